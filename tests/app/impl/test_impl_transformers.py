"""`posenc check --impl transformers` runs to a verdict (transformers installed): its rotary classes with
`apply_rotary_pos_emb` (llama half, gpt-neox partial, cohere interleaved, qwen2-vl / qwen3-vl M-RoPE), BLOOM's
ALiBi and T5's buckets and bias, and GPT-J's table-gathered rotary, each compared with the float64 spec under
the "float32" precision class. Found and asserted: GPT-J's `embed_positions[position_ids]` takes negative
positions from the end of its table (diagnosis `wrapped`)."""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("transformers")

from posenc.check.registry import all_cases  # noqa: E402
from posenc.check.run_impl import run_implementations  # noqa: E402
from posenc.impl.builtin import load_builtin  # noqa: E402


@pytest.fixture(scope="module")
def all_records():
    impls = load_builtin("transformers")
    # the rotary classes and GPT-J first; the sinusoid builders and the ViT resizes have tests of their own
    assert [i.name for i in impls][:2] == ["transformers", "transformers-gptj"]
    return run_implementations(all_cases(), impls[:2], dtypes=["float32", "bfloat16", "float16"])


@pytest.fixture(scope="module")
def records(all_records):
    return [r for r in all_records if r.backend == "transformers"]


def test_transformers_runs_to_a_verdict(records):
    import transformers

    counts = Counter(r.status for r in records)
    assert counts["pass"] >= 250, counts
    assert {r.impl for r in records} == {transformers.__version__}
    failed = [(r.convention, r.case, r.dtype, r.diagnosis) for r in records if r.status in ("fail", "error")]
    assert failed == []  # transformers 5.24 agrees with the spec on everything it expresses


def test_gptj_wraps_negative_positions(all_records):
    gptj = [r for r in all_records if r.backend == "transformers-gptj"]
    assert sum(r.status == "pass" for r in gptj) >= 30
    failed = {(r.case, r.diagnosis) for r in gptj if r.status in ("fail", "error")}
    assert failed == {("negative-positions-interleaved", "wrapped")}
    refused = [r for r in gptj if r.case == "past-table-interleaved"]
    assert refused and all(r.status == "pass" and "IndexError" in r.message for r in refused)


@pytest.mark.parametrize("convention", ["hf-llama", "gptj", "gpt-neox", "half-yarn", "interleaved-dynamic",
                                        "half-longrope", "qwen2-vl", "qwen3-vl", "mrope-interleaved-yarn",
                                        "bloom-alibi", "t5", "t5-decoder"])
def test_each_mapped_path_ran(all_records, convention):
    ran = [r for r in all_records if r.convention == convention and r.status == "pass"]
    assert ran, convention


def test_rope_records_state_the_float32_angle_cost(records):
    long = [r for r in records if r.case == "long" and r.convention == "half-default" and r.dtype == "float32"]
    assert long[0].worst_angle_err > 1e-3 and long[0].worst_angle_position > 2**19  # float32 p * inv_freq at 2^20


def test_what_transformers_cannot_express_is_a_skip_with_its_reason(records):
    reasons = {r.message for r in records if r.status == "skip" and r.family == "rope"}
    assert "not supported: scaling rope_type 'ntk' is not one of transformers' (linear, dynamic, yarn, llama3, " \
           "longrope)" in reasons
    assert any("mrope_frequencies='per-axis'" in m for m in reasons)
