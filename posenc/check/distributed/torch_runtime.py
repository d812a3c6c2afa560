"""The PyTorch sharded-runtime checks: `torch.distributed` with gloo, `TORCH_WORLD` processes, DTensors.

Each rank applies `posenc_torch.apply_rope` to its local shard with its own positions; the shards are
gathered (`DTensor.full_tensor`, an all-gather), put back in sequence order (`cp_unshard`) and compared
with the unsharded result. Every rank's verdict reaches rank 0, which writes the records.
"""

from __future__ import annotations

import json
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

import posenc_torch as pt
from posenc_np.testing import tolerance

from .common import (
    MROPE_CONVENTIONS,
    STRATEGIES,
    TORCH_WORLD,
    mrope_ids,
    mrope_params,
    record,
)

__all__ = ["checks"]

SEQ, HEADS, DIM = 32, 2, 16


def _gathered(out_local, mesh, dim, world_size, **unshard):
    """The ranks' outputs all-gathered and put back in sequence order."""
    gathered = DTensor.from_local(out_local, mesh, [Shard(dim)]).full_tensor()  # all-gather
    return pt.cp_unshard(list(gathered.chunk(world_size, dim=dim)), axis=dim, **unshard)


def _rank_order(x, world_size, strategy, dim, **cp):
    """The ranks' shards of `x` in rank order: the data loader's layout; DTensor then shards contiguously."""
    return torch.cat([pt.cp_shard(x, world_size=world_size, rank=r, strategy=strategy, axis=dim, **cp)
                      for r in range(world_size)], dim=dim)


def _strategies(x, whole, tol, mesh, rank, world_size):
    """`(name, max_abs_err, tol, this rank's shard is cp_shard's)` per strategy of a `[b, h, seq, d]` batch."""
    out = []
    for strategy in STRATEGIES:
        local = distribute_tensor(_rank_order(x, world_size, strategy, 2), mesh, [Shard(2)]).to_local()
        same_shard = torch.equal(local, pt.cp_shard(x, world_size=world_size, rank=rank, strategy=strategy))
        out_local = pt.apply_rope(local, pt.cp_positions(SEQ, world_size=world_size, rank=rank, strategy=strategy))
        restored = _gathered(out_local, mesh, 2, world_size, strategy=strategy)
        out.append((f"rope-dtensor-{strategy}", float((restored - whole).abs().max()), tol, same_shard))
    return out


def _packed_zigzag(gen, tol, mesh, rank, world_size):
    """A packed row (thd) with zigzag per document, TE's layout."""
    cu = torch.tensor([0, 8, 24, 32], dtype=torch.int32)
    xt = torch.randn(SEQ, HEADS, DIM, generator=gen)
    positions = pt.positions_from_cu_seqlens(cu)
    whole_t = pt.apply_rope(xt, positions[:, None])
    rank_order = _rank_order(xt, world_size, "zigzag", 0, cu_seqlens=cu)
    local = distribute_tensor(rank_order, mesh, [Shard(0)]).to_local()
    index = pt.cp_indices(cu, world_size=world_size, rank=rank, strategy="zigzag")
    out_local = pt.apply_rope(local, positions[index.long()][:, None])
    restored = _gathered(out_local, mesh, 0, world_size, strategy="zigzag", cu_seqlens=cu)
    return ("rope-dtensor-packed-zigzag", float((restored - whole_t).abs().max()), tol, True)


def _mrope(gen, mesh, rank, world_size):
    """Multi-axis RoPE: `[3, seq]` position ids, each rank's columns picked by its zigzag cp_positions."""
    ids = torch.from_numpy(mrope_ids(SEQ))
    index = pt.cp_positions(SEQ, world_size=world_size, rank=rank, strategy="zigzag")
    out = []
    for convention in MROPE_CONVENTIONS:
        params, head_dim = mrope_params(convention)
        xm = torch.randn(2, HEADS, SEQ, head_dim, generator=gen)
        whole_m = pt.apply_rope(xm, ids, **params)
        tol_m = tolerance("float32", max_angle=float(SEQ), scale=float(whole_m.abs().max())).atol
        local = distribute_tensor(_rank_order(xm, world_size, "zigzag", 2), mesh, [Shard(2)]).to_local()
        out_local = pt.apply_rope(local, ids[:, index.long()], **params)
        restored = _gathered(out_local, mesh, 2, world_size, strategy="zigzag")
        out.append((f"mrope-{convention}-dtensor-zigzag", float((restored - whole_m).abs().max()), tol_m, True))
    return out


def _write_verdicts(results, rank, world_size, out_path):
    """The worst error and the weakest shard check over every rank, written by rank 0 as records."""
    errors = torch.tensor([r[1] for r in results], dtype=torch.float64)
    dist.all_reduce(errors, op=dist.ReduceOp.MAX)
    shards_ok = torch.tensor([float(r[3]) for r in results])
    dist.all_reduce(shards_ok, op=dist.ReduceOp.MIN)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump([record(name, "torch", bool(e <= t and ok), max_abs_err=float(e), tol=t,
                              world_size=world_size, backend="gloo")
                       for (name, _, t, _), e, ok in zip(results, errors.tolist(), shards_ok.tolist(), strict=True)], f)


def _worker(rank, world_size, init_file, out_path, seed):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("cp",))
        gen = torch.Generator().manual_seed(seed)  # the same global batch on every rank
        x = torch.randn(2, HEADS, SEQ, DIM, generator=gen)
        whole = pt.apply_rope(x, torch.arange(SEQ))
        tol = tolerance("float32", max_angle=float(SEQ), scale=float(whole.abs().max())).atol
        results = _strategies(x, whole, tol, mesh, rank, world_size)
        results.append(_packed_zigzag(gen, tol, mesh, rank, world_size))
        results += _mrope(gen, mesh, rank, world_size)
        _write_verdicts(results, rank, world_size, out_path)
    finally:
        dist.destroy_process_group()


def checks(world_size=TORCH_WORLD, seed=0) -> list[dict]:
    """Spawn `world_size` gloo processes; returns rank 0's records."""
    with tempfile.TemporaryDirectory() as tmp:
        init_file, out_path = os.path.join(tmp, "init"), os.path.join(tmp, "records.json")
        mp.spawn(_worker, args=(world_size, init_file, out_path, seed), nprocs=world_size, join=True)
        with open(out_path) as f:
            return json.load(f)
