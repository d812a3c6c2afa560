"""ONNX Runtime as a `posenc check` backend: registry cases on the exported graphs, skips with reasons,
the position shapes of the real fusion failures (onnxruntime #29618: batch > 1, packed batches), and the
ONNX plants (interleaved flag flipped; float32 caches) that must turn a check red."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

import posenc_np  # noqa: E402
from posenc.adapters import CHECK_BACKENDS, NotSupported, adapter  # noqa: E402
from posenc.check.registry import all_cases  # noqa: E402
from posenc.check.run import run  # noqa: E402
from posenc.cli import main  # noqa: E402
from posenc.onnx import graphs as G  # noqa: E402
from posenc_np.rope import rope_plan  # noqa: E402
from posenc_np.testing import rope_angle_error, tolerance  # noqa: E402

ONNX = adapter("onnx")


def test_onnx_is_in_the_default_matrix():
    assert "onnx" in CHECK_BACKENDS and ONNX.available()


@pytest.mark.parametrize("family", ["rope", "sinusoidal", "learned", "alibi", "t5", "relative"])
def test_registry_cases_pass_or_skip_with_a_reason(family):
    cases = [c for c in all_cases() if c.family == family]
    records = run(cases, backends=["onnx"], dtypes=["float32", "float16", "bfloat16"], modes=["eager", "jit"],
                  require=["onnx"])
    passed = [r for r in records if r.status == "pass"]
    assert passed, family
    for r in records:
        assert r.status in ("pass", "skip"), (r.case, r.dtype, r.mode, r.status, r.max_abs_err, r.tol, r.message)
        if r.status == "skip":
            assert r.message.startswith("not supported: "), r
    assert all(r.status == "skip" for r in records if r.dtype == "bfloat16")


@pytest.mark.parametrize("optimize", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_position_shapes_of_the_fusion_failures(layout, optimize):
    """batch > 1 with per-row offsets and packed sequences (positions restart inside a row), both x forms."""
    rng = np.random.default_rng(1)
    position_ids = np.array([[0, 1, 2, 3, 0, 1, 2, 0], [700, 701, 702, 703, 704, 705, 706, 707],
                             [0, 1, 0, 1, 2, 3, 4, 5]])
    x = rng.standard_normal((3, 4, 8, 32)).astype(np.float32)
    desired = posenc_np.apply_rope(x.astype(np.float64), position_ids[:, None, :], layout=layout, rotary_dim=24)
    tol = tolerance("float32", scale=float(np.abs(desired).max()))  # float64-reduced caches: no angle term
    for case_x, positions in ((x, position_ids[:, None, :]),  # [batch, heads, seq, dim]
                              (x.transpose(0, 2, 1, 3), position_ids[:, :, None])):  # [batch, seq, heads, dim]
        y = ONNX.call("apply_rope", (case_x, positions), {"layout": layout, "rotary_dim": 24},
                      mode="jit" if optimize else "eager", cache={})
        if case_x is not x:
            y = y.transpose(0, 2, 1, 3)
        assert np.abs(y - desired).max() <= tol.atol


def test_not_expressible_is_not_supported():
    x = np.zeros((1, 1, 4, 8), np.float32)
    with pytest.raises(NotSupported, match="dynamic"):
        ONNX.call("apply_rope", (x, np.arange(4)), {"scaling": {"rope_type": "dynamic", "factor": 2.0,
                                                                "original_max_position_embeddings": 4}})
    with pytest.raises(NotSupported, match="bfloat16"):
        ONNX.call("sinusoidal", (np.arange(4), 8), {"dtype": "bfloat16"})
    with pytest.raises(NotSupported, match="int64 positions"):
        ONNX.call("sinusoidal", (np.arange(4) * 0.5, 8), {"dtype": "float32"})


def test_compacted_cache_reads_longrope_length_from_true_positions():
    """Above COMPACT_ABOVE rows the suite compacts the cache; LongRoPE must still see max(positions) + 1."""
    scaling = {"rope_type": "longrope", "short_factor": [1.0, 1.2, 1.5, 2.0], "long_factor": [1.0, 2.0, 4.0, 8.0],
               "factor": 8.0, "original_max_position_embeddings": 64}
    x = np.random.default_rng(2).standard_normal((1, 1, 3, 8)).astype(np.float32)
    for positions in (np.array([0, 5, 63]), np.array([0, 5, 100_000])):  # short factors, then long ones
        y = ONNX.call("apply_rope", (x, positions), {"scaling": scaling}, cache={})
        desired = posenc_np.apply_rope(x.astype(np.float64), positions, scaling=scaling)
        assert np.abs(y - desired).max() < 1e-6


# --- plants -------------------------------------------------------------------------------------------

def _flip_interleaved(model):
    for node in model.graph.node:
        if node.op_type == "RotaryEmbedding":
            for attribute in node.attribute:
                if attribute.name == "interleaved":
                    attribute.i = 1 - attribute.i
    return model


def _float32_caches(max_len, rotary_dim, *, base=10000.0, scaling=None, cache_positions=None):
    """The common exporter shortcut: angles p * inv_freq formed in float32, no float64 reduction."""
    plan = rope_plan(rotary_dim, base=base, scaling=scaling)
    rows = np.arange(max_len) if cache_positions is None else np.asarray(cache_positions)
    angles = rows.astype(np.float32)[:, None] * (plan.turns * 2 * np.pi).astype(np.float32)
    scale = np.float32(plan.attention_scale)
    return np.cos(angles) * scale, np.sin(angles) * scale


def test_flipped_interleaved_flag_turns_the_check_red(monkeypatch, capsys):
    original = G.rope_model
    monkeypatch.setattr(G, "rope_model", lambda **kw: _flip_interleaved(original(**kw)))
    code = main(["check", "--encoding", "hf-llama,meta-llama", "--backend", "onnx", "--dtype", "float32",
                 "--quiet", "--jobs", "1"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "hf-llama" in out.split("PASSED")[0] and "meta-llama" in out.split("PASSED")[0]


def test_float32_caches_fail_the_cache_precision_bound(monkeypatch):
    """Exported caches hold float64-reduced angles: within 1e-6 rad of the spec at every row up to 2**20.
    float32 p * inv_freq caches miss that by orders of magnitude at long positions."""
    rows = np.array([0, 1, 4097, 65537, 300001, 2**20 - 1])
    good = G.rope_caches(None, 128, base=500000.0, cache_positions=rows)
    good32 = tuple(c.astype(np.float32) for c in good)
    assert rope_angle_error(*good32, rows, 128, base=500000.0) < 1e-6
    bad = _float32_caches(None, 128, base=500000.0, cache_positions=rows)
    assert rope_angle_error(*bad, rows, 128, base=500000.0) > 1e-2


def test_float32_caches_turn_the_check_red(monkeypatch, capsys):
    """RoPE cases hold every path to the 1e-6 rad angle goal (posenc_np.testing.ROPE_ANGLE_GOAL), so caches
    built from float32 p * inv_freq fail `posenc check` itself, not only the exporter's own bound."""
    monkeypatch.setattr(G, "rope_caches", lambda max_len, rotary_dim, *, base=10000.0, scaling=None,
                        cache_positions=None: _float32_caches(max_len, rotary_dim, base=base, scaling=scaling,
                                                              cache_positions=cache_positions))
    code = main(["check", "--encoding", "hf-llama", "--backend", "onnx", "--dtype", "float32", "--quiet",
                 "--jobs", "1"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "hf-llama" in out.split("PASSED")[0]
