"""Packed sequences and context parallelism in PyTorch. The rules and sources: `posenc_np.packing`.

Everything here is index arithmetic on integer tensors (`searchsorted`, `arange`, gathers), so the
results equal the spec exactly, and it traces under `torch.compile(fullgraph=True)`:
- `cu_seqlens` is a tensor (data): new document boundaries never recompile. The packed row length
  `total` must be static under torch.compile (pass `total=`, usually `x.shape[0]`); eagerly it is
  read from `cu_seqlens[-1]` and every value is validated by the spec. Under torch.compile values
  cannot be read: tokens past `cu_seqlens[-1]` are numbered as one more document, and document
  lengths that do not split evenly give indices of the wrong tokens; validate in the data loader.
- `rank` may be an int (validated) or an integer tensor (`torch.distributed.get_rank()` is an int;
  a tensor rank lets one compiled graph serve every rank).
Outputs of the position functions have the integer dtype of `cu_seqlens` (flash-attn and TE use
int32); `cp_positions` returns int64.
"""

from __future__ import annotations

import torch

from posenc_np import packing as spec
from posenc_np.backend import check_float_dtype
from posenc_np.rope import resolve_rotary_dim, rope_plan

from ._common import TRACE, as_tensor, is_tracing, spec_constant
from .rope import apply_rope

__all__ = ["document_ids", "positions_from_cu_seqlens", "document_mask", "document_bias", "cp_positions",
           "cp_indices", "cp_shard", "cp_unshard", "rerotate"]


def _is_integer(x) -> bool:
    return not (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool)


def _cp_args(world_size, rank, strategy):
    """Validate: an int rank fully (returned as an int), a tensor rank for its dtype and shape (its value is data)."""
    if not isinstance(rank, torch.Tensor):
        return spec.check_cp_args(world_size, rank, strategy)
    return spec.check_cp_rank_tensor(world_size, strategy, dtype=rank.dtype, shape=rank.shape,
                                     is_integer=_is_integer(rank)), rank


def _cu(cu_seqlens, *, device=None):
    cu = as_tensor(cu_seqlens, device=device)
    spec.check_cu_seqlens_tensor(cu.shape, cu.dtype, is_integer=_is_integer(cu),
                                 values=None if is_tracing(cu) else cu.detach().cpu().numpy())
    return cu


def _total(cu, total) -> int:
    return spec.check_total(total, None if is_tracing(cu) else int(cu[-1]), where=TRACE)


def _doc(cu, t):
    """`searchsorted(cu, t, side="right") - 1`: the document of every token index in `t`."""
    return torch.searchsorted(cu, t.to(cu.dtype).contiguous(), right=True) - 1


def document_ids(cu_seqlens, *, total=None):
    """`[total]` document index of every token (dtype of cu_seqlens); see `posenc_np.document_ids`."""
    cu = _cu(cu_seqlens)
    total = _total(cu, total)
    return _doc(cu, torch.arange(total, device=cu.device, dtype=cu.dtype)).to(cu.dtype)


def positions_from_cu_seqlens(cu_seqlens, *, offset=0, total=None):
    """`[total]` positions restarting at `offset` per document; see `posenc_np.positions_from_cu_seqlens`."""
    offset = spec.check_offset(offset)
    cu = _cu(cu_seqlens)
    total = _total(cu, total)
    t = torch.arange(total, device=cu.device, dtype=cu.dtype)
    return t - cu[_doc(cu, t)] + offset


