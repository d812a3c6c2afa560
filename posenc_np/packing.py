"""Packed sequences and context parallelism: the specification (NumPy, integer index maths).

Packed (varlen) form: documents of lengths n1, n2, ... are laid end to end in one row of
`total = n1 + n2 + ...` tokens and described by `cu_seqlens = [0, n1, n1+n2, ..., total]` (the
flash-attn / Transformer Engine "thd" form). Positions restart at every document start, attention
must not cross documents, and relative biases measure distances inside a document only.

Context parallelism (CP): a sequence of `seq_len` tokens is split over `world_size` ranks along the
sequence axis. Rank `rank` holds `seq_len // world_size` tokens; which ones is the `strategy`:
    "contiguous"  one block each: rank r holds tokens [r*n, (r+1)*n), n = seq_len / world_size.
    "striped"     token t on rank t % world_size (MaxText STRIPED, striped attention).
    "zigzag"      2*world_size chunks of c = seq_len / (2*world_size) tokens; rank r holds chunk r
                  followed by chunk 2*world_size-1-r (the load-balanced causal split: every rank gets
                  one early and one late chunk; ring attention, Megatron `get_pos_emb_on_this_cp_rank`,
                  Transformer Engine `_get_freqs_on_this_cp_rank`, MaxText DUAL_CHUNK_SWAP).
With `cu_seqlens`, every document is split by the strategy on its own and a rank holds its share of
document 0, then of document 1, ...: for "zigzag" this is Transformer Engine's thd layout
(transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
`get_batch_on_this_cp_rank` and transformer_engine/common/fused_attn/context_parallel.cu
`thd_partition_src_index`, TE v2.18), which needs every document padded to a multiple of
2*world_size (TE's `cu_seqlens_padded`); the local `cu_seqlens` on every rank is `cu_seqlens //
world_size`.

Position functions return int64 indices; `cp_shard`/`cp_unshard` gather along an axis, so backends
are exact (no tolerance). The index rules are written once, `cp_local_index` and `cp_packed_index`,
against a library's `where` and gather: the backends take the spec's index arrays as constants where
every input is static and run these same two functions in their graphs where one is data (a traced
`cu_seqlens`, a rank tensor). RoPE, ALiBi and T5 are functions of the positions alone, so
`cp_unshard([apply_rope(cp_shard(x, r), cp_positions(r)) for r]) == apply_rope(x, arange(seq_len))`
for every strategy: that is what `posenc check --distributed` and the sharded-runtime tests check.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ._validate import (
    check_choice,
    check_cu_seqlens_shape,
    check_float_dtype,
    check_integer_positions,
    check_positive_int,
)

__all__ = [
    "CP_STRATEGIES",
    "check_cu_seqlens",
    "check_cu_seqlens_tensor",
    "check_cp_args",
    "check_cp_rank_tensor",
    "check_cp_shards",
    "check_cp_divisible",
    "check_total",
    "check_document_bias_args",
    "check_document_index_tensor",
    "check_offset",
    "check_rerotate_args",
    "check_axis",
    "cp_rank_order",
    "cp_local_index",
    "cp_packed_index",
    "document_ids",
    "positions_from_cu_seqlens",
    "document_mask",
    "document_bias",
    "cp_positions",
    "cp_indices",
    "cp_shard",
    "cp_unshard",
    "rerotate",
]

CP_STRATEGIES = ("contiguous", "striped", "zigzag")


# --- validation (backends call these on eager values) -------------------------------------------------

def check_cu_seqlens(cu_seqlens, name="cu_seqlens") -> np.ndarray:
    """`[num_docs + 1]` integers, starting at 0, never decreasing (empty documents are allowed)."""
    cu = check_integer_positions(name, cu_seqlens)
    check_cu_seqlens_shape(cu.shape, name)
    if cu[0] != 0:
        raise ValueError(f"{name} must start at 0, got {name}[0]={int(cu[0])}")
    steps = np.diff(cu)
    if np.any(steps < 0):
        i = int(np.argmax(steps < 0))
        raise ValueError(f"{name} must not decrease: {name}[{i}]={int(cu[i])} > {name}[{i + 1}]={int(cu[i + 1])}")
    return cu.astype(np.int64)


def check_cu_seqlens_tensor(shape, dtype, *, is_integer, values=None) -> None:
    """A backend's `cu_seqlens` tensor: an integer dtype (`is_integer`, the backend's own test; TypeError),
    the `[num_docs + 1]` shape (checked under a trace too: a shape is static) and, when its values can be
    read (`values`, NumPy; None under a trace), everything `check_cu_seqlens` checks."""
    if not is_integer:
        raise TypeError(f"cu_seqlens must be a 1-D integer tensor, got dtype {dtype}")
    check_cu_seqlens_shape(shape)
    if values is not None:
        check_cu_seqlens(values)


def check_document_index(name, index, total) -> None:
    """`document_bias`'s token indices (`q_index`, `k_index`; the bias's axes `arange(q)`, `arange(k)` when
    None) must lie in the packed row `[0, cu_seqlens[-1])`: a bias wider than the row is refused."""
    index = np.asarray(index)
    if index.size and (index.min() < 0 or index.max() >= total):
        raise ValueError(f"{name} must lie in [0, cu_seqlens[-1]={total}), got values in "
                         f"[{int(index.min())}, {int(index.max())}]")


def check_document_bias_args(bias_shape, causal) -> None:
    """`document_bias`'s bias is `[..., q, k]` (a shape: checked under a trace too) and `causal` a bool."""
    if len(tuple(bias_shape)) < 2:
        raise ValueError(f"bias must be [..., q, k], got shape {tuple(bias_shape)}")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal={causal!r} must be a bool")


