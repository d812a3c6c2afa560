"""DeBERTa log-bucketed relative positions in PyTorch. Spec: `posenc_np.make_log_bucket_position`."""

from __future__ import annotations

import torch

from posenc_np.backend import check_integer_dtype, check_integer_positions, check_traced_integer
from posenc_np.deberta import check_deberta_args, deberta_log_range

from ._common import TRACE, as_tensor, is_tracing, position_pair

__all__ = ["make_log_bucket_position", "build_relative_position"]


def _log_bucket(relative, bucket_size, max_position):
    """HF's float32 arithmetic on int64 relative positions (the spec's `_log_bucket_float32`)."""
    mid = bucket_size // 2
    sign = torch.sign(relative)
    abs_pos = torch.where((relative < mid) & (relative > -mid), torch.full_like(relative, mid - 1), relative.abs())
    log_range = deberta_log_range(bucket_size, max_position)  # a float32 value: exact in the float32 division
    log_pos = torch.ceil(torch.log(abs_pos.float() / mid) / log_range * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, relative, log_pos.long() * sign)


def make_log_bucket_position(relative_pos, bucket_size, max_position):
    """int32 DeBERTa buckets; see `posenc_np.make_log_bucket_position` (HF's own code is torch)."""
    check_deberta_args(bucket_size, max_position, required=True)
    relative = as_tensor(relative_pos)
    if relative.dtype == torch.bool or relative.is_complex():
        check_integer_dtype("relative_pos", relative.dtype, False)
    if relative.is_floating_point():
        if is_tracing(relative):
            check_traced_integer("relative_pos", relative.dtype, is_floating=True, where=TRACE)
        check_integer_positions("relative_pos", relative.detach().cpu().double().numpy())
    return _log_bucket(relative.long(), bucket_size, max_position).int()


def build_relative_position(q_positions, k_positions, *, bucket_size=-1, max_position=-1):
    """int32 `[..., q, k]` query - key, log-bucketed when both limits are > 0; see the spec."""
    bucketed = check_deberta_args(bucket_size, max_position)
    q, k = position_pair(q_positions, k_positions, integer=True)
    relative = q[..., :, None] - k[..., None, :]
    return (_log_bucket(relative, bucket_size, max_position) if bucketed else relative).int()
