"""ALiBi in TensorFlow / Keras 3. Spec: `posenc_np.alibi_slopes`, `posenc_np.alibi_bias`."""

from __future__ import annotations

import keras
import tensorflow as tf

from posenc_np._validate import check_integer_positions
from posenc_np.alibi import alibi_slopes as _spec_slopes
from posenc_np.alibi import check_alibi_args, check_position_pair

from ._common import as_tensor, is_symbolic, register_serializable, resolve_dtype, spec_constant, bias_output_shape

__all__ = ["alibi_slopes", "alibi_bias", "ALiBi", "position_pair"]


def position_pair(q_positions, k_positions, *, integer: bool):
    """Tensors for `[..., q]` / `[..., k]` positions, validated as the spec validates them.

    Eager, `integer=True` positions must hold integers (ValueError naming the argument); inside a
    tf.function values cannot be read, so a floating dtype is a TypeError instead. Integer positions
    come back as int64.
    """
    pair = []
    for name, x in (("q_positions", q_positions), ("k_positions", k_positions)):
        x = as_tensor(x)
        if x.shape.rank is not None and x.shape.rank < 1:
            raise ValueError(f"{name} must have at least one axis [..., seq], got a scalar")
        if x.dtype == tf.bool or x.dtype.is_complex:
            raise TypeError(f"{name} must be a real array, got dtype {x.dtype.name}")
        if x.dtype.is_floating and integer:
            if is_symbolic(x):
                raise TypeError(f"{name} must be an integer tensor inside tf.function, got {x.dtype.name}")
            x = tf.constant(check_integer_positions(name, tf.cast(x, tf.float64).numpy()))
        if x.dtype.is_integer:
            x = tf.cast(x, tf.int64)
        pair.append(x)
    check_position_pair(pair[0].shape, pair[1].shape)
    return tuple(pair)


def alibi_slopes(num_heads, *, dtype=None):
    """`[num_heads]` slopes computed by the spec in float64, returned as `dtype` (float32 default)."""
    num_heads = check_alibi_args(num_heads, "symmetric")
    return tf.constant(_spec_slopes(num_heads), dtype=resolve_dtype(dtype))


def alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", dtype=None):
    """`[..., num_heads, q, k]` ALiBi bias; see `posenc_np.alibi_bias`.

    Spec slopes as float32 constants; integer positions are subtracted as int64 before the float32
    product. Works inside tf.function(jit_compile=True) with positions as data.
    """
    num_heads = check_alibi_args(num_heads, form)
    q, k = position_pair(q_positions, k_positions, integer=False)
    slopes = spec_constant(("alibi_slopes", num_heads), lambda: _spec_slopes(num_heads))[:, None, None]
    i = q[..., None, :, None]
    j = k[..., None, None, :]
    as_float = lambda x: x if x.dtype == tf.float64 else tf.cast(x, tf.float32)  # noqa: E731
    if form == "symmetric":
        bias = -tf.cast(slopes, as_float(i).dtype) * as_float(tf.abs(i - j))
    elif form == "causal":
        bias = -tf.cast(slopes, as_float(i).dtype) * as_float(i - j)
    else:
        bias = tf.cast(slopes, as_float(j).dtype) * as_float(j) + 0 * as_float(i)  # full [..., h, q, k]
    return tf.cast(bias, resolve_dtype(dtype))


@register_serializable
class ALiBi(keras.layers.Layer):
    """ALiBi bias as a Keras layer: `ALiBi(num_heads, form=...)(q_positions, k_positions)`.

    No weights. Slopes and positions stay float32 under any dtype policy; the bias is cast to the
    layer's compute dtype at the end.
    """

    def __init__(self, num_heads, *, form="symmetric", **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_alibi_args(num_heads, form)
        self.form = form
        self.built = True

    def call(self, q_positions, k_positions):
        bias = alibi_bias(self.num_heads, q_positions, k_positions, form=self.form)
        return tf.cast(bias, self.compute_dtype)

    def compute_output_shape(self, q_positions_shape, k_positions_shape):
        return bias_output_shape(self.num_heads, q_positions_shape, k_positions_shape)

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads, "form": self.form}
