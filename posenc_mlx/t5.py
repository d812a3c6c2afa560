"""T5 relative position buckets and bias in MLX. Spec: `posenc_np.t5_bucket`, `posenc_np.t5_bias`."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from posenc_np.backend import T5BiasConfig, check_table
from posenc_np.t5 import check_t5_args, t5_bucket_thresholds

from ._common import as_tensor, bind_config, integer_values, is_floating, position_pair, spec_constant

__all__ = ["t5_bucket", "t5_bias", "T5RelativeBias"]


def _buckets(relative, bidirectional, num_buckets, max_distance):
    per_direction, max_exact = check_t5_args(bidirectional, num_buckets, max_distance)
    key = ("t5_thresholds", bool(bidirectional), num_buckets, max_distance)
    thresholds = spec_constant(key, lambda: t5_bucket_thresholds(
        bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance), dtype=mx.int32)
    relative = relative.astype(mx.int32)
    if bidirectional:
        offset = mx.where(relative > 0, per_direction, 0)
        distance = mx.abs(relative)
    else:
        offset = 0
        distance = mx.maximum(-relative, 0)
    # count(thresholds <= distance): integers only, the spec's buckets whatever a float32 log does
    log_steps = mx.searchsorted(thresholds, distance, side="right").astype(mx.int32)
    return (offset + mx.minimum(distance, max_exact) + log_steps).astype(mx.int32)


def t5_bucket(relative_position, *, bidirectional=True, num_buckets=32, max_distance=128):
    """int32 T5 buckets of `key - query`; see `posenc_np.t5_bucket` (and `posenc_torch.t5_bucket` for
    why thresholds are counted instead of taking a float32 log). Readable non-integer values raise
    ValueError; under mx.compile a floating array is a TypeError."""
    check_t5_args(bidirectional, num_buckets, max_distance)
    relative = as_tensor(relative_position)
    if is_floating(relative):
        relative = integer_values("relative_position", relative)
    return _buckets(relative, bidirectional, num_buckets, max_distance)


def t5_bias(table, q_positions, k_positions, *, bidirectional=True, num_buckets=32, max_distance=128):
    """`[..., heads, q, k]` T5 bias from `table [num_buckets, heads]`; see `posenc_np.t5_bias`.

    The table's dtype; differentiable with respect to `table`. Works under mx.compile.
    """
    check_t5_args(bidirectional, num_buckets, max_distance)
    table = as_tensor(table)
    check_table("table", table.shape, rows=num_buckets)
    q, k = position_pair(q_positions, k_positions, integer=True)
    bucket = _buckets(k[..., None, :] - q[..., :, None], bidirectional, num_buckets, max_distance)
    return mx.moveaxis(mx.take(table, bucket, axis=0), -1, -3)


class T5RelativeBias(nn.Module):
    """T5 bias with a trainable `table [num_buckets, num_heads]` (a parameter, N(0, 0.02) init)."""

    def __init__(self, num_heads, *, bidirectional=True, num_buckets=32, max_distance=128, dtype=mx.float32,
                 key=None):
        super().__init__()
        config = T5BiasConfig(num_heads, bidirectional=bidirectional, num_buckets=num_buckets,
                              max_distance=max_distance)
        bind_config(config, self)
        self.table = (0.02 * mx.random.normal(config.table_shape, key=key)).astype(dtype)

    def __call__(self, q_positions, k_positions):
        return t5_bias(self.table, q_positions, k_positions, bidirectional=self.bidirectional,
                       num_buckets=self.num_buckets, max_distance=self.max_distance)

    def _extra_repr(self):
        return self.config.repr_args()