def check_document_index_tensor(name, shape, dtype, *, size, bias_shape, is_integer, values=None, total=None):
    """A backend's `q_index`/`k_index`: an integer (`is_integer`, the backend's test) `[size]` tensor for a
    bias axis of `size`; when the values of it and of `cu_seqlens` can be read (`values`, NumPy, and
    `total = cu_seqlens[-1]`; None under a trace), inside the packed row as `check_document_index` asks."""
    if not is_integer or tuple(shape) != (size,):
        raise ValueError(f"{name} must be an integer [{size}] tensor to match bias {tuple(bias_shape)}, "
                         f"got {dtype} shape {tuple(shape)}")
    if values is not None and total is not None:
        check_document_index(name, values, total)


def check_total(total, cu_last, *, where="where cu_seqlens cannot be read") -> int:
    """`total` (the packed row's static length) must equal `cu_seqlens[-1]`; returns it.

    `cu_last=None`: the values of `cu_seqlens` cannot be read (a backend's trace, named by `where`, as in
    `check_traced_integer`), so `total` must be given: the output shape cannot depend on data.
    """
    if total is None:
        if cu_last is None:
            raise ValueError(f"total= (the packed row length, a Python int) is required {where}: "
                             "the output shape cannot depend on cu_seqlens' values")
        return int(cu_last)
    total = check_positive_int("total", total, minimum=0)
    if cu_last is not None and total != int(cu_last):
        raise ValueError(f"total={total} does not match cu_seqlens[-1]={int(cu_last)}")
    return total


def check_offset(offset) -> int:
    """`positions_from_cu_seqlens`'s first position: any integer (not a bool)."""
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
        raise TypeError(f"offset={offset!r} must be an integer")
    return int(offset)


def check_cp_args(world_size, rank, strategy) -> tuple[int, int]:
    """`world_size >= 1`, `0 <= rank < world_size`, a known strategy; returns `(world_size, rank)`."""
    world_size = check_positive_int("world_size", world_size)
    rank = check_positive_int("rank", rank, minimum=0)
    if rank >= world_size:
        raise ValueError(f"rank={rank} must be < world_size={world_size}")
    check_choice("strategy", strategy, CP_STRATEGIES)
    return world_size, rank


def check_cp_rank_tensor(world_size, strategy, *, dtype, shape, is_integer) -> int:
    """`check_cp_args` for a rank given as a backend tensor (data, so one graph serves every rank): its
    value cannot be checked, its dtype (`is_integer`, the backend's test) and shape (a scalar) are;
    returns world_size."""
    world_size, _ = check_cp_args(world_size, 0, strategy)
    if not is_integer or len(tuple(shape)):
        raise TypeError(f"rank must be an int or an integer scalar tensor, got {dtype} shape {tuple(shape)}")
    return world_size


