"""`posenc check --impl onnxruntime` runs to a verdict (onnxruntime installed): com.microsoft RotaryEmbedding
and MRotaryEmbedding, the opset-23 RotaryEmbedding and GroupQueryAttention's rotated present_key, fed the
spec's caches (precision class "table"), with a declared 4096-row cache: past it ONNX Runtime raises."""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("onnxruntime")

from posenc.check.registry import all_cases  # noqa: E402
from posenc.check.run_impl import run_implementations  # noqa: E402
from posenc.impl.builtin import load_builtin  # noqa: E402


@pytest.fixture(scope="module")
def records():
    impls = load_builtin("onnxruntime")
    assert [i.name for i in impls] == ["onnxruntime", "onnxruntime-opset23", "onnxruntime-gqa"]
    cases = [c for c in all_cases() if c.family == "rope"]
    return run_implementations(cases, impls, dtypes=["float32", "float16"])


def test_every_operator_passes_what_it_expresses(records):
    counts = Counter((r.backend, r.status) for r in records)
    assert counts["onnxruntime", "pass"] >= 80 and counts["onnxruntime-opset23", "pass"] >= 60
    assert counts["onnxruntime-gqa", "pass"] >= 40
    bad = [(r.backend, r.convention, r.case, r.dtype, r.message) for r in records if r.status in ("fail", "error")]
    assert bad == []


def test_mrope_runs_through_mrotary_embedding(records):
    mrope = {r.convention for r in records if r.backend == "onnxruntime" and r.status == "pass"}
    assert {"qwen2-vl", "qwen3-vl", "mrope-interleaved-dynamic", "mrope-contiguous-longrope"} <= mrope


@pytest.mark.parametrize("case", ["past-table", "offset-past-table", "decode-past-table", "negative-positions"])
def test_positions_outside_the_cache_are_refused(records, case):
    edge = [r for r in records if r.convention == "edge" and r.case == case and r.backend != "onnxruntime-gqa"]
    assert edge and all(r.status == "pass" and r.message.startswith("refused") for r in edge), edge
