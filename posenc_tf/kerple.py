"""KERPLE and Sandwich relative biases in TensorFlow / Keras 3. Spec: `posenc_np.kerple_bias`, `posenc_np.sandwich_bias`."""

from __future__ import annotations

import keras
import tensorflow as tf

from posenc_np.backend import KERPLEConfig
from posenc_np.kerple import check_kerple_params, check_sandwich_args, sandwich_head_scale, sandwich_inv_freq

from ._common import as_tensor, bias_output_shape, position_pair, register_serializable, resolve_dtype, spec_constant

__all__ = ["kerple_bias", "sandwich_bias", "KERPLEBias"]


def _distance32(q, k, absolute):
    """`[..., 1, q, k]` float32 (q - k or |q - k|); integer positions are subtracted as integers."""
    i, j = q[..., None, :, None], k[..., None, None, :]
    if q.dtype.is_integer and k.dtype.is_integer:
        d = i - j
        return tf.cast(tf.abs(d) if absolute else d, tf.float32)
    d = tf.cast(i, tf.float32) - tf.cast(j, tf.float32)
    return tf.abs(d) if absolute else d


def kerple_bias(r1, r2, q_positions, k_positions, *, kernel="log"):
    """`[..., heads, q, k]` KERPLE bias in float32, returned in r1's dtype; see `posenc_np.kerple_bias`."""
    r1, r2 = as_tensor(r1), as_tensor(r2)
    check_kerple_params(r1.shape, r2.shape, kernel)
    q, k = position_pair(q_positions, k_positions, integer=False)
    distance = _distance32(q, k, absolute=True)
    a, b = tf.cast(r1, tf.float32)[:, None, None], tf.cast(r2, tf.float32)[:, None, None]
    bias = -a * tf.math.log1p(b * distance) if kernel == "log" else -a * tf.pow(distance, b)
    return tf.cast(bias, r1.dtype)


def sandwich_bias(num_heads, q_positions, k_positions, *, dim, base=10000.0, dtype=None):
    """`[..., heads, q, k]` Sandwich bias; see `posenc_np.sandwich_bias`. float32 cosines, cast to `dtype`."""
    num_heads, dim, base = check_sandwich_args(num_heads, dim, base)
    inv_freq = spec_constant(("sandwich", dim, base), lambda: sandwich_inv_freq(dim, base=base))
    head_scale = spec_constant(("sandwich_heads", num_heads), lambda: sandwich_head_scale(num_heads))
    q, k = position_pair(q_positions, k_positions, integer=False)
    relative = _distance32(q, k, absolute=False)[..., 0, :, :]
    inner = tf.reduce_sum(tf.cos(relative[..., None] * inv_freq), -1) - dim / 2
    return tf.cast(inner[..., None, :, :] * head_scale[:, None, None], resolve_dtype(dtype))


@register_serializable
class KERPLEBias(keras.layers.Layer):
    """KERPLE bias with trainable per-head weights `r1`, `r2` (`[num_heads]`; init U(0, 2), U(0, 1)),
    clamped to >= eps (and r2 <= 2 for the power kernel) in every call, as KERPLE's code does."""

    def __init__(self, num_heads, *, kernel="log", eps=0.01, **kwargs):
        super().__init__(**kwargs)
        KERPLEConfig(num_heads, kernel=kernel, eps=eps).bind(self)
        self.r1 = self.add_weight(name="r1", shape=(self.num_heads,),
                                  initializer=keras.initializers.RandomUniform(0.0, 2.0))
        self.r2 = self.add_weight(name="r2", shape=(self.num_heads,),
                                  initializer=keras.initializers.RandomUniform(0.0, 1.0))
        self.built = True

    def call(self, q_positions, k_positions):
        r1 = tf.maximum(self.r1, self.eps)
        r2_max = self.config.r2_max
        r2 = tf.maximum(self.r2, self.eps) if r2_max is None else tf.clip_by_value(self.r2, self.eps, r2_max)
        return tf.cast(kerple_bias(r1, r2, q_positions, k_positions, kernel=self.kernel), self.compute_dtype)

    def compute_output_shape(self, q_positions_shape, k_positions_shape):
        return bias_output_shape(self.num_heads, q_positions_shape, k_positions_shape)

    def get_config(self):
        return {**super().get_config(), **self.config.as_dict()}
