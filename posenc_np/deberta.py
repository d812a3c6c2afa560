"""DeBERTa-v2/v3 log-bucketed relative positions: the specification (NumPy)."""

from __future__ import annotations

import numbers

import numpy as np

from ._validate import check_integer_positions

__all__ = ["make_log_bucket_position", "build_relative_position", "check_deberta_args", "deberta_log_range"]


def check_deberta_args(bucket_size, max_position, *, required=False) -> bool:
    """True when bucketing is on (both > 0, as HF's `bucket_size > 0 and max_position > 0`).

    `required=True` (`make_log_bucket_position`, which always buckets): off is a ValueError. Bucketing
    needs `bucket_size >= 4` (mid = bucket_size // 2 >= 2, so the log buckets' scale mid - 1 is positive)
    and `max_position - 1 > mid` (a positive log range).
    """
    for name, value in (("bucket_size", bucket_size), ("max_position", max_position)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name}={value!r} must be an integer")
    if bucket_size <= 0 or max_position <= 0:
        if required:
            raise ValueError(f"bucket_size={bucket_size} and max_position={max_position} must both be > 0")
        return False
    mid = bucket_size // 2
    if mid < 2:
        raise ValueError(f"bucket_size={bucket_size} must be >= 4 (mid = bucket_size // 2 must be >= 2)")
    if max_position - 1 <= mid:
        raise ValueError(f"max_position={max_position} must be > bucket_size // 2 + 1 = {mid + 1}")
    return True


def deberta_log_range(bucket_size, max_position) -> float:
    """`ln((max_position - 1) / mid)` as HF forms it: the float32 log of the float32 ratio (a Python float
    holding a float32 value, so every backend divides by the same number)."""
    mid = bucket_size // 2
    return float(np.log(np.float32((max_position - 1) / mid)))


def _log_bucket_float32(relative, bucket_size, max_position):
    """HF's arithmetic: int64 relative positions, the log term in float32 operation by operation."""
    f32 = np.float32
    mid = bucket_size // 2
    sign = np.sign(relative)
    abs_pos = np.where((relative < mid) & (relative > -mid), mid - 1, np.abs(relative))
    # torch: long / int -> float32; torch.log(torch.tensor(python float)) -> float32 log of a float32
    log_range = f32(deberta_log_range(bucket_size, max_position))
    log_pos = np.ceil(np.log(abs_pos.astype(f32) / f32(mid)) / log_range * f32(mid - 1)) + f32(mid)
    return np.where(abs_pos <= mid, relative, log_pos.astype(np.int64) * sign)


def make_log_bucket_position(relative_pos, bucket_size, max_position):
    """DeBERTa's log bucket of a relative position, int32 (HF returns the same integers).

    Formula, with mid = bucket_size // 2 and r the relative position:
        |r| <= mid:  bucket = r     (exact, |r| < mid and r = +-mid both keep their value)
        otherwise:   bucket = sign(r) * (ceil(ln(|r| / mid) / ln((max_position - 1) / mid) * (mid - 1)) + mid)
    The log range is not clipped: |r| beyond max_position - 1 gives buckets beyond bucket_size - 1
    (DeBERTa clips them later, `clamp(c2p_pos, 0, 2 * att_span - 1)`). The log term is evaluated
    in float32 as HF does (its `abs_pos / mid` is float32 for an integer tensor).

    Args:
        relative_pos: integer array of any shape (query - key, see `build_relative_position`).
        bucket_size: `position_buckets` (256 in DeBERTa-v3), >= 4.
        max_position: `max_relative_positions` (512 when the config leaves it -1).

    Returns:
        int32 array of the same shape.

    Raises:
        ValueError/TypeError: non-integer positions, bucket_size < 4, max_position too small.

    Reference:
        He et al., "DeBERTa: Decoding-enhanced BERT with Disentangled Attention", 2020,
        arXiv:2006.03654; HF transformers models/deberta_v2/modeling_deberta_v2.py
        `make_log_bucket_position` (tested against the installed function).

    Examples:
        >>> make_log_bucket_position(np.array([-300, -5, 0, 3, 4, 5, 40]), 8, 64).tolist()
        [-9, -5, 0, 3, 4, 5, 7]
    """
    check_deberta_args(bucket_size, max_position, required=True)
    relative = check_integer_positions("relative_pos", relative_pos).astype(np.int64)
    return _log_bucket_float32(relative, bucket_size, max_position).astype(np.int32)


def build_relative_position(q_positions, k_positions, *, bucket_size=-1, max_position=-1):
    """DeBERTa's relative positions `query - key`, log-bucketed when both limits are > 0: `[..., q, k]` int32.

    Formula: `r[i, j] = q_positions[i] - k_positions[j]` (note: query minus key, the opposite of T5
    and Shaw), then `make_log_bucket_position(r, bucket_size, max_position)` when bucket_size > 0 and
    max_position > 0. HF builds it from `arange(query_size)` and `arange(key_size)` and adds a
    leading axis (`[1, q, k]`); explicit positions cover caches and other offsets.

    Args:
        q_positions: `[..., q]` integer array.
        k_positions: `[..., k]` integer array; leading axes broadcast with q's.
        bucket_size, max_position: see `make_log_bucket_position`; -1 (the default) disables bucketing.

    Returns:
        int32 `[..., q, k]`.

    Reference:
        HF transformers models/deberta_v2/modeling_deberta_v2.py `build_relative_position`.

    Examples:
        >>> build_relative_position(np.arange(3), np.arange(3)).tolist()
        [[0, -1, -2], [1, 0, -1], [2, 1, 0]]
    """
    bucketed = check_deberta_args(bucket_size, max_position)
    q = check_integer_positions("q_positions", q_positions).astype(np.int64)
    k = check_integer_positions("k_positions", k_positions).astype(np.int64)
    if q.ndim < 1 or k.ndim < 1:
        raise ValueError(f"q_positions and k_positions must be [..., seq] arrays, got shapes {q.shape}, {k.shape}")
    try:
        np.broadcast_shapes(q.shape[:-1], k.shape[:-1])
    except ValueError:
        raise ValueError(f"q_positions {q.shape} and k_positions {k.shape}: leading axes do not broadcast") from None
    relative = q[..., :, None] - k[..., None, :]
    if bucketed:
        relative = _log_bucket_float32(relative, bucket_size, max_position)
    return relative.astype(np.int32)
