"""RoPE in MLX: posenc_mlx against MLX's own fused kernel and MLX's compiled `x + 1` (the anchor).

    python benchmarks/bench_mlx_rope.py --write     # rewrites docs/performance.md's MLX table
    python benchmarks/bench_mlx_rope.py [--shape 4 16 2048 128] [--dtypes float32 bfloat16] [--reps 10]

q and k are `[batch, heads, seq, head_dim]`, positions `arange(seq)` (int32) broadcast over batch and
heads, every path rotating both and evaluated (`mx.eval`: MLX is lazy) on MLX's default device (the
CPU on Linux). Paths, round robin, best of `--reps` (`_timing.timed_group`, compile time excluded):
  mx.compile x + 1          `x + 1` on q and k under `mx.compile`: the least an allocating op costs
  mx.fast.rope              MLX's RoPE kernel (`traditional=False`, float32 angles `(arange + offset) * inv`)
  posenc_mlx eager          `apply_rope`: cos/sin gathered from its float32 spec table (positions < 4096)
  posenc_mlx mx.compile     `apply_rope` under `mx.compile`: the float64 angle reduction on the CPU
                            stream every call (no conditional in MLX graphs), then the rotation
Columns: best time, x of `mx.compile` `x + 1` (anchor time / path time), x of `mx.fast.rope`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
from pathlib import Path

import numpy as np
from _timing import timed_group, write_between_markers

DOC = Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def paths(shape, dtype_name):
    import mlx.core as mx

    import posenc_mlx

    rng = np.random.default_rng(0)
    dtype = getattr(mx, dtype_name)
    q, k = (mx.array(rng.standard_normal(shape).astype(np.float32)).astype(dtype) for _ in range(2))
    positions = mx.arange(shape[-2], dtype=mx.int32)
    mx.eval(q, k, positions)
    plus_one = mx.compile(lambda a, b: (a + 1, b + 1))
    rope = mx.compile(lambda a, b, p: (posenc_mlx.apply_rope(a, p), posenc_mlx.apply_rope(b, p)))
    dim = shape[-1]
    return {
        "mx.compile x + 1 on q, k (anchor)": lambda: mx.eval(plus_one(q, k)),
        "mx.fast.rope, eager": lambda: mx.eval(*(mx.fast.rope(t, dim, traditional=False, base=10000.0, scale=1.0,
                                                              offset=0) for t in (q, k))),
        "posenc_mlx apply_rope, eager": lambda: mx.eval(posenc_mlx.apply_rope(q, positions),
                                                        posenc_mlx.apply_rope(k, positions)),
        "posenc_mlx apply_rope, mx.compile": lambda: mx.eval(rope(q, k, positions)),
    }


def table(shape, dtypes, reps):
    import mlx.core as mx

    load = os.getloadavg()[0]
    lines = [f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
             f"{os.cpu_count()} CPUs, MLX {mx.__version__} on {mx.default_device()}; load average {load:.1f} at the "
             f"start. Shape {list(shape)} (q and k each), positions arange({shape[-2]}); best of {reps} round-robin "
             f"runs, one process.", ""]
    for dtype_name in dtypes:
        best = timed_group(paths(shape, dtype_name), reps)
        anchor, fast = best["mx.compile x + 1 on q, k (anchor)"], best["mx.fast.rope, eager"]
        lines += [f"**{dtype_name}**", "", "| path | time (ms) | x of own `x + 1` | x of `mx.fast.rope` |",
                  "|---|---:|---:|---:|"]
        for label, seconds in best.items():
            lines.append(f"| {label} | {seconds * 1e3:.1f} | {anchor / seconds:.2f} | {fast / seconds:.2f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=4, default=[4, 16, 2048, 128])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--write", action="store_true", help="rewrite the bench_mlx_rope part of docs/performance.md")
    args = parser.parse_args(argv)
    text = table(args.shape, args.dtypes, args.reps)
    print(text)
    if args.write:
        write_between_markers(DOC, "bench_mlx_rope", text)


if __name__ == "__main__":
    main()
