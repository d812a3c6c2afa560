"""DeBERTa log-bucketed relative positions in TensorFlow. Spec: `posenc_np.make_log_bucket_position`."""

from __future__ import annotations

import tensorflow as tf

from posenc_np.backend import check_integer_dtype, check_integer_positions, check_traced_integer
from posenc_np.deberta import check_deberta_args, deberta_log_range

from ._common import TRACE, as_tensor, is_tracing, position_pair

__all__ = ["make_log_bucket_position", "build_relative_position"]


def _log_bucket(relative, bucket_size, max_position):
    """HF's float32 arithmetic on int64 relative positions (the spec's `_log_bucket_float32`)."""
    mid = bucket_size // 2
    sign = tf.sign(relative)
    abs_pos = tf.where((relative < mid) & (relative > -mid), tf.cast(mid - 1, relative.dtype), tf.abs(relative))
    ratio = tf.cast(abs_pos, tf.float32) / float(mid)
    log_pos = tf.math.ceil(tf.math.log(ratio) / deberta_log_range(bucket_size, max_position) * float(mid - 1)) + mid
    return tf.where(abs_pos <= mid, relative, tf.cast(log_pos, tf.int64) * sign)


def make_log_bucket_position(relative_pos, bucket_size, max_position):
    """int32 DeBERTa buckets; see `posenc_np.make_log_bucket_position`."""
    check_deberta_args(bucket_size, max_position, required=True)
    relative = as_tensor(relative_pos)
    if relative.dtype == tf.bool or relative.dtype.is_complex:  # the spec's TypeError (check_integer_positions)
        check_integer_dtype("relative_pos", relative.dtype.name, False)
    if relative.dtype.is_floating:
        if is_tracing(relative):
            check_traced_integer("relative_pos", relative.dtype.name, is_floating=True, where=TRACE)
        relative = tf.constant(check_integer_positions("relative_pos", tf.cast(relative, tf.float64).numpy()))
    return tf.cast(_log_bucket(tf.cast(relative, tf.int64), bucket_size, max_position), tf.int32)


def build_relative_position(q_positions, k_positions, *, bucket_size=-1, max_position=-1):
    """int32 `[..., q, k]` query - key, log-bucketed when both limits are > 0; see the spec."""
    bucketed = check_deberta_args(bucket_size, max_position)
    q, k = position_pair(q_positions, k_positions, integer=True)
    relative = q[..., :, None] - k[..., None, :]
    return tf.cast(_log_bucket(relative, bucket_size, max_position) if bucketed else relative, tf.int32)
