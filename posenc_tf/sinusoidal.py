"""Sinusoidal absolute encodings in TensorFlow / Keras 3. The math and its conventions: `posenc_np.sinusoidal`."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from posenc_np.backend import SinusoidalConfig
from posenc_np.sinusoidal import check_sinusoidal_2d_args, check_sinusoidal_args, sinusoid_2d_axes, sinusoid_inv_freq

from ._common import as_tensor, is_tracing, register_serializable, resolve_dtype, spec_constant

__all__ = ["sinusoidal", "sinusoidal_2d", "SinusoidalEncoding"]


def sinusoidal(positions, dim, *, base=10000.0, layout="interleaved", denominator="dim", dtype=None):
    """`[*positions.shape] -> [*positions.shape, dim]`; see `posenc_np.sinusoidal`.

    Angles are float32 (unlike keras-hub's SinePositionEncoding, which casts positions to the compute
    dtype, so bf16 positions above 256 stop being integers); the result is cast to `dtype` last.
    """
    dim = check_sinusoidal_args(dim, base, layout, denominator)
    inv_freq = spec_constant(("sinusoid", dim, float(base), denominator),
                             lambda: sinusoid_inv_freq(dim, base=base, denominator=denominator))
    angles = tf.cast(as_tensor(positions), tf.float32)[..., None] * inv_freq  # [..., dim/2]
    sin, cos = tf.sin(angles), tf.cos(angles)
    if layout == "interleaved":
        table = tf.reshape(tf.stack([sin, cos], axis=-1), tf.concat([tf.shape(angles)[:-1], [dim]], 0))
    elif layout == "concat":
        table = tf.concat([sin, cos], axis=-1)
    else:  # concat-cos
        table = tf.concat([cos, sin], axis=-1)
    return tf.cast(table, resolve_dtype(dtype))


def sinusoidal_2d(positions, dim, *, base=10000.0, axis_order="xy", blocks="per-axis", layout="concat",
                  denominator="dim", dtype=None):
    """`[..., 2] -> [..., dim]` 2-D sin-cos table; see `posenc_np.sinusoidal_2d`.

    Each axis is this backend's `sinusoidal` of width dim/2 (float32 angles); the blocks are joined
    and cast to `dtype` (float32 when None) at the end.
    """
    positions = as_tensor(positions)
    dim = check_sinusoidal_2d_args(tuple(positions.shape.as_list()) if positions.shape.rank is not None else (None,), dim, base, axis_order, blocks, layout, denominator)
    first, second = (sinusoidal(positions[..., axis], dim // 2, base=base, layout=layout, denominator=denominator)
                     for axis in sinusoid_2d_axes(axis_order))
    if blocks == "per-axis":
        table = tf.concat([first, second], axis=-1)
    else:  # sin-cos: [S(a) | S(b) | C(a) | C(b)]
        q = dim // 4
        table = tf.concat([first[..., :q], second[..., :q], first[..., q:], second[..., q:]], axis=-1)
    return tf.cast(table, resolve_dtype(dtype))


@register_serializable
class SinusoidalEncoding(keras.layers.Layer):
    """`sinusoidal` as a weightless Keras layer; called with integer `positions`.

    The output has the layer's compute dtype (bf16 under a `mixed_bfloat16` policy); angles are
    float32. With `max_len`, rows 0..max_len-1 come from the float64 spec (a constant, not a weight);
    positions beyond are computed.

    Args:
        dim, base, layout, denominator: as `posenc_np.sinusoidal`.
        max_len: rows of the precomputed cache, or None to always compute.
    """

    def __init__(self, dim, *, base=10000.0, layout="interleaved", denominator="dim", max_len=None, **kwargs):
        super().__init__(**kwargs)
        config = SinusoidalConfig(dim, base=base, layout=layout, denominator=denominator, max_len=max_len)
        config.bind(self)
        self._cache = config.cache_table().astype(np.float32)
        self.built = True

    def call(self, positions):
        positions = as_tensor(positions)
        computed = sinusoidal(positions, self.dim, base=self.base, layout=self.layout,
                              denominator=self.denominator, dtype=self.compute_dtype)
        rows = self._cache.shape[0]
        if rows == 0 or positions.dtype.is_floating:  # the cache holds integer rows; fractional positions
            return computed
        if not is_tracing(positions) and int(tf.size(positions)) and int(tf.reduce_max(positions)) >= rows:
            return computed
        positions = tf.cast(positions, tf.int32)
        inside = (positions >= 0) & (positions < rows)
        gathered = tf.cast(tf.gather(self._cache, tf.clip_by_value(positions, 0, rows - 1)), computed.dtype)
        return tf.where(inside[..., None], gathered, computed)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.dim)

    def get_config(self):
        return {**super().get_config(), **self.config.as_dict()}
