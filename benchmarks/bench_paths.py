"""Every newer RoPE path against plain 1-D RoPE of the same backend, mode and size.

    python benchmarks/bench_paths.py --write    # all backends and modes, rewrites docs/performance.md's paths table
    python benchmarks/bench_paths.py [--shape 4 16 2048 128] [--dtype float32] [--reps 5] [--modes torch-eager torch-jit tf-jit jax-jit]

Prints each path's time ratio to its plain reference and exits with status 1 when one exceeds 1.3
(the reasons for the known misses are in docs/performance.md). q and k are `[batch, heads, seq, head_dim]`;
every path and its reference move the same tensors:

  multi-axis (mrope)   `apply_rope(x, positions [3, seq], mrope_section=[s/8, 3s/16, 3s/16] of r/2)`
                       (Qwen2-VL's [16, 24, 24] at head_dim 128) vs `apply_rope(x, arange(seq))`
  per-layer schedule   Gemma 3's two layer kinds from `rope_schedule_from_hf_config` (sliding: base
                       1e4; global: base 1e6, linear x8), each layer `apply_rope(x, p, **entry)`; time
                       per layer vs `apply_rope(x, p)`
  MLA                  `apply_mla_rope(q [.., nope + rope], k_pe [b, 1, seq, rope], p)` with DeepSeek-V3's
                       nope 128 / rope 64 vs `apply_rope` of the same q (first 64 channels) and k_pe
  packed               `positions_from_cu_seqlens` of `batch` documents of `seq` tokens + `apply_rope`
                       on `[1, heads, batch * seq, head_dim]` vs `apply_rope(x [batch, ...], arange(seq))`
  xPos                 `apply_xpos(q, p, kind="query")`, `apply_xpos(k, p, kind="key")` vs interleaved
                       `apply_rope` (xPos's layout)

Timing as benchmarks/bench_rope.py (the shared `benchmarks/_timing.py`): round robin over the paths of one backend and mode, best of
`--reps`; compile time excluded. JAX/TF outputs stay on the device (blocked on).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path

import numpy as np
from _timing import timed_group, write_between_markers

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parents[1]

DOC = ROOT / "docs" / "performance.md"
MODES = ("torch-eager", "torch-jit", "tf-jit", "jax-jit")
GEMMA3 = {"model_type": "gemma3_text", "num_hidden_layers": 2, "sliding_window_pattern": 2,
          "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                              "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}}
MLA_NOPE, MLA_ROPE = 128, 64  # DeepSeek-V3 qk_nope_head_dim / qk_rope_head_dim
# (path, its reference): the ratio is path time / reference time
PAIRS = (("mrope", "plain"), ("schedule", "plain"), ("mla", "mla reference"), ("packed", "plain"),
         ("xpos", "plain interleaved"))
LABELS = {"plain": "apply_rope, 1-D positions", "mrope": "apply_rope, mrope_section (3 axes)",
          "schedule": "per-layer schedule (Gemma 3 sliding + global), per layer",
          "mla": "apply_mla_rope (nope 128 + rope 64, k_pe one head)",
          "mla reference": "apply_rope of the same q (64 channels) and k_pe",
          "packed": "positions_from_cu_seqlens + apply_rope, packed [1, h, b*s, d]",
          "xpos": "apply_xpos (query, key)", "plain interleaved": "apply_rope, layout interleaved"}


def inputs(shape, dtype):
    """NumPy inputs of every path (converted per backend)."""
    batch, heads, seq, head_dim = shape
    rng = np.random.default_rng(0)
    normal = lambda *s: rng.standard_normal(s, dtype=np.float32)  # noqa: E731
    half = head_dim // 2
    section = [half // 4, (half - half // 4) // 2]
    section.append(half - sum(section))
    grid = int(np.sqrt(seq)) or 1
    return {
        "q": normal(*shape), "k": normal(*shape), "positions": np.arange(seq),
        "positions3": np.stack([np.arange(seq), np.arange(seq) // grid, np.arange(seq) % grid]),
        "section": section,
        "q_mla": normal(batch, heads, seq, MLA_NOPE + MLA_ROPE), "k_pe": normal(batch, 1, seq, MLA_ROPE),
        "q_packed": normal(1, heads, batch * seq, head_dim), "k_packed": normal(1, heads, batch * seq, head_dim),
        "cu_seqlens": np.arange(batch + 1) * seq, "dtype": dtype,
    }


def path_functions(m, section, schedule, total):
    """The paths as functions of (framework) tensors, for any backend module `m`."""
    entries = [entry for entry in schedule if entry is not None]

    def plain(q, k, p):
        return m.apply_rope(q, p), m.apply_rope(k, p)

    def mrope(q, k, p3):
        return m.apply_rope(q, p3, mrope_section=section), m.apply_rope(k, p3, mrope_section=section)

    def per_layer(q, k, p):
        return [(m.apply_rope(q, p, **entry), m.apply_rope(k, p, **entry)) for entry in entries]

    def mla(q, k_pe, p):
        return m.apply_mla_rope(q, k_pe, p, qk_nope_head_dim=MLA_NOPE, rotary_dim=MLA_ROPE)

    def mla_reference(q, k_pe, p):
        return m.apply_rope(q, p, rotary_dim=MLA_ROPE), m.apply_rope(k_pe, p)

    def packed(q, k, cu):
        p = m.positions_from_cu_seqlens(cu, total=total)
        return m.apply_rope(q, p), m.apply_rope(k, p)

    def xpos(q, k, p):
        return m.apply_xpos(q, p, kind="query"), m.apply_xpos(k, p, kind="key")

    def plain_interleaved(q, k, p):
        return m.apply_rope(q, p, layout="interleaved"), m.apply_rope(k, p, layout="interleaved")

    return {"plain": (plain, ("q", "k", "positions")), "mrope": (mrope, ("q", "k", "positions3")),
            "schedule": (per_layer, ("q", "k", "positions")), "mla": (mla, ("q_mla", "k_pe", "positions")),
            "mla reference": (mla_reference, ("q_mla", "k_pe", "positions")),
            "packed": (packed, ("q_packed", "k_packed", "cu_seqlens")), "xpos": (xpos, ("q", "k", "positions")),
            "plain interleaved": (plain_interleaved, ("q", "k", "positions"))}, len(entries)


def backend_paths(mode, data):
    """`{name: zero-argument callable}` for one backend and mode, and the schedule's layer count."""
    import posenc_np as pn

    framework, how = mode.split("-")
    schedule = pn.rope_schedule_from_hf_config({**GEMMA3, "head_dim": data["q"].shape[-1]})
    total = int(data["cu_seqlens"][-1])
    if framework == "torch":
        import torch

        import posenc_torch as m

        def convert(name, value):
            t = torch.as_tensor(value)
            return t.to(getattr(torch, data["dtype"])) if t.is_floating_point() else t

        wrap = (lambda f: torch.compile(f, fullgraph=True)) if how == "jit" else (lambda f: f)
        block = lambda out: out  # noqa: E731  (CPU kernels are synchronous)
    elif framework == "tf":
        import tensorflow as tf

        import posenc_tf as m

        def convert(name, value):
            t = tf.constant(value)
            return tf.cast(t, data["dtype"]) if t.dtype.is_floating else t

        wrap = lambda f: tf.function(f, jit_compile=True)  # noqa: E731
        block = lambda out: out  # noqa: E731
    else:
        import jax
        import jax.numpy as jnp

        import posenc_jax as m

        def convert(name, value):
            t = jnp.asarray(value)
            return t.astype(data["dtype"]) if jnp.issubdtype(t.dtype, jnp.floating) else t

        wrap = jax.jit
        block = jax.block_until_ready
    functions, layers = path_functions(m, data["section"], schedule, total)
    tensors = {name: convert(name, data[name]) for name in
               ("q", "k", "positions", "positions3", "q_mla", "k_pe", "q_packed", "k_packed", "cu_seqlens")}
    paths = {}
    for name, (fn, args) in functions.items():
        compiled = wrap(fn)
        values = tuple(tensors[a] for a in args)
        paths[name] = lambda compiled=compiled, values=values: block(compiled(*values))
    return paths, layers


