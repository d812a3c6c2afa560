"""TensorFlow / Keras helpers shared by the posenc_tf modules."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from posenc_np._dtypes import dtype_name  # noqa: E402

if keras.backend.backend() != "tensorflow":  # the layers call TensorFlow ops directly
    raise ImportError(f"posenc_tf needs KERAS_BACKEND=tensorflow, keras is using {keras.backend.backend()!r}")

__all__ = ["resolve_dtype", "as_tensor", "is_symbolic", "register_serializable", "spec_constant",
           "bias_output_shape"]


def resolve_dtype(dtype) -> tf.DType:
    """`None` -> float32 (the backends' default); names and tf dtypes -> tf.DType."""
    if dtype is None:
        return tf.float32
    if isinstance(dtype, tf.DType):
        return dtype
    return getattr(tf, dtype_name(dtype))


def as_tensor(x):
    return x if isinstance(x, (tf.Tensor, tf.Variable)) else tf.convert_to_tensor(x)


def is_symbolic(x) -> bool:
    """True inside tf.function / XLA tracing, where values cannot be read and errors cannot be raised."""
    return not tf.executing_eagerly() or not hasattr(x, "numpy")


def register_serializable(cls):
    """Register a layer under the "posenc" package so `.keras` files load without custom_objects."""
    return keras.saving.register_keras_serializable(package="posenc")(cls)

_CONSTANTS: dict = {}


def spec_constant(key, make, *, dtype=tf.float32):
    """A parameter-only array computed once by the spec (`make()` returns NumPy), cached per dtype."""
    full_key = (key, dtype)
    value = _CONSTANTS.get(full_key)
    if value is None:
        with tf.init_scope():  # an eager constant, even when first asked for inside a tf.function
            value = tf.constant(make(), dtype=dtype)
        _CONSTANTS[full_key] = value
    return value


def bias_output_shape(num_heads, q_positions_shape, k_positions_shape):
    """`[*batch, heads, q, k]` for position shapes `[*batch, q]` and `[*batch, k]` (Keras shape inference)."""
    import numpy as np

    lead = np.broadcast_shapes(tuple(1 if d is None else d for d in q_positions_shape[:-1]),
                               tuple(1 if d is None else d for d in k_positions_shape[:-1]))
    return (*lead, num_heads, q_positions_shape[-1], k_positions_shape[-1])
