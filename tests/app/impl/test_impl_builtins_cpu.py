"""Properties of the built-in `--impl` adapters that run on a CPU with the test extras, beyond their verdicts
(which are data, `EXPECTED` in each adapter, checked by test_builtin_verdicts.py): the precision class each
one's worst angle error shows, what a failure's channels and diagnoses say about the upstream mismatch
(docs/ecosystem.md, "Findings"), and inputs the registry does not hold.
"""

from __future__ import annotations

import collections

import pytest

from posenc.check.registry import all_cases
from posenc.check.run_impl import run_implementations
from posenc.impl.builtin import builtin_status, load_builtin


def run_builtin(name, *, dtypes=("float32",), select=None):
    """Records of built-in `name` over the RoPE cases (`select(case)` narrows them); skip when not installed."""
    installed, _ = builtin_status(name)
    if not installed:
        pytest.skip(f"{name} is not installed")
    cases = [c for c in all_cases() if c.family == "rope" and (select is None or select(c))]
    return run_implementations(cases, load_builtin(name), dtypes=list(dtypes))


def verdicts(records):
    """`{status: count}` and the failing `(backend, convention, case, dtype) -> diagnosis`."""
    counts = collections.Counter(r.status for r in records)
    failing = {(r.backend, r.convention, r.case, r.dtype): r.diagnosis for r in records if r.status == "fail"}
    return counts, failing


def worst_angle(records, dtype="float32"):
    return max((r.worst_angle_err for r in records if r.dtype == dtype and r.worst_angle_err is not None), default=0.0)


def test_mlx_passes_as_float32():
    records = run_builtin("mlx", dtypes=("float32", "bfloat16", "float16"))
    counts, failing = verdicts(records)
    assert failing == {} and counts["error"] == 0 and counts["pass"] >= 150, counts
    # float32 angles at 2**20: ~0.05 rad (the float32 class), far above posenc's 1e-6 rad goal
    assert 1e-3 < worst_angle(records) < 0.1
    reasons = {r.message for r in records if r.status == "skip"}
    assert any("no magnitude factor" in m for m in reasons)  # YaRN / LongRoPE: mx.fast.rope cannot scale



def test_mlx_lm_diagnoses_name_its_mismatches():
    records = run_builtin("mlx-lm")
    _, failing = verdicts(records)
    # the temporal ids on every axis; on "long" a row at t = 0 is returned unrotated, which is named first
    assert {d for (_, conv, _, _), d in failing.items() if conv in ("qwen2-vl", "qwen3-vl")} <= {"mrope-axes", "unrotated"}
    assert ("mlx-lm", "half-mlx-longrope", "long", "float32") not in failing  # what mlx-lm means by longrope
    # HF's longrope at short lengths: SuScaledRoPE reads the long factors (and drops `traditional`)
    assert failing[("mlx-lm", "half-longrope", "short", "float32")] == "longrope-factors"
    assert failing[("mlx-lm", "interleaved-longrope", "per-row", "float32")] == "longrope-factors"


def test_gemma_passes_as_float32():
    records = run_builtin("gemma", dtypes=("float32", "bfloat16"))
    counts, failing = verdicts(records)
    assert failing == {} and counts["error"] == 0 and counts["pass"] >= 40, counts
    assert 1e-3 < worst_angle(records) < 0.1


def test_gemma_proportional_is_rope_proportion():
    """Gemma 4's proportional RoPE (not in the registry's cases): `rope_proportion` = partial_rotary_factor."""
    if not builtin_status("gemma")[0]:
        pytest.skip("gemma is not installed")
    import jax.numpy as jnp
    import numpy as np

    import posenc_np

    (impl,) = load_builtin("gemma")
    x = np.random.default_rng(0).standard_normal((1, 2, 8, 32)).astype(np.float32)
    positions = np.arange(8) + 100
    scaling = {"rope_type": "proportional", "partial_rotary_factor": 0.25, "factor": 2.0}
    got = np.asarray(impl.functions["apply_rope"](jnp.asarray(x), jnp.asarray(positions), base=1e6, scaling=scaling))
    want = posenc_np.apply_rope(x.astype(np.float64), positions, base=1e6, scaling=scaling)
    assert np.abs(got - want).max() < 1e-5  # float32 angles at positions ~100: ~1e-5 rad
    assert np.array_equal(got[..., 4:16], x[..., 4:16])  # pairs past int(0.25 * 32 // 2) = 4 are not rotated


def test_torchtune_wraps_negative_positions_in_every_dtype():
    records = run_builtin("torchtune", dtypes=("float32", "bfloat16"))
    _, failing = verdicts(records)
    # cache[input_pos] with a negative id reads the cache from its end (torch indexing), silently
    assert failing == {("torchtune", "edge", "negative-positions-interleaved", d): "wrapped"
                       for d in ("float32", "bfloat16")}
    assert {r.case for r in records if r.status == "pass" and r.convention == "interleaved-llama3"} == {"long"}


def test_transformer_engine_refuses_past_its_table_and_crashes_on_negative_offsets():
    records = run_builtin("transformer-engine", dtypes=("float32", "bfloat16"))
    counts, failing = verdicts(records)
    assert failing == {}, failing
    passed = {(r.convention, r.case) for r in records if r.backend == "transformer-engine" and r.status == "pass"}
    # start offsets per row, and a past-the-table start refused with TE's declared assert
    assert {("edge", "row-offsets"), ("edge", "offset-past-table"), ("hf-llama", "kv-offset")} <= passed
    refused = {r.message for r in records if r.status == "pass" and r.message.startswith("refused")}
    assert refused and all("AssertionError: Rotary Embeddings only suppported up to 4096" in m for m in refused)
    # negative start offsets are not refused: they slice an empty table and crash on a shape mismatch
    crashed = {(r.backend, r.case) for r in records if r.status == "error"}
    assert ("transformer-engine", "negative-positions") in crashed
    assert all("RuntimeError" in r.message for r in records if r.status == "error")


def test_ggml_imrope_differs_on_the_pairs_of_the_fourth_stream():
    records = run_builtin("ggml")
    # only the interleaved (IMROPE) sections fail: ggml feeds pairs HF gives the temporal id from its 4th
    # position stream, which llama.cpp sets to 0 for text (docs/ecosystem.md)
    channels = {r.convention: set() for r in records if r.status == "fail"}
    for r in records:
        if r.status == "fail":
            channels[r.convention].add(r.worst_angle_index[-1])
    assert channels["qwen3-vl"] <= {61, 62}  # section [24, 20, 20], 64 pairs, half layout: channel = pair
    assert channels["mrope-interleaved-linear"] == {6}  # section [2, 3, 3]: pair 6
    named = {r.diagnosis for r in records if r.status == "fail" and r.convention.startswith("mrope-interleaved")}
    assert named == {"imrope-fourth-stream"}, named
