"""Packed sequences and context parallelism in TensorFlow. The rules and sources: `posenc_np.packing`.

Everything here is index arithmetic on integer tensors (`tf.searchsorted`, `tf.range`, gathers), so
the results equal the spec exactly, and it runs inside `tf.function(jit_compile=True)`:
- `cu_seqlens` is a tensor (data): new document boundaries never retrace. The packed row length
  `total` must be static inside tf.function (pass `total=`, usually `x.shape[0]`); eagerly it is
  read from `cu_seqlens[-1]` and every value is validated by the spec. In a graph values cannot be
  read: tokens past `cu_seqlens[-1]` are numbered as one more document, and document lengths that do
  not split evenly give indices of the wrong tokens; validate in the data loader.
- `rank` may be an int (validated) or an integer scalar tensor (one graph for every rank, e.g. the
  replica id under a `tf.distribute` strategy).
Outputs of the position functions have the integer dtype of `cu_seqlens`.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from posenc_np import packing as spec
from posenc_np.backend import check_float_dtype
from posenc_np.rope import resolve_rotary_dim, rope_plan

from ._common import TRACE, as_tensor, is_tracing, spec_constant
from .rope import apply_rope

__all__ = ["document_ids", "positions_from_cu_seqlens", "document_mask", "document_bias", "cp_positions",
           "cp_indices", "cp_shard", "cp_unshard", "rerotate"]


def _cp_args(world_size, rank, strategy):
    """Validate: an int rank fully (returned as an int), a tensor rank for its dtype and shape (its value is data)."""
    if isinstance(rank, (int, np.integer)):
        return spec.check_cp_args(world_size, rank, strategy)
    rank = as_tensor(rank)
    return spec.check_cp_rank_tensor(world_size, strategy, dtype=rank.dtype, shape=rank.shape,
                                     is_integer=rank.dtype.is_integer), rank


def _cu(cu_seqlens):
    cu = as_tensor(cu_seqlens)
    spec.check_cu_seqlens_tensor(cu.shape.as_list() if cu.shape.rank is not None else (None, None), cu.dtype,
                                 is_integer=cu.dtype.is_integer, values=None if is_tracing(cu) else cu.numpy())
    return cu


def _total(cu, total) -> int:
    return spec.check_total(total, None if is_tracing(cu) else int(cu[-1]), where=TRACE)


def _doc(cu, t):
    """`searchsorted(cu, t, side="right") - 1`: the document of every token index in `t`."""
    return tf.searchsorted(cu, tf.cast(t, cu.dtype), side="right", out_type=cu.dtype) - 1


def document_ids(cu_seqlens, *, total=None):
    """`[total]` document index of every token (dtype of cu_seqlens); see `posenc_np.document_ids`."""
    cu = _cu(cu_seqlens)
    return _doc(cu, tf.range(_total(cu, total), dtype=cu.dtype))


def positions_from_cu_seqlens(cu_seqlens, *, offset=0, total=None):
    """`[total]` positions restarting at `offset` per document; see `posenc_np.positions_from_cu_seqlens`."""
    offset = spec.check_offset(offset)
    cu = _cu(cu_seqlens)
    t = tf.range(_total(cu, total), dtype=cu.dtype)
    return t - tf.gather(cu, _doc(cu, t)) + tf.cast(offset, cu.dtype)


def document_mask(cu_seqlens, *, causal=False, total=None):
    """`[total, total]` bool same-document (causal) mask; see `posenc_np.document_mask`."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal={causal!r} must be a bool")
    doc = document_ids(cu_seqlens, total=total)
    mask = tf.equal(doc[:, None], doc[None, :])
    if causal:
        n = tf.range(tf.shape(doc)[0])
        mask = tf.logical_and(mask, n[None, :] <= n[:, None])
    return mask


def document_bias(bias, cu_seqlens, *, q_index=None, k_index=None, causal=False):
    """`bias` with cross-document entries set to -inf; see `posenc_np.document_bias`.

    Eagerly, indices (the bias's axes when None) outside `[0, cu_seqlens[-1])` raise the spec's ValueError.
    Under tf.function, where values cannot raise, such an index belongs to no document: its row or column
    is -inf against every token of the packed row.
    """
    bias = as_tensor(bias)
    check_float_dtype("bias", tf.as_dtype(bias.dtype).name, tf.as_dtype(bias.dtype).is_floating)
    spec.check_document_bias_args(bias.shape, causal)
    cu = _cu(cu_seqlens)
    total = None if is_tracing(cu) else int(cu[-1])
    indices = []
    for name, index, size in (("q_index", q_index, bias.shape[-2]), ("k_index", k_index, bias.shape[-1])):
        index = tf.range(size) if index is None else as_tensor(index)
        spec.check_document_index_tensor(name, index.shape, index.dtype, size=size, bias_shape=bias.shape,
                                         is_integer=index.dtype.is_integer, total=total,
                                         values=None if is_tracing(index) else index.numpy())
        indices.append(tf.cast(index, cu.dtype))
    q_idx, k_idx = indices
    keep = tf.equal(_doc(cu, q_idx)[:, None], _doc(cu, k_idx)[None, :])
    if causal:
        keep = tf.logical_and(keep, k_idx[None, :] <= q_idx[:, None])
    return tf.where(keep, bias, tf.constant(-np.inf, bias.dtype))


