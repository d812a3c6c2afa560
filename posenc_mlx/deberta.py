"""DeBERTa log-bucketed relative positions in MLX. Spec: `posenc_np.make_log_bucket_position`."""

from __future__ import annotations

import mlx.core as mx

from posenc_np.backend import check_integer_dtype
from posenc_np.deberta import check_deberta_args, deberta_log_range

from ._common import as_tensor, integer_values, is_floating, position_pair

__all__ = ["make_log_bucket_position", "build_relative_position"]


def _log_bucket(relative, bucket_size, max_position):
    """HF's float32 arithmetic on integer relative positions (the spec's `_log_bucket_float32`)."""
    mid = bucket_size // 2
    sign = mx.sign(relative)
    abs_pos = mx.where((relative < mid) & (relative > -mid), mid - 1, mx.abs(relative))
    ratio = abs_pos.astype(mx.float32) / mx.array(mid, mx.float32)
    log_range = mx.array(deberta_log_range(bucket_size, max_position), mx.float32)
    log_pos = mx.ceil(mx.log(ratio) / log_range * mx.array(mid - 1, mx.float32)) + mid
    return mx.where(abs_pos <= mid, relative, log_pos.astype(relative.dtype) * sign)


def make_log_bucket_position(relative_pos, bucket_size, max_position):
    """int32 DeBERTa buckets; see `posenc_np.make_log_bucket_position`."""
    check_deberta_args(bucket_size, max_position, required=True)
    relative = as_tensor(relative_pos)
    if relative.dtype in (mx.bool_, mx.complex64):  # the spec's TypeError (check_integer_positions)
        check_integer_dtype("relative_pos", relative.dtype, False)
    if is_floating(relative):
        relative = integer_values("relative_pos", relative)
    return _log_bucket(relative, bucket_size, max_position).astype(mx.int32)


def build_relative_position(q_positions, k_positions, *, bucket_size=-1, max_position=-1):
    """int32 `[..., q, k]` query - key, log-bucketed when both limits are > 0; see the spec."""
    bucketed = check_deberta_args(bucket_size, max_position)
    q, k = position_pair(q_positions, k_positions, integer=True)
    relative = q[..., :, None] - k[..., None, :]
    if bucketed:
        relative = _log_bucket(relative, bucket_size, max_position)
    return relative.astype(mx.int32)
