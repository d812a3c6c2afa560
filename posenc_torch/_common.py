"""PyTorch helpers shared by the posenc_torch modules."""

from __future__ import annotations

import numpy as np
import torch

from posenc_np._dtypes import dtype_name

__all__ = ["resolve_dtype", "as_tensor", "spec_constant"]


def resolve_dtype(dtype) -> torch.dtype:
    """`None` -> float32 (the backends' default); names and torch dtypes -> torch dtype."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    return getattr(torch, dtype_name(dtype))


def as_tensor(x, device=None) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.as_tensor(x, device=device)

_CONSTANTS: dict = {}


def spec_constant(key, make, *, dtype=torch.float32, device=None) -> torch.Tensor:
    """A parameter-only array computed once by the spec (`make()` returns NumPy), cached per dtype/device.

    `make` must close over Python values only (no tensors). Eagerly the tensor is cached. Under
    torch.compile the spec must not be traced (Dynamo would turn its NumPy validation into graph
    code): `_spec_values` runs it at trace time and hands Dynamo a constant tuple.
    """
    if torch.compiler.is_compiling():
        values, shape = _spec_values(key, make)
        return torch.tensor(values, dtype=dtype, device=device).reshape(shape)
    full_key = (key, dtype, str(device))
    value = _CONSTANTS.get(full_key)
    if value is None:
        values, shape = _spec_values(key, make)
        value = torch.tensor(values, dtype=dtype, device=device).reshape(shape)
        _CONSTANTS[full_key] = value
    return value


_VALUES: dict = {}


@torch.compiler.assume_constant_result
def _spec_values(key, make):
    """`make()` as (flat tuple of Python numbers, shape); a tuple, not a tensor, so Dynamo can bake it in
    as a constant any number of times in one graph."""
    if key not in _VALUES:
        array = np.asarray(make())
        _VALUES[key] = (tuple(array.ravel().tolist()), tuple(array.shape))
    return _VALUES[key]
