"""Sharded-runtime checks: posenc encodings give the same numbers sharded and unsharded.

Two real distributed runtimes, on the host CPUs:
* JAX: a 1-D `Mesh` over 8 host CPU devices (`XLA_FLAGS=--xla_force_host_platform_device_count=8`,
  which must be set before JAX starts, hence a subprocess). q/k are sharded on the sequence axis with
  `NamedSharding`; `apply_rope`, `alibi_bias` and `t5_bias` run under `jax.jit` and must equal the
  unsharded result, keep the sequence sharding, and (RoPE) compile to HLO without collectives that
  move sequence data. The per-rank form runs under `shard_map` with `cp_positions`/`cp_indices`
  and `rank = lax.axis_index`.
* PyTorch: `torch.distributed` with the gloo backend, 4 processes (`torch.multiprocessing.spawn`), a
  DTensor sharded on the sequence dimension: `posenc_torch.apply_rope` on each rank's local shard with
  that rank's `cp_positions` (contiguous, striped, zigzag) or, for a packed row, the positions of its
  `cp_indices`, gathered (`DTensor.full_tensor`, an all-gather) and put back in sequence order
  (`cp_unshard`), equals the unsharded result.

`run_distributed()` starts each runtime in a fresh Python process (`python -m posenc.check.distributed
jax|torch`), which prints one JSON record per check; `posenc check --distributed` and
tests/backends/test_distributed.py call it. The frameworks are imported only inside those processes.

Results are compared with the float64 spec's tolerance policy; the sharded and unsharded runs execute
the same float32 operations on the same values, so the measured difference is 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import posenc_np

__all__ = ["run_distributed", "as_records", "mrope_ids", "jax_checks", "torch_checks", "RUNTIMES", "JAX_DEVICES",
           "TORCH_WORLD", "STRATEGIES", "MROPE_CONVENTIONS"]

JAX_DEVICES = 8
#: the runtimes `run_distributed` knows, named as `posenc check --backend` names them
RUNTIMES = ("jax", "torch")
TORCH_WORLD = 4
STRATEGIES = ("contiguous", "striped", "zigzag")
#: multi-axis RoPE conventions run sharded: contiguous (Qwen2-VL) and interleaved (Qwen3-VL) sections
MROPE_CONVENTIONS = ("qwen2-vl", "qwen3-vl")
#: collectives that would move sequence data between devices
DATA_COLLECTIVES = ("all-gather", "all-to-all", "collective-permute", "reduce-scatter", "all-reduce")


def mrope_ids(seq: int) -> np.ndarray:
    """int32 `[3, seq]` Qwen-VL position ids (temporal, height, width) of one row: 8 text tokens, a 1x8x8
    image (16 tokens after the 2x2 merge), text to the end; `posenc_np.mrope_position_ids` (HF get_rope_index)."""
    types = [0] * 8 + [1] * 16 + [0] * (seq - 24)
    ids, _ = posenc_np.mrope_position_ids([types], image_grid_thw=[[1, 8, 8]])
    return ids[:, 0].astype(np.int32)


def _mrope_params(convention):
    """`(apply_rope keywords, head_dim)` of a registered multi-axis convention (qwen2-vl, qwen3-vl)."""
    from posenc_np.conventions import conventions

    c = conventions[convention]
    return dict(c.params), c.extra["head_dim"]


def _record(name, runtime, passed, **fields):
    return {"check": name, "runtime": runtime, "status": "pass" if passed else "fail", **fields}


def _collectives(hlo: str) -> dict:
    """Count the collectives of compiled HLO text; all-reduces are listed with their result shapes."""
    import re

    counts = {op: len(re.findall(rf"= [^=]*\b{op}(?:-start)?\(", hlo)) for op in DATA_COLLECTIVES}
    reduce_shapes = re.findall(r"= (\S+) all-reduce(?:-start)?\(", hlo)
    return {"counts": counts, "all_reduce_shapes": reduce_shapes}


# --- JAX ---------------------------------------------------------------------------------------------------

def jax_checks(seed=0) -> list[dict]:
    """Run in a process whose XLA_FLAGS gave JAX `JAX_DEVICES` host devices (see `main`)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import posenc_jax as pj
    from posenc_np.testing import tolerance

    try:
        from jax import shard_map
    except ImportError:  # older JAX
        from jax.experimental.shard_map import shard_map

    devices = jax.devices()
    if len(devices) != JAX_DEVICES:
        return [_record("jax-devices", "jax", False, message=f"expected {JAX_DEVICES} devices, got {len(devices)}")]
    mesh = Mesh(np.array(devices), ("sp",))
    rng = np.random.default_rng(seed)
    seq, heads, dim = 64, 2, 16
    x = rng.standard_normal((2, heads, seq, dim)).astype(np.float32)
    positions = np.arange(seq, dtype=np.int32)
    whole = np.asarray(pj.apply_rope(x, positions))  # unsharded, one device
    tol = tolerance("float32", max_angle=float(seq), scale=float(np.abs(whole).max())).atol
    seq_spec = NamedSharding(mesh, P(None, None, "sp", None))
    records = []

    def err(a, b):
        return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())

    # 1. NamedSharding + jit: positions replicated, and positions sharded like the tokens
    rope = jax.jit(lambda a, p: pj.apply_rope(a, p))
    xs = jax.device_put(x, seq_spec)
    for how, pspec in (("positions-replicated", P()), ("positions-sharded", P("sp"))):
        ps = jax.device_put(positions, NamedSharding(mesh, pspec))
        out = rope(xs, ps)
        coll = _collectives(rope.lower(xs, ps).compile().as_text())
        moved = {op: n for op, n in coll["counts"].items() if n and op != "all-reduce"}
        # A sharded position array makes the table-range predicate of apply_rope's fast path (are all
        # positions inside the 4096-row table?) one pred[] all-reduce; no sequence data moves. It cannot be
        # dropped cheaply: a per-element select computes the angles for every call (~20x slower, measured).
        scalar_reduces = all(s.endswith("[]") for s in coll["all_reduce_shapes"])
        ok_coll = not moved and (coll["counts"]["all-reduce"] == 0 if how == "positions-replicated" else scalar_reduces)
        e = err(out, whole)
        records.append(_record(f"rope-namedsharding-{how}", "jax", e <= tol and out.sharding.is_equivalent_to(
            seq_spec, x.ndim) and ok_coll, max_abs_err=e, tol=tol, sharding=str(out.sharding.spec),
            collectives=coll["counts"], all_reduce_shapes=coll["all_reduce_shapes"]))

    # 2. shard_map per-rank form: each device holds its strategy's shard and computes its positions
    for strategy in STRATEGIES:
        x_rank_order = np.concatenate([posenc_np.cp_shard(x, world_size=JAX_DEVICES, rank=r, strategy=strategy)
                                       for r in range(JAX_DEVICES)], axis=-2)

        def per_rank(local, strategy=strategy):
            rank = jax.lax.axis_index("sp")
            return pj.apply_rope(local, pj.cp_positions(seq, world_size=JAX_DEVICES, rank=rank, strategy=strategy))

        fn = jax.jit(shard_map(per_rank, mesh=mesh, in_specs=P(None, None, "sp", None),
                               out_specs=P(None, None, "sp", None)))
        xs = jax.device_put(x_rank_order, seq_spec)
        out = fn(xs)
        coll = _collectives(fn.lower(xs).compile().as_text())
        shards = np.split(np.asarray(out), JAX_DEVICES, axis=-2)
        e = err(posenc_np.cp_unshard(shards, strategy=strategy), whole)
        records.append(_record(f"rope-shard_map-{strategy}", "jax", e <= tol and not any(coll["counts"].values())
                               and out.sharding.is_equivalent_to(seq_spec, x.ndim), max_abs_err=e, tol=tol,
                               collectives=coll["counts"]))

    # 3. packed row (thd) under zigzag context parallelism, Transformer Engine's layout, in shard_map
    cu = np.array([0, 16, 48, 64], dtype=np.int32)  # documents padded to multiples of 2 * 8
    xt = rng.standard_normal((seq, heads, dim)).astype(np.float32)
    packed_pos = posenc_np.positions_from_cu_seqlens(cu).astype(np.int32)
    whole_t = np.asarray(pj.apply_rope(xt, packed_pos[:, None]))
    xt_rank_order = np.concatenate([posenc_np.cp_shard(xt, world_size=JAX_DEVICES, rank=r, strategy="zigzag",
                                                       axis=0, cu_seqlens=cu) for r in range(JAX_DEVICES)])

    def per_rank_packed(local, cu_seqlens):
        rank = jax.lax.axis_index("sp")
        index = pj.cp_indices(cu_seqlens, world_size=JAX_DEVICES, rank=rank, strategy="zigzag", total=seq)
        local_positions = pj.positions_from_cu_seqlens(cu_seqlens, total=seq)[index]
        return pj.apply_rope(local, local_positions[:, None])

    fn = jax.jit(shard_map(per_rank_packed, mesh=mesh, in_specs=(P("sp"), P()), out_specs=P("sp")))
    xs = jax.device_put(xt_rank_order, NamedSharding(mesh, P("sp")))
    cus = jax.device_put(cu, NamedSharding(mesh, P()))
    out = fn(xs, cus)
    coll = _collectives(fn.lower(xs, cus).compile().as_text())
    e = err(posenc_np.cp_unshard(np.split(np.asarray(out), JAX_DEVICES), strategy="zigzag", axis=0, cu_seqlens=cu),
            whole_t)
    records.append(_record("rope-shard_map-packed-zigzag", "jax", e <= tol and not any(coll["counts"].values()),
                           max_abs_err=e, tol=tol, collectives=coll["counts"]))

    # 4. biases under jit with the query axis sharded: rows computed where the queries live
    table = rng.standard_normal((32, heads)).astype(np.float32)
    row_spec = NamedSharding(mesh, P(None, "sp", None))
    qs = jax.device_put(positions, NamedSharding(mesh, P("sp")))
    ks = jax.device_put(positions, NamedSharding(mesh, P()))
    for name, fn, spec in (
            ("alibi", jax.jit(lambda q, k: pj.alibi_bias(heads, q, k, form="symmetric")),
             posenc_np.alibi_bias(heads, positions, positions)),
            ("t5", jax.jit(lambda q, k: pj.t5_bias(jnp.asarray(table), q, k)),
             posenc_np.t5_bias(table.astype(np.float64), positions, positions))):
        out = fn(qs, ks)
        unsharded = np.asarray(fn(positions, positions))
        coll = _collectives(fn.lower(qs, ks).compile().as_text())
        e = err(out, unsharded)
        tol_bias = tolerance("float32", scale=float(np.abs(spec).max())).atol
        records.append(_record(f"{name}-namedsharding", "jax", e == 0.0 and err(out, spec) <= tol_bias
                               and out.sharding.is_equivalent_to(row_spec, 3) and not any(coll["counts"].values()),
                               max_abs_err=e, spec_err=err(out, spec), tol=tol_bias, sharding=str(out.sharding.spec),
                               collectives=coll["counts"]))

    # 5. multi-axis RoPE (Qwen2-VL contiguous, Qwen3-VL interleaved sections; head_dim 128), position ids
    #    [3, seq] of a text + image row. Global view: positions sharded on their seq axis like the tokens;
    #    the multi-axis path has no table fast path, so not even a scalar reduction crosses devices.
    #    Per-rank view: each rank gathers its tokens' ids with the zigzag cp_positions.
    ids = mrope_ids(seq)
    for convention in MROPE_CONVENTIONS:
        params, head_dim = _mrope_params(convention)
        xm = rng.standard_normal((2, heads, seq, head_dim)).astype(np.float32)
        whole_m = np.asarray(pj.apply_rope(xm, ids, **params))
        tol_m = tolerance("float32", max_angle=float(seq), scale=float(np.abs(whole_m).max())).atol
        rope_m = jax.jit(lambda a, p, params=params: pj.apply_rope(a, p, **params))
        xs = jax.device_put(xm, seq_spec)
        ps = jax.device_put(ids, NamedSharding(mesh, P(None, "sp")))
        out = rope_m(xs, ps)
        coll = _collectives(rope_m.lower(xs, ps).compile().as_text())
        e = err(out, whole_m)
        kept = out.sharding.is_equivalent_to(seq_spec, xm.ndim)
        records.append(_record(f"mrope-{convention}-namedsharding-positions-sharded", "jax", e <= tol_m
                               and kept and not any(coll["counts"].values()),
                               max_abs_err=e, tol=tol_m, sharding=str(out.sharding.spec), collectives=coll["counts"]))

        def per_rank_mrope(local, ids_all, params=params):
            rank = jax.lax.axis_index("sp")
            index = pj.cp_positions(seq, world_size=JAX_DEVICES, rank=rank, strategy="zigzag")
            return pj.apply_rope(local, ids_all[:, index], **params)

        fn = jax.jit(shard_map(per_rank_mrope, mesh=mesh, in_specs=(P(None, None, "sp", None), P()),
                               out_specs=P(None, None, "sp", None)))
        x_rank_order = np.concatenate([posenc_np.cp_shard(xm, world_size=JAX_DEVICES, rank=r, strategy="zigzag")
                                       for r in range(JAX_DEVICES)], axis=-2)
        xs = jax.device_put(x_rank_order, seq_spec)
        ids_rep = jax.device_put(ids, NamedSharding(mesh, P()))
        out = fn(xs, ids_rep)
        coll = _collectives(fn.lower(xs, ids_rep).compile().as_text())
        e = err(posenc_np.cp_unshard(np.split(np.asarray(out), JAX_DEVICES, axis=-2), strategy="zigzag"), whole_m)
        kept = out.sharding.is_equivalent_to(seq_spec, xm.ndim)
        records.append(_record(f"mrope-{convention}-shard_map-zigzag", "jax", e <= tol_m
                               and not any(coll["counts"].values()) and kept,
                               max_abs_err=e, tol=tol_m, collectives=coll["counts"]))
    return records


