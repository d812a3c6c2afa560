"""Sharded runtimes on this machine's CPUs: posenc gives the same numbers sharded and unsharded.

Runs posenc.check.distributed (the same code as `posenc check --distributed`), each runtime in a fresh
process: JAX with 8 host CPU devices (XLA_FLAGS set before JAX starts), a 1-D Mesh, NamedSharding and
shard_map; PyTorch with torch.distributed/gloo, 4 spawned processes and DTensor. What each record
checks is in that module's docstring; here every record must pass and the expected checks must all
have run (a runtime that ran nothing must not pass).
"""

from __future__ import annotations

import json

import pytest

from posenc.check.distributed import as_records, run_distributed
from posenc.check.report import json_report, markdown_table

MROPE = ("qwen2-vl", "qwen3-vl")  # contiguous and interleaved sections
JAX_CHECKS = {"rope-namedsharding-positions-replicated", "rope-namedsharding-positions-sharded",
              "rope-shard_map-contiguous", "rope-shard_map-striped", "rope-shard_map-zigzag",
              "rope-shard_map-packed-zigzag", "alibi-namedsharding", "t5-namedsharding",
              *(f"mrope-{c}-{form}" for c in MROPE for form in ("namedsharding-positions-sharded", "shard_map-zigzag"))}
TORCH_CHECKS = {"rope-dtensor-contiguous", "rope-dtensor-striped", "rope-dtensor-zigzag", "rope-dtensor-packed-zigzag",
                *(f"mrope-{c}-dtensor-zigzag" for c in MROPE)}
_RUNS: dict = {}


def _records(runtime):
    """One run per runtime per session (each starts processes: ~15 s for JAX, ~30 s for 4 torch ranks)."""
    pytest.importorskip(runtime)
    if runtime not in _RUNS:
        _RUNS[runtime] = run_distributed([runtime], timeout=240)
    return _RUNS[runtime]


@pytest.mark.slow
@pytest.mark.parametrize("runtime, expected", [("jax", JAX_CHECKS), ("torch", TORCH_CHECKS)])
def test_sharded_equals_unsharded(runtime, expected):
    records = _records(runtime)
    failed = [r for r in records if r["status"] != "pass"]
    assert not failed, failed
    assert {r["check"] for r in records} == expected
    assert all(r["max_abs_err"] <= r["tol"] for r in records)


@pytest.mark.slow
def test_rope_under_namedsharding_moves_no_sequence_data():
    records = {r["check"]: r for r in _records("jax")}
    replicated = records["rope-namedsharding-positions-replicated"]
    assert not any(replicated["collectives"].values())  # nothing at all crosses devices
    sharded = records["rope-namedsharding-positions-sharded"]
    # sharded positions: one boolean all-reduce (the table-range predicate), never a gather of tokens
    assert sharded["collectives"]["all-reduce"] == 1 and sharded["all_reduce_shapes"] == ["pred[]"]
    assert sharded["collectives"]["all-gather"] == sharded["collectives"]["all-to-all"] == 0
    assert sharded["collectives"]["collective-permute"] == 0
    for name in ("rope-shard_map-zigzag", "rope-shard_map-packed-zigzag", "alibi-namedsharding", "t5-namedsharding"):
        assert not any(records[name]["collectives"].values()), name
    # multi-axis RoPE computes its angles (no table fast path, so no range predicate): with position ids
    # [3, seq] sharded on their seq axis like the tokens, nothing at all crosses devices
    for convention in MROPE:
        for form in ("namedsharding-positions-sharded", "shard_map-zigzag"):
            record = records[f"mrope-{convention}-{form}"]
            assert not any(record["collectives"].values()), record
        assert records[f"mrope-{convention}-namedsharding-positions-sharded"]["sharding"] == "P(None, None, 'sp', None)"
    assert records["alibi-namedsharding"]["sharding"] == "P(None, 'sp')"


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["jax", "torch"])
def test_records_reach_the_check_reports(runtime):
    """`posenc check --distributed --json/--markdown`: the same records, family "distributed"."""
    raw = _records(runtime)
    records = as_records(raw)
    data = json.loads(json_report(records, argv=[], seed=0, seconds=0.0, versions={}))
    assert len(data["records"]) == len(raw) and data["summary"] == {"pass": len(raw)}
    for r, source in zip(data["records"], raw, strict=True):
        assert (r["family"], r["backend"], r["case"], r["status"]) == ("distributed", runtime, source["check"], "pass")
        assert r["max_abs_err"] == source["max_abs_err"] and r["tol"] == source["tol"] > 0
        assert r["encoding"] == ("alibi_bias" if r["case"].startswith("alibi") else
                                 "t5_bias" if r["case"].startswith("t5") else "apply_rope")
    by_case = {r["case"]: r for r in data["records"]}
    form = "shard_map" if runtime == "jax" else "dtensor"
    assert by_case[f"mrope-qwen3-vl-{form}-zigzag"]["convention"] == "qwen3-vl"
    if runtime == "jax":
        assert by_case["rope-shard_map-zigzag"]["message"] == "collectives: none"
        assert by_case["rope-namedsharding-positions-sharded"]["message"] == "collectives: all-reduce x1 (pred[])"
    table = markdown_table(records)
    assert all(f"| distributed | {r['convention']} | {r['case']} | {runtime} |" in table for r in data["records"])
