"""The example of docs/impl.md, run as a user runs it: an HF-signature kernel in a file of its own through the
whole RoPE registry with one command (`python -m posenc check --impl my_kernel.py --encoding rope`), in a
subprocess; and the same kernel with the interleaved-pairs bug, failing with its diagnosis."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from posenc.check.registry import DTYPES, all_cases  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def _example() -> str:
    text = (ROOT / "docs" / "impl.md").read_text()
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def _check(tmp_path, source, *extra):
    kernel = tmp_path / "my_kernel.py"
    kernel.write_text(source)
    report = tmp_path / "report.json"
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    environ.pop("POSENC_IMPL", None)
    done = subprocess.run([sys.executable, "-m", "posenc", "check", "--impl", kernel.name, "--encoding", "rope",
                           "--json", str(report), "--quiet", *extra], cwd=tmp_path, capture_output=True, text=True,
                          env=environ, timeout=600)
    return done, json.loads(report.read_text()) if report.exists() else None


def test_the_documented_kernel_runs_the_whole_rope_registry(tmp_path):
    done, report = _check(tmp_path, _example())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = report["records"]
    rope = {(c.id, d) for c in all_cases() if c.family == "rope" for d in DTYPES if d in c.dtypes and "eager" in c.modes}
    assert {(f"{r['family']}/{r['convention']}/{r['case']}", r["dtype"]) for r in records} == rope
    assert {r["backend"] for r in records} == {"my-kernel"}
    ran = [r for r in records if r["status"] == "pass"]
    skipped = [r for r in records if r["status"] == "skip"]
    assert len(ran) > 150 and len(ran) + len(skipped) == len(records)
    assert {r["message"] for r in skipped} == {"my-kernel declares layouts half, not interleaved"}
    assert all(r["worst_angle_err"] is not None for r in ran
               if r["encoding"] == "apply_rope" and r["convention"] != "training")  # a gradient has no angle
    lines = done.stdout.strip().splitlines()
    assert any(re.fullmatch(r"\d+ passed, 0 failed, \d+ skipped", line) for line in lines[-3:]), lines[-3:]
    assert any(line.startswith("  float32: worst angle error") for line in lines)


def test_the_sign_bug_fails_with_its_diagnosis(tmp_path):
    buggy = _example().replace("torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2])",
                               "torch.cat((x[..., x.shape[-1] // 2:], -x[..., : x.shape[-1] // 2])")
    assert buggy != _example()
    done, report = _check(tmp_path, buggy, "--dtype", "float32")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "diagnosis: direction: your outputs equal the spec rotated by -theta" in done.stdout
    failed = [r for r in report["records"] if r["status"] == "fail"]
    assert len(failed) > 50 and {r["diagnosis"] for r in failed} == {"direction"}


def test_an_unimportable_spec_exits_2_in_one_line(tmp_path):
    done, _ = _check(tmp_path, "import no_such_package_posenc\n")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "my_kernel.py" in done.stderr and "Traceback" not in done.stderr