def cp_positions(seq_len, *, world_size, rank, strategy="contiguous"):
    """`[seq_len // world_size]` int64 global positions of rank `rank`; see `posenc_np.cp_positions`."""
    world_size, rank = _cp_args(world_size, rank, strategy)
    seq_len = spec.check_cp_divisible(seq_len, world_size, strategy)
    if isinstance(rank, int):
        return spec_constant(("cp_positions", seq_len, world_size, rank, strategy), lambda: spec.cp_positions(
            seq_len, world_size=world_size, rank=rank, strategy=strategy), dtype=tf.int64)
    i = tf.range(seq_len // world_size, dtype=tf.int64)
    return spec.cp_local_index(i, tf.cast(rank, tf.int64), length=seq_len, world_size=world_size, strategy=strategy,
                               where=tf.where)


def cp_indices(cu_seqlens, *, world_size, rank, strategy="zigzag", total=None):
    """`[total // world_size]` packed-row indices rank `rank` holds; see `posenc_np.cp_indices`."""
    world_size, rank = _cp_args(world_size, rank, strategy)
    cu = _cu(cu_seqlens)
    if not is_tracing(cu) and isinstance(rank, int):  # every value known: the spec validates and computes
        index = spec.cp_indices(cu.numpy(), world_size=world_size, rank=rank, strategy=strategy, total=total)
        return tf.constant(index, dtype=cu.dtype)
    total = spec.check_cp_divisible(_total(cu, total), world_size, strategy, what="total")
    g = tf.range(total // world_size, dtype=cu.dtype)
    return spec.cp_packed_index(cu, g, tf.cast(rank, cu.dtype), world_size=world_size, strategy=strategy,
                                document_of=_doc, take=tf.gather, where=tf.where)


def cp_shard(x, *, world_size, rank, strategy="contiguous", axis=-2, cu_seqlens=None):
    """The part of `x` rank `rank` holds along `axis`; see `posenc_np.cp_shard`."""
    x = as_tensor(x)
    axis = spec.check_axis(axis, x.shape.rank)
    world_size, rank = _cp_args(world_size, rank, strategy)
    if cu_seqlens is None:
        index = cp_positions(x.shape[axis], world_size=world_size, rank=rank, strategy=strategy)
    else:
        index = cp_indices(cu_seqlens, world_size=world_size, rank=rank, strategy=strategy, total=x.shape[axis])
    return tf.gather(x, index, axis=axis)


def cp_unshard(shards, *, strategy="contiguous", axis=-2, cu_seqlens=None):
    """Reassemble per-rank shards (ranks 0..W-1) into sequence order; see `posenc_np.cp_unshard`."""
    shards = [as_tensor(s) for s in shards]
    world_size, axis = spec.check_cp_shards([s.shape for s in shards], strategy, axis)
    joined = tf.concat(shards, axis=axis)
    length = joined.shape[axis]
    if cu_seqlens is None:
        # the order depends on shapes only: a constant index
        inverse = tf.constant(np.argsort(spec.cp_rank_order(length, world_size, strategy)))
    else:
        order = tf.concat([cp_indices(cu_seqlens, world_size=world_size, rank=r, strategy=strategy, total=length)
                           for r in range(world_size)], axis=0)
        # inverse permutation by a scatter: inverse[order[i]] = i
        inverse = tf.scatter_nd(order[:, None], tf.range(length, dtype=order.dtype),
                                tf.shape(order, out_type=order.dtype))
    return tf.gather(joined, inverse, axis=axis)


def rerotate(k, delta, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, mrope_section=None):
    """Keys rotated at `p` -> keys rotated at `p + delta`; see `posenc_np.rerotate` (rule and exceptions).

    Computed in float32 (half-precision keys are rotated in float32 and rounded once).
    """
    spec.check_rerotate_args(scaling, mrope_section)
    k = as_tensor(k)
    check_float_dtype("k", tf.as_dtype(k.dtype).name, tf.as_dtype(k.dtype).is_floating)
    rotary_dim = resolve_rotary_dim(k.shape[-1], rotary_dim)
    scale = rope_plan(rotary_dim, base=base, scaling=scaling, layout=layout).attention_scale
    delta = as_tensor(delta)
    if delta.shape.rank == 0:
        delta = tf.broadcast_to(delta, k.shape[:-1])
    compute = tf.float64 if k.dtype == tf.float64 else tf.float32
    out = apply_rope(tf.cast(k, compute), delta, base=base, layout=layout, rotary_dim=rotary_dim, scaling=scaling)
    if scale != 1.0:  # the shift carries no attention factor: divide apply_rope's back out
        out = tf.concat([out[..., :rotary_dim] / tf.constant(scale, compute), out[..., rotary_dim:]], axis=-1)
    return tf.cast(out, k.dtype)
