"""TensorFlow / Keras helpers shared by the posenc_tf modules.

The same names, with the same roles, exist in `posenc_torch._common` and `posenc_jax._common`:
`resolve_dtype`, `as_tensor`, `is_tracing`, `spec_value`, `spec_constant`, `position_pair`.

Cache policy (the same in every backend): what the spec computes from parameters alone is cached
as NumPy/Python values (`spec_value`), which no trace can touch. A framework tensor made from it
is cached only when it is concrete: `spec_constant` builds it under `tf.init_scope()`, so it is an
eager tensor even when first asked for inside a tf.function (which captures it), and it stores it
only if it is one; a graph tensor is never stored, so no later graph can meet a tensor of another.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from posenc_np.backend import (  # noqa: E402
    check_integer_positions,
    check_position_axes,
    check_position_pair,
    check_traced_integer,
    dtype_name,  # noqa: E402
    spec_value,
)

if keras.backend.backend() != "tensorflow":  # the layers call TensorFlow ops directly
    raise ImportError(f"posenc_tf needs KERAS_BACKEND=tensorflow, keras is using {keras.backend.backend()!r}")

__all__ = ["resolve_dtype", "as_tensor", "is_tracing", "spec_value", "spec_constant", "position_pair",
           "register_serializable", "bias_output_shape"]


def resolve_dtype(dtype) -> tf.DType:
    """`None` -> float32 (the backends' default); names and tf dtypes -> tf.DType."""
    if dtype is None:
        return tf.float32
    if isinstance(dtype, tf.DType):
        return dtype
    return getattr(tf, dtype_name(dtype))


def as_tensor(x):
    return x if isinstance(x, (tf.Tensor, tf.Variable)) else tf.convert_to_tensor(x)


def is_tracing(x=None) -> bool:
    """True inside tf.function / XLA tracing (or when `x` is symbolic): values cannot be read and
    errors cannot be raised on data."""
    return not tf.executing_eagerly() or (x is not None and not hasattr(x, "numpy"))


def register_serializable(cls):
    """Register a layer under the "posenc" package so `.keras` files load without custom_objects."""
    return keras.saving.register_keras_serializable(package="posenc")(cls)


TRACE = "inside tf.function"  # where values cannot be read, in the messages of `_validate.check_traced_integer`



_CONSTANTS: dict = {}


def spec_constant(key, make, *, dtype=tf.float32):
    """A parameter-only array computed once by the spec (`make()` returns NumPy) as a `dtype` tensor;
    see the cache policy above."""
    full_key = (key, dtype)
    value = _CONSTANTS.get(full_key)
    if value is None:
        with tf.init_scope():  # an eager constant, even when first asked for inside a tf.function
            value = tf.constant(np.asarray(spec_value(key, make)), dtype=dtype)
        if hasattr(value, "numpy"):  # concrete: safe to hand to any later graph
            _CONSTANTS[full_key] = value
    return value


def position_pair(q_positions, k_positions, *, integer: bool):
    """Tensors for `[..., q]` / `[..., k]` positions, validated as the spec validates them.

    Eager, `integer=True` positions must hold integers (ValueError naming the argument); inside a
    tf.function values cannot be read, so a floating dtype is a TypeError instead. Integer positions
    come back as int64.
    """
    pair = []
    for name, x in (("q_positions", q_positions), ("k_positions", k_positions)):
        x = as_tensor(x)
        check_position_axes(name, x.shape.rank, x.dtype.name, is_real=not (x.dtype == tf.bool or x.dtype.is_complex))
        if x.dtype.is_floating and integer:
            if is_tracing(x):
                check_traced_integer(name, x.dtype.name, is_floating=True, where=TRACE)
            x = tf.constant(check_integer_positions(name, tf.cast(x, tf.float64).numpy()))
        if x.dtype.is_integer:
            x = tf.cast(x, tf.int64)
        pair.append(x)
    check_position_pair(pair[0].shape, pair[1].shape)
    return tuple(pair)


def bias_output_shape(num_heads, q_positions_shape, k_positions_shape, *trailing):
    """`[*batch, heads, q, k, *trailing]` for position shapes `[*batch, q]` and `[*batch, k]` (Keras shape
    inference); `num_heads=None` leaves the heads axis out (relative embeddings)."""
    lead = np.broadcast_shapes(tuple(1 if d is None else d for d in q_positions_shape[:-1]),
                               tuple(1 if d is None else d for d in k_positions_shape[:-1]))
    heads = () if num_heads is None else (num_heads,)
    return (*lead, *heads, q_positions_shape[-1], k_positions_shape[-1], *trailing)
