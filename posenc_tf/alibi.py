"""ALiBi in TensorFlow / Keras 3. Spec: `posenc_np.alibi_slopes`, `posenc_np.alibi_bias`."""

from __future__ import annotations

import keras
import tensorflow as tf

from posenc_np.alibi import alibi_slopes as _spec_slopes
from posenc_np.alibi import check_alibi_args
from posenc_np.backend import ALiBiConfig

from ._common import bias_output_shape, position_pair, register_serializable, resolve_dtype, spec_constant

__all__ = ["alibi_slopes", "alibi_bias", "ALiBi", "position_pair"]


def alibi_slopes(num_heads, *, max_bias=8.0, dtype=None):
    """`[num_heads]` slopes computed by the spec in float64, returned as `dtype` (float32 default)."""
    num_heads = check_alibi_args(num_heads, "symmetric", max_bias)
    return tf.constant(_spec_slopes(num_heads, max_bias=max_bias), dtype=resolve_dtype(dtype))


def alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", max_bias=8.0, dtype=None):
    """`[..., num_heads, q, k]` ALiBi bias; see `posenc_np.alibi_bias`.

    Spec slopes as float32 constants; integer positions are subtracted as int64 before the float32
    product. Works inside tf.function(jit_compile=True) with positions as data.
    """
    num_heads = check_alibi_args(num_heads, form, max_bias)
    q, k = position_pair(q_positions, k_positions, integer=False)
    if q.dtype != k.dtype:  # integer and float positions (both allowed): TF does not promote, subtract in float64
        q, k = tf.cast(q, tf.float64), tf.cast(k, tf.float64)
    slopes = spec_constant(("alibi_slopes", num_heads, float(max_bias)), lambda: _spec_slopes(num_heads, max_bias=max_bias))[:, None, None]
    i = q[..., None, :, None]
    j = k[..., None, None, :]
    as_float = lambda x: x if x.dtype == tf.float64 else tf.cast(x, tf.float32)  # noqa: E731
    if form == "symmetric":
        bias = -tf.cast(slopes, as_float(i).dtype) * as_float(tf.abs(i - j))
    elif form == "causal":
        bias = -tf.cast(slopes, as_float(i).dtype) * as_float(i - j)
    else:
        # + zeros_like(i): the full [..., h, q, k] shape without q's values (0 * NaN is NaN), as the spec
        bias = tf.cast(slopes, as_float(j).dtype) * as_float(j) + tf.zeros_like(as_float(i))
    return tf.cast(bias, resolve_dtype(dtype))


@register_serializable
class ALiBi(keras.layers.Layer):
    """ALiBi bias as a Keras layer: `ALiBi(num_heads, form=...)(q_positions, k_positions)`.

    No weights. Slopes and positions stay float32 under any dtype policy; the bias is cast to the
    layer's compute dtype at the end.
    """

    def __init__(self, num_heads, *, form="symmetric", max_bias=8.0, **kwargs):
        super().__init__(**kwargs)
        ALiBiConfig(num_heads, form=form, max_bias=max_bias).bind(self)
        self.built = True

    def call(self, q_positions, k_positions):
        bias = alibi_bias(self.num_heads, q_positions, k_positions, form=self.form, max_bias=self.max_bias)
        return tf.cast(bias, self.compute_dtype)

    def compute_output_shape(self, q_positions_shape, k_positions_shape):
        return bias_output_shape(self.num_heads, q_positions_shape, k_positions_shape)

    def get_config(self):
        return {**super().get_config(), **self.config.as_dict()}
