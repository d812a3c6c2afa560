"""Overhead of the sharded path against the unsharded one, on this machine's CPUs.

    python benchmarks/bench_distributed.py [--seq 4096] [--reps 20]

JAX (8 host CPU devices, XLA_FLAGS set below before JAX starts), q `[1, 8, seq, 128]` float32:
  unsharded          jax.jit(apply_rope) on one device, positions arange(seq)
  NamedSharding      the same jitted function on q sharded over 8 devices on the sequence axis
                     (positions replicated; XLA partitions the gather and the rotation, no collectives)
  shard_map zigzag   per-rank form: each device computes its positions with
                     cp_positions(rank=lax.axis_index) and rotates its shard
  shard_map packed   per-rank, packed row of 4 documents: cp_indices + positions_from_cu_seqlens in-graph
  NamedSharding, positions sharded   positions sharded like q: one pred[] all-reduce (the table-range check)
  M-RoPE (qwen3-vl, interleaved [24, 20, 20]) with Qwen-VL ids [3, seq] of a text + image row: unsharded,
                     NamedSharding (ids sharded on their seq axis), shard_map zigzag (ids[:, cp_positions])
PyTorch (one process, the per-rank work of a 4-rank job), q `[1, 8, seq / 4, 128]`:
  apply_rope(shard, arange)        the rotation alone
  + cp_positions(zigzag)           the rank's positions built per call
  + cp_indices/positions (packed)  the packed row's positions of the rank built per call (in-graph form)
  M-RoPE (qwen3-vl)                the rank's [3, seq/4] ids gathered with cp_positions(zigzag), per call

Best of `--reps` timed runs after warm-up (the machine is shared and noisy: load only adds time, so
the minimum is the least disturbed run). The 8 JAX "devices" share this machine's cores, so the
sharded columns measure overhead (partitioning, per-device dispatch), not a speed-up; on a real
mesh each device rotates seq/8 tokens at its own memory bandwidth.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402


def best(fn, reps):
    fn()
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_jax(seq, reps):
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import posenc_jax as pj
    from posenc.check.distributed import mrope_ids
    from posenc_np.conventions import conventions

    try:
        from jax import shard_map
    except ImportError:
        from jax.experimental.shard_map import shard_map

    devices = jax.devices()
    world = len(devices)
    mesh = Mesh(np.array(devices), ("sp",))
    x = np.random.default_rng(0).standard_normal((1, 8, seq, 128)).astype(np.float32)
    positions = np.arange(seq, dtype=np.int32)
    rope = jax.jit(lambda a, p: pj.apply_rope(a, p))
    x1, p1 = jax.device_put(x, devices[0]), jax.device_put(positions, devices[0])
    xs = jax.device_put(x, NamedSharding(mesh, P(None, None, "sp", None)))
    ps = jax.device_put(positions, NamedSharding(mesh, P()))

    def per_rank(local):
        rank = jax.lax.axis_index("sp")
        return pj.apply_rope(local, pj.cp_positions(seq, world_size=world, rank=rank, strategy="zigzag"))

    zigzag = jax.jit(shard_map(per_rank, mesh=mesh, in_specs=P(None, None, "sp", None),
                               out_specs=P(None, None, "sp", None)))
    cu = np.array([0, seq // 4, seq // 2, 3 * seq // 4, seq], dtype=np.int32)
    xt = jax.device_put(np.ascontiguousarray(x[0].transpose(1, 0, 2)), NamedSharding(mesh, P("sp")))

    def per_rank_packed(local, cu_seqlens):
        rank = jax.lax.axis_index("sp")
        index = pj.cp_indices(cu_seqlens, world_size=world, rank=rank, strategy="zigzag", total=seq)
        return pj.apply_rope(local, pj.positions_from_cu_seqlens(cu_seqlens, total=seq)[index][:, None])

    packed = jax.jit(shard_map(per_rank_packed, mesh=mesh, in_specs=(P("sp"), P()), out_specs=P("sp")))
    cus = jax.device_put(cu, NamedSharding(mesh, P()))
    psh = jax.device_put(positions, NamedSharding(mesh, P("sp")))
    # multi-axis RoPE: Qwen3-VL's interleaved sections on q's 128 channels
    params = dict(conventions["qwen3-vl"].params)
    ids = mrope_ids(seq)
    mrope = jax.jit(lambda a, p: pj.apply_rope(a, p, **params))
    ids1 = jax.device_put(ids, devices[0])
    ids_sh, ids_rep = (jax.device_put(ids, NamedSharding(mesh, spec)) for spec in (P(None, "sp"), P()))

    def per_rank_mrope(local, ids_all):
        rank = jax.lax.axis_index("sp")
        index = pj.cp_positions(seq, world_size=world, rank=rank, strategy="zigzag")
        return pj.apply_rope(local, ids_all[:, index], **params)

    mrope_zigzag = jax.jit(shard_map(per_rank_mrope, mesh=mesh, in_specs=(P(None, None, "sp", None), P()),
                                     out_specs=P(None, None, "sp", None)))
    rows = [("unsharded (1 device)", best(lambda: rope(x1, p1).block_until_ready(), reps)),
            (f"NamedSharding ({world} devices)", best(lambda: rope(xs, ps).block_until_ready(), reps)),
            (f"NamedSharding, positions sharded ({world} devices)", best(lambda: rope(xs, psh).block_until_ready(),
                                                                        reps)),
            (f"shard_map zigzag ({world} devices)", best(lambda: zigzag(xs).block_until_ready(), reps)),
            (f"shard_map packed zigzag ({world} devices)", best(lambda: packed(xt, cus).block_until_ready(), reps)),
            ("M-RoPE qwen3-vl unsharded (1 device)", best(lambda: mrope(x1, ids1).block_until_ready(), reps)),
            (f"M-RoPE qwen3-vl NamedSharding, ids sharded ({world} devices)",
             best(lambda: mrope(xs, ids_sh).block_until_ready(), reps)),
            (f"M-RoPE qwen3-vl shard_map zigzag ({world} devices)",
             best(lambda: mrope_zigzag(xs, ids_rep).block_until_ready(), reps))]
    return rows


def bench_torch(seq, reps, world=4):
    import torch

    import posenc_torch as pt
    from posenc.check.distributed import mrope_ids
    from posenc_np.conventions import conventions

    torch.set_num_threads(1)  # one rank's share of the machine
    local = seq // world
    x = torch.randn(1, 8, local, 128)
    xt = torch.randn(local, 8, 128)
    arange = torch.arange(local)
    cu = torch.tensor([0, seq // 4, seq // 2, 3 * seq // 4, seq], dtype=torch.int32)
    params = dict(conventions["qwen3-vl"].params)
    ids = torch.from_numpy(mrope_ids(seq)).long()
    local_ids = ids[:, :local].contiguous()

    def packed():
        index = pt.cp_indices(cu, world_size=world, rank=1, strategy="zigzag", total=seq)
        return pt.apply_rope(xt, pt.positions_from_cu_seqlens(cu, total=seq)[index.long()][:, None])

    return [("apply_rope(shard, arange)", best(lambda: pt.apply_rope(x, arange), reps)),
            ("apply_rope(shard, cp_positions zigzag)",
             best(lambda: pt.apply_rope(x, pt.cp_positions(seq, world_size=world, rank=1, strategy="zigzag")), reps)),
            ("apply_rope(thd shard, positions[cp_indices]) packed", best(packed, reps)),
            ("apply_rope(thd shard, arange) (no packing work)", best(lambda: pt.apply_rope(xt, arange[:, None]), reps)),
            ("M-RoPE qwen3-vl, apply_rope(shard, ids[:, cp_positions zigzag])",
             best(lambda: pt.apply_rope(x, ids[:, pt.cp_positions(seq, world_size=world, rank=1, strategy="zigzag")],
                                        **params), reps)),
            ("M-RoPE qwen3-vl, apply_rope(shard, ids of arange) (no sharding work)",
             best(lambda: pt.apply_rope(x, local_ids, **params), reps))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    print(f"seq {args.seq}, best of {args.reps}, {os.cpu_count()} CPU cores (shared)")
    for title, rows in (("JAX, q [1, 8, seq, 128] float32", bench_jax(args.seq, args.reps)),
                        ("PyTorch, one of 4 ranks, q [1, 8, seq/4, 128] float32, 1 thread",
                         bench_torch(args.seq, args.reps))):
        print(f"\n{title}\n| path | ms |\n|---|---|")
        for name, seconds in rows:
            print(f"| {name} | {seconds * 1e3:.3f} |")


if __name__ == "__main__":
    main()
