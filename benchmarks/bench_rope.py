"""RoPE side by side: posenc per backend against transformers, rotary-embedding-torch and copy bandwidth.

    python benchmarks/bench_rope.py --write     # times everything in one process, rewrites docs/performance.md's RoPE tables
    python benchmarks/bench_rope.py [--shape 4 16 2048 128] [--dtypes float32 bfloat16] [--reps 10] [--only torch tf jax decode]

Prints every target with its measured ratio and exits with status 1 when one is missed (the tables and
the targets are written with `--write` either way).

q and k are `[batch, heads, seq, head_dim]` with positions `arange(seq)` broadcast over batch and
heads. Every path rotates both q and k, so the least it can move is one read and one write of q
and k; the reference is a PyTorch `copy_` of q and k into existing buffers, which moves exactly
that. Timing: the paths of one framework run round robin (rep 1 of every path, then rep 2, ...), and
each keeps its best of `--reps` (the machine is shared; load only adds time), so a burst of load
lands on every path of a ratio alike. Columns: best time, effective GB/s (those bytes / time), share
of copy bandwidth (copy time / path time), ratio to transformers' eager `apply_rotary_pos_emb` (its
time / path time), and for TF and JAX the ratio to their own allocating elementwise op (`x + 1` on q
and k, compiled), each measured with the same position dtype and output handling.

Paths (compiled torch paths: Inductor, `torch.compile(fullgraph=True)`; compile time excluded):
  copy_ / clone               copy into existing buffers (1.0) / allocating `clone` (fresh output pages)
  hf apply_rotary_pos_emb     transformers' Llama function, cos/sin precomputed once in the input dtype
  rotary-embedding-torch      `RotaryEmbedding(head_dim).rotate_queries_or_keys` (its frequency cache on)
  posenc_torch apply_rope     the function (cos/sin gathered from its spec table); `out=` writes into
                              preallocated buffers
  posenc_tf / posenc_jax      `apply_rope` eager and under tf.function(jit_compile=True) / jax.jit, with
                              int32 and int64 positions, the output left on the device (a TF/JAX
                              array) or brought to the host (`.numpy()` / `np.asarray`), each against
                              the framework's own compiled `x + 1` handled the same way
Decode: q, k `[batch, heads, 1, head_dim]` for batch 1 and 32, one new token per step at a KV-cache
offset held in a tensor (per row: offset + row), inside the 4096-row table (offset 1000) and beyond it
(offset 5000, the angles computed); transformers' path is its `LlamaRotaryEmbedding` module called
with the position ids, then `apply_rotary_pos_emb`. The compiled step is counted with a Dynamo
CompileCounter across all offsets of a batch size, plus one call at position 100000.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np
from _timing import timed_group, write_between_markers

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parents[1]

DOC = ROOT / "docs" / "performance.md"
DECODE_OFFSETS = {"inside the table": 1000, "beyond the table": 5000}
DECODE_BATCHES = (1, 32)
COPY, CLONE, HF = ("copy_ of q, k into existing buffers", "clone of q, k (allocating)", "hf apply_rotary_pos_emb, eager")
TORCH_EAGER, TORCH_JIT = "posenc_torch apply_rope, eager", "posenc_torch apply_rope, torch.compile"
OUT_EAGER, OUT_JIT = "posenc_torch apply_rope(out=), eager", "posenc_torch apply_rope(out=), torch.compile"


def _compile(f):
    import torch

    return torch.compile(f, fullgraph=True)


def torch_paths(shape, dtype_name):
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    import posenc_torch as pt

    dtype = getattr(torch, dtype_name)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(shape, generator=gen).to(dtype)
    k = torch.randn(shape, generator=gen).to(dtype)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    positions = torch.arange(shape[-2])
    cos, sin = pt.rope_cos_sin(positions[None], shape[-1], dtype=dtype)

    def copy():
        q_out.copy_(q)
        k_out.copy_(k)

    def hf(q, k, cos, sin):
        return apply_rotary_pos_emb(q, k, cos, sin)

    def function(q, k, positions):
        return pt.apply_rope(q, positions), pt.apply_rope(k, positions)

    def into(q, k, positions, q_out, k_out):
        return pt.apply_rope(q, positions, out=q_out), pt.apply_rope(k, positions, out=k_out)

    hf_c, function_c, into_c = _compile(hf), _compile(function), _compile(into)
    paths = {
        COPY: copy,
        CLONE: lambda: (q.clone(), k.clone()),
        HF: lambda: hf(q, k, cos, sin),
        "hf apply_rotary_pos_emb, torch.compile": lambda: hf_c(q, k, cos, sin),
    }
    try:
        from rotary_embedding_torch import RotaryEmbedding as LucidRotary
    except ImportError:
        pass
    else:
        lucid = LucidRotary(dim=shape[-1])
        paths["rotary-embedding-torch, eager"] = lambda: (lucid.rotate_queries_or_keys(q), lucid.rotate_queries_or_keys(k))
    paths.update({
        TORCH_EAGER: lambda: function(q, k, positions),
        TORCH_JIT: lambda: function_c(q, k, positions),
        OUT_EAGER: lambda: into(q, k, positions, q_out, k_out),
        OUT_JIT: lambda: into_c(q, k, positions, q_out, k_out),
    })
    return paths


def _own_label(framework, host):
    where = "on the host (.numpy())" if framework == "tf" else "on the host (np.asarray)"
    return f"{framework} x + 1 on q, k, jitted, output {where if host else 'on the device'}"


def _jit_label(framework, positions_dtype, host):
    jit = "tf.function(jit_compile=True)" if framework == "tf" else "jax.jit"
    where = "host" if host else "device"
    return f"posenc_{framework} apply_rope, {jit}, {positions_dtype} positions, output on the {where}"


def tf_paths(shape, dtype_name):
    import tensorflow as tf

    import posenc_tf as ptf

    dtype = getattr(tf, dtype_name)
    q = tf.cast(tf.random.stateless_normal(shape, seed=(0, 1)), dtype)
    k = tf.cast(tf.random.stateless_normal(shape, seed=(0, 2)), dtype)

    def function(q, k, positions):
        return ptf.apply_rope(q, positions), ptf.apply_rope(k, positions)

    xla = tf.function(function, jit_compile=True)
    plus = tf.function(lambda q, k: (q + 1, k + 1), jit_compile=True)

    def host(outputs):
        return [t.numpy() for t in outputs]

    # TensorFlow's CPU kernels run synchronously in eager mode and at the end of a tf.function call.
    paths = {_own_label("tf", False): lambda: plus(q, k), _own_label("tf", True): lambda: host(plus(q, k))}
    for name in ("int32", "int64"):
        positions = tf.range(shape[-2], dtype=getattr(tf, name))
        paths[_jit_label("tf", name, False)] = lambda p=positions: xla(q, k, p)
        paths[_jit_label("tf", name, True)] = lambda p=positions: host(xla(q, k, p))
    positions = tf.range(shape[-2], dtype=tf.int64)
    paths["posenc_tf apply_rope, eager, int64 positions"] = lambda: function(q, k, positions)
    return paths


def jax_paths(shape, dtype_name):
    import jax

    jax.config.update("jax_enable_x64", True)  # int64 positions exist only with x64; q, k keep their dtype
    import jax.numpy as jnp

    import posenc_jax as pj

    dtype = getattr(jnp, dtype_name)
    key_q, key_k = jax.random.split(jax.random.PRNGKey(0))
    q = jax.random.normal(key_q, shape, dtype=jnp.float32).astype(dtype)
    k = jax.random.normal(key_k, shape, dtype=jnp.float32).astype(dtype)

    def function(q, k, positions):
        return pj.apply_rope(q, positions), pj.apply_rope(k, positions)

    jitted = jax.jit(function)
    plus = jax.jit(lambda q, k: (q + 1, k + 1))

    def host(outputs):
        return [np.asarray(t) for t in outputs]

    paths = {_own_label("jax", False): lambda: jax.block_until_ready(plus(q, k)),
             _own_label("jax", True): lambda: host(plus(q, k))}
    for name in ("int32", "int64"):
        positions = jnp.arange(shape[-2], dtype=getattr(jnp, name))
        label = str(positions.dtype)
        paths[_jit_label("jax", label, False)] = lambda p=positions: jax.block_until_ready(jitted(q, k, p))
        paths[_jit_label("jax", label, True)] = lambda p=positions: host(jitted(q, k, p))
    positions = jnp.arange(shape[-2], dtype=jnp.int32)
    paths["posenc_jax apply_rope, eager, int32 positions"] = lambda: jax.block_until_ready(function(q, k, positions))
    return paths


def decode_rows(shape, steps):
    """One new token per step at a KV-cache offset, per batch size and offset regime.

    Returns `(rows, compiles)`: rows `(batch, regime, label, seconds)` and, per batch size, the number
    of graphs Dynamo compiled for the posenc step over every offset of both regimes and position 100000.
    """
    import torch
    import torch._dynamo
    import torch._dynamo.testing
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    import posenc_torch as pt

    _, heads, _, head_dim = shape
    hf_rope = LlamaRotaryEmbedding(LlamaConfig(head_dim=head_dim, hidden_size=heads * head_dim,
                                               num_attention_heads=heads, max_position_embeddings=8192))

    def posenc(q, k, positions):
        return pt.apply_rope(q, positions), pt.apply_rope(k, positions)

    def hf(q, k, position_ids):
        cos, sin = hf_rope(q, position_ids)
        return apply_rotary_pos_emb(q, k, cos, sin)

    rows, compiles = [], {}
    for batch in DECODE_BATCHES:
        gen = torch.Generator().manual_seed(batch)
        q, k = (torch.randn(batch, heads, 1, head_dim, generator=gen) for _ in range(2))
        torch._dynamo.reset()
        counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
        compiled = torch.compile(posenc, fullgraph=True, backend=counter)
        rows_of_batch = torch.arange(batch)
        for regime, start in DECODE_OFFSETS.items():
            # each row of the batch has its own cache length; the offsets are data, as in a server
            offsets = [start + i + rows_of_batch for i in range(steps + 3)]
            ids = [o[:, None] for o in offsets]  # HF position_ids [batch, 1]
            positions = [o[:, None, None] for o in offsets]  # posenc: broadcasting against [batch, heads, 1]
            paths = {"hf LlamaRotaryEmbedding + apply_rotary_pos_emb, eager": (hf, ids),
                     "posenc_torch apply_rope, eager": (posenc, positions),
                     "posenc_torch apply_rope, torch.compile": (compiled, positions)}
            best = {label: float("inf") for label in paths}
            for fn, inputs in paths.values():
                fn(q, k, inputs[0])  # warm-up (and compilation)
            for i in range(1, steps + 3):  # round robin: step i of every path, then step i + 1
                for label, (fn, inputs) in paths.items():
                    start_time = time.perf_counter()
                    fn(q, k, inputs[i])
                    best[label] = min(best[label], time.perf_counter() - start_time)
            rows += [(batch, regime, label, seconds) for label, seconds in best.items()]
        compiled(q, k, torch.full((batch, 1, 1), 100_000))  # outside the table: torch.cond, no recompile
        compiles[batch] = counter.frame_count
    return rows, compiles


class Targets:
    """Each target's measured value, whether it is met, and the printable line."""

    def __init__(self):
        self.rows = []

    def add(self, name, shown, met):
        self.rows.append((name, shown, bool(met)))

    @property
    def missed(self):
        return [row for row in self.rows if not row[2]]