def document_mask(cu_seqlens, *, causal=False, total=None):
    """`[total, total]` bool same-document (causal) mask; see `posenc_np.document_mask`."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal={causal!r} must be a bool")
    doc = document_ids(cu_seqlens, total=total)
    mask = doc[:, None] == doc[None, :]
    if causal:
        mask = mask & torch.ones_like(mask).tril()
    return mask


def document_bias(bias, cu_seqlens, *, q_index=None, k_index=None, causal=False):
    """`bias` with cross-document entries set to -inf; see `posenc_np.document_bias`.

    Eagerly, indices (the bias's axes when None) outside `[0, cu_seqlens[-1])` raise the spec's ValueError.
    Under torch.compile, where values cannot raise, such an index belongs to no document: its row or column
    is -inf against every token of the packed row.
    """
    check_float_dtype("bias", bias.dtype, bias.is_floating_point())
    spec.check_document_bias_args(bias.shape, causal)
    cu = _cu(cu_seqlens, device=bias.device)
    total = None if is_tracing(cu) else int(cu[-1])
    indices = []
    for name, index, size in (("q_index", q_index, bias.shape[-2]), ("k_index", k_index, bias.shape[-1])):
        index = torch.arange(size, device=bias.device) if index is None else as_tensor(index, device=bias.device)
        spec.check_document_index_tensor(name, index.shape, index.dtype, size=size, bias_shape=bias.shape,
                                         is_integer=_is_integer(index), total=total,
                                         values=None if is_tracing(index) else index.detach().cpu().numpy())
        indices.append(index.to(cu.dtype))
    q_idx, k_idx = indices
    keep = _doc(cu, q_idx)[:, None] == _doc(cu, k_idx)[None, :]
    if causal:
        keep = keep & (k_idx[None, :] <= q_idx[:, None])
    return bias.masked_fill(~keep, float("-inf"))


def cp_positions(seq_len, *, world_size, rank, strategy="contiguous", device=None):
    """`[seq_len // world_size]` int64 global positions of rank `rank`; see `posenc_np.cp_positions`."""
    world_size, rank = _cp_args(world_size, rank, strategy)
    seq_len = spec.check_cp_divisible(seq_len, world_size, strategy)
    if isinstance(rank, int):
        return spec_constant(("cp_positions", seq_len, world_size, rank, strategy), lambda: spec.cp_positions(
            seq_len, world_size=world_size, rank=rank, strategy=strategy), dtype=torch.int64, device=device)
    i = torch.arange(seq_len // world_size, device=rank.device if device is None else device, dtype=torch.int64)
    return spec.cp_local_index(i, rank.to(torch.int64), length=seq_len, world_size=world_size, strategy=strategy,
                               where=torch.where)


def cp_indices(cu_seqlens, *, world_size, rank, strategy="zigzag", total=None):
    """`[total // world_size]` packed-row indices rank `rank` holds; see `posenc_np.cp_indices`."""
    world_size, rank = _cp_args(world_size, rank, strategy)
    cu = _cu(cu_seqlens)
    if not is_tracing(cu) and isinstance(rank, int):  # every value known: the spec validates and computes
        index = spec.cp_indices(cu.detach().cpu().numpy(), world_size=world_size, rank=rank, strategy=strategy,
                                total=total)
        return torch.as_tensor(index, dtype=cu.dtype, device=cu.device)
    total = spec.check_cp_divisible(_total(cu, total), world_size, strategy, what="total")
    g = torch.arange(total // world_size, device=cu.device, dtype=cu.dtype)
    rank = torch.as_tensor(rank, device=cu.device, dtype=cu.dtype)
    return spec.cp_packed_index(cu, g, rank, world_size=world_size, strategy=strategy, document_of=_doc,
                                where=torch.where)


def cp_shard(x, *, world_size, rank, strategy="contiguous", axis=-2, cu_seqlens=None):
    """The part of `x` rank `rank` holds along `axis`; see `posenc_np.cp_shard`."""
    axis = spec.check_axis(axis, x.ndim)
    world_size, rank = _cp_args(world_size, rank, strategy)
    if cu_seqlens is None:
        index = cp_positions(x.shape[axis], world_size=world_size, rank=rank, strategy=strategy, device=x.device)
    else:
        index = cp_indices(cu_seqlens, world_size=world_size, rank=rank, strategy=strategy, total=x.shape[axis])
    return x.index_select(axis, index.to(device=x.device, dtype=torch.int64))


def cp_unshard(shards, *, strategy="contiguous", axis=-2, cu_seqlens=None):
    """Reassemble per-rank shards (ranks 0..W-1) into sequence order; see `posenc_np.cp_unshard`."""
    shards = list(shards)
    world_size, axis = spec.check_cp_shards([s.shape for s in shards], strategy, axis)
    joined = torch.cat(shards, dim=axis)
    length = joined.shape[axis]
    if cu_seqlens is None:
        # the order is static (it depends on shapes only): one constant index
        order = torch.as_tensor(spec.cp_rank_order(length, world_size, strategy, None), device=joined.device)
        inverse = torch.argsort(order)
    else:
        order = torch.cat([cp_indices(cu_seqlens, world_size=world_size, rank=r, strategy=strategy, total=length)
                           for r in range(world_size)]).to(device=joined.device, dtype=torch.int64)
        # inverse permutation by a scatter: inverse[order[i]] = i
        inverse = torch.empty_like(order).scatter_(0, order, torch.arange(length, device=joined.device))
    return joined.index_select(axis, inverse)


def rerotate(k, delta, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, mrope_section=None):
    """Keys rotated at `p` -> keys rotated at `p + delta`; see `posenc_np.rerotate` (rule and exceptions).

    Computed in float32 (half-precision keys are rotated in float32 and rounded once).
    """
    spec.check_rerotate_args(scaling, mrope_section)
    check_float_dtype("k", k.dtype, k.is_floating_point())
    rotary_dim = resolve_rotary_dim(k.shape[-1], rotary_dim)
    scale = rope_plan(rotary_dim, base=base, scaling=scaling, layout=layout).attention_scale
    delta = as_tensor(delta, device=k.device)
    if delta.ndim == 0:
        delta = delta.expand(k.shape[:-1])
    compute = torch.promote_types(k.dtype, torch.float32)
    out = apply_rope(k.to(compute), delta, base=base, layout=layout, rotary_dim=rotary_dim, scaling=scaling)
    if scale != 1.0:  # the shift carries no attention factor: divide apply_rope's back out
        out = torch.cat([out[..., :rotary_dim] / scale, out[..., rotary_dim:]], dim=-1)
    return out.to(k.dtype)