# --- PyTorch ---------------------------------------------------------------------------------------------

def _torch_worker(rank, world_size, init_file, out_path, seed):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    import posenc_torch as pt
    from posenc_np.testing import tolerance

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("cp",))
        gen = torch.Generator().manual_seed(seed)  # the same global batch on every rank
        seq, heads, dim = 32, 2, 16
        x = torch.randn(2, heads, seq, dim, generator=gen)
        whole = pt.apply_rope(x, torch.arange(seq))
        tol = tolerance("float32", max_angle=float(seq), scale=float(whole.abs().max())).atol
        records = []
        for strategy in STRATEGIES:
            # the data loader puts the tokens in rank order; DTensor then shards contiguously
            x_rank_order = torch.cat([pt.cp_shard(x, world_size=world_size, rank=r, strategy=strategy)
                                      for r in range(world_size)], dim=2)
            dx = distribute_tensor(x_rank_order, mesh, [Shard(2)])
            local = dx.to_local()
            same_shard = torch.equal(local, pt.cp_shard(x, world_size=world_size, rank=rank, strategy=strategy))
            out_local = pt.apply_rope(local, pt.cp_positions(seq, world_size=world_size, rank=rank, strategy=strategy))
            gathered = DTensor.from_local(out_local, mesh, [Shard(2)]).full_tensor()  # all-gather
            out = pt.cp_unshard(list(gathered.chunk(world_size, dim=2)), strategy=strategy)
            records.append((f"rope-dtensor-{strategy}", float((out - whole).abs().max()), tol, same_shard))
        # packed row (thd) with zigzag per document, TE's layout
        cu = torch.tensor([0, 8, 24, 32], dtype=torch.int32)
        xt = torch.randn(seq, heads, dim, generator=gen)
        positions = pt.positions_from_cu_seqlens(cu)
        whole_t = pt.apply_rope(xt, positions[:, None])
        xt_rank_order = torch.cat([pt.cp_shard(xt, world_size=world_size, rank=r, strategy="zigzag", axis=0,
                                               cu_seqlens=cu) for r in range(world_size)])
        local = distribute_tensor(xt_rank_order, mesh, [Shard(0)]).to_local()
        index = pt.cp_indices(cu, world_size=world_size, rank=rank, strategy="zigzag")
        out_local = pt.apply_rope(local, positions[index.long()][:, None])
        gathered = DTensor.from_local(out_local, mesh, [Shard(0)]).full_tensor()
        out = pt.cp_unshard(list(gathered.chunk(world_size, dim=0)), strategy="zigzag", axis=0, cu_seqlens=cu)
        records.append(("rope-dtensor-packed-zigzag", float((out - whole_t).abs().max()), tol, True))
        # multi-axis RoPE: [3, seq] position ids, each rank's columns picked by its zigzag cp_positions
        ids = torch.from_numpy(mrope_ids(seq))
        index = pt.cp_positions(seq, world_size=world_size, rank=rank, strategy="zigzag")
        for convention in MROPE_CONVENTIONS:
            params, head_dim = _mrope_params(convention)
            xm = torch.randn(2, heads, seq, head_dim, generator=gen)
            whole_m = pt.apply_rope(xm, ids, **params)
            tol_m = tolerance("float32", max_angle=float(seq), scale=float(whole_m.abs().max())).atol
            x_rank_order = torch.cat([pt.cp_shard(xm, world_size=world_size, rank=r, strategy="zigzag")
                                      for r in range(world_size)], dim=2)
            local = distribute_tensor(x_rank_order, mesh, [Shard(2)]).to_local()
            out_local = pt.apply_rope(local, ids[:, index.long()], **params)
            gathered = DTensor.from_local(out_local, mesh, [Shard(2)]).full_tensor()
            out = pt.cp_unshard(list(gathered.chunk(world_size, dim=2)), strategy="zigzag")
            records.append((f"mrope-{convention}-dtensor-zigzag", float((out - whole_m).abs().max()), tol_m, True))
        # every rank's verdict reaches rank 0
        errors = torch.tensor([r[1] for r in records], dtype=torch.float64)
        dist.all_reduce(errors, op=dist.ReduceOp.MAX)
        shards_ok = torch.tensor([float(r[3]) for r in records])
        dist.all_reduce(shards_ok, op=dist.ReduceOp.MIN)
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump([_record(name, "torch", bool(e <= t and ok), max_abs_err=float(e), tol=t,
                                   world_size=world_size, backend="gloo")
                           for (name, _, t, _), e, ok in zip(records, errors.tolist(), shards_ok.tolist())], f)
    finally:
        dist.destroy_process_group()


