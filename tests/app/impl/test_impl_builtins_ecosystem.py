"""The ecosystem table's generator (posenc.ecosystem): columns, merge, the Markdown, one real run."""

from __future__ import annotations

import json

import pytest

from posenc import ecosystem
from posenc.ecosystem import table
from posenc.ecosystem.__main__ import main as ecosystem_main
from posenc.impl.builtin import builtin_status


def record(convention, case, dtype="float32", status="pass", **extra):
    return {"convention": convention, "case": case, "dtype": dtype, "status": status, "message": "",
            "diagnosis": None, **extra}


@pytest.mark.parametrize("convention, case, dtype, column", [
    ("edge", "past-table", "bfloat16", "edge"),
    ("hf-llama", "kv-offset", "bfloat16", "bf16"),
    ("gptj", "short", "float16", "fp16"),
    ("qwen3-vl", "long", "float32", "mrope"),
    ("mrope-interleaved-yarn", "long", "float32", "mrope"),
    ("per-axis-yarn", "long", "float32", "mrope"),
    ("gpt-neox", "long", "float32", "partial"),
    ("half-yarn", "long", "float32", "scalings"),
    ("interleaved-vllm-ntk", "long", "float32", "scalings"),
    ("half-default", "long", "float32", "long"),
    ("meta-llama", "left-pad", "float32", "offsets"),
    ("hf-llama", "short", "float32", "layouts"),
    ("interleaved-default", "long", "float32", "long"),
])
def test_column_of(convention, case, dtype, column):
    assert ecosystem.column_of(record(convention, case, dtype)) == column


def _report(entries):
    return {"schema": ecosystem.SCHEMA, "generated": "2026-12-01T00:00:00+00:00", "posenc": "0", "command": "x",
            "host": {"platform": "p", "python": "3", "device": "cpu"},
            "columns": [{"key": k, "title": t, "what": w} for k, t, w in ecosystem.COLUMNS],
            "implementations": entries, "findings": ecosystem.findings()}


def test_markdown_cells_name_failures_and_skips():
    records = [record("edge", "past-table", status="fail", diagnosis="unrotated", err_in_tol=9.0,
                      worst_angle_err=1.5, worst_angle_position=4096, worst_angle_index=[0, 3]),
               record("edge", "row-offsets"), record("hf-llama", "short", worst_angle_err=1e-7, worst_angle_position=3),
               record("hf-llama", "long", status="fail", diagnosis="angle-precision", err_in_tol=2.0,
                      worst_angle_err=0.2, worst_angle_position=2**20 - 1, worst_angle_index=[0, 5]),
               record("qwen2-vl", "short", status="skip", message="no multi-axis")]
    meta = {"builtin": "flash-attn", "name": "k", "distribution": "d", "version": "1.0", "angles": "table",
            "description": ""}
    entry = table._entry(meta, records)
    assert entry["cells"]["edge"] == {"pass": 1, "fail": 1, "skip": 0, "error": 0, "diagnoses": {"unrotated": 1},
                                      "skip_reason": None}
    assert entry["cells"]["mrope"]["skip_reason"] == "no multi-axis"
    # the worst angle is the computing cases' (the edge column reports the edge set)
    assert entry["worst_angle"]["float32"] == {"radians": 0.2, "position": 2**20 - 1, "case": "hf-llama/long",
                                               "status": "fail"}
    missing = {"builtin": "vllm", "name": "vllm", "distribution": "vllm", "installed": False, "version": None,
               "install": ecosystem.install_recipe("vllm")}
    page = ecosystem.render_markdown(_report([entry, missing]))
    row = next(line for line in page.splitlines() if line.startswith("| k |"))
    assert "**fail 1**/2 (unrotated)" in row and "| skip |" in row and "0.2 rad @ 1048575 (fail)" in row
    assert "**vllm** (vllm): not installed. Install: its own virtual environment" in page
    assert page.count("```python") == len(ecosystem.findings())


def test_merge_replaces_only_the_rows_run():
    old = _report([{"builtin": "mlx", "name": "mlx", "v": 1}, {"builtin": "vllm", "name": "vllm", "v": 1}])
    new = _report([{"builtin": "vllm", "name": "vllm", "v": 2}, {"builtin": "vllm", "name": "vllm-cpu-kernel", "v": 2}])
    merged = ecosystem.merge(old, new)
    assert [(e["name"], e["v"]) for e in merged["implementations"]] == [("mlx", 1), ("vllm", 2), ("vllm-cpu-kernel", 2)]