def bulk_targets(targets, dtype_name, times):
    t = times.get
    if t(TORCH_JIT) and t(CLONE):
        ratio = t(TORCH_JIT) / t(CLONE)
        targets.add(f"{dtype_name}: torch compiled apply_rope <= 1.3x an allocating clone", f"{ratio:.2f}x clone",
                    ratio <= 1.3)
    if t(TORCH_EAGER) and t(HF):
        ratio = t(HF) / t(TORCH_EAGER)
        targets.add(f"{dtype_name}: torch eager >= 2x faster than HF eager", f"{ratio:.3f}x", ratio >= 2)
    for label, mode in ((OUT_EAGER, "eager"), (OUT_JIT, "compiled")):
        if t(label) and t(COPY):
            share = t(COPY) / t(label)
            targets.add(f"{dtype_name}: out= ({mode}) >= 60 % of copy bandwidth", f"{share:.0%}", share >= 0.6)
    for label, seconds in times.items():
        match = re.match(r"posenc_(tf|jax) apply_rope, .*, (\w+) positions, output on the (host|device)", label)
        if match:
            framework, positions, where = match.groups()
            ratio = seconds / times[_own_label(framework, where == "host")]
            targets.add(f"{dtype_name}: {framework} jitted apply_rope <= 1.3x its own jitted x + 1, {positions} "
                        f"positions, output on the {where}", f"{ratio:.2f}x", ratio <= 1.3)


