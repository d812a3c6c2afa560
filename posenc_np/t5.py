"""T5 relative position buckets and bias: the specification (NumPy)."""

from __future__ import annotations

import math

import numpy as np

from ._validate import check_integer_positions, check_position_pair, check_positive_int, check_table

__all__ = ["t5_bucket", "t5_bias", "t5_bucket_thresholds", "check_t5_args"]


def check_t5_args(bidirectional, num_buckets, max_distance) -> tuple[int, int]:
    """Validate the bucketing parameters; returns `(buckets per direction, max_exact)`.

    Backends call this before building anything.
    """
    if not isinstance(bidirectional, (bool, np.bool_)):
        raise TypeError(f"bidirectional={bidirectional!r} must be a bool")
    num_buckets = check_positive_int("num_buckets", num_buckets, minimum=2)
    max_distance = check_positive_int("max_distance", max_distance)
    if bidirectional and num_buckets % 2:
        raise ValueError(f"num_buckets={num_buckets} must be even with bidirectional=True: "
                         f"half the buckets serve each direction")
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    max_exact = per_direction // 2
    if max_exact < 1:
        raise ValueError(f"num_buckets={num_buckets} leaves no exact bucket (bidirectional={bool(bidirectional)}): "
                         f"need at least {4 if bidirectional else 2}")
    if max_distance <= max_exact:
        raise ValueError(f"max_distance={max_distance} must be larger than the exact-bucket range "
                         f"max_exact={max_exact} (num_buckets={num_buckets}, bidirectional={bool(bidirectional)})")
    return per_direction, max_exact


def _log_bucket_float32(distance, per_direction, max_exact, max_distance):
    """HF/Mesh TF's log bucket for distances >= max_exact, in float32 exactly as HF computes it.

    HF: max_exact + int(log(float32(n) / max_exact) / math.log(max_distance / max_exact) * (nb - max_exact)),
    every operation in float32 (the Python float constant is rounded to float32), truncated toward zero.
    """
    f32 = np.float32
    ratio = np.asarray(distance).astype(f32) / f32(max_exact)
    scaled = np.log(ratio) / f32(math.log(max_distance / max_exact)) * f32(per_direction - max_exact)
    return np.minimum(max_exact + scaled.astype(np.int64), per_direction - 1)


def t5_bucket_thresholds(*, bidirectional=True, num_buckets=32, max_distance=128) -> np.ndarray:
    """The distances where T5's log buckets start: `[per_direction - max_exact - 1]` int64, ascending.

    `thresholds[k - 1]` is the smallest distance n with log bucket >= max_exact + k (HF float32
    arithmetic). With them the bucket of a distance n >= 0 within one direction is
        min(n, max_exact) + count(thresholds <= n)
    integer arithmetic only, which is how the backends compute buckets: they do not evaluate a
    float32 log whose last ulp (and so a bucket at an exact boundary like n = 16, 32, 64 for the
    default parameters) would depend on the framework's log implementation.
    """
    per_direction, max_exact = check_t5_args(bidirectional, num_buckets, max_distance)
    distance = np.arange(max_exact, 2 * max_distance + 1)
    buckets = _log_bucket_float32(distance, per_direction, max_exact, max_distance)
    targets = np.arange(max_exact + 1, per_direction)
    index = np.searchsorted(buckets, targets, side="left")  # buckets are non-decreasing in distance
    return distance[index].astype(np.int64)