def check_cp_shards(shapes, strategy, axis) -> tuple[int, int]:
    """`cp_unshard`'s shards: one array per rank, all of one shape; returns `(world_size, axis)`, the axis
    made non-negative."""
    shapes = [tuple(shape) for shape in shapes]
    if not shapes:
        raise ValueError("shards must hold one array per rank, got none")
    if any(shape != shapes[0] for shape in shapes):
        raise ValueError(f"shards must all have the same shape, got {shapes}")
    world_size, _ = check_cp_args(len(shapes), 0, strategy)
    return world_size, check_axis(axis, len(shapes[0]))


def _pieces(world_size, strategy) -> int:
    return 2 * world_size if strategy == "zigzag" else world_size


def check_cp_divisible(seq_len, world_size, strategy, *, what="seq_len") -> int:
    """`seq_len` must split evenly: by world_size, or by 2*world_size for "zigzag"."""
    seq_len = check_positive_int(what, seq_len, minimum=0)
    pieces = _pieces(world_size, strategy)
    if seq_len % pieces:
        how = (f"2*world_size={pieces} (strategy='zigzag' cuts it into 2*world_size chunks)"
               if strategy == "zigzag" else f"world_size={world_size}")
        raise ValueError(f"{what}={seq_len} is not divisible by {how}: pad it to a multiple of {pieces} "
                         f"(Transformer Engine: cu_seqlens_padded)")
    return seq_len


def _check_documents_divisible(cu, world_size, strategy):
    lengths = np.diff(cu)
    pieces = _pieces(world_size, strategy)
    bad = np.nonzero(lengths % pieces)[0]
    if bad.size:
        i = int(bad[0])
        check_cp_divisible(int(lengths[i]), world_size, strategy, what=f"document {i} length")


def check_rerotate_args(scaling, mrope_section) -> None:
    """`rerotate` exists only where the frequencies do not depend on the positions or on the axis."""
    if mrope_section is not None:
        raise ValueError(f"rerotate: mrope_section={mrope_section!r}: a multi-axis (mRoPE) key has one rotation "
                         "per axis; shifting it needs the per-axis deltas, re-apply RoPE to the raw keys instead")
    if isinstance(scaling, Mapping):
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind in ("dynamic", "longrope"):
            raise ValueError(f"rerotate: scaling rope_type={kind!r} picks its frequencies from the sequence length "
                             "(max position + 1), so keys rotated at p are not a fixed rotation away from keys "
                             "rotated at p + delta; re-apply RoPE to the raw keys instead")


# --- packed sequences ---------------------------------------------------------------------------------

def _index(values, index):
    return values[index]


def _document_of(cu_seqlens, t):
    """`searchsorted(cu_seqlens, t, side="right") - 1`: the document of every token index in `t`."""
    return np.searchsorted(cu_seqlens, t, side="right") - 1


def document_ids(cu_seqlens, *, total=None) -> np.ndarray:
    """The document of every token of the packed row: `[total]` int64, `doc[t] = i` for cu[i] <= t < cu[i+1].

    Formula: `doc[t] = searchsorted(cu_seqlens, t, side="right") - 1` (empty documents get no token).
    This is MaxText's `decoder_segment_ids` minus one.

    Examples:
        >>> document_ids([0, 3, 5]).tolist()
        [0, 0, 0, 1, 1]
    """
    cu = check_cu_seqlens(cu_seqlens)
    total = check_total(total, cu[-1])
    return _document_of(cu, np.arange(total)).astype(np.int64)