def decode_targets(targets, rows, compiles):
    by = {(batch, regime, label): seconds for batch, regime, label, seconds in rows}
    for batch, regime, label, seconds in rows:
        if label == "posenc_torch apply_rope, eager":
            hf = by[(batch, regime, "hf LlamaRotaryEmbedding + apply_rotary_pos_emb, eager")]
            ratio = seconds / hf
            targets.add(f"decode batch {batch}, {regime}: eager posenc at least as fast as HF (time ratio <= 1)",
                        f"{ratio:.2f}x HF's time ({seconds * 1e6:.0f} vs {hf * 1e6:.0f} us)", ratio <= 1.0)
    for batch, count in compiles.items():
        targets.add(f"decode batch {batch}: compiled, no recompiles across offsets",
                    f"{count} graph(s) for {len(DECODE_OFFSETS)} offset ranges + 100000", count == 1)


def machine():
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{platform.machine()} {cpu}, {os.cpu_count()} CPUs, no GPU; load average {load:.1f} at the start"


def run(shape, dtypes, reps, only):
    import torch

    tables, targets = {}, Targets()
    builders = {"torch": torch_paths, "tf": tf_paths, "jax": jax_paths}
    for dtype_name in dtypes:
        itemsize = torch.tensor([], dtype=getattr(torch, dtype_name)).element_size()
        moved = 2 * 2 * int(np.prod(shape)) * itemsize  # read + write of q and k
        times = {}
        for name, builder in builders.items():
            if name not in only:
                continue
            try:
                paths = builder(shape, dtype_name)
            except ImportError as error:
                print(f"skipping {name}: {error}", file=sys.stderr)
                continue
            group = timed_group(paths, reps)
            for label, seconds in group.items():
                print(f"{dtype_name:9s} {label:95s} {seconds * 1e3:8.1f} ms", flush=True)
            times.update(group)
        tables[dtype_name] = (moved, times)
        bulk_targets(targets, dtype_name, times)
    decode, compiles = ([], {})
    if "decode" in only:
        decode, compiles = decode_rows(shape, max(reps, 30))
        for batch, regime, label, seconds in decode:
            print(f"decode batch {batch:2d} {regime:17s} {label:55s} {seconds * 1e6:8.0f} us", flush=True)
        print(f"decode compiled graphs per batch size: {compiles}")
        decode_targets(targets, decode, compiles)
    return tables, decode, compiles, targets


