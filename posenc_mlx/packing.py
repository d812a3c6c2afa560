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

from posenc_np import packing as spec
from posenc_np.backend import check_float_dtype
from posenc_np.rope import resolve_rotary_dim, rope_plan

from ._common import TRACE, as_tensor, is_floating, is_integer, is_tracing, spec_constant
from .rope import apply_rope

__all__ = ["document_ids", "positions_from_cu_seqlens", "document_mask", "document_bias", "cp_positions",
           "cp_indices", "cp_shard", "cp_unshard", "rerotate"]


def _cp_args(world_size, rank, strategy):
    """Validate: an int rank fully (returned as an int), an array rank for its dtype and shape (its value is data)."""
    if isinstance(rank, (int, np.integer)):
        return spec.check_cp_args(world_size, rank, strategy)
    rank = as_tensor(rank)
    return spec.check_cp_rank_tensor(world_size, strategy, dtype=rank.dtype, shape=rank.shape,
                                     is_integer=is_integer(rank)), rank


def _cu(cu_seqlens):
    cu = as_tensor(cu_seqlens)
    spec.check_cu_seqlens_tensor(tuple(cu.shape), cu.dtype, is_integer=is_integer(cu),
                                 values=None if is_tracing(cu) else np.asarray(cu))
    return cu


def _cu_last(cu):
    """`cu_seqlens[-1]` as an int, or None under mx.compile (its value cannot be read)."""
    return None if is_tracing(cu) else int(cu[-1].item())


def _total(cu, total) -> int:
    return spec.check_total(total, _cu_last(cu), where=TRACE)


def _doc(cu, t):
    """`searchsorted(cu, t, side="right") - 1`: the document of every token index in `t`."""
    return mx.searchsorted(cu, t.astype(cu.dtype), side="right").astype(cu.dtype) - 1


def document_ids(cu_seqlens, *, total=None):
    """`[total]` document index of every token (dtype of cu_seqlens); see `posenc_np.document_ids`."""
    cu = _cu(cu_seqlens)
    return _doc(cu, mx.arange(_total(cu, total), dtype=cu.dtype))


def positions_from_cu_seqlens(cu_seqlens, *, offset=0, total=None):
    """`[total]` positions restarting at `offset` per document; see `posenc_np.positions_from_cu_seqlens`."""
    offset = spec.check_offset(offset)
    cu = _cu(cu_seqlens)
    t = mx.arange(_total(cu, total), dtype=cu.dtype)
    return t - mx.take(cu, _doc(cu, t)) + mx.array(offset, cu.dtype)


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
    spec.check_document_bias_args(tuple(bias.shape), causal)
    cu = _cu(cu_seqlens)
    total = _cu_last(cu)
    indices = []
    for name, index, size in (("q_index", q_index, bias.shape[-2]), ("k_index", k_index, bias.shape[-1])):
        index = mx.arange(size) if index is None else as_tensor(index)
        spec.check_document_index_tensor(name, tuple(index.shape), index.dtype, size=size,
                                         bias_shape=tuple(bias.shape), is_integer=is_integer(index), total=total,
                                         values=None if is_tracing(index) else np.asarray(index))
        indices.append(index.astype(cu.dtype))
    q_idx, k_idx = indices
    keep = _doc(cu, q_idx)[:, None] == _doc(cu, k_idx)[None, :]
    if causal:
        keep = keep & (k_idx[None, :] <= q_idx[:, None])
    return mx.where(keep, bias, mx.array(-float("inf"), bias.dtype))


def cp_positions(seq_len, *, world_size, rank, strategy="contiguous"):
    """`[seq_len // world_size]` int32 global positions of rank `rank`; see `posenc_np.cp_positions`."""
    world_size, rank = _cp_args(world_size, rank, strategy)
    seq_len = spec.check_cp_divisible(seq_len, world_size, strategy)
    if isinstance(rank, int):
        return spec_constant(("cp_positions", seq_len, world_size, rank, strategy), lambda: spec.cp_positions(
            seq_len, world_size=world_size, rank=rank, strategy=strategy), dtype=mx.int32)
    i = mx.arange(seq_len // world_size, dtype=mx.int32)
    return spec.cp_local_index(i, rank.astype(mx.int32), length=seq_len, world_size=world_size, strategy=strategy,
                               where=mx.where)


def cp_indices(cu_seqlens, *, world_size, rank, strategy="zigzag", total=None):
    """`[total // world_size]` packed-row indices rank `rank` holds; see `posenc_np.cp_indices`."""
    world_size, rank = _cp_args(world_size, rank, strategy)
    cu = _cu(cu_seqlens)
    if not is_tracing(cu) and isinstance(rank, int):  # every value known: the spec validates and computes
        index = spec.cp_indices(np.asarray(cu), world_size=world_size, rank=rank, strategy=strategy, total=total)
        return mx.array(index).astype(cu.dtype)
    total = spec.check_cp_divisible(_total(cu, total), world_size, strategy, what="total")
    g = mx.arange(total // world_size, dtype=cu.dtype)
    return spec.cp_packed_index(cu, g, as_tensor(rank).astype(cu.dtype), world_size=world_size, strategy=strategy,
                                document_of=_doc, take=mx.take, where=mx.where)


def cp_shard(x, *, world_size, rank, strategy="contiguous", axis=-2, cu_seqlens=None):
    """The part of `x` rank `rank` holds along `axis`; see `posenc_np.cp_shard`."""
    x = as_tensor(x)
    axis = spec.check_axis(axis, x.ndim)
    world_size, rank = _cp_args(world_size, rank, strategy)
    if cu_seqlens is None:
        index = cp_positions(x.shape[axis], world_size=world_size, rank=rank, strategy=strategy)
    else:
        index = cp_indices(cu_seqlens, world_size=world_size, rank=rank, strategy=strategy, total=x.shape[axis])
    return mx.take(x, index, axis=axis)


def cp_unshard(shards, *, strategy="contiguous", axis=-2, cu_seqlens=None):
    """Reassemble per-rank shards (ranks 0..W-1) into sequence order; see `posenc_np.cp_unshard`."""
    shards = [as_tensor(s) for s in shards]
    world_size, axis = spec.check_cp_shards([tuple(s.shape) for s in shards], strategy, axis)
    joined = mx.concatenate(shards, axis=axis)
    length = joined.shape[axis]
    if cu_seqlens is None:
        # the order depends on shapes only: a constant index
        inverse = mx.array(np.argsort(spec.cp_rank_order(length, world_size, strategy)).astype(np.int32))
    else:
        order = mx.concatenate([cp_indices(cu_seqlens, world_size=world_size, rank=r, strategy=strategy,
                                           total=length) for r in range(world_size)])
        inverse = mx.argsort(order)  # order is a permutation: its argsort is the inverse permutation
    return mx.take(joined, inverse, axis=axis)


def rerotate(k, delta, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, mrope_section=None):
    """Keys rotated at `p` -> keys rotated at `p + delta`; see `posenc_np.rerotate` (rule and exceptions).

    Computed in float32 (half-precision keys are rotated in float32 and rounded once).
    """
    spec.check_rerotate_args(scaling, mrope_section)
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
