"""CoPE (contextual position encoding): the specification (float64 NumPy)."""

from __future__ import annotations

import numpy as np

from ._validate import check_float_dtype, check_table

__all__ = ["cope", "check_cope_shapes"]


def check_cope_shapes(query_shape, logits_shape, pos_emb_shape) -> int:
    """`query [..., q, dim]`, `attn_logits [..., q, k]`, `pos_emb [max_pos, dim]`; returns max_pos."""
    query_shape, logits_shape = tuple(query_shape), tuple(logits_shape)
    if len(query_shape) < 2 or len(logits_shape) < 2:
        raise ValueError(f"query must be [..., q, dim] and attn_logits [..., q, k], got shapes "
                         f"{query_shape} and {logits_shape}")
    check_table("pos_emb", pos_emb_shape, cols=query_shape[-1])
    if logits_shape[-2] != query_shape[-2]:
        raise ValueError(f"attn_logits {logits_shape} and query {query_shape} must have the same number of "
                         f"queries (axis -2)")
    try:
        np.broadcast_shapes(query_shape[:-2], logits_shape[:-2])
    except ValueError:
        raise ValueError(f"leading axes of query {query_shape} and attn_logits {logits_shape} do not "
                         f"broadcast") from None
    if pos_emb_shape[0] < 1:
        raise ValueError(f"pos_emb must have at least one row, got shape {tuple(pos_emb_shape)}")
    return int(pos_emb_shape[0])


def cope(query, attn_logits, pos_emb):
    """CoPE: positions counted by gates, position logits interpolated: `[..., q, k]`.

    Formula, for query i, key j, and a learned table `pos_emb [max_pos, dim]`:
        g[i, j] = sigmoid(attn_logits[i, j])                     (gates; masked logits -> 0)
        p[i, j] = min(sum_{t >= j} g[i, t], max_pos - 1)           (a reverse cumulative sum over keys)
        e[i, n] = query[i] . pos_emb[n]                            (n = 0 .. max_pos - 1)
        out[i, j] = e[i, ceil(p)] * (p - floor(p)) + e[i, floor(p)] * (1 - (p - floor(p)))
    The caller adds `out` to `attn_logits` before the softmax. Causal use passes logits in which
    future keys hold a large negative value (x-transformers fills masked logits with -finfo.max),
    so their gates are 0 and they count nothing; the clip at max_pos - 1 is the reference's.

    Args:
        query: `[..., q, dim]` float array (the queries of one head, before scaling).
        attn_logits: `[..., q, k]` float array, `q . k` logits (masked entries very negative).
        pos_emb: `[max_pos, dim]` the trainable position embeddings.

    Returns:
        float64 `[..., q, k]` array: the position logits.

    Raises:
        ValueError: shapes that do not fit, non-float inputs.

    Reference:
        Golovneva, Wang, Weston, Sukhbaatar, "Contextual Position Encoding: Learning to Count What's
        Important", 2024, arXiv:2405.18719, appendix B; lucidrains/x-transformers
        x_transformers/x_transformers.py class `CoPE` (commit 9252ed7838021ee61e6c5be0930b3a9a88efdf06,
        default `soft_onehot=False`, no talking heads).

    Examples:
        >>> cope(np.ones((2, 1)), np.array([[0.0, -1e9], [0.0, 0.0]]), np.array([[0.0], [1.0], [2.0]])).tolist()
        [[0.5, 0.0], [1.0, 0.5]]
    """
    query, attn_logits, pos_emb = np.asarray(query), np.asarray(attn_logits), np.asarray(pos_emb)
    for name, a in (("query", query), ("attn_logits", attn_logits), ("pos_emb", pos_emb)):
        check_float_dtype(name, a.dtype)
    max_pos = check_cope_shapes(query.shape, attn_logits.shape, pos_emb.shape)
    gates = 0.5 * (1.0 + np.tanh(0.5 * attn_logits.astype(np.float64)))  # sigmoid, no overflow at -1e9
    positions = np.minimum(np.flip(np.cumsum(np.flip(gates, -1), -1), -1), max_pos - 1)
    logits_int = query.astype(np.float64) @ pos_emb.astype(np.float64).T  # [..., q, max_pos]
    lead = np.broadcast_shapes(logits_int.shape[:-2], positions.shape[:-2])
    logits_int = np.broadcast_to(logits_int, (*lead, *logits_int.shape[-2:]))
    positions = np.broadcast_to(positions, (*lead, *positions.shape[-2:]))
    floor, ceil = np.floor(positions), np.ceil(positions)
    frac = positions - floor
    at_floor = np.take_along_axis(logits_int, floor.astype(np.int64), -1)
    at_ceil = np.take_along_axis(logits_int, ceil.astype(np.int64), -1)
    return at_ceil * frac + at_floor * (1.0 - frac)
