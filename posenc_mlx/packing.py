"""Packed sequences and context parallelism in MLX. The rules and sources: `posenc_np.packing`.

Everything here is index arithmetic on integer arrays (`searchsorted`, `arange`, gathers), so the
results equal the spec exactly, and it runs under `mx.compile`:
- `cu_seqlens` is an array (data): new document boundaries never recompile. The packed row length
  `total` must be static under mx.compile (pass `total=`, usually `x.shape[0]`); eagerly it is read
  from `cu_seqlens[-1]` and every value is validated by the spec. Under mx.compile values cannot be
  read: tokens past `cu_seqlens[-1]` are numbered as one more document, and document lengths that do
  not split evenly give indices of the wrong tokens; validate in the data loader.
- `rank` may be an int (validated) or an integer scalar array (data).
Outputs of the position functions have the integer dtype of `cu_seqlens`.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from posenc_np._validate import check_cu_seqlens_shape, check_float_dtype
from posenc_np.packing import (
    check_axis,
    check_cp_args,
    check_cp_divisible,
    check_cu_seqlens,
    check_document_index,
    check_rerotate_args,
    check_total,
    cp_rank_order,
)
from posenc_np.packing import cp_indices as spec_cp_indices
from posenc_np.rope import resolve_rotary_dim, rope_plan

from ._common import as_tensor, is_floating, is_integer, is_tracing
from .rope import apply_rope

__all__ = ["document_ids", "positions_from_cu_seqlens", "document_mask", "document_bias", "cp_positions",
           "cp_indices", "cp_shard", "cp_unshard", "rerotate"]


def _is_static_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _cp_args(world_size, rank, strategy):
    """Validate; an array rank is checked for dtype only (its value is data)."""
    if _is_static_int(rank) or isinstance(rank, bool):
        return check_cp_args(world_size, rank, strategy)
    world_size, _ = check_cp_args(world_size, 0, strategy)
    rank = as_tensor(rank)
    if not is_integer(rank) or rank.ndim:
        raise TypeError(f"rank must be an int or an integer scalar array, got {rank.dtype} shape {rank.shape}")
    return world_size, rank


def _cu(cu_seqlens):
    cu = as_tensor(cu_seqlens)
    if not is_integer(cu):
        raise TypeError(f"cu_seqlens must be a 1-D integer array, got dtype {cu.dtype}")
    check_cu_seqlens_shape(tuple(cu.shape))  # the spec's ValueError: a shape is static, checked under jit too
    if not is_tracing(cu):
        check_cu_seqlens(np.asarray(cu))
    return cu


def _total(cu, total) -> int:
    if is_tracing(cu):
        if total is None:
            raise ValueError("total= (the packed row length, a Python int) is required under mx.compile: "
                             "the output shape cannot depend on cu_seqlens' values")
        return check_total(total, None)
    return check_total(total, int(cu[-1].item()))


def _doc(cu, t):
    """`searchsorted(cu, t, side="right") - 1`: the document of every token index in `t`."""
    return mx.searchsorted(cu, t.astype(cu.dtype), side="right").astype(cu.dtype) - 1


def document_ids(cu_seqlens, *, total=None):
    """`[total]` document index of every token (dtype of cu_seqlens); see `posenc_np.document_ids`."""
    cu = _cu(cu_seqlens)
    return _doc(cu, mx.arange(_total(cu, total), dtype=cu.dtype))


def positions_from_cu_seqlens(cu_seqlens, *, offset=0, total=None):
    """`[total]` positions restarting at `offset` per document; see `posenc_np.positions_from_cu_seqlens`."""
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
        raise TypeError(f"offset={offset!r} must be an integer")
    cu = _cu(cu_seqlens)
    t = mx.arange(_total(cu, total), dtype=cu.dtype)
    return t - mx.take(cu, _doc(cu, t)) + mx.array(int(offset), cu.dtype)


def document_mask(cu_seqlens, *, causal=False, total=None):
    """`[total, total]` bool same-document (causal) mask; see `posenc_np.document_mask`."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal={causal!r} must be a bool")
    doc = document_ids(cu_seqlens, total=total)
    mask = doc[:, None] == doc[None, :]
    if causal:
        n = doc.shape[0]
        mask = mask & (mx.arange(n)[None, :] <= mx.arange(n)[:, None])
    return mask


def document_bias(bias, cu_seqlens, *, q_index=None, k_index=None, causal=False):
    """`bias` with cross-document entries set to -inf; see `posenc_np.document_bias`.

    Eagerly, indices (the bias's axes when None) outside `[0, cu_seqlens[-1])` raise the spec's ValueError.
    Under mx.compile, where values cannot raise, such an index belongs to no document: its row or column
    is -inf against every token of the packed row.
    """
    bias = as_tensor(bias)
    check_float_dtype("bias", bias.dtype, is_floating(bias))
    if bias.ndim < 2:
        raise ValueError(f"bias must be [..., q, k], got shape {tuple(bias.shape)}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal={causal!r} must be a bool")
    cu = _cu(cu_seqlens)
    indices = []
    for name, index, size in (("q_index", q_index, bias.shape[-2]), ("k_index", k_index, bias.shape[-1])):
        index = mx.arange(size) if index is None else as_tensor(index)
        if not is_integer(index) or tuple(index.shape) != (size,):
            raise ValueError(f"{name} must be an integer [{size}] array to match bias {tuple(bias.shape)}, "
                             f"got {index.dtype} shape {tuple(index.shape)}")
        if not (is_tracing(cu) or is_tracing(index)):  # the spec's range check (a bias wider than the row)
            check_document_index(name, np.asarray(index), int(cu[-1].item()))
        indices.append(index.astype(cu.dtype))
    q_idx, k_idx = indices
    keep = _doc(cu, q_idx)[:, None] == _doc(cu, k_idx)[None, :]
    if causal:
        keep = keep & (k_idx[None, :] <= q_idx[:, None])
    return mx.where(keep, bias, mx.array(-float("inf"), bias.dtype))


