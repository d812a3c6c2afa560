"""PyTorch helpers shared by the posenc_torch modules."""

from __future__ import annotations

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

    `make` must close over Python values only (no tensors). Under torch.compile a cached constant is
    read from the dict as a constant; an uncached one is traced (Dynamo turns the spec's float64 NumPy
    code into float64 tensor ops) and not stored, since a traced value must not outlive its graph.
    """
    full_key = (key, dtype, str(device))
    value = _CONSTANTS.get(full_key)
    if value is None:
        value = torch.as_tensor(make(), dtype=dtype, device=device)
        if not torch.compiler.is_compiling():
            _CONSTANTS[full_key] = value
    return value
