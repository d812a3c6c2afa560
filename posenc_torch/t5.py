"""T5 relative position buckets and bias in PyTorch. Spec: `posenc_np.t5_bucket`, `posenc_np.t5_bias`."""

from __future__ import annotations

import torch

from posenc_np.backend import T5BiasConfig, check_integer_positions, check_table, check_traced_integer
from posenc_np.t5 import check_t5_args, t5_bucket_thresholds

from ._common import TRACE, as_tensor, is_tracing, position_pair, spec_constant

__all__ = ["t5_bucket", "t5_bias", "T5RelativeBias"]


def _buckets(relative, bidirectional, num_buckets, max_distance):
    per_direction, max_exact = check_t5_args(bidirectional, num_buckets, max_distance)
    key = ("t5_thresholds", bool(bidirectional), num_buckets, max_distance)
    thresholds = spec_constant(key, lambda: t5_bucket_thresholds(
        bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance),
        dtype=torch.long, device=relative.device)
    if bidirectional:
        offset = (relative > 0).long() * per_direction
        distance = relative.abs()
    else:
        offset = 0
        distance = (-relative).clamp(min=0)
    # count(thresholds <= distance): integer only, so every backend returns the spec's buckets.
    log_steps = torch.bucketize(distance, thresholds, right=True)
    return (offset + distance.clamp(max=max_exact) + log_steps).int()


def t5_bucket(relative_position, *, bidirectional=True, num_buckets=32, max_distance=128):
    """int32 T5 buckets of `key - query`; see `posenc_np.t5_bucket`.

    No float32 log: the spec's bucket thresholds (`posenc_np.t5.t5_bucket_thresholds`, HF's float32
    arithmetic) are counted, so buckets equal HF's exactly at every boundary. Eager, non-integer
    values raise ValueError; under torch.compile a floating tensor is a TypeError.
    """
    check_t5_args(bidirectional, num_buckets, max_distance)
    relative = as_tensor(relative_position)
    if relative.is_floating_point():
        if is_tracing(relative):
            check_traced_integer("relative_position", relative.dtype, is_floating=True, where=TRACE)
        check_integer_positions("relative_position", relative.detach().cpu().double().numpy())
    return _buckets(relative.long(), bidirectional, num_buckets, max_distance)


def t5_bias(table, q_positions, k_positions, *, bidirectional=True, num_buckets=32, max_distance=128):
    """`[..., heads, q, k]` T5 bias gathered from `table [num_buckets, heads]`; see `posenc_np.t5_bias`.

    Returns the table's dtype; differentiable with respect to `table` (the gather's gradient is a
    scatter-add into the bucket rows). Logits it is added to are not scaled (T5).
    """
    check_t5_args(bidirectional, num_buckets, max_distance)
    check_table("table", table.shape, rows=num_buckets)
    q, k = position_pair(q_positions, k_positions, integer=True)
    bucket = _buckets(k[..., None, :] - q[..., :, None], bidirectional, num_buckets, max_distance)
    return table.t()[:, bucket].movedim(0, -3)  # gathered straight into [heads, ..., q, k]


class T5RelativeBias(torch.nn.Module):
    """T5 bias with a trainable `table [num_buckets, num_heads]` (nn.Parameter, N(0, 0.02) init).

    The parameter name `table` maps to HF's `relative_attention_bias.weight` (same orientation).
    """

    def __init__(self, num_heads, *, bidirectional=True, num_buckets=32, max_distance=128, dtype=None, device=None):
        super().__init__()
        config = T5BiasConfig(num_heads, bidirectional=bidirectional, num_buckets=num_buckets,
                              max_distance=max_distance)
        config.bind(self)
        self.table = torch.nn.Parameter(torch.empty(config.table_shape, dtype=dtype, device=device))
        torch.nn.init.normal_(self.table, std=0.02)

    def forward(self, q_positions, k_positions):
        return t5_bias(self.table, q_positions, k_positions, bidirectional=self.bidirectional,
                       num_buckets=self.num_buckets, max_distance=self.max_distance)

    def extra_repr(self):
        return self.config.repr_args()
