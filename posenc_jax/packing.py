"""Packed sequences and context parallelism in JAX. The rules and sources: `posenc_np.packing`.

Everything here is index arithmetic on integer arrays (`searchsorted`, `arange`, gathers), so the
results equal the spec exactly, and it runs under `jax.jit`, `shard_map` and `NamedSharding`:
- `cu_seqlens` is an array (data): new document boundaries never recompile. The packed row length
  `total` must be static under jit (pass `total=`, usually `x.shape[0]`); eagerly it is read from
  `cu_seqlens[-1]` and every value is validated by the spec. Under jit values cannot be read: tokens
  past `cu_seqlens[-1]` are numbered as one more document, and document lengths that do not split
  evenly give indices of the wrong tokens; validate in the data loader.
- `rank` may be an int (validated) or a traced integer scalar: inside `shard_map`,
  `rank=jax.lax.axis_index("sp")` gives each device its own positions from one program.
Outputs of the position functions have the integer dtype of `cu_seqlens` (int32 without x64).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from posenc_np import packing as spec
from posenc_np.backend import check_float_dtype
from posenc_np.rope import resolve_rotary_dim, rope_plan

from ._common import TRACE, is_tracing, spec_constant
from .rope import apply_rope

__all__ = ["document_ids", "positions_from_cu_seqlens", "document_mask", "document_bias", "cp_positions",
           "cp_indices", "cp_shard", "cp_unshard", "rerotate"]


def _cp_args(world_size, rank, strategy):
    """Validate: an int rank fully (returned as an int), an array rank for its dtype and shape (its value is data)."""
    if isinstance(rank, (int, np.integer)):
        return spec.check_cp_args(world_size, rank, strategy)
    rank = jnp.asarray(rank)
    return spec.check_cp_rank_tensor(world_size, strategy, dtype=rank.dtype, shape=rank.shape,
                                     is_integer=jnp.issubdtype(rank.dtype, jnp.integer)), rank


def _cu(cu_seqlens):
    cu = jnp.asarray(cu_seqlens)
    spec.check_cu_seqlens_tensor(cu.shape, cu.dtype, is_integer=jnp.issubdtype(cu.dtype, jnp.integer),
                                 values=None if is_tracing(cu) else np.asarray(cu))
    return cu


def _total(cu, total) -> int:
    return spec.check_total(total, None if is_tracing(cu) else int(cu[-1]), where=TRACE)


def _doc(cu, t):
    """`searchsorted(cu, t, side="right") - 1`: the document of every token index in `t`."""
    return jnp.searchsorted(cu, t.astype(cu.dtype), side="right").astype(cu.dtype) - 1


def document_ids(cu_seqlens, *, total=None):
    """`[total]` document index of every token (dtype of cu_seqlens); see `posenc_np.document_ids`."""
    cu = _cu(cu_seqlens)
    return _doc(cu, jnp.arange(_total(cu, total), dtype=cu.dtype))


def positions_from_cu_seqlens(cu_seqlens, *, offset=0, total=None):
    """`[total]` positions restarting at `offset` per document; see `posenc_np.positions_from_cu_seqlens`."""
    offset = spec.check_offset(offset)
    cu = _cu(cu_seqlens)
    t = jnp.arange(_total(cu, total), dtype=cu.dtype)
    return t - cu[_doc(cu, t)] + jnp.asarray(offset, cu.dtype)


def document_mask(cu_seqlens, *, causal=False, total=None):
    """`[total, total]` bool same-document (causal) mask; see `posenc_np.document_mask`."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal={causal!r} must be a bool")
    doc = document_ids(cu_seqlens, total=total)
    mask = doc[:, None] == doc[None, :]
    if causal:
        mask = mask & jnp.tril(jnp.ones_like(mask))
    return mask


def document_bias(bias, cu_seqlens, *, q_index=None, k_index=None, causal=False):
    """`bias` with cross-document entries set to -inf; see `posenc_np.document_bias`.

    Eagerly, indices (the bias's axes when None) outside `[0, cu_seqlens[-1])` raise the spec's ValueError.
    Under jax.jit, where values cannot raise, such an index belongs to no document: its row or column
    is -inf against every token of the packed row.
    """
    bias = jnp.asarray(bias)
    check_float_dtype("bias", bias.dtype, jnp.issubdtype(bias.dtype, jnp.floating))
    spec.check_document_bias_args(bias.shape, causal)
    cu = _cu(cu_seqlens)
    total = None if is_tracing(cu) else int(cu[-1])
    indices = []
    for name, index, size in (("q_index", q_index, bias.shape[-2]), ("k_index", k_index, bias.shape[-1])):
        index = jnp.arange(size) if index is None else jnp.asarray(index)
        spec.check_document_index_tensor(name, index.shape, index.dtype, size=size, bias_shape=bias.shape,
                                         is_integer=jnp.issubdtype(index.dtype, jnp.integer), total=total,
                                         values=None if is_tracing(index) else np.asarray(index))
        indices.append(index.astype(cu.dtype))
    q_idx, k_idx = indices
    keep = _doc(cu, q_idx)[:, None] == _doc(cu, k_idx)[None, :]
    if causal:
        keep = keep & (k_idx[None, :] <= q_idx[:, None])
    return jnp.where(keep, bias, jnp.asarray(-jnp.inf, bias.dtype))


