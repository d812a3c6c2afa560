"""Relative position embeddings (Shaw et al. 2018; HF BERT relative_key): the specification."""

from __future__ import annotations

import numpy as np

from ._validate import check_choice, check_integer_positions, check_position_pair, check_positive_int, check_table

__all__ = ["relative_embeddings", "relative_index", "RELATIVE_SIGNS", "check_relative_args"]

RELATIVE_SIGNS = ("key-query", "query-key")


def check_relative_args(table_shape, max_distance, sign) -> int:
    """Validate `relative_embeddings` parameters and the table shape `[2*max_distance+1, dim]`."""
    max_distance = check_positive_int("max_distance", max_distance, minimum=0)
    check_choice("sign", sign, RELATIVE_SIGNS)
    if table_shape is not None:
        check_table("table", table_shape, rows=2 * max_distance + 1)
    return max_distance


def relative_index(q_positions, k_positions, *, max_distance, sign="key-query"):
    """The table rows `relative_embeddings` gathers: `[..., q] x [..., k] -> [..., q, k]` int64.

    Formula:
        sign="key-query":  row[i, j] = clip(j - i, -max_distance, max_distance) + max_distance
        sign="query-key":  row[i, j] = clip(i - j, -max_distance, max_distance) + max_distance
    """
    max_distance = check_relative_args(None, max_distance, sign)
    q = check_integer_positions("q_positions", q_positions).astype(np.int64)
    k = check_integer_positions("k_positions", k_positions).astype(np.int64)
    if q.ndim < 1 or k.ndim < 1:
        raise ValueError(f"q_positions and k_positions must be [..., seq] arrays, got shapes {q.shape}, {k.shape}")
    check_position_pair(q.shape, k.shape)
    distance = k[..., None, :] - q[..., :, None]
    if sign == "query-key":
        distance = -distance
    return np.clip(distance, -max_distance, max_distance) + max_distance


def relative_embeddings(table, q_positions, k_positions, *, max_distance, sign="key-query"):
    """Clipped relative position embeddings: `[..., q] x [..., k] -> [..., q, k, dim]`.

    Formula (k = max_distance, table `[2k + 1, dim]`):
        sign="key-query" (Shaw et al., default):  out[i, j] = table[clip(j - i, -k, k) + k]
        sign="query-key" (HF BERT relative_key):  out[i, j] = table[clip(i - j, -k, k) + k]
    The two signs are the same encoding with the table's rows reversed:
        relative_embeddings(T, ..., sign="query-key") == relative_embeddings(T[::-1], ..., sign="key-query")
    so porting a BERT `distance_embedding` to a Shaw layer is `table[::-1]`.

    Shaw et al. add `q_i . out[i, j]` to the logits (and, with a second table, `sum_j w_ij out[i, j]`
    to the output); the embeddings are shared across heads, `dim` is the per-head width.

    Named conventions: "shaw" (sign "key-query", clipped at k); "hf-bert-relative-key" (sign
    "query-key" with k = max_position_embeddings - 1, so the table has 2 * max_position_embeddings - 1
    rows as HF's `distance_embedding`; HF does not clip, and for positions below max_position_embeddings
    the clip never applies, so the two agree wherever HF is defined).

    Args:
        table: `[2 * max_distance + 1, dim]` array; its dtype is returned.
        q_positions: `[..., q]` integer array (a KV cache passes past .. past + q - 1).
        k_positions: `[..., k]` integer array; leading axes broadcast with q_positions'.
        max_distance: the clipping distance k, >= 0.
        sign: "key-query" or "query-key".

    Returns:
        `[..., q, k, dim]` array of the table's dtype.

    Raises:
        ValueError/TypeError: a table that is not `[2 * max_distance + 1, dim]`, non-integer positions,
            unknown `sign`, negative `max_distance`. Under jit, backends refuse floating positions
            by dtype (TypeError); the clip keeps every row inside the table, so no position is out of range.

    Reference:
        Shaw, Uszkoreit, Vaswani, "Self-Attention with Relative Position Representations", 2018,
        arXiv:1803.02155; tensor2tensor common_attention.py `_generate_relative_positions_matrix`;
        HF models/bert/modeling_bert.py (position_embedding_type="relative_key").

    Examples:
        >>> relative_embeddings(np.arange(5.0)[:, None], np.arange(3), np.arange(3), max_distance=2)[..., 0].tolist()
        [[2.0, 3.0, 4.0], [1.0, 2.0, 3.0], [0.0, 1.0, 2.0]]
    """
    table = np.asarray(table)
    max_distance = check_relative_args(table.shape, max_distance, sign)
    return table[relative_index(q_positions, k_positions, max_distance=max_distance, sign=sign)]
