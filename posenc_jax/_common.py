"""JAX helpers shared by the posenc_jax modules.

The same names, with the same roles, exist in `posenc_torch._common` and `posenc_tf._common`:
`resolve_dtype`, `as_tensor`, `is_tracing`, `spec_value`, `spec_constant`, `position_pair`.

Cache policy (the same in every backend): what the spec computes from parameters alone is cached
as NumPy/Python values (`spec_value`), which no trace can touch. A framework array made from it is
cached only when it is concrete: under `jax.jit` (or any transformation) `jnp.asarray` gives a
tracer, which `spec_constant` returns for this trace and never stores. A stored tracer would
outlive its trace and raise `UnexpectedTracerError` at the next retrace (a new length, dtype or
sharding).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from posenc_np.backend import (
    check_integer_positions,
    check_position_axes,
    check_position_pair,
    check_traced_integer,
    dtype_name,
    spec_value,
)

__all__ = ["resolve_dtype", "as_tensor", "is_tracing", "spec_value", "spec_constant", "position_pair"]


def resolve_dtype(dtype):
    """`None` -> float32 (the backends' default); names and jnp dtypes -> jnp dtype."""
    if dtype is None:
        return jnp.float32
    if isinstance(dtype, str):
        return getattr(jnp, dtype_name(dtype))
    return jnp.dtype(dtype)


def as_tensor(x):
    """A JAX array (tracers pass through unchanged)."""
    return x if isinstance(x, jax.Array) else jnp.asarray(x)


def is_tracing(x=None) -> bool:
    """True under jax.jit (or when `x` is a tracer), where values cannot be read and errors cannot be
    raised on data."""
    if x is not None:
        return isinstance(x, jax.core.Tracer)
    return isinstance(jnp.zeros(()), jax.core.Tracer)


TRACE = "under jit"  # where values cannot be read, in the messages of `_validate.check_traced_integer`



_CONSTANTS: dict = {}


def spec_constant(key, make, *, dtype=jnp.float32):
    """A parameter-only array computed once by the spec (`make()` returns NumPy) as a `dtype` array;
    see the cache policy above."""
    full_key = (key, jnp.dtype(dtype).name)
    value = _CONSTANTS.get(full_key)
    if value is None:
        value = jnp.asarray(np.asarray(spec_value(key, make)).astype(jnp.dtype(dtype)))
        if not isinstance(value, jax.core.Tracer):
            _CONSTANTS[full_key] = value
    return value


def position_pair(q_positions, k_positions, *, integer: bool):
    """Arrays for `[..., q]` / `[..., k]` positions, validated as the spec validates them.

    Concrete `integer=True` positions must hold integers (ValueError naming the argument); under
    jax.jit values cannot be read, so a floating dtype is a TypeError instead.
    """
    pair = []
    for name, x in (("q_positions", q_positions), ("k_positions", k_positions)):
        x = as_tensor(x)
        check_position_axes(name, x.ndim, x.dtype,
                            is_real=not (x.dtype == jnp.bool_ or jnp.issubdtype(x.dtype, jnp.complexfloating)))
        if integer and jnp.issubdtype(x.dtype, jnp.floating):
            if is_tracing(x):
                check_traced_integer(name, x.dtype, is_floating=True, where=TRACE)
            x = jnp.asarray(check_integer_positions(name, np.asarray(x, dtype=np.float64)).astype(np.int32))
        pair.append(x)
    check_position_pair(pair[0].shape, pair[1].shape)
    return tuple(pair)