def cp_positions(seq_len, *, world_size, rank, strategy="contiguous"):
    """`[seq_len // world_size]` int32 global positions of rank `rank`; see `posenc_np.cp_positions`."""
    world_size, rank = _cp_args(world_size, rank, strategy)
    seq_len = spec.check_cp_divisible(seq_len, world_size, strategy)
    if isinstance(rank, int):
        return spec_constant(("cp_positions", seq_len, world_size, rank, strategy), lambda: spec.cp_positions(
            seq_len, world_size=world_size, rank=rank, strategy=strategy), dtype=jnp.int32)
    i = jnp.arange(seq_len // world_size, dtype=jnp.int32)
    return spec.cp_local_index(i, rank.astype(jnp.int32), length=seq_len, world_size=world_size, strategy=strategy,
                               where=jnp.where)


def cp_indices(cu_seqlens, *, world_size, rank, strategy="zigzag", total=None):
    """`[total // world_size]` packed-row indices rank `rank` holds; see `posenc_np.cp_indices`."""
    world_size, rank = _cp_args(world_size, rank, strategy)
    cu = _cu(cu_seqlens)
    if not is_tracing(cu) and isinstance(rank, int):  # every value known: the spec validates and computes
        index = spec.cp_indices(np.asarray(cu), world_size=world_size, rank=rank, strategy=strategy, total=total)
        return jnp.asarray(index, dtype=cu.dtype)
    total = spec.check_cp_divisible(_total(cu, total), world_size, strategy, what="total")
    g = jnp.arange(total // world_size, dtype=cu.dtype)
    return spec.cp_packed_index(cu, g, jnp.asarray(rank, cu.dtype), world_size=world_size, strategy=strategy,
                                document_of=_doc, where=jnp.where)


def cp_shard(x, *, world_size, rank, strategy="contiguous", axis=-2, cu_seqlens=None):
    """The part of `x` rank `rank` holds along `axis`; see `posenc_np.cp_shard`."""
    x = jnp.asarray(x)
    axis = spec.check_axis(axis, x.ndim)
    world_size, rank = _cp_args(world_size, rank, strategy)
    if cu_seqlens is None:
        index = cp_positions(x.shape[axis], world_size=world_size, rank=rank, strategy=strategy)
    else:
        index = cp_indices(cu_seqlens, world_size=world_size, rank=rank, strategy=strategy, total=x.shape[axis])
    return jnp.take(x, index, axis=axis)


def cp_unshard(shards, *, strategy="contiguous", axis=-2, cu_seqlens=None):
    """Reassemble per-rank shards (ranks 0..W-1) into sequence order; see `posenc_np.cp_unshard`."""
    shards = [jnp.asarray(s) for s in shards]
    world_size, axis = spec.check_cp_shards([s.shape for s in shards], strategy, axis)
    joined = jnp.concatenate(shards, axis=axis)
    length = joined.shape[axis]
    if cu_seqlens is None:
        # the order depends on shapes only: a constant index
        inverse = np.argsort(spec.cp_rank_order(length, world_size, strategy))
    else:
        order = jnp.concatenate([cp_indices(cu_seqlens, world_size=world_size, rank=r, strategy=strategy,
                                            total=length) for r in range(world_size)])
        # inverse permutation by a scatter: inverse[order[i]] = i
        inverse = jnp.zeros_like(order).at[order].set(jnp.arange(length, dtype=order.dtype))
    return jnp.take(joined, inverse, axis=axis)


def rerotate(k, delta, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, mrope_section=None):
    """Keys rotated at `p` -> keys rotated at `p + delta`; see `posenc_np.rerotate` (rule and exceptions).

    Computed in float32 (half-precision keys are rotated in float32 and rounded once).
    """
    spec.check_rerotate_args(scaling, mrope_section)
    k = jnp.asarray(k)
    check_float_dtype("k", k.dtype, jnp.issubdtype(k.dtype, jnp.floating))
    rotary_dim = resolve_rotary_dim(k.shape[-1], rotary_dim)
    scale = rope_plan(rotary_dim, base=base, scaling=scaling, layout=layout).attention_scale
    delta = jnp.asarray(delta)
    if delta.ndim == 0:
        delta = jnp.broadcast_to(delta, k.shape[:-1])
    compute = jnp.promote_types(k.dtype, jnp.float32)
    out = apply_rope(k.astype(compute), delta, base=base, layout=layout, rotary_dim=rotary_dim, scaling=scaling)
    if scale != 1.0:  # the shift carries no attention factor: divide apply_rope's back out
        out = jnp.concatenate([out[..., :rotary_dim] / jnp.asarray(scale, compute), out[..., rotary_dim:]], axis=-1)
    return out.astype(k.dtype)
