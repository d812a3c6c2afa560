"""The dynamic position-aware encoding and NoPE in TensorFlow / Keras 3. Spec: `posenc_np.dynamic_position_encoding`, `posenc_np.nope`."""

from __future__ import annotations

import keras
import tensorflow as tf

from posenc_np.backend import DynamicConfig, check_float_dtype
from posenc_np.dynamic import check_dynamic_args

from ._common import as_tensor, register_serializable
from .sinusoidal import sinusoidal

__all__ = ["dynamic_position_encoding", "nope", "DynamicPositionEncoding"]


def dynamic_position_encoding(x, weight, bias, *, base=10000.0, layout="interleaved", denominator="dim"):
    """`x + sinusoidal(arange(seq)) @ weight.T + bias`; see `posenc_np.dynamic_position_encoding`.

    `weight` is `[out, in]` like the spec (a Keras `Dense` kernel is `weight.T`; the layer below passes
    `tf.transpose(kernel)`). float32 compute, one cast to x's dtype. Works in tf.function(jit_compile=True).
    """
    x = as_tensor(x)
    check_float_dtype("x", tf.as_dtype(x.dtype).name, tf.as_dtype(x.dtype).is_floating)
    check_dynamic_args(x.shape, weight.shape, bias.shape, base, layout, denominator)
    dim = x.shape[-1]
    table = sinusoidal(tf.range(tf.shape(x)[-2]), dim, base=base, layout=layout, denominator=denominator)
    projected = tf.matmul(table, tf.cast(weight, tf.float32), transpose_b=True) + tf.cast(bias, tf.float32)
    return tf.cast(tf.cast(x, tf.float32) + projected, x.dtype)


def nope(x):
    """NoPE: `x` unchanged; see `posenc_np.nope` (a float tensor: an integer one is a TypeError)."""
    x = as_tensor(x)
    check_float_dtype("x", tf.as_dtype(x.dtype).name, tf.as_dtype(x.dtype).is_floating)
    return tf.identity(x)


@register_serializable
class DynamicPositionEncoding(keras.layers.Layer):
    """`x + proj(sinusoidal(arange(seq), dim))`, `proj` a trainable `keras.layers.Dense(dim)`.

    Weights: `proj.kernel [dim, dim]` (`[in, out]` = the PyTorch `proj.weight` transposed) and
    `proj.bias [dim]`. Output in the layer's compute dtype.
    """

    def __init__(self, dim, *, base=10000.0, layout="interleaved", denominator="dim", **kwargs):
        super().__init__(**kwargs)
        config = DynamicConfig(dim, base=base, layout=layout, denominator=denominator)
        config.bind(self)
        self.proj = keras.layers.Dense(self.dim, name="proj", dtype=self.dtype_policy)
        self.proj.build((None, self.dim))
        self.built = True

    @property
    def table(self):
        """The trainable projection kernel (the contract's trainable-weight attribute)."""
        return self.proj.kernel

    def call(self, x):
        out = dynamic_position_encoding(x, tf.transpose(self.proj.kernel), self.proj.bias, base=self.base,
                                        layout=self.layout, denominator=self.denominator)
        return tf.cast(out, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), **self.config.as_dict()}
