"""T5 relative position buckets and bias in TensorFlow / Keras 3. Spec: `posenc_np.t5_bucket`, `posenc_np.t5_bias`."""

from __future__ import annotations

import keras
import tensorflow as tf

from posenc_np.backend import T5BiasConfig, check_integer_positions, check_table, check_traced_integer
from posenc_np.t5 import check_t5_args, t5_bucket_thresholds

from ._common import (
    TRACE,
    as_tensor,
    bias_output_shape,
    is_tracing,
    position_pair,
    register_serializable,
    spec_constant,
)

__all__ = ["t5_bucket", "t5_bias", "T5RelativeBias"]


def _buckets(relative, bidirectional, num_buckets, max_distance):
    per_direction, max_exact = check_t5_args(bidirectional, num_buckets, max_distance)
    key = ("t5_thresholds", bool(bidirectional), num_buckets, max_distance)
    thresholds = spec_constant(key, lambda: t5_bucket_thresholds(
        bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance), dtype=tf.int64)
    if bidirectional:
        offset = tf.cast(relative > 0, tf.int64) * per_direction
        distance = tf.abs(relative)
    else:
        offset = tf.zeros((), tf.int64)
        distance = tf.maximum(-relative, 0)
    # count(thresholds <= distance): integers only, the spec's buckets whatever XLA's log does.
    flat = tf.reshape(distance, [1, -1])
    log_steps = tf.reshape(tf.searchsorted(thresholds[None], flat, side="right", out_type=tf.int64),
                           tf.shape(distance))
    return tf.cast(offset + tf.minimum(distance, max_exact) + log_steps, tf.int32)


def t5_bucket(relative_position, *, bidirectional=True, num_buckets=32, max_distance=128):
    """int32 T5 buckets of `key - query`; see `posenc_np.t5_bucket` (thresholds are counted, as in
    `posenc_torch.t5_bucket`). Eager, non-integer values raise ValueError; inside tf.function a
    floating tensor is a TypeError."""
    check_t5_args(bidirectional, num_buckets, max_distance)
    relative = as_tensor(relative_position)
    if relative.dtype.is_floating:
        if is_tracing(relative):
            check_traced_integer("relative_position", relative.dtype.name, is_floating=True, where=TRACE)
        relative = tf.constant(check_integer_positions("relative_position", tf.cast(relative, tf.float64).numpy()))
    return _buckets(tf.cast(relative, tf.int64), bidirectional, num_buckets, max_distance)


def t5_bias(table, q_positions, k_positions, *, bidirectional=True, num_buckets=32, max_distance=128):
    """`[..., heads, q, k]` T5 bias from `table [num_buckets, heads]`; see `posenc_np.t5_bias`.

    The table's dtype; differentiable with respect to `table` (tf.gather's gradient is an
    IndexedSlices scatter-add). Works inside tf.function(jit_compile=True).
    """
    check_t5_args(bidirectional, num_buckets, max_distance)
    check_table("table", table.shape, rows=num_buckets)
    q, k = position_pair(q_positions, k_positions, integer=True)
    bucket = _buckets(k[..., None, :] - q[..., :, None], bidirectional, num_buckets, max_distance)
    values = tf.gather(tf.transpose(table), bucket, axis=1)  # [heads, ..., q, k]
    rank = len(values.shape)
    return tf.transpose(values, [*range(1, rank - 2), 0, rank - 2, rank - 1]) if rank > 3 else values


@register_serializable
class T5RelativeBias(keras.layers.Layer):
    """T5 bias with a trainable weight `table [num_buckets, num_heads]` (N(0, 0.02) init).

    Buckets are integers; the gathered bias is cast to the layer's compute dtype.
    """

    def __init__(self, num_heads, *, bidirectional=True, num_buckets=32, max_distance=128, **kwargs):
        super().__init__(**kwargs)
        config = T5BiasConfig(num_heads, bidirectional=bidirectional, num_buckets=num_buckets,
                              max_distance=max_distance)
        config.bind(self)
        self.table = self.add_weight(name="table", shape=config.table_shape,
                                     initializer=keras.initializers.RandomNormal(stddev=0.02))
        self.built = True

    def call(self, q_positions, k_positions):
        bias = t5_bias(self.table, q_positions, k_positions, bidirectional=self.bidirectional,
                       num_buckets=self.num_buckets, max_distance=self.max_distance)
        return tf.cast(bias, self.compute_dtype)

    def compute_output_shape(self, q_positions_shape, k_positions_shape):
        return bias_output_shape(self.num_heads, q_positions_shape, k_positions_shape)

    def get_config(self):
        return {**super().get_config(), **self.config.as_dict()}
