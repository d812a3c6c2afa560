"""`posenc check --impl keras-hub` runs to a verdict (keras-hub installed): RotaryEmbedding, SinePositionEncoding
and AlibiBias compared with the float64 spec. Found and stated: SinePositionEncoding forms its angles in the
layer's compute dtype, so in bfloat16 / float16 it fails, diagnosed angle-precision (or non-finite where
float16 positions overflow)."""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("keras_hub")

from posenc.check.registry import all_cases  # noqa: E402
from posenc.check.run_impl import run_implementations  # noqa: E402
from posenc.impl.builtin import load_builtin  # noqa: E402


@pytest.fixture(scope="module")
def records():
    [impl] = load_builtin("keras-hub")
    cases = [c for c in all_cases() if c.family in ("rope", "sinusoidal", "alibi")]
    return run_implementations(cases, [impl], dtypes=["float32", "bfloat16", "float16"])


def test_rotary_embedding_passes_what_it_expresses(records):
    rope = [r for r in records if r.family == "rope" and r.status != "skip"]
    assert len(rope) >= 60 and all(r.status == "pass" for r in rope), [
        (r.convention, r.case, r.dtype, r.diagnosis) for r in rope if r.status != "pass"]
    assert {"half-linear", "half-keras-hub-dynamic", "half-yarn", "half-keras-hub-yarn", "hf-llama",
            "gpt-neox"} <= {r.convention for r in rope}


def test_sine_position_encoding_fails_in_half_precision_and_is_named(records):
    sine = [r for r in records if r.family == "sinusoidal" and r.status != "skip"]
    assert {r.status for r in sine if r.dtype == "float32"} == {"pass"}
    half = [r for r in sine if r.dtype != "float32"]
    assert half and all(r.status == "fail" for r in half)
    diagnoses = Counter(r.diagnosis for r in half)
    # SinePositionEncoding computes in the layer's compute dtype throughout (positions, frequencies, angles,
    # sin and cos): named exactly; float16 positions past 65504 are inf
    assert diagnoses["compute-dtype"] >= 8 and set(diagnoses) <= {"compute-dtype", "non-finite"}, diagnoses


def test_alibi_is_a_stated_skip(records):
    alibi = [r for r in records if r.family == "alibi"]
    assert alibi and all(r.status == "skip" for r in alibi)
    assert any("m_h (j - (k - 1))" in r.message for r in alibi)
