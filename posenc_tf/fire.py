"""FIRE in TensorFlow / Keras 3. Spec: `posenc_np.fire_bias`."""

from __future__ import annotations

import keras
import tensorflow as tf

from posenc_np.backend import FIREConfig
from posenc_np.fire import check_fire_eps, check_fire_params

from ._common import as_tensor, bias_output_shape, position_pair, register_serializable

__all__ = ["fire_bias", "FIREBias"]


def fire_bias(c, L, w1, b1, w2, b2, q_positions, k_positions, *, eps=1e-6):
    """`[..., heads, q, k]` FIRE bias in float32, returned in w2's dtype; see `posenc_np.fire_bias`.

    Weights in `nn.Linear` orientation (`w1 [width, 1]`, `w2 [heads, width]`), like the spec.
    """
    c, L, w1, b1, w2, b2 = (as_tensor(a) for a in (c, L, w1, b1, w2, b2))
    check_fire_params(c.shape, L.shape, w1.shape, b1.shape, w2.shape, b2.shape)
    check_fire_eps(eps)
    q, k = position_pair(q_positions, k_positions, integer=False)
    q32, k32 = tf.cast(q, tf.float32), tf.cast(k, tf.float32)
    f32 = [tf.cast(a, tf.float32) for a in (c, L, w1, b1, w2, b2)]
    c32, L32, w1_32, b1_32, w2_32, b2_32 = f32
    c32, L32 = tf.reshape(c32, []), tf.reshape(L32, [])

    def psi(x):
        return tf.math.log1p(tf.abs(c32 * x))

    relative = q32[..., :, None] - k32[..., None, :]
    normalizer = tf.maximum(q32, tf.abs(L32))[..., :, None]
    u = psi(relative) / (psi(normalizer) + eps)
    hidden = tf.nn.relu(u[..., None] * w1_32[:, 0] + b1_32)
    out = tf.einsum("...w,hw->...h", hidden, w2_32) + b2_32  # [..., q, k, heads]
    rank = len(out.shape)
    out = tf.transpose(out, [*range(rank - 3), rank - 1, rank - 3, rank - 2])
    return tf.cast(out, w2.dtype)


@register_serializable
class FIREBias(keras.layers.Layer):
    """FIRE with the reference's parameters: `mlp_in` / `mlp_out` Dense layers (kernels `[1, width]`,
    `[width, heads]` = the torch weights transposed), `c` (init 0.1) and `L_multiplier` (init 1) times
    the fixed `init_L`."""

    def __init__(self, num_heads, *, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, **kwargs):
        super().__init__(**kwargs)
        FIREConfig(num_heads, mlp_width=mlp_width, init_c=init_c, init_L=init_L, eps=eps).bind(self)
        self.mlp_in = keras.layers.Dense(self.mlp_width, name="mlp_in", dtype=self.dtype_policy)
        self.mlp_in.build((None, 1))
        self.mlp_out = keras.layers.Dense(self.num_heads, name="mlp_out", dtype=self.dtype_policy)
        self.mlp_out.build((None, self.mlp_width))
        self.c = self.add_weight(name="c", shape=(), initializer=keras.initializers.Constant(self.init_c))
        self.L_multiplier = self.add_weight(name="L_multiplier", shape=(), initializer="ones")
        self.built = True

    def call(self, q_positions, k_positions):
        bias = fire_bias(self.c, self.L_multiplier * self.init_L, tf.transpose(self.mlp_in.kernel), self.mlp_in.bias,
                         tf.transpose(self.mlp_out.kernel), self.mlp_out.bias, q_positions, k_positions, eps=self.eps)
        return tf.cast(bias, self.compute_dtype)

    def compute_output_shape(self, q_positions_shape, k_positions_shape):
        return bias_output_shape(self.num_heads, q_positions_shape, k_positions_shape)

    def get_config(self):
        return {**super().get_config(), **self.config.as_dict()}
