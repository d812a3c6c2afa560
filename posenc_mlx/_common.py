"""MLX helpers shared by the posenc_mlx modules.

The same names, with the same roles, exist in `posenc_torch._common`, `posenc_tf._common` and
`posenc_jax._common`: `resolve_dtype`, `as_tensor`, `is_tracing`, `spec_value`, `spec_constant`,
`position_pair`; MLX adds `bind_config`, `is_floating`, `is_integer`, `integer_values` and `F64`.

Cache policy (the same in every backend): what the spec computes from parameters alone is cached
as NumPy/Python values (`spec_value`), which no trace can touch. An `mx.array` made from it holds its
data from the start (`mx.array(numpy)`), also when it is made inside `mx.compile`'s trace, where it is
a constant of the graph and not a placeholder: so `spec_constant` may store it whatever the context.

Tracing: MLX's `mx.compile` (and `mx.vmap`) call the function with placeholder arrays whose values
cannot be read (evaluating one raises), so data-dependent checks are skipped there and the documented
in-graph behaviour applies instead. `mx.grad` / `mx.vjp` arrays are readable: validation runs as eagerly.

float64: MLX computes float64 on its CPU device only (Metal has none), so every float64 operation of
this package runs on the `F64` stream (the CPU; unified memory, no copy on Apple silicon).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from posenc_np.backend import (
    check_integer_positions,
    check_position_axes,
    check_position_pair,
    check_traced_integer,
    dtype_name,
    spec_value,
)

__all__ = ["resolve_dtype", "as_tensor", "is_tracing", "spec_value", "spec_constant", "position_pair", "bind_config",
           "is_floating", "is_integer", "integer_values", "F64", "TRACE"]

#: the stream of every float64 operation: MLX has float64 on its CPU device only
F64 = mx.cpu

TRACE = "under mx.compile"  # where values cannot be read, in the messages of `_validate.check_traced_integer`


def resolve_dtype(dtype):
    """`None` -> float32 (the backends' default); names and mx dtypes -> mx dtype."""
    if dtype is None:
        return mx.float32
    if isinstance(dtype, mx.Dtype):
        return dtype
    return getattr(mx, dtype_name(dtype))


def _from_numpy(x):
    """An mx.array of a NumPy array or Python value, keeping float64 (plain `mx.array` makes it float32)."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        return mx.array(x, dtype=mx.float64)
    if x.dtype.kind == "V" or x.dtype.name == "bfloat16":  # ml_dtypes bfloat16: through float32, exactly
        return mx.array(x.astype(np.float32)).astype(mx.bfloat16)
    return mx.array(x)


def as_tensor(x):
    """An mx.array (arrays, placeholders under mx.compile included, pass through unchanged)."""
    return x if isinstance(x, mx.array) else _from_numpy(x)


def is_floating(x) -> bool:
    return mx.issubdtype(x.dtype, mx.floating)


def is_integer(x) -> bool:
    return mx.issubdtype(x.dtype, mx.integer)


def is_tracing(x) -> bool:
    """True when `x` is a placeholder of `mx.compile` / `mx.vmap` (its values cannot be read).

    MLX has no public tracing flag: evaluating a placeholder raises, evaluating any other array only
    computes it (which reading its values would do anyway).
    """
    if not isinstance(x, mx.array):
        return False
    try:
        mx.eval(x)
    except ValueError:
        return True
    return False




_CONSTANTS: dict = {}


def spec_constant(key, make, *, dtype=mx.float32):
    """A parameter-only array computed once by the spec (`make()` returns NumPy) as a `dtype` mx.array;
    see the cache policy above."""
    full_key = (key, str(dtype))
    value = _CONSTANTS.get(full_key)
    if value is None:
        value = _from_numpy(spec_value(key, make))
        value = value.astype(dtype, stream=F64) if dtype == mx.float64 else value.astype(dtype)
        mx.eval(value)  # a constant: never a placeholder, whatever the context
        _CONSTANTS[full_key] = value
    return value


def bind_config(config, module) -> None:
    """`config.bind(module)` for an `mlx.nn.Module`: the fields become plain attributes.

    `nn.Module` is a dict and stores dict, list and tuple attributes as children, which would put a
    `scaling` dict or an `mrope_section` tuple into `parameters()`; the config's fields are settings.
    """
    object.__setattr__(module, "config", config)
    for name, value in config._fields().items():
        object.__setattr__(module, name, value)


def integer_values(name: str, x):
    """A floating array holding integers as an int64 array (the spec's ValueError naming `name` when it
    does not); under mx.compile a floating array cannot be read, so it is a TypeError instead."""
    if is_tracing(x):
        check_traced_integer(name, x.dtype, is_floating=True, where=TRACE)
    values = check_integer_positions(name, np.asarray(x.astype(mx.float64, stream=F64)))
    return mx.array(values.astype(np.int64))


def position_pair(q_positions, k_positions, *, integer: bool):
    """Arrays for `[..., q]` / `[..., k]` positions, validated as the spec validates them.

    Concrete `integer=True` positions must hold integers (ValueError naming the argument); under
    mx.compile values cannot be read, so a floating dtype is a TypeError instead.
    """
    pair = []
    for name, x in (("q_positions", q_positions), ("k_positions", k_positions)):
        x = as_tensor(x)
        check_position_axes(name, x.ndim, x.dtype,
                            is_real=not (x.dtype == mx.bool_ or mx.issubdtype(x.dtype, mx.complexfloating)))
        if integer and is_floating(x):
            x = integer_values(name, x)
        pair.append(x)
    check_position_pair(pair[0].shape, pair[1].shape)
    return tuple(pair)