def positions_from_cu_seqlens(cu_seqlens, *, offset=0, total=None) -> np.ndarray:
    """Positions of a packed row: they restart at `offset` at every document start.

    Formula: `positions[t] = t - cu_seqlens[doc(t)] + offset`, `doc(t)` as in `document_ids`.

    `offset=2` gives RoBERTa/fairseq positions (first position `padding_idx + 1` with padding_idx=1),
    per document equal to transformers' `RobertaEmbeddings.create_position_ids_from_input_ids` on each
    unpadded document: a flattening collator that numbers from 0 instead is transformers issue #47496.
    HF's flash-attention path goes the other way (`position_ids` resets -> `cu_seqlens`, PR #31629).

    Args:
        cu_seqlens: `[num_docs + 1]` integers `[0, n1, n1+n2, ..., total]` (flash-attn, Transformer
            Engine varlen form), non-decreasing; empty documents are allowed.
        offset: the first position of every document (int, may be any integer).
        total: the row length; must equal `cu_seqlens[-1]` (backends need it under jit, where the row
            length must be static).

    Returns:
        `[total]` int64.

    Raises:
        ValueError/TypeError: `cu_seqlens` not 1-D integers starting at 0 and non-decreasing;
            `total != cu_seqlens[-1]`; a non-integer `offset`.

    Reference:
        Dao, flash-attn `flash_attn_varlen_func` (cu_seqlens); Transformer Engine
        transformer_engine/pytorch/attention/rope.py (v2.18, thd format); transformers
        models/roberta/modeling_roberta.py `create_position_ids_from_input_ids` (v5.24).

    Examples:
        >>> positions_from_cu_seqlens([0, 3, 5, 9]).tolist()
        [0, 1, 2, 0, 1, 0, 1, 2, 3]
        >>> positions_from_cu_seqlens([0, 2, 5], offset=2).tolist()
        [2, 3, 2, 3, 4]
    """
    offset = check_offset(offset)
    cu = check_cu_seqlens(cu_seqlens)
    doc = document_ids(cu, total=total)
    return np.arange(doc.shape[0], dtype=np.int64) - cu[doc] + offset


def document_mask(cu_seqlens, *, causal=False, total=None) -> np.ndarray:
    """`[total, total]` bool: true where query i and key j are in the same document (and j <= i if causal).

    Formula: `mask[i, j] = doc(i) == doc(j)  [and j <= i]`: the block-diagonal (causal) mask that
    flash-attn's varlen kernels and Transformer Engine's "padding_causal" thd attention apply.

    Args:
        cu_seqlens: see `positions_from_cu_seqlens`.
        causal: also hide future keys.
        total: see `positions_from_cu_seqlens`.

    Returns:
        `[total, total]` bool.

    Raises:
        ValueError/TypeError: as `positions_from_cu_seqlens`; a non-bool `causal`.

    Examples:
        >>> document_mask([0, 2, 3]).astype(int).tolist()
        [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
    """
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal={causal!r} must be a bool")
    doc = document_ids(cu_seqlens, total=total)
    mask = doc[:, None] == doc[None, :]
    if causal:
        mask &= np.tril(np.ones_like(mask))
    return mask


def document_bias(bias, cu_seqlens, *, q_index=None, k_index=None, causal=False):
    """Restrict an attention-logit bias to document boundaries: entries across documents become -inf.

    Formula: `out[..., i, j] = bias[..., i, j]` if `doc(q_index[i]) == doc(k_index[j])` (and
    `k_index[j] <= q_index[i]` when causal), else `-inf`; `doc` as in `document_ids`.

    ALiBi and T5 biases depend only on `k_position - q_position`, which inside a document is the same
    whether positions are global (`arange(total)`) or restart per document
    (`positions_from_cu_seqlens`); what packing adds is that a query must not see another
    document. So: `document_bias(alibi_bias(h, p, p), cu_seqlens)` or `document_bias(t5_bias(table, p,
    p), cu_seqlens)`, added to the logits. Relative embeddings (`relative_embeddings`, `[q, k, dim]`) are
    not logits: compute them from `positions_from_cu_seqlens` positions and mask the logits they
    produce with `document_bias(logits, ...)` or `document_mask`.

    Under context parallelism a rank's queries and keys are a subset of the packed row: pass their
    global token indices (`q_index = cp_indices(..., rank=r)`, keys after a ring/all-gather step
    `k_index = cp_indices(..., rank=s)`), and `causal=True` compares those global indices, not the
    local (zigzag-ordered) ones. Every query keeps at least its own key when the query's token is
    among the keys, so no softmax row is all -inf in self-attention.

    Args:
        bias: `[..., q, k]` float array (`[heads, q, k]` from `alibi_bias`/`t5_bias`).
        cu_seqlens: see `positions_from_cu_seqlens`.
        q_index: `[q]` global token indices of the rows (default `arange(q)`).
        k_index: `[k]` global token indices of the columns (default `arange(k)`).
        causal: also hide keys with a larger global index than the query.

    Returns:
        Array like `bias` (shape and dtype), -inf across documents.

    Raises:
        ValueError/TypeError: bad `cu_seqlens`, indices that are not 1-D integers of length q / k or
            fall outside `[0, cu_seqlens[-1])`, a non-float bias.

    Examples:
        >>> document_bias(np.zeros((3, 3)), [0, 2, 3]).tolist()
        [[0.0, 0.0, -inf], [0.0, 0.0, -inf], [-inf, -inf, 0.0]]
    """
    bias = np.asarray(bias)
    check_float_dtype("bias", bias.dtype)  # a float bias: -inf must be representable
    check_document_bias_args(bias.shape, causal)
    cu = check_cu_seqlens(cu_seqlens)
    total = int(cu[-1])
    indices = []
    for name, index, size in (("q_index", q_index, bias.shape[-2]), ("k_index", k_index, bias.shape[-1])):
        index = np.arange(size) if index is None else check_integer_positions(name, index).astype(np.int64)
        if index.shape != (size,):
            raise ValueError(f"{name} must be [{size}] to match bias {bias.shape}, got shape {index.shape}")
        check_document_index(name, index, total)
        indices.append(index)
    q_idx, k_idx = indices
    keep = _document_of(cu, q_idx)[:, None] == _document_of(cu, k_idx)[None, :]
    if causal:
        keep &= k_idx[None, :] <= q_idx[:, None]
    return np.where(keep, bias, -np.inf).astype(bias.dtype)