def t5_bucket(relative_position, *, bidirectional=True, num_buckets=32, max_distance=128):
    """T5's relative position bucket of `key_position - query_position`, as int32.

    Formula (n = |r| bidirectional, n = max(-r, 0) unidirectional; nb = num_buckets / 2 bidirectional,
    num_buckets unidirectional; max_exact = nb // 2):
        offset = nb if (bidirectional and r > 0) else 0
        bucket = offset + n                                                      if n < max_exact
        bucket = offset + min(max_exact + int(log(n / max_exact) / log(max_distance / max_exact)
                                              * (nb - max_exact)), nb - 1)       otherwise
    `int` truncates toward zero. Unidirectional (decoder) buckets put every future key (r > 0) in
    bucket 0, like the current position. Distances >= max_distance share the last bucket.

    Precision: the log term is evaluated in float32, operation by operation, as HF transformers and
    Mesh TensorFlow do, and this function returns exactly HF's integers. For the default (32, 128)
    the boundaries n = 16, 32, 64 make the real-valued term exactly 2, 4, 6; float32 and float64
    agree there, but a float64 evaluation is not what defines the checkpoints' buckets, so the spec
    follows float32 (see `t5_bucket_thresholds` for how backends reproduce it exactly).

    Named conventions: "t5" = (bidirectional, 32, 128) for the encoder, "t5-decoder" =
    (unidirectional, 32, 128).

    Args:
        relative_position: integer array of any shape, `key_position - query_position` (floats that
            hold integers are accepted).
        bidirectional: encoder (True) or decoder (False) bucketing.
        num_buckets: total number of buckets; even when bidirectional.
        max_distance: distance from which all positions share the last bucket; larger than max_exact.

    Returns:
        int32 array, same shape, values in [0, num_buckets).

    Raises:
        ValueError/TypeError: non-integer relative positions, odd `num_buckets` with
            bidirectional=True, `max_distance <= max_exact`, too few buckets.

    Under jit (torch.compile, tf.function, jax.jit) backends cannot read values: an integer array is
    bucketed as here, a floating one is refused by its dtype (TypeError) whatever it holds.

    Reference:
        Raffel et al., "Exploring the Limits of Transfer Learning", 2019, arXiv:1910.10683;
        HF models/t5/modeling_t5.py `T5Attention._relative_position_bucket`;
        mesh_tensorflow/transformer/transformer_layers.py `_relative_position_bucket`.

    Examples:
        >>> t5_bucket(np.array([-200, -16, -1, 0, 1, 15, 16, 200])).tolist()
        [15, 10, 1, 0, 17, 25, 26, 31]
    """
    per_direction, max_exact = check_t5_args(bidirectional, num_buckets, max_distance)
    relative = check_integer_positions("relative_position", relative_position).astype(np.int64)
    if bidirectional:
        offset = np.where(relative > 0, per_direction, 0)
        distance = np.abs(relative)
    else:
        offset = np.zeros_like(relative)
        distance = np.maximum(-relative, 0)
    large = _log_bucket_float32(np.maximum(distance, max_exact), per_direction, max_exact, max_distance)
    bucket = offset + np.where(distance < max_exact, distance, large)
    return bucket.astype(np.int32)


def t5_bias(table, q_positions, k_positions, *, bidirectional=True, num_buckets=32, max_distance=128):
    """T5 relative attention bias: `table[t5_bucket(j - i)]`, `[..., q] x [..., k] -> [..., heads, q, k]`.

    Formula:
        bias[h, i, j] = table[t5_bucket(k_positions[j] - q_positions[i]), h]

    T5 adds this to unscaled logits: T5 attention has no 1/sqrt(d_kv) factor (it is folded into the
    initialisation), so compare with `attention(q, k, v, bias=t5_bias(...), scale=1.0)`.

    Shapes as `alibi_bias`: `[q]`, `[k]` positions give `[heads, q, k]` with no batch axis; leading
    axes of the two broadcast (`[batch, q]` positions give `[batch, heads, q, k]`). Decoding with a
    cache passes q_positions = past .. past + q - 1 (HF's `cache_position`).

    Args:
        table: `[num_buckets, heads]` (HF's `relative_attention_bias.weight`; t5x and Mesh TF store
            `[heads, num_buckets]`, transpose those). Its dtype is returned.
        q_positions: `[..., q]` integer array.
        k_positions: `[..., k]` integer array.
        bidirectional, num_buckets, max_distance: see `t5_bucket`.

    Returns:
        `[..., heads, q, k]` array of the table's dtype.

    Raises:
        ValueError/TypeError: a table that is not `[num_buckets, heads]`, non-integer positions, and
            everything `t5_bucket` raises.

    Reference:
        HF models/t5/modeling_t5.py `T5Attention.compute_bias`; Raffel et al. 2019.

    Examples:
        >>> table = np.arange(64.0).reshape(32, 2)  # [num_buckets, heads]
        >>> t5_bias(table, np.arange(3), np.arange(3))[0]  # head 0: key before query -> buckets 1, 2; after -> 17, 18
        array([[ 0., 34., 36.],
               [ 2.,  0., 34.],
               [ 4.,  2.,  0.]])
    """
    table = np.asarray(table)
    check_t5_args(bidirectional, num_buckets, max_distance)
    check_table("table", table.shape, rows=num_buckets)
    q = check_integer_positions("q_positions", q_positions).astype(np.int64)
    k = check_integer_positions("k_positions", k_positions).astype(np.int64)
    if q.ndim < 1 or k.ndim < 1:
        raise ValueError(f"q_positions and k_positions must be [..., seq] arrays, got shapes {q.shape}, {k.shape}")
    check_position_pair(q.shape, k.shape)
    bucket = t5_bucket(k[..., None, :] - q[..., :, None], bidirectional=bidirectional,
                       num_buckets=num_buckets, max_distance=max_distance)  # [..., q, k]
    return np.moveaxis(table[bucket], -1, -3)
