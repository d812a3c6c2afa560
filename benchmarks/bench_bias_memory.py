"""Peak memory of building and applying an attention bias, per path (PyTorch, CPU).

    python benchmarks/bench_bias_memory.py [--n 4096 8192] [--heads 16] [--dim 64] [--paths ...] [--json PATH]

Each measurement runs in its own subprocess: build q, k, v (`[1, heads, n, dim]` float32); for the
compiled (score_mod) paths run once first so torch.compile's own memory is not counted; reset the
kernel's peak-RSS counter (`/proc/self/clear_refs`, Linux), note the resident set, run the path, and
report the peak resident set above that baseline (`VmHWM - VmRSS`): the memory building and applying
the bias needs, q/k/v excluded, the output (`[1, heads, n, dim]`, 32 MiB at n=8192) included.

Paths:
  alibi-materialised   `alibi_bias(form="symmetric")` -> `[heads, n, n]` float32, then SDPA with it as float mask
  alibi-broadcast      `alibi_bias(form="bloom")`: a `[heads, 1, n]` tensor expanded (stride 0) to `[heads, n, n]`,
                       SDPA reads it through strides (equals ALiBi's softmax only under a causal mask, which
                       SDPA cannot combine with a float mask without materialising it; run without one here)
  alibi-score-mod      `torch.compile(flex_attention)` with `alibi_score_mod`: no bias tensor
  t5-materialised      `t5_bias` -> `[heads, n, n]` (int64 buckets on the way), then SDPA
  t5-score-mod         `torch.compile(flex_attention)` with `t5_score_mod`: no bias tensor
  none                 SDPA without a bias (the floor)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

PATHS = ("none", "alibi-materialised", "alibi-broadcast", "alibi-score-mod", "t5-materialised", "t5-score-mod")


def _status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024  # kB -> bytes
    raise RuntimeError(f"{key} not in /proc/self/status")


def _child(path, n, heads, dim):
    import warnings

    import torch

    import posenc_torch
    from posenc_torch.attention import alibi_score_mod, flex_attention, sdpa_attention, t5_score_mod

    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, dim) for _ in range(3))
    positions = torch.arange(n)
    table = torch.randn(32, heads)
    flex = torch.compile(flex_attention, fullgraph=True)

    def run():
        if path == "none":
            return sdpa_attention(q, k, v)
        if path == "alibi-materialised":
            return sdpa_attention(q, k, v, bias=posenc_torch.alibi_bias(heads, positions, positions))
        if path == "alibi-broadcast":
            return sdpa_attention(q, k, v, bias=posenc_torch.alibi_bias(heads, positions, positions, form="bloom"))
        if path == "alibi-score-mod":
            return flex(q, k, v, score_mod=alibi_score_mod(heads))
        if path == "t5-materialised":
            return sdpa_attention(q, k, v, bias=posenc_torch.t5_bias(table, positions, positions), scale=1.0)
        if path == "t5-score-mod":
            return flex(q, k, v, score_mod=t5_score_mod(table), scale=1.0)
        raise ValueError(f"path={path!r} is not one of {PATHS}")

    warm_seconds = 0.0
    if path.endswith("score-mod"):
        started = time.perf_counter()
        run()
        warm_seconds = time.perf_counter() - started
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    baseline = _status("VmRSS")
    started = time.perf_counter()
    out = run()
    seconds = time.perf_counter() - started
    peak = _status("VmHWM")
    print(json.dumps({"path": path, "n": n, "heads": heads, "dim": dim, "peak_above_baseline": peak - baseline,
                      "seconds": seconds, "warmup_seconds": warm_seconds, "finite": bool(torch.isfinite(out).all())}))


def measure(path, n, heads, dim, timeout):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", path, "--n", str(n), "--heads", str(heads),
           "--dim", str(dim)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"path": path, "n": n, "error": f"timeout after {timeout} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"path": path, "n": n, "error": f"exit {done.returncode}: {tail[0][:200]}"}
    return json.loads(lines[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per measurement")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--child", choices=PATHS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.n[0], args.heads, args.dim)
        return 0
    print(f"heads={args.heads}, dim={args.dim}; a float32 [heads, n, n] tensor is "
          + ", ".join(f"{args.heads * n * n * 4 / 2**30:.2f} GiB at n={n}" for n in args.n) + "\n")
    print("| n | path | peak above baseline (MiB) | x [heads, n, n] float32 | run (s) | compile run (s) |")
    print("|---:|---|---:|---:|---:|---:|")
    results = []
    for n in args.n:
        bias_bytes = args.heads * n * n * 4
        for path in args.paths:
            r = measure(path, n, args.heads, args.dim, args.timeout)
            results.append(r)
            if "error" in r:
                print(f"| {n} | {path} | {r['error']} | | | |", flush=True)
                continue
            print(f"| {n} | {path} | {r['peak_above_baseline'] / 2**20:.0f} | {r['peak_above_baseline'] / bias_bytes:.2f} "
                  f"| {r['seconds']:.1f} | {r['warmup_seconds']:.1f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
