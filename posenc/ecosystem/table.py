"""Run every installed built-in through the registry, each in a child process, into the ecosystem JSON."""

from __future__ import annotations

import collections
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import __version__
from ..impl.builtin import BUILTINS, builtin_module, builtin_status, load_builtin
from ..impl.resolve import process_environ

__all__ = ["COLUMNS", "FAMILIES", "SCHEMA", "column_of", "family_group", "collect", "describe", "merge", "findings", "install_recipe"]

SCHEMA = "posenc-ecosystem/1"

#: (key, title, what the column holds): a record belongs to the first column whose rule matches
COLUMNS = (
    ("layouts", "layouts", "unscaled RoPE, half and interleaved layouts, short positions (float32)"),
    ("scalings", "scalings", "every scaling type of the registry (linear, ntk, dynamic, yarn, llama3, longrope "
                             "and the runtime variants) (float32)"),
    ("partial", "partial", "partial rotary: GPT-J (rotary_dim 64 of 72) and GPT-NeoX (rotary_pct 0.25) (float32)"),
    ("mrope", "M-RoPE", "multi-axis RoPE: Qwen2-VL, Qwen3-VL, the vision towers, FLUX, scaled sections (float32)"),
    ("offsets", "offsets", "KV-cache offsets, per-row ids, left padding, [batch, seq, heads, dim], a zigzag "
                           "context-parallel rank's tokens (float32)"),
    ("long", "long positions", "unscaled RoPE at positions up to 2^20 (float32)"),
    ("bf16", "bf16", "every non-edge case in bfloat16"),
    ("fp16", "fp16", "every non-edge case in float16"),
    ("edge", "edge cases", "past the table, negative positions, tensor offsets past the table, non-contiguous "
                           "inputs, rows at different offsets (every dtype; a declared refusal is correct)"),
    ("backward", "backward", "the gradient against the spec's transposed rotation: random cotangents, dense, "
                             "zero-stride, [b,s,h,d] and non-contiguous; offsets; partial rotary (float32)"),
    ("aliasing", "aliasing", "inputs unchanged by the forward, the cotangent by the backward, the upstream "
                             "gradient through tanh -> kernel (float32)"),
    ("table-grad", "table gradients", "d/dcos, d/dsin of the tables a kernel is fed, d/dfreqs of an angle table "
                                      "(float32)"),
    ("autocast", "autocast", "float32 q inside torch.autocast(bfloat16) at positions 32760-32767: the library's "
                             "own tables under mixed precision (float32 class)"),
)
#: the other families with a table of their own (family -> title); a family's columns are its conventions (float32)
#: and the half-precision dtypes, each present where some implementation ran a comparison
FAMILIES = {
    "sinusoidal": "sinusoids (1-D timestep / token and 2-D sin-cos tables)",
    "resize": "learned-table and ViT-grid resizes",
    "learned": "learned tables",
    "alibi": "ALiBi",
    "t5": "T5 relative buckets",
    "relative": "relative position embeddings",
}
#: `posenc check --encoding` of an ecosystem run: RoPE and the families above
ENCODINGS = ",".join(("rope", *FAMILIES))
_MROPE_PREFIXES = ("mrope-", "per-axis-")
_MROPE_CONVENTIONS = ("qwen2-vl", "qwen3-vl", "qwen2-vl-vision", "pixtral", "flux")
_OFFSET_SETS = ("kv-offset", "per-row", "left-pad", "broadcast", "cp-zigzag-rank0", "cp-zigzag-rank1")


def install_recipe(name: str) -> str:
    """Built-in `name`'s install recipe (its module's `INSTALL`)."""
    return getattr(builtin_module(name), "INSTALL", "")


def findings() -> list[dict]:
    """Every built-in's findings (its module's `FINDINGS`), in `BUILTINS` order."""
    return [dict(f) for name in BUILTINS for f in getattr(builtin_module(name), "FINDINGS", ())]


def column_of(record: dict) -> str:
    """The column key of a JSON record (`COLUMNS`: the first rule that matches)."""
    convention, case, dtype = record["convention"], record["case"], record["dtype"]
    if convention == "training":
        return "backward" if case.startswith("backward") else case
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


def family_group(record: dict) -> str:
    """The column of a non-RoPE record in its family's table: its convention (float32), else its dtype."""
    return {"bfloat16": "bf16", "float16": "fp16"}.get(record["dtype"], record["convention"])


def describe(name: str) -> list[dict]:
    """The implementations of built-in `name` (in this process: run as `--describe` in a child)."""
    return [dict(builtin=name, name=i.name, distribution=builtin_module(name).DISTRIBUTION, version=i.version,
                 angles=i.angles, description=i.description, max_positions=i.max_positions)
            for i in load_builtin(name)]


def _child(args: list[str], timeout: float, builtin: str) -> subprocess.CompletedProcess:
    # a child runs only `builtin`, so it sets what that built-in reads once at import (keras' backend)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", **process_environ(builtin)})


def _run_builtin(name: str, timeout: float) -> tuple[list[dict], list[dict], str | None]:
    """`(implementations, records, error)` of one built-in, each step in a child process."""
    described = _child(["-m", "posenc.ecosystem", "--describe", name], timeout, name)
    if described.returncode != 0:
        return [], [], (described.stderr.strip().splitlines() or ["no output"])[-1]
    impls = json.loads(described.stdout.strip().splitlines()[-1])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "records.json"
        done = _child(["-m", "posenc", "check", "--impl", name, "--encoding", ENCODINGS, "--quiet", "--json",
                       str(path)], timeout, name)
        if not path.exists():
            return impls, [], f"posenc check exited {done.returncode}: " + \
                (done.stderr.strip().splitlines() or ["no output"])[-1]
        return impls, json.loads(path.read_text())["records"], None


