"""JAX helpers shared by the posenc_jax modules."""

from __future__ import annotations

import jax
import numpy as np
import jax.numpy as jnp

from posenc_np._dtypes import dtype_name

__all__ = ["resolve_dtype", "is_traced", "spec_constant"]


def resolve_dtype(dtype):
    """`None` -> float32 (the backends' default); names and jnp dtypes -> jnp dtype."""
    if dtype is None:
        return jnp.float32
    if isinstance(dtype, str):
        return getattr(jnp, dtype_name(dtype))
    return jnp.dtype(dtype)


def is_traced(x) -> bool:
    """True under jax.jit, where values cannot be read and errors cannot be raised."""
    return isinstance(x, jax.core.Tracer)

_CONSTANTS: dict = {}


def spec_constant(key, make, *, dtype=jnp.float32):
    """A parameter-only array computed once by the spec (`make()` returns NumPy), cached per dtype.

    Kept as NumPy so it enters each trace as a constant, never as a leaked tracer.
    """
    full_key = (key, jnp.dtype(dtype).name)
    value = _CONSTANTS.get(full_key)
    if value is None:
        value = np.asarray(make()).astype(jnp.dtype(dtype))
        _CONSTANTS[full_key] = value
    return value
