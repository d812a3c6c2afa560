"""PyTorch helpers shared by the posenc_torch modules.

The same names, with the same roles, exist in `posenc_tf._common` and `posenc_jax._common`:
`resolve_dtype`, `as_tensor`, `is_tracing`, `spec_value`, `spec_constant`, `position_pair`.

Cache policy (the same in every backend): what the spec computes from parameters alone is cached
as NumPy/Python values (`spec_value`), which no trace can touch. A framework tensor made from it
is cached only when it is concrete: under torch.compile it is made at trace time by
`_constant_name` (run by Dynamo as a constant function, so the tensor is real, never traced) and
checked before it is stored. A FakeTensor (torch.export, FakeTensorMode) or a meta
tensor is returned but never stored, so no later call can receive a value that belongs to a trace.
"""

from __future__ import annotations

import numpy as np
import torch

from posenc_np.backend import (
    check_integer_positions,
    check_position_axes,
    check_position_pair,
    check_traced_integer,
    dtype_name,
)
from posenc_np.backend import spec_value as _spec_value

__all__ = ["resolve_dtype", "as_tensor", "is_tracing", "spec_value", "spec_constant", "position_pair"]


def resolve_dtype(dtype) -> torch.dtype:
    """`None` -> float32 (the backends' default); names and torch dtypes -> torch dtype."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    return getattr(torch, dtype_name(dtype))


def as_tensor(x, device=None) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.as_tensor(x, device=device)


def _is_concrete(value) -> bool:
    from torch._subclasses.fake_tensor import is_fake

    return isinstance(value, torch.Tensor) and not is_fake(value) and value.device.type != "meta"


def is_tracing(x=None) -> bool:
    """True under torch.compile / torch.export (or when `x` is a fake tensor): values cannot be read."""
    if torch.compiler.is_compiling():
        return True
    return x is not None and isinstance(x, torch.Tensor) and not _is_concrete(x)


TRACE = "under torch.compile"  # where values cannot be read, in the messages of `_validate.check_traced_integer`



@torch.compiler.assume_constant_result
def spec_value(key, make):
    """`make()` (Python values computed by the spec from parameters: numbers, strings, tuples, or NumPy
    arrays for `spec_constant`), once per `key`.

    `make` must close over Python values only (no tensors, no arrays); `key` must be hashable and name
    every parameter `make` reads. Under torch.compile Dynamo runs it at trace time and bakes the result
    in, so the spec's NumPy code is never traced; a result read by traced code must be Python values.
    """
    return _spec_value(key, make)


def _spec_array(key, make):
    """`spec_value` outside Dynamo's view (called only by `_constant_name`, which runs at trace time)."""
    return _spec_value(key, make)


class _Constants:
    """Cached constants, one attribute each: Dynamo reads an attribute of a global object as it is at
    trace time and gives every tensor its own source (a dict it has already read would be a stale
    copy, and one function returning several tensors would give them one source)."""


_CONSTANTS = _Constants()
_NAMES: dict = {}  # (key, dtype, device) -> attribute of _CONSTANTS


@torch.compiler.assume_constant_result
def _constant_name(key, make, dtype, device: str) -> str:
    """The attribute holding the tensor of `spec_value(key, make)`, built and stored on first use; "" when
    the tensor built is not concrete (fake or meta) and so must not be stored. Under torch.compile Dynamo
    runs this at trace time (the spec is never traced) and keeps only the returned name."""
    full_key = (key, dtype, device)
    if full_key not in _NAMES:
        value = torch.as_tensor(np.asarray(_spec_array(key, make)), dtype=dtype,
                                device=None if device == "None" else torch.device(device))
        if not _is_concrete(value):
            return ""
        name = f"c{len(_NAMES)}"
        setattr(_CONSTANTS, name, value)
        _NAMES[full_key] = name
    return _NAMES[full_key]


def spec_constant(key, make, *, dtype=torch.float32, device=None) -> torch.Tensor:
    """A parameter-only array computed once by the spec (`make()` returns NumPy) as a `dtype` tensor on
    `device`; see the cache policy above."""
    name = _constant_name(key, make, dtype, str(device))
    if name:
        return getattr(_CONSTANTS, name)
    return torch.as_tensor(np.asarray(_spec_array(key, make)), dtype=dtype, device=device)


def position_pair(q_positions, k_positions, *, integer: bool):
    """Tensors for `[..., q]` / `[..., k]` positions, validated as the spec validates them.

    Eager, `integer=True` positions must hold integers (ValueError naming the argument otherwise);
    under torch.compile values cannot be read, so a floating dtype is a TypeError instead (which
    torch.compile(fullgraph=True) reports wrapped in `torch._dynamo.exc.Unsupported`, message kept).
    """
    q = as_tensor(q_positions)
    k = as_tensor(k_positions, device=q.device)
    for name, x in (("q_positions", q), ("k_positions", k)):
        check_position_axes(name, x.ndim, x.dtype, is_real=not (x.dtype == torch.bool or x.is_complex()))
        if integer and x.is_floating_point():
            if is_tracing(x):
                check_traced_integer(name, x.dtype, is_floating=True, where=TRACE)
            check_integer_positions(name, x.detach().cpu().double().numpy())
    check_position_pair(q.shape, k.shape)
    if integer:
        return q.long(), k.long()
    return q, k