# --- context parallelism ------------------------------------------------------------------------------

def cp_local_index(i, rank, *, length, world_size, strategy, where=np.where):
    """The global index, inside one sequence of `length` tokens, of local token `i` of rank `rank`.

    Formula (W = world_size, n = length / W, c = length / (2W)):
        "contiguous":  rank * n + i
        "striped":     i * W + rank
        "zigzag":      i + c * (rank if i < c else 2W - 2 - rank)
    zigzag's second branch is `(i - c) + (2W - 1 - rank) * c`: chunk `rank`, then chunk `2W - 1 - rank`
    (`thd_partition_src_index`, see `cp_indices`). This is the one copy of the rule: `i`, `rank` and
    `length` may be Python ints, NumPy arrays or a backend's tensors (a traced rank, per-token document
    lengths), with `where` that library's `where`; the arguments are not validated here.

    Examples:
        >>> cp_local_index(np.arange(4), 1, length=8, world_size=2, strategy="zigzag").tolist()
        [2, 3, 4, 5]
    """
    if strategy == "contiguous":
        return rank * (length // world_size) + i
    if strategy == "striped":
        return i * world_size + rank
    c = length // (2 * world_size)
    return i + c * where(i < c, rank, 2 * world_size - 2 - rank)


def cp_packed_index(cu_seqlens, g, rank, *, world_size, strategy, document_of=_document_of, take=_index,
                    where=np.where):
    """The packed-row index of local token `g` of rank `rank`, every document split by `strategy` on its own.

    Formula: with `local = cu_seqlens // W`, `d = doc(local, g)` (the document whose local range holds
    `g`), `start = cu_seqlens[d]` and `l = cu_seqlens[d + 1] - start`:
        index = start + cp_local_index(g - local[d], rank, length=l)
    The one copy of the rule, as `cp_local_index`: `document_of(cu, t)` is the library's `searchsorted`
    (`_document_of` for NumPy), `take(values, index)` its gather (default `values[index]`). Unvalidated, as
    `cp_local_index`: `cp_indices` checks first.

    Examples:
        >>> cp_packed_index(np.array([0, 4, 12]), np.arange(6), 0, world_size=2, strategy="zigzag").tolist()
        [0, 3, 4, 5, 10, 11]
    """
    local = cu_seqlens // world_size
    doc = document_of(local, g)
    start = take(cu_seqlens, doc)
    length = take(cu_seqlens, doc + 1) - start
    return start + cp_local_index(g - take(local, doc), rank, length=length, world_size=world_size,
                                  strategy=strategy, where=where)


def _local_indices(length, world_size, rank, strategy) -> np.ndarray:
    """Indices (0-based, inside one sequence of `length`) that `rank` holds, in its order."""
    i = np.arange(length // world_size, dtype=np.int64)
    return cp_local_index(i, rank, length=length, world_size=world_size, strategy=strategy).astype(np.int64)


def cp_positions(seq_len, *, world_size, rank, strategy="contiguous") -> np.ndarray:
    """The global positions, in order, that rank `rank` holds when `seq_len` tokens are split over ranks.

    Formula (n = seq_len / world_size, c = seq_len / (2 world_size)):
        "contiguous":  r*n + [0, 1, ..., n-1]
        "striped":     [0, 1, ..., n-1] * world_size + r
        "zigzag":      [r*c, ..., (r+1)*c - 1] ++ [(2W-1-r)*c, ..., (2W-r)*c - 1]      (W = world_size)
    The zigzag rule is Transformer Engine's `_get_freqs_on_this_cp_rank`
    (transformer_engine/pytorch/attention/rope.py, v2.18) and Megatron-LM's
    `get_pos_emb_on_this_cp_rank` (megatron/core/models/common/embeddings/rope_utils.py): rank r's
    RoPE angles are those of positions `cp_positions(..., rank=r)`. Passing them as `positions` to
    `apply_rope` on the rank's shard is all context parallelism asks of an encoding.

    Args:
        seq_len: global sequence length; divisible by world_size (2*world_size for "zigzag").
        world_size: number of ranks, >= 1.
        rank: this rank, 0 <= rank < world_size.
        strategy: "contiguous", "striped" or "zigzag".

    Returns:
        `[seq_len // world_size]` int64.

    Raises:
        ValueError/TypeError: a length that does not split evenly, bad world_size/rank/strategy.

    Examples:
        >>> cp_positions(8, world_size=2, rank=0, strategy="zigzag").tolist()
        [0, 1, 6, 7]
        >>> cp_positions(8, world_size=2, rank=1, strategy="striped").tolist()
        [1, 3, 5, 7]
    """
    world_size, rank = check_cp_args(world_size, rank, strategy)
    seq_len = check_cp_divisible(seq_len, world_size, strategy)
    return _local_indices(seq_len, world_size, rank, strategy)


def cp_indices(cu_seqlens, *, world_size, rank, strategy="zigzag", total=None) -> np.ndarray:
    """Packed + context parallel: the packed-row token indices rank `rank` holds, in its order.

    Every document `[cu[i], cu[i+1])` is split by `strategy` on its own (its length must divide by
    world_size, by 2*world_size for "zigzag"), and the rank holds its share of document 0, then of
    document 1, and so on. For "zigzag" this is Transformer Engine's thd partition: local token `g` of
    document `i` (local start `cu[i] / W`, local length `l = (cu[i+1] - cu[i]) / W`) comes from
        cu[i] + g' + (l / 2) * (r if g' < l/2 else 2W - 2 - r),     g' = g - cu[i] / W
    (transformer_engine/common/fused_attn/context_parallel.cu `thd_partition_src_index` and
    transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
    `get_batch_on_this_cp_rank`, TE v2.18). The rank's local `cu_seqlens` is `cu_seqlens // W`.

    The rank's positions are `positions_from_cu_seqlens(cu_seqlens)[cp_indices(...)]`: for one
    document of 8 tokens over 2 ranks, rank 0 holds positions [0, 1, 6, 7] and rank 1 [2, 3, 4, 5]
    (Megatron-LM PR #5243 fixed a version that gave the chunks of later documents the positions of
    the first; TE PR #2077 one that passed the unpadded cu_seqlens).

    Args:
        cu_seqlens: see `positions_from_cu_seqlens` (for "zigzag": TE's `cu_seqlens_padded`).
        world_size, rank, strategy: see `cp_positions`.
        total: see `positions_from_cu_seqlens`.

    Returns:
        `[cu_seqlens[-1] // world_size]` int64.

    Raises:
        ValueError/TypeError: bad `cu_seqlens`, a document length that does not split evenly
            (naming the document), bad world_size/rank/strategy.

    Examples:
        >>> cp_indices([0, 4, 12], world_size=2, rank=0).tolist()
        [0, 3, 4, 5, 10, 11]
    """
    world_size, rank = check_cp_args(world_size, rank, strategy)
    cu = check_cu_seqlens(cu_seqlens)
    check_total(total, cu[-1])
    _check_documents_divisible(cu, world_size, strategy)
    g = np.arange(int(cu[-1]) // world_size, dtype=np.int64)
    return cp_packed_index(cu, g, rank, world_size=world_size, strategy=strategy).astype(np.int64)


def cp_rank_order(length, world_size, strategy, cu_seqlens=None):
    """`[length]` int64: the global index of every token of `concatenate(shards of ranks 0..W-1)`."""
    if cu_seqlens is None:
        check_cp_divisible(length, world_size, strategy, what="sequence length")
        return np.concatenate([_local_indices(length, world_size, r, strategy) for r in range(world_size)])
    cu = check_cu_seqlens(cu_seqlens)
    if int(cu[-1]) != length:
        raise ValueError(f"the sequence axis has {length} tokens but cu_seqlens[-1]={int(cu[-1])}")
    return np.concatenate([cp_indices(cu, world_size=world_size, rank=r, strategy=strategy)
                           for r in range(world_size)])


def cp_shard(x, *, world_size, rank, strategy="contiguous", axis=-2, cu_seqlens=None):
    """The part of `x` that rank `rank` holds: `take(x, cp_positions(...) or cp_indices(...), axis)`.

    What a data loader does before a context-parallel step (Megatron/TE `get_batch_on_this_cp_rank`,
    MaxText `reorder_causal_load_balanced` then a contiguous shard): rank r gets the tokens, in the
    order, given by `cp_positions(seq_len, ...)` (or `cp_indices(cu_seqlens, ...)` for a packed row).

    Args:
        x: array with the sequence on `axis`.
        world_size, rank, strategy: see `cp_positions`.
        axis: the sequence axis (default -2: `[..., seq, dim]` as `apply_rope` takes; 0 for a packed
            `[total, heads, dim]` thd tensor or `[total]` ids).
        cu_seqlens: a packed row: shard every document (see `cp_indices`); `x.shape[axis]` must equal
            `cu_seqlens[-1]`.

    Returns:
        `x` with `x.shape[axis] // world_size` entries on `axis`, same dtype.

    Raises:
        ValueError/TypeError: as `cp_positions` / `cp_indices`; an axis out of range.

    Examples:
        >>> cp_shard(np.arange(8), world_size=2, rank=1, strategy="zigzag", axis=0).tolist()
        [2, 3, 4, 5]
    """
    x = np.asarray(x)
    axis = check_axis(axis, x.ndim)
    world_size, rank = check_cp_args(world_size, rank, strategy)
    if cu_seqlens is None:
        index = cp_positions(x.shape[axis], world_size=world_size, rank=rank, strategy=strategy)
    else:
        cu = check_cu_seqlens(cu_seqlens)
        if int(cu[-1]) != x.shape[axis]:
            raise ValueError(f"x has {x.shape[axis]} tokens on axis {axis} but cu_seqlens[-1]={int(cu[-1])}")
        index = cp_indices(cu, world_size=world_size, rank=rank, strategy=strategy)
    return np.take(x, index, axis=axis)


def cp_unshard(shards, *, strategy="contiguous", axis=-2, cu_seqlens=None):
    """Reassemble per-rank shards (ranks 0..W-1, as `cp_shard` cut them) into sequence order.

    Formula: `out[..., g_r[i], ...] = shards[r][..., i, ...]` with `g_r = cp_positions(seq_len, rank=r)`
    (or `cp_indices(cu_seqlens, rank=r)`), `seq_len = W * shards[r].shape[axis]`, W = len(shards). It is
    the inverse of `cp_shard`: `cp_unshard([cp_shard(x, rank=r, ...) for r in range(W)], ...) == x`.
    What an all-gather along the sequence axis followed by undoing the load-balancing order gives.

    Args:
        shards: sequence of W arrays of equal shape and dtype.
        strategy, axis, cu_seqlens: as given to `cp_shard` (world_size is `len(shards)`).

    Returns:
        One array with `W * shards[0].shape[axis]` entries on `axis`.

    Raises:
        ValueError: no shards, shards of different shapes, a length that does not split evenly.

    Examples:
        >>> cp_unshard([np.array([0, 1, 6, 7]), np.array([2, 3, 4, 5])], strategy="zigzag", axis=0).tolist()
        [0, 1, 2, 3, 4, 5, 6, 7]
    """
    shards = [np.asarray(s) for s in shards]
    world_size, axis = check_cp_shards([s.shape for s in shards], strategy, axis)
    joined = np.concatenate(shards, axis=axis)
    order = cp_rank_order(joined.shape[axis], world_size, strategy, cu_seqlens)
    return np.take(joined, np.argsort(order, kind="stable"), axis=axis)


def check_axis(axis, ndim) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"axis={axis!r} is out of range for an array of {ndim} dimensions")
    return int(axis) % ndim


# --- KV-cache context shift -----------------------------------------------------------------------------

def rerotate(k, delta, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, mrope_section=None):
    """Keys already rotated at positions `p` turned into keys rotated at `p + delta` (KV-cache context shift).

    Rule: RoPE rotates each channel pair by `p * inv_j`, and rotations compose, `R(a) R(b) = R(a + b)`.
    When the frequencies `inv_j` do not depend on the positions, rotating a stored key once more by
    `delta * inv_j` gives exactly the key RoPE would have produced at `p + delta`:
        rerotate(apply_rope(k, p), delta) == apply_rope(k, p + delta)
    (in exact arithmetic; in floating point up to the rounding of one more rotation). A scaling's
    attention factor (YaRN, keras-hub-yarn) is already in the stored key, so the extra rotation has
    factor 1: applying `apply_rope(k_rotated, delta)` instead would multiply by it twice (the pitfall
    of re-using the forward RoPE for llama.cpp's K-shift with YaRN's attention factor). Channels past
    `rotary_dim` are unchanged.

    Exact for: no scaling, linear, ntk, yarn, llama3, keras-hub-dynamic, keras-hub-yarn (frequencies
    fixed by the parameters). Not defined, ValueError, for `dynamic` (dynamic NTK) and `longrope`,
    whose frequencies follow `seq_len = max(positions) + 1` (keys cached at one length were rotated
    with other frequencies than the shifted length would use), and for multi-axis (mRoPE,
    `mrope_section`) keys, which need one delta per axis.

    Used by llama.cpp's context shift (src/llama-kv-cache.cpp `llama_kv_cache::build_rope_shift`:
    `ggml_rope_ext` on the cached K with the position delta) and StreamingLLM-style cache eviction.

    Args:
        k: `[..., seq, dim]` keys already rotated (float; half precision computed in float64 here).
        delta: integer shift broadcasting against `k.shape[:-1]` (a scalar, `[seq]`, or per row
            `[batch, 1, 1]`); negative after evicting earlier tokens.
        base, layout, rotary_dim, scaling: as given to `apply_rope` when the keys were rotated.
        mrope_section: must be None (multi-axis keys cannot be shifted this way).

    Returns:
        Array like `k`.

    Raises:
        ValueError/TypeError: `dynamic`/`longrope` scaling, a multi-axis setting, and everything
            `apply_rope` raises (non-integer delta, bad rotary_dim/layout/scaling).

    Examples:
        >>> from posenc_np.rope import apply_rope
        >>> k = np.array([[1.0, 0.0, 0.5, 2.0]])
        >>> bool(np.allclose(rerotate(apply_rope(k, np.array([3])), 4), apply_rope(k, np.array([7]))))
        True
    """
    from .rope import apply_rope, resolve_rotary_dim, rope_plan

    check_rerotate_args(scaling, mrope_section)
    k = np.asarray(k)
    check_float_dtype("k", k.dtype)
    rotary_dim = resolve_rotary_dim(k.shape[-1], rotary_dim)
    plan = rope_plan(rotary_dim, base=base, scaling=scaling, layout=layout)
    delta = check_integer_positions("delta", delta)
    shaped = np.broadcast_to(delta, k.shape[:-1]) if delta.ndim == 0 else delta
    # float64 throughout, one rounding to k's dtype at the end
    out = apply_rope(k.astype(np.float64), shaped, base=base, layout=layout, rotary_dim=rotary_dim, scaling=scaling)
    # the rotation by delta carries no attention factor: divide apply_rope's back out (rotated channels only)
    out[..., :rotary_dim] /= plan.attention_scale
    return out.astype(k.dtype)