def _cell(records: list[dict]) -> dict:
    counts = collections.Counter(r["status"] for r in records)
    diagnoses = collections.Counter(r["diagnosis"] for r in records if r["status"] == "fail" and r["diagnosis"])
    skips = collections.Counter(r["message"] for r in records if r["status"] == "skip")
    return {"pass": counts["pass"], "fail": counts["fail"], "skip": counts["skip"], "error": counts["error"],
            "diagnoses": dict(diagnoses.most_common()),
            "skip_reason": scrub_paths(skips.most_common(1)[0][0]) if skips else None}


def _worst_angle(records: list[dict]) -> dict:
    worst = {}
    for r in records:
        err = r.get("worst_angle_err")
        if err is not None and err > worst.get(r["dtype"], {}).get("radians", -1.0):
            worst[r["dtype"]] = {"radians": err, "position": r.get("worst_angle_position"),
                                 "case": f"{r['convention']}/{r['case']}", "status": r["status"]}
    return worst


_MACHINE_PATH = re.compile(r"(?<![\w.])/(?:tmp|work|root|home)/\S*")


def scrub_paths(text):
    """`text` with this machine's directories (a compiler's temp file in an error message) as `<path>`: the
    table describes an environment by versions, never by directories."""
    return _MACHINE_PATH.sub("<path>", text) if isinstance(text, str) else text


def _failures(records: list[dict]) -> list[dict]:
    return [{"case": f"{r['convention']}/{r['case']}", "dtype": r["dtype"], "status": r["status"],
             "diagnosis": r.get("diagnosis"),
             "detail": scrub_paths(r.get("diagnosis_detail") or r.get("message", "")),
             "err_in_tol": r.get("err_in_tol"), "worst_angle": r.get("worst_angle_err"),
             "position": r.get("worst_angle_position"),
             "channel": (r.get("worst_angle_index") or [None])[-1]}
            for r in records if r["status"] in ("fail", "error")]


def _summary(records: list[dict]) -> dict:
    counts = collections.Counter(r["status"] for r in records)
    return {k: counts[k] for k in ("pass", "fail", "skip", "error")}


def _family_entry(records: list[dict]) -> dict:
    groups = collections.defaultdict(list)
    for r in records:
        groups[family_group(r)].append(r)
    return {"summary": _summary(records), "cells": {g: _cell(rs) for g, rs in groups.items()},
            "failures": _failures(records)}


def _entry(meta: dict, records: list[dict]) -> dict:
    rope = [r for r in records if r.get("family", "rope") == "rope"]
    by_column = collections.defaultdict(list)
    for r in rope:
        by_column[column_of(r)].append(r)
    families = {f: _family_entry([r for r in records if r.get("family") == f]) for f in FAMILIES}
    return {**meta, "installed": True, "install": install_recipe(meta["builtin"]), "summary": _summary(rope),
            "worst_angle": _worst_angle([r for r in rope if r["convention"] != "edge"]),
            "cells": {key: _cell(by_column[key]) for key, _, _ in COLUMNS}, "failures": _failures(rope),
            "families": {f: e for f, e in families.items() if e["summary"]["pass"] + e["summary"]["fail"]
                         + e["summary"]["error"]}}


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
    return {"platform": platform.platform(), "python": platform.python_version(), "device": device}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def merge(old: dict, new: dict) -> dict:
    """`old` with the rows of the built-ins `new` ran replaced by `new`'s (in `BUILTINS` order); a built-in
    not installed where `new` ran keeps the row it has in `old` (run in an environment of its own)."""
    kept = {e["builtin"] for e in old["implementations"] if e.get("installed")}
    fresh = [e for e in new["implementations"] if e.get("installed") or e["builtin"] not in kept]
    ran = {e["builtin"] for e in fresh}
    entries = [e for e in old["implementations"] if e["builtin"] not in ran] + fresh
    order = {name: n for n, name in enumerate(BUILTINS)}
    entries.sort(key=lambda e: order.get(e["builtin"], len(order)))
    return {**old, "generated": new["generated"], "implementations": entries, "findings": new["findings"],
            "columns": new["columns"], "families": new.get("families", old.get("families", {}))}


def collect(names=None, *, timeout: float = 1800.0, progress=print) -> dict:
    """Run the built-ins (`names`, default all) and return the ecosystem JSON object."""
    stamp = {"generated": _now(), "host": _host()}
    entries = []
    for name in names or BUILTINS:
        installed, version = builtin_status(name)
        if not installed:
            entries.append({**stamp, "builtin": name, "name": name, "distribution": builtin_module(name).DISTRIBUTION,
                            "installed": False, "version": None, "install": install_recipe(name)})
            progress(f"{name}: not installed")
            continue
        progress(f"{name} {version}: running")
        impls, records, error = _run_builtin(name, timeout)
        if error:
            entries.append({**stamp, "builtin": name, "name": name, "distribution": builtin_module(name).DISTRIBUTION,
                            "installed": True, "version": version, "install": install_recipe(name),
                            "run_error": error})
            progress(f"{name}: {error}")
            continue
        for meta in impls:
            entries.append({**stamp, **_entry(meta, [r for r in records if r["backend"] == meta["name"]])})
    return {"schema": SCHEMA, "generated": stamp["generated"], "posenc": __version__,
            "command": "python -m posenc.ecosystem", "host": stamp["host"],
            "columns": [{"key": k, "title": t, "what": w} for k, t, w in COLUMNS],
            "families": dict(FAMILIES), "implementations": entries, "findings": findings()}


