"""`posenc check --distributed` as a user sees it: which runtimes `--backend` selects, the section's records
in `--json` and `--markdown` (family "distributed"), and a failing sharded check failing the run.

The sharded runtimes themselves (8 JAX devices, 4 gloo processes) run in tests/backends/test_distributed.py,
which also passes their real records through the same reports; here `run_distributed` is replaced by its
recorded output so the command's plumbing is tested without starting those processes again.
"""

from __future__ import annotations

import json

import pytest

import posenc.check.distributed as distributed
from helpers import FAST
from posenc.cli import main

LEARNED_ON_JAX = ["--encoding", "learned", "--backend", "jax", "--dtype", "float32", *FAST]
NONE = {"all-gather": 0, "all-to-all": 0, "collective-permute": 0, "reduce-scatter": 0, "all-reduce": 0}


def _fake_run(records, calls):
    def run_distributed(runtimes=distributed.RUNTIMES, **_):
        calls.append(list(runtimes))
        return [r for r in records if r["runtime"] in runtimes]

    return run_distributed


def _raw(status="pass", err=0.0):
    return [
        {"check": "mrope-qwen3-vl-shard_map-zigzag", "runtime": "jax", "status": status, "max_abs_err": err,
         "tol": 6.6e-05, "collectives": NONE},
        {"check": "rope-namedsharding-positions-sharded", "runtime": "jax", "status": "pass", "max_abs_err": 0.0,
         "tol": 6.4e-05, "collectives": NONE | {"all-reduce": 2}, "all_reduce_shapes": ["s32[]", "s32[]"]},
        {"check": "rope-dtensor-zigzag", "runtime": "torch", "status": "pass", "max_abs_err": 0.0, "tol": 3.5e-05,
         "world_size": 4, "backend": "gloo"},
    ]


def test_distributed_records_join_json_and_markdown(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(distributed, "run_distributed", _fake_run(_raw(), calls))
    report, table = tmp_path / "r.json", tmp_path / "r.md"
    code = main(["check", *LEARNED_ON_JAX, "--distributed", "--json", str(report), "--markdown", str(table)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert calls == [["jax"]]  # --backend jax: the torch runtime is not started
    assert "pass  jax   mrope-qwen3-vl-shard_map-zigzag" in out
    data = json.loads(report.read_text())
    dist = [r for r in data["records"] if r["family"] == "distributed"]
    assert [r["case"] for r in dist] == ["mrope-qwen3-vl-shard_map-zigzag", "rope-namedsharding-positions-sharded"]
    assert {r["family"] for r in data["records"]} == {"learned", "distributed"}
    first, second = dist
    assert (first["backend"], first["status"], first["max_abs_err"], first["tol"]) == ("jax", "pass", 0.0, 6.6e-05)
    assert (first["encoding"], first["convention"], first["mode"]) == ("apply_rope", "qwen3-vl", "jit")
    assert first["message"] == "collectives: none"
    assert second["message"] == "collectives: all-reduce x2 (s32[], s32[])"
    assert data["summary"]["pass"] == len(data["records"])
    markdown = table.read_text()
    assert "| distributed | qwen3-vl | mrope-qwen3-vl-shard_map-zigzag | jax | float32 | jit | 0.00e+00 |" in markdown
    assert "| distributed | rope | rope-namedsharding-positions-sharded | jax |" in markdown


def test_failing_sharded_check_fails_the_run_and_reports(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(distributed, "run_distributed", _fake_run(_raw("fail", 0.5), calls))
    report = tmp_path / "r.json"
    assert main(["check", *LEARNED_ON_JAX, "--backend", "torch", "--distributed", "--json", str(report)]) == 1
    assert calls == [["jax", "torch"]]
    failed = [r for r in json.loads(report.read_text())["records"] if r["status"] == "fail"]
    assert [(r["family"], r["case"], r["max_abs_err"]) for r in failed] == [
        ("distributed", "mrope-qwen3-vl-shard_map-zigzag", 0.5)]
    assert "FAILURES" not in capsys.readouterr().out.split("distributed (")[0]  # the suite itself passed


def test_required_runtime_missing_is_an_error(monkeypatch, capsys):
    skip = [{"check": "torch-runtime", "runtime": "torch", "status": "skip", "message": "not installed"}]
    monkeypatch.setattr(distributed, "run_distributed", _fake_run(skip, []))
    learned_on_torch = [a if a != "jax" else "torch" for a in LEARNED_ON_JAX]
    assert main(["check", *learned_on_torch, "--distributed"]) == 0  # not installed: a skip
    assert main(["check", *learned_on_torch, "--distributed", "--require", "torch"]) == 1
    assert "required runtime torch is not installed" in capsys.readouterr().out


@pytest.mark.parametrize("backend", ["tf", "onnx"])
def test_distributed_without_its_runtimes_is_bad_usage(backend, monkeypatch, capsys):
    monkeypatch.setattr(distributed, "run_distributed", lambda *a, **k: pytest.fail("must not start"))
    assert main(["check", "--encoding", "learned", "--backend", backend, "--distributed", "--quiet"]) == 2
    assert "--distributed runs on jax and torch; --backend " + backend in capsys.readouterr().err