def test_one_command_writes_the_json_and_the_page(tmp_path):
    if not builtin_status("mlx")[0]:
        pytest.skip("mlx is not installed")
    out_json, out_md = tmp_path / "eco.json", tmp_path / "eco.md"
    assert ecosystem_main(["--impl", "mlx", "--json", str(out_json), "--markdown", str(out_md)]) == 0
    report = json.loads(out_json.read_text())
    (entry,) = report["implementations"]
    assert entry["installed"] and entry["summary"]["fail"] == 0 and entry["summary"]["pass"] > 100
    assert entry["angles"] == "float32" and entry["generated"] == report["generated"]
    assert f"| mlx | {entry['version']} | float32 |" in out_md.read_text()
    assert f"<th>mlx</th><td>{entry['version']}</td>" in (tmp_path / "scoreboard.md").read_text()
    before = out_json.read_text()
    assert ecosystem_main(["--from-json", str(out_json), "--markdown", str(tmp_path / "again.md")]) == 0
    assert (tmp_path / "again.md").read_text() == out_md.read_text() and out_json.read_text() == before
    # nothing else written: the scoreboard goes beside the page it was asked for
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.md", "eco.json", "eco.md", "scoreboard.md"]


def test_each_child_runs_keras_on_the_backend_its_row_names(tmp_path):
    # describing keras-torch on the default (TensorFlow) backend loads TF's and torch's LLVM into one process
    if not builtin_status("keras-torch")[0]:
        pytest.skip("keras or torch is not installed")
    out_json = tmp_path / "eco.json"
    assert ecosystem_main(["--impl", "keras-torch", "--json", str(out_json), "--markdown", str(tmp_path / "eco.md")]) == 0
    (entry,) = json.loads(out_json.read_text())["implementations"]
    resize = entry["families"]["resize"]["summary"]
    assert "run_error" not in entry and resize["fail"] == 0 and resize["pass"] > 0
    assert "KERAS_BACKEND=torch" in entry["install"]


def test_merge_keeps_a_row_run_elsewhere_when_its_library_is_missing_here():
    old = _report([{"builtin": "vllm", "name": "vllm", "installed": True, "v": 1}])
    new = _report([{"builtin": "vllm", "name": "vllm", "installed": False},
                   {"builtin": "mlx", "name": "mlx", "installed": True, "v": 2}])
    merged = ecosystem.merge(old, new)
    assert [(e["name"], e.get("v")) for e in merged["implementations"]] == [("mlx", 2), ("vllm", 1)]


def test_training_records_have_their_columns():
    assert [ecosystem.column_of(record("training", c)) for c in ("backward-bshd", "aliasing", "table-grad")] == \
        ["backward", "aliasing", "table-grad"]


def test_training_autocast_and_cp_records_have_their_columns():
    assert ecosystem.column_of(record("training", "autocast")) == "autocast"
    assert ecosystem.column_of(record("hf-llama", "cp-zigzag-rank0")) == "offsets"


def test_each_other_family_gets_its_own_dated_table_with_conventions_and_diagnoses():
    """A sinusoid row: per-convention float32 cells, bf16/fp16 over every case, the diagnoses named; RoPE records
    stay in the RoPE table, and a family the implementation never ran has no row."""
    records = [dict(record("hf-llama", "short"), family="rope"),
               dict(record("diffusers-sd", "timesteps"), family="sinusoidal"),
               dict(record("tensor2tensor", "short", status="fail", diagnosis="denominator", err_in_tol=50.0),
                    family="sinusoidal"),
               dict(record("vaswani", "short", dtype="bfloat16"), family="sinusoidal"),
               dict(record("press-alibi", "short", status="skip", message="no alibi_bias"), family="alibi")]
    meta = {"builtin": "diffusers", "name": "d", "distribution": "d", "version": "0.1", "angles": "float32",
            "description": ""}
    entry = table._entry(meta, records)
    assert entry["summary"]["pass"] == 1 and set(entry["families"]) == {"sinusoidal"}
    report = {**_report([entry]), "families": dict(ecosystem.FAMILIES)}
    page = ecosystem.render_markdown(report)
    head = next(line for line in page.splitlines() if line.startswith("## Sinusoids"))
    assert "2026-12-01" in head and "## ALiBi" not in page
    section = page.split(head)[1].split("\n## ")[0].splitlines()
    header = next(line for line in section if line.startswith("| implementation | version | precision |"))
    assert header.split(" | ")[3:6] == ["diffusers-sd", "tensor2tensor", "bf16"]
    row = next(line for line in section if line.startswith("| d | 0.1 | float32 |"))
    assert "**fail 1**/1 (denominator)" in row and row.endswith("| denominator |")
    assert "<th>diffusers-sd</th>" in ecosystem.render_scoreboard(report)