def _local(length, world_size, rank, strategy, i):
    """Global index (inside one sequence of `length`, an array or int) of local token `i` of `rank`."""
    if strategy == "contiguous":
        return rank * (length // world_size) + i
    if strategy == "striped":
        return i * world_size + rank
    c = length // (2 * world_size)
    return i + c * mx.where(i < c, rank, 2 * world_size - 2 - rank)


def cp_positions(seq_len, *, world_size, rank, strategy="contiguous"):
    """`[seq_len // world_size]` int32 global positions of rank `rank`; see `posenc_np.cp_positions`."""
    world_size, rank = _cp_args(world_size, rank, strategy)
    seq_len = check_cp_divisible(seq_len, world_size, strategy)
    i = mx.arange(seq_len // world_size, dtype=mx.int32)
    rank = rank.astype(mx.int32) if isinstance(rank, mx.array) else mx.array(rank, mx.int32)
    return _local(seq_len, world_size, rank, strategy, i).astype(mx.int32)


def cp_indices(cu_seqlens, *, world_size, rank, strategy="zigzag", total=None):
    """`[total // world_size]` packed-row indices rank `rank` holds (in-graph); see `posenc_np.cp_indices`."""
    world_size, rank = _cp_args(world_size, rank, strategy)
    cu = _cu(cu_seqlens)
    if not is_tracing(cu) and _is_static_int(rank):
        spec_cp_indices(np.asarray(cu), world_size=world_size, rank=int(rank), strategy=strategy)  # validates
    total = check_cp_divisible(_total(cu, total), world_size, strategy, what="total")
    local_cu = cu // world_size
    g = mx.arange(total // world_size, dtype=cu.dtype)
    doc = _doc(local_cu, g)
    start = mx.take(cu, doc)
    length = mx.take(cu, doc + 1) - start
    rank = rank.astype(cu.dtype) if isinstance(rank, mx.array) else mx.array(rank, cu.dtype)
    return start + _local(length, world_size, rank, strategy, g - mx.take(local_cu, doc))


def cp_shard(x, *, world_size, rank, strategy="contiguous", axis=-2, cu_seqlens=None):
    """The part of `x` rank `rank` holds along `axis`; see `posenc_np.cp_shard`."""
    x = as_tensor(x)
    axis = check_axis(axis, x.ndim)
    world_size, rank = _cp_args(world_size, rank, strategy)
    if cu_seqlens is None:
        index = cp_positions(x.shape[axis], world_size=world_size, rank=rank, strategy=strategy)
    else:
        index = cp_indices(cu_seqlens, world_size=world_size, rank=rank, strategy=strategy, total=x.shape[axis])
    return mx.take(x, index, axis=axis)


def cp_unshard(shards, *, strategy="contiguous", axis=-2, cu_seqlens=None):
    """Reassemble per-rank shards (ranks 0..W-1) into sequence order; see `posenc_np.cp_unshard`."""
    shards = [as_tensor(s) for s in shards]
    if not shards:
        raise ValueError("shards must hold one array per rank, got none")
    if any(s.shape != shards[0].shape for s in shards):
        raise ValueError(f"shards must all have the same shape, got {[tuple(s.shape) for s in shards]}")
    world_size = len(shards)
    check_cp_args(world_size, 0, strategy)
    axis = check_axis(axis, shards[0].ndim)
    joined = mx.concatenate(shards, axis=axis)
    length = joined.shape[axis]
    if cu_seqlens is None:
        # the order depends on shapes only: a constant index
        inverse = mx.array(np.argsort(cp_rank_order(length, world_size, strategy)).astype(np.int32))
    else:
        order = mx.concatenate([cp_indices(cu_seqlens, world_size=world_size, rank=r, strategy=strategy,
                                           total=length) for r in range(world_size)])
        inverse = mx.argsort(order)  # order is a permutation: its argsort is the inverse permutation
    return mx.take(joined, inverse, axis=axis)


def rerotate(k, delta, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, mrope_section=None):
    """Keys rotated at `p` -> keys rotated at `p + delta`; see `posenc_np.rerotate` (rule and exceptions).

    Computed in float32 (half-precision keys are rotated in float32 and rounded once).
    """
    check_rerotate_args(scaling, mrope_section)
    k = as_tensor(k)
    check_float_dtype("k", k.dtype, is_floating(k))
    rotary_dim = resolve_rotary_dim(k.shape[-1], rotary_dim)
    scale = rope_plan(rotary_dim, base=base, scaling=scaling, layout=layout).attention_scale
    delta = as_tensor(delta)
    if delta.ndim == 0:
        delta = mx.broadcast_to(delta, k.shape[:-1])
    compute = mx.float64 if k.dtype == mx.float64 else mx.float32
    out = apply_rope(k.astype(compute), delta, base=base, layout=layout, rotary_dim=rotary_dim, scaling=scaling)
    if scale != 1.0:  # the shift carries no attention factor: divide apply_rope's back out
        out = mx.concatenate([out[..., :rotary_dim] / scale, out[..., rotary_dim:]], axis=-1)
    return out.astype(k.dtype)