def run(shape, dtype, reps, modes):
    data = inputs(shape, dtype)
    results = {}
    for mode in modes:
        try:
            paths, layers = backend_paths(mode, data)
        except ImportError as error:
            print(f"skipping {mode}: {error}", file=sys.stderr)
            continue
        times = timed_group(paths, reps, skip_failing=True)  # a path a backend lacks is reported, not fatal
        if "schedule" in times:
            times["schedule"] /= layers
        for name, seconds in times.items():
            print(f"{mode:12s} {LABELS[name]:66s} {seconds * 1e3:8.1f} ms", flush=True)
        results[mode] = times
    return results


def rows(results):
    """`(mode, path, reference, ratio, met)` for every pair measured."""
    out = []
    for mode, times in results.items():
        for path, reference in PAIRS:
            if path in times and reference in times:
                ratio = times[path] / times[reference]
                out.append((mode, path, reference, ratio, ratio <= 1.3))
    return out


def markdown(shape, dtype, reps, results):
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    lines = [f"Run {when}, {os.cpu_count()} CPUs, load average {load:.1f} at the end; shape {list(shape)} {dtype}, "
             f"best of {reps} round-robin runs per backend and mode, compile time excluded.", "",
             "| backend, mode | path | time (ms) | reference | time (ms) | ratio | within 1.3x |",
             "|---|---|---:|---|---:|---:|---|"]
    for mode, path, reference, ratio, met in rows(results):
        times = results[mode]
        lines.append(f"| {mode} | {LABELS[path]} | {times[path] * 1e3:.1f} | {LABELS[reference]} | "
                     f"{times[reference] * 1e3:.1f} | {ratio:.2f} | {'yes' if met else '**no**'} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=4, default=[4, 16, 2048, 128])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--write", action="store_true", help="rewrite the paths table in docs/performance.md")
    args = parser.parse_args(argv)
    shape = tuple(args.shape)
    if shape[-1] % 8:
        parser.error("head_dim must be a multiple of 8 (three mrope sections of whole pairs)")
    results = run(shape, args.dtype, args.reps, args.modes)
    text = markdown(shape, args.dtype, args.reps, results)
    print()
    print(text)
    missed = [row for row in rows(results) if not row[4]]
    for mode, path, reference, ratio, met in rows(results):
        print(f"{'within' if met else 'OVER  '} {mode:12s} {path:9s} {ratio:.2f}x {reference}")
    if args.write:
        write_between_markers(DOC, "bench_paths", text)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