def torch_checks(world_size=TORCH_WORLD, seed=0) -> list[dict]:
    """Spawn `world_size` gloo processes; returns rank 0's records."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        init_file, out_path = os.path.join(tmp, "init"), os.path.join(tmp, "records.json")
        mp.spawn(_torch_worker, args=(world_size, init_file, out_path, seed), nprocs=world_size, join=True)
        with open(out_path) as f:
            return json.load(f)


# --- driver ----------------------------------------------------------------------------------------------

_ENCODINGS = {"rope": "apply_rope", "mrope": "apply_rope", "alibi": "alibi_bias", "t5": "t5_bias"}


def as_records(records) -> list:
    """The records of `run_distributed` as the suite's `runner.Record`s, for `posenc check`'s JSON and
    Markdown reports: family "distributed", backend = the runtime ("jax", "torch"), case = the check's
    name, convention = the multi-axis convention of an `mrope-*` check, else its encoding's family;
    float32, mode "jit" (JAX) or "eager" (torch). The collectives found in the HLO go into `message`."""
    from .runner import Record

    out = []
    for r in records:
        prefix = r["check"].split("-")[0]
        convention = next((c for c in MROPE_CONVENTIONS if r["check"].startswith(f"mrope-{c}-")), prefix)
        err, tol = r.get("max_abs_err"), r.get("tol")
        notes = [r["message"]] if r.get("message") else []
        if "collectives" in r:
            moved = {op: n for op, n in r["collectives"].items() if n}
            shapes = f" ({', '.join(r.get('all_reduce_shapes', []))})" if r.get("all_reduce_shapes") else ""
            notes.append("collectives: " + (", ".join(f"{op} x{n}" for op, n in moved.items()) + shapes
                                            if moved else "none"))
        if r["runtime"] == "torch" and "world_size" in r:
            notes.append(f"torch.distributed {r.get('backend', 'gloo')} x {r['world_size']}")
        out.append(Record(encoding=_ENCODINGS.get(prefix, r["check"]), family="distributed", convention=convention,
                          case=r["check"], backend=r["runtime"], dtype="float32",
                          mode="jit" if r["runtime"] == "jax" else "eager", status=r["status"], max_abs_err=err,
                          err_in_tol=None if err is None or not tol else err / tol, tol=tol,
                          tol_why="float32 tolerance of the unsharded result (posenc_np.testing.tolerance)"
                          if tol is not None else "", message="; ".join(notes),
                          description="sharded result equals the unsharded one (posenc.check.distributed)"))
    return out


def run_distributed(runtimes=RUNTIMES, *, timeout=300) -> list[dict]:
    """Run each runtime's checks in a fresh process; a runtime that is not installed is a "skip"
    record, one that crashes an "error" record."""
    import importlib.util

    records = []
    for runtime in runtimes:
        if importlib.util.find_spec(runtime) is None:
            records.append(_record(f"{runtime}-runtime", runtime, False, message="not installed") | {"status": "skip"})
            continue
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        proc = subprocess.run([sys.executable, "-m", "posenc.check.distributed", runtime], capture_output=True,
                              text=True, timeout=timeout, env=env)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode or not lines:
            records.append(_record(f"{runtime}-runtime", runtime, False, message=(proc.stderr or proc.stdout)[-2000:])
                           | {"status": "error"})
            continue
        records.extend(json.loads(line) for line in lines)
    return records


def main(argv=None) -> int:
    runtime = (argv or sys.argv[1:] or ["jax"])[0]
    if runtime == "jax":
        # must precede the first import of jax in this process
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={JAX_DEVICES}".strip()
        records = jax_checks()
    elif runtime == "torch":
        records = torch_checks()
    else:
        print(f"unknown runtime {runtime!r}: choose jax or torch", file=sys.stderr)
        return 2
    for record in records:
        print(json.dumps(record))
    return 0 if all(r["status"] == "pass" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
