"""RoPE throughput per backend, eager and compiled, as a fraction of the machine's copy bandwidth.

    python benchmarks/bench_rope.py [--shape 4 16 2048 128] [--dtypes float32 bfloat16] [--reps 10] [--markdown]

q and k are `[batch, heads, seq, head_dim]` with positions `arange(seq)` (`[seq]`, broadcast over
batch and heads). Every path rotates both q and k, so its minimum traffic is one read and one
write of q and k; the reference is a PyTorch `copy_` of q and k into existing buffers, which moves
exactly those bytes. A path's score is `copy time / path time`: 1.0 means it runs at copy speed.

Paths:
  hf apply_rotary_pos_emb      transformers' Llama `apply_rotary_pos_emb` with cos/sin precomputed once
                               (`[1, seq, head_dim]`, in the input dtype, as LlamaRotaryEmbedding returns)
  posenc_torch apply_rope      the function: builds its half-size cos/sin per call (float64 angle reduction
                               over `[seq, head_dim/2]`), then rotates q and k
  posenc_torch RotaryEmbedding the module with `max_len=2 * seq`: gathers the cached float32 table by
                               positions (eager: one host read decides cache vs compute; compiled: torch.cond)
  posenc_tf / posenc_jax       `apply_rope` eager and under tf.function(jit_compile=True) / jax.jit
Compiled torch paths use Inductor (`torch.compile(fullgraph=True)`); compile time is excluded.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def timed(fn, reps):
    fn()  # warm-up (and compilation)
    fn()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def torch_paths(shape, dtype_name):
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    import posenc_torch as pt

    dtype = getattr(torch, dtype_name)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(shape, generator=gen).to(dtype)
    k = torch.randn(shape, generator=gen).to(dtype)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    seq, head_dim = shape[-2], shape[-1]
    positions = torch.arange(seq)
    cos, sin = pt.rope_cos_sin(positions[None], head_dim, dtype=dtype)
    module = pt.RotaryEmbedding(head_dim, max_len=2 * seq)

    def copy():
        q_out.copy_(q)
        k_out.copy_(k)

    def function(q, k, positions):
        return pt.apply_rope(q, positions), pt.apply_rope(k, positions)

    def hf(q, k, cos, sin):
        return apply_rotary_pos_emb(q, k, cos, sin)

    def rotary(q, k, positions):
        return module(q, positions), module(k, positions)

    compile_ = lambda f: torch.compile(f, fullgraph=True)  # noqa: E731
    paths = {
        "copy_ of q, k (reference)": copy,
        "hf apply_rotary_pos_emb, eager": lambda: hf(q, k, cos, sin),
        "hf apply_rotary_pos_emb, torch.compile": (lambda f: lambda: f(q, k, cos, sin))(compile_(hf)),
        "posenc_torch apply_rope, eager": lambda: function(q, k, positions),
        "posenc_torch apply_rope, torch.compile": (lambda f: lambda: f(q, k, positions))(compile_(function)),
        "posenc_torch RotaryEmbedding(max_len), eager": lambda: rotary(q, k, positions),
        "posenc_torch RotaryEmbedding(max_len), torch.compile": (lambda f: lambda: f(q, k, positions))(
            compile_(rotary)),
    }
    return paths


def tf_paths(shape, dtype_name):
    import tensorflow as tf

    import posenc_tf as ptf

    dtype = getattr(tf, dtype_name)
    q = tf.cast(tf.random.stateless_normal(shape, seed=(0, 1)), dtype)
    k = tf.cast(tf.random.stateless_normal(shape, seed=(0, 2)), dtype)
    positions = tf.range(shape[-2])

    def function(q, k, positions):
        return ptf.apply_rope(q, positions), ptf.apply_rope(k, positions)

    xla = tf.function(function, jit_compile=True)
    # TensorFlow's CPU kernels run synchronously in eager mode and at the end of a tf.function call.
    return {
        "posenc_tf apply_rope, eager": lambda: function(q, k, positions),
        "posenc_tf apply_rope, tf.function(jit_compile=True)": lambda: xla(q, k, positions),
    }


def jax_paths(shape, dtype_name):
    import jax
    import jax.numpy as jnp

    import posenc_jax as pj

    dtype = getattr(jnp, dtype_name)
    key_q, key_k = jax.random.split(jax.random.PRNGKey(0))
    q = jax.random.normal(key_q, shape).astype(dtype)
    k = jax.random.normal(key_k, shape).astype(dtype)
    positions = jnp.arange(shape[-2])

    def function(q, k, positions):
        return pj.apply_rope(q, positions), pj.apply_rope(k, positions)

    jitted = jax.jit(function)
    return {
        "posenc_jax apply_rope, eager": lambda: jax.block_until_ready(function(q, k, positions)),
        "posenc_jax apply_rope, jax.jit": lambda: jax.block_until_ready(jitted(q, k, positions)),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=4, default=[4, 16, 2048, 128])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args(argv)
    shape = tuple(args.shape)

    import torch

    rows = []
    for dtype_name in args.dtypes:
        paths = torch_paths(shape, dtype_name)
        itemsize = torch.tensor([], dtype=getattr(torch, dtype_name)).element_size()
        moved = 2 * 2 * int(np.prod(shape)) * itemsize  # read + write of q and k
        reference = timed(paths.pop("copy_ of q, k (reference)"), args.reps)
        rows.append((dtype_name, "copy_ of q, k (reference)", reference, moved / reference / 1e9, 1.0))
        for builder in (lambda: paths, lambda: tf_paths(shape, dtype_name), lambda: jax_paths(shape, dtype_name)):
            for label, fn in builder().items():
                seconds = timed(fn, args.reps)
                rows.append((dtype_name, label, seconds, moved / seconds / 1e9, reference / seconds))
                print(f"{dtype_name:9s} {label:58s} {seconds * 1e3:8.2f} ms  {reference / seconds:5.2f} x copy",
                      flush=True)

    if args.markdown:
        print()
        print(f"Shape {list(shape)} (q and k each), positions arange({shape[-2]}); {platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} CPUs; torch {torch.__version__}; median of {args.reps} runs.")
        print()
        print("| dtype | path | time (ms) | effective GB/s | fraction of copy bandwidth |")
        print("|---|---|---|---|---|")
        for dtype_name, label, seconds, gbps, fraction in rows:
            print(f"| {dtype_name} | {label} | {seconds * 1e3:.1f} | {gbps:.1f} | {fraction:.2f} |")


if __name__ == "__main__":
    main()