def _own_reference(label):
    match = re.match(r"posenc_(tf|jax) apply_rope, (.*)", label)
    if not match:
        return None
    return _own_label(match.group(1), "output on the host" in label)


def markdown(shape, reps, tables, decode, compiles, targets):
    import torch

    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"Run {when} on {machine()}; torch {torch.__version__}. Shape {list(shape)} (q and k each), "
             f"positions arange({shape[-2]}); best of {reps} round-robin runs, one process.", ""]
    for dtype_name, (moved, times) in tables.items():
        if not times:
            continue
        lines += [f"**{dtype_name}** ({moved / 2**20:.0f} MiB moved per call)", "",
                  "| path | time (ms) | GB/s | share of copy bandwidth | x faster than HF eager | x faster than own `x + 1` |",
                  "|---|---:|---:|---:|---:|---:|"]
        for label, seconds in times.items():
            own = _own_reference(label)
            ratio = f"{times[own] / seconds:.2f}" if own in times else ""
            share = f"{times[COPY] / seconds:.2f}" if COPY in times else ""
            vs_hf = f"{times[HF] / seconds:.2f}" if HF in times else ""
            lines.append(f"| {label} | {seconds * 1e3:.1f} | {moved / seconds / 1e9:.1f} | {share} | {vs_hf} | {ratio} |")
        lines.append("")
    if decode:
        lines += [f"**Decode step** (q, k `[batch, {shape[1]}, 1, {shape[3]}]` float32, one token per step, each row "
                  "at its own KV-cache offset held in a tensor)", "",
                  "| batch | offsets | path | time per step (us) |", "|---:|---|---|---:|"]
        lines += [f"| {batch} | {regime} ({DECODE_OFFSETS[regime]} + step + row) | {label} | {seconds * 1e6:.0f} |"
                  for batch, regime, label, seconds in decode]
        lines += ["", "Compiled decode graphs per batch size, after every offset of both ranges and one call at "
                  "position 100000: " + ", ".join(f"batch {b}: **{n}**" for b, n in compiles.items()) + ".", ""]
    lines += ["**Targets** (ratios from the run above)", "", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {name} | {value} | {'yes' if met else '**no**'} |" for name, value, met in targets.rows]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=4, default=[4, 16, 2048, 128])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--only", nargs="+", default=["torch", "tf", "jax", "decode"],
                        choices=["torch", "tf", "jax", "decode"], help="sections to run (default: all)")
    parser.add_argument("--write", action="store_true", help="rewrite the tables in docs/performance.md")
    args = parser.parse_args(argv)
    shape = tuple(args.shape)
    tables, decode, compiles, targets = run(shape, args.dtypes, args.reps, set(args.only))
    text = markdown(shape, args.reps, tables, decode, compiles, targets)
    print()
    print(text)
    for name, value, met in targets.rows:
        print(f"{'met   ' if met else 'MISSED'} {name}: {value}")
    if args.write:
        write_between_markers(DOC, "bench_rope", text)
    if targets.missed:
        print(f"{len(targets.missed)} of {len(targets.rows)} targets missed", file=sys.stderr)
        return 1
    print(f"all {len(targets.rows)} targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
