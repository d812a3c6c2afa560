"""RoPE as a share of measured copy bandwidth on the accelerator (run by benchmarks/gpu.sh; also runs on a CPU).

    python benchmarks/bench_gpu.py [--out gpu-rope.md] [--small] [--reps 20] [--dtypes float32 bfloat16]

For each shape (q and k each; default the Llama-8B prefill `[1, 32, 8192, 128]` and a batch
`[8, 32, 2048, 128]`, `--small` for a quick CPU test) and dtype, the reference is a device-to-device
copy of q and k into existing buffers (`torch.Tensor.copy_`: one read and one write of both, the
least any RoPE moves). Each RoPE path's share of copy bandwidth is copy time / path time: torch
`apply_rope` compiled with Inductor (allocating, and `out=` into existing buffers) and eager, JAX
`jax.jit(apply_rope)` and TF `tf.function(jit_compile=True)(apply_rope)`. Each framework runs on its own
default device, which the table names: a CPU-only build (the pinned `tensorflow-cpu`, a JAX without
CUDA plugins) reports CPU numbers, which are not compared with the GPU copy. Timing: best of `--reps`
after warm-up (compilation excluded), with a device synchronisation (CUDA events for torch,
`block_until_ready` for JAX, `.numpy()` of one element for TF) around every call.

Goal on a GPU: compiled RoPE >= 80 % of the measured copy bandwidth (docs/performance.md).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SHAPES = ([1, 32, 8192, 128], [8, 32, 2048, 128])
SMALL = ([1, 4, 512, 64], [2, 4, 256, 64])
GOAL = 0.8


def best_of(fn, sync, reps, warmup=3):
    for _ in range(warmup):
        fn()
    sync()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def torch_rows(shape, dtype_name, reps):
    import torch

    import posenc_torch as pt

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, dtype_name)
    gen = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(shape, generator=gen, device=device).to(dtype)
    k = torch.randn(shape, generator=gen, device=device).to(dtype)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    positions = torch.arange(shape[-2], device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    name = f"gpu ({torch.cuda.get_device_name()})" if device == "cuda" else "cpu"

    def copy():
        q_out.copy_(q)
        k_out.copy_(k)

    def function(q, k, positions):
        return pt.apply_rope(q, positions), pt.apply_rope(k, positions)

    def into(q, k, positions, q_out, k_out):
        return pt.apply_rope(q, positions, out=q_out), pt.apply_rope(k, positions, out=k_out)

    compiled = torch.compile(function, fullgraph=True)
    compiled_into = torch.compile(into, fullgraph=True)
    rows = [("torch copy_ of q, k (the reference)", name, best_of(copy, sync, reps))]
    rows.append(("torch apply_rope, torch.compile", name, best_of(lambda: compiled(q, k, positions), sync, reps)))
    rows.append(("torch apply_rope(out=), torch.compile", name,
                 best_of(lambda: compiled_into(q, k, positions, q_out, k_out), sync, reps)))
    rows.append(("torch apply_rope, eager", name, best_of(lambda: function(q, k, positions), sync, reps)))
    return rows


def jax_rows(shape, dtype_name, reps):
    import jax
    import jax.numpy as jnp

    import posenc_jax as pj

    device = jax.devices()[0]
    key_q, key_k = jax.random.split(jax.random.PRNGKey(0))
    q = jax.random.normal(key_q, shape).astype(getattr(jnp, dtype_name))
    k = jax.random.normal(key_k, shape).astype(getattr(jnp, dtype_name))
    positions = jnp.arange(shape[-2])
    jitted = jax.jit(lambda q, k, p: (pj.apply_rope(q, p), pj.apply_rope(k, p)))
    plus = jax.jit(lambda q, k: (q + 1, k + 1))
    name = "cpu" if device.platform == "cpu" else f"gpu ({getattr(device, 'device_kind', device.platform)})"
    return [("jax x + 1 on q, k, jax.jit", name, best_of(lambda: jax.block_until_ready(plus(q, k)), lambda: None, reps)),
            ("jax apply_rope, jax.jit", name,
             best_of(lambda: jax.block_until_ready(jitted(q, k, positions)), lambda: None, reps))]


def tf_rows(shape, dtype_name, reps):
    import tensorflow as tf

    import posenc_tf as ptf

    gpus = tf.config.list_physical_devices("GPU")
    q = tf.cast(tf.random.stateless_normal(shape, seed=(0, 1)), getattr(tf, dtype_name))
    k = tf.cast(tf.random.stateless_normal(shape, seed=(0, 2)), getattr(tf, dtype_name))
    positions = tf.range(shape[-2])
    xla = tf.function(lambda q, k, p: (ptf.apply_rope(q, p), ptf.apply_rope(k, p)), jit_compile=True)
    plus = tf.function(lambda q, k: (q + 1, k + 1), jit_compile=True)
    name = "gpu" if gpus else "cpu"  # the pinned tensorflow-cpu has no GPU

    def done(outputs):  # reading one element waits for the computation, without copying the outputs
        outputs[0][(0,) * len(shape)].numpy()

    return [("tf x + 1 on q, k, tf.function(jit_compile=True)", name, best_of(lambda: done(plus(q, k)), lambda: None, reps)),
            ("tf apply_rope, tf.function(jit_compile=True)", name,
             best_of(lambda: done(xla(q, k, positions)), lambda: None, reps))]


def run(shapes, dtypes, reps, frameworks):
    results = []
    for shape in shapes:
        for dtype_name in dtypes:
            itemsize = 4 if dtype_name == "float32" else 2
            moved = 2 * 2 * int(np.prod(shape)) * itemsize
            rows = []
            for framework, builder in (("torch", torch_rows), ("jax", jax_rows), ("tf", tf_rows)):
                if framework not in frameworks:
                    continue
                try:
                    rows += builder(shape, dtype_name, reps)
                except ImportError as error:
                    print(f"skipping {framework}: {error}", file=sys.stderr)
            for label, device, seconds in rows:
                print(f"{str(shape):20s} {dtype_name:9s} {label:50s} {device:30s} {seconds * 1e3:9.3f} ms", flush=True)
            results.append((shape, dtype_name, moved, rows))
    return results


def markdown(results, reps):
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"RoPE against copy bandwidth, {when}, {platform.node()} ({os.cpu_count()} CPUs); best of {reps} runs.", "",
             "| shape (q and k each) | dtype | path | device | time (ms) | GB/s | share of copy bandwidth |",
             "|---|---|---|---|---:|---:|---:|"]
    verdicts = []
    for shape, dtype_name, moved, rows in results:
        copy = next((s for label, _, s in rows if label.startswith("torch copy_")), None)
        copy_device = next((d for label, d, _ in rows if label.startswith("torch copy_")), None)
        for label, device, seconds in rows:
            same = copy is not None and device.split()[0] == copy_device.split()[0]  # gpu vs cpu
            share = f"{copy / seconds:.2f}" if same else "(other device)"
            lines.append(f"| {shape} | {dtype_name} | {label} | {device} | {seconds * 1e3:.3f} | {moved / seconds / 1e9:.1f} "
                         f"| {share} |")
            if same and "compile" in label:
                verdicts.append(f"{shape} {dtype_name} {label}: {copy / seconds:.0%} of copy bandwidth "
                                f"({'meets' if copy / seconds >= GOAL else 'misses'} the {GOAL:.0%} goal on {device})")
    lines += ["", *[f"- {v}" for v in verdicts]]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small shapes (a quick test, e.g. on a CPU)")
    parser.add_argument("--shapes", type=int, nargs="+", help="shapes as groups of four integers")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--frameworks", nargs="+", default=["torch", "jax", "tf"])
    parser.add_argument("--out", help="write the Markdown table here")
    args = parser.parse_args(argv)
    if args.shapes:
        if len(args.shapes) % 4:
            parser.error("--shapes takes groups of four integers")
        shapes = [args.shapes[i:i + 4] for i in range(0, len(args.shapes), 4)]
    else:
        shapes = SMALL if args.small else SHAPES
    results = run(shapes, args.dtypes, args.reps, set(args.frameworks))
    text = markdown(results, args.reps)
    print()
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
