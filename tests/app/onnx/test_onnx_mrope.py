"""ONNX graphs: multi-axis RoPE through ONNX Runtime's contrib `com.microsoft.MRotaryEmbedding` (onnxruntime
1.32's schema: x, position_ids [3, batch, seq], cos/sin caches; `mrope_layout` 0 chunked, 1 interleaved), and
the sinusoid computed in the graph from float64 angles. Reference: the float64 spec (`posenc_np`).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

import posenc_np  # noqa: E402
from posenc import cli  # noqa: E402
from posenc.check.cases_mrope import mixed_prompt_positions  # noqa: E402
from posenc.onnx import graphs as G  # noqa: E402
from posenc_np.conventions import conventions  # noqa: E402
from posenc_np.testing import compare, tolerance  # noqa: E402


@pytest.mark.parametrize("name", ["qwen2-vl", "qwen3-vl"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_mrope_model_matches_the_spec_on_a_text_image_video_prompt(name, dtype):
    params = {k: v for k, v in conventions[name].params.items() if k != "mrope_frequencies"}
    head_dim = 2 * sum(params["mrope_section"]) if not params.get("rotary_dim") else params["rotary_dim"]
    positions = mixed_prompt_positions()  # [3, batch 2, 1, seq]: text, image grids, a video, text again
    seq = positions.shape[-1]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, seq, head_dim)).astype(dtype)
    model = G.mrope_model(head_dim=head_dim, max_len=max(int(positions.max()) + 1, seq), dtype=dtype, **params)
    assert {(o.domain, o.version) for o in model.opset_import} == {("", G.OPSET), (G.CONTRIB_DOMAIN, 1)}
    assert {p.key: p.value for p in model.metadata_props}[G.REQUIRES_KEY].endswith("(MRotaryEmbedding)")
    feeds = {"x": x, "positions": np.ascontiguousarray(positions[:, :, 0, :]).astype(np.int64)}
    for optimize in (False, True):
        y = G.run_model(model, feeds, optimize=optimize)
        desired = posenc_np.apply_rope(x.astype(np.float64), positions, **params)
        assert compare(y, desired, tolerance(dtype, scale=float(np.abs(desired).max()))).passed
    # the other layout is a different rotation: the flag is not decorative
    other = G.mrope_model(head_dim=head_dim, max_len=max(int(positions.max()) + 1, seq), dtype=dtype,
                          **{**params, "mrope_interleaved": not params.get("mrope_interleaved", False)})
    assert not compare(G.run_model(other, feeds), desired, tolerance(dtype, scale=1.0)).passed


def test_mrope_model_refuses_what_the_operator_cannot_express():
    with pytest.raises(G.NotExportable, match="three position axes"):
        G.mrope_model(head_dim=16, max_len=8, mrope_section=[4, 4])
    with pytest.raises(G.NotExportable, match="one fixed cos/sin cache"):
        G.mrope_model(head_dim=16, max_len=8, mrope_section=[2, 3, 3],
                      scaling={"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4})


@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_computed_sinusoid_works_at_any_position(layout):
    """No table: positions up to 2**40 give the spec's float64 values rounded once to float32."""
    model = G.sinusoidal_computed_model(dim=128, layout=layout, denominator="dim")
    positions = np.array([[0, 1, 2, 4095, 2 ** 20, 2 ** 20 + 1, 2 ** 30, 2 ** 40]], np.int64)
    table = G.run_model(model, {"positions": positions})
    desired = posenc_np.sinusoidal(positions, 128, layout=layout)
    assert table.dtype == np.float32 and table.shape == (1, 8, 128)
    assert compare(table, desired, tolerance("float32", scale=1.0)).passed
    # a float32 angle (the usual in-graph shortcut) is off by whole radians at 2**20: the bound is not loose
    shortcut = np.sin(positions[0, 4].astype(np.float32) * posenc_np.sinusoid_inv_freq(128).astype(np.float32))
    assert np.abs(shortcut - np.sin(2.0 ** 20 * posenc_np.sinusoid_inv_freq(128))).max() > 1e-3


def test_posenc_check_onnx_runs_the_multi_axis_cases(tmp_path):
    out = tmp_path / "check.json"
    assert cli.main(["check", "--backend", "onnx", "--encoding", "qwen2-vl,qwen3-vl", "-q", "--json", str(out)]) == 0
    records = json.loads(out.read_text())["records"]
    ran = [r for r in records if r["status"] == "pass"]
    assert ran and not [r for r in records if r["status"] in ("fail", "error")]
    assert not [r for r in records if r["status"] == "skip" and r["dtype"] != "bfloat16"], records


def test_export_multi_axis_and_unbounded_sinusoid(tmp_path, capsys):
    """`posenc export` of both Qwen layouts writes a contrib-domain model and says so; a sinusoidal convention
    without --max-len computes the sinusoid in the graph (no table) and works at 2**20; with it, a table."""
    from posenc.onnx.export import export

    for name in ("qwen2-vl", "qwen3-vl"):
        out = tmp_path / f"{name}.onnx"
        assert cli.main(["export", name, "--out", str(out), "--head-dim", "128"]) == 0
        assert G.CONTRIB_DOMAIN in capsys.readouterr().out
        model = onnx.load(str(out))
        node = [n for n in model.graph.node if n.op_type == "MRotaryEmbedding"][0]
        layout = [a.i for a in node.attribute if a.name == "mrope_layout"][0]
        assert layout == (1 if name == "qwen3-vl" else 0)
        assert [d.dim_value or d.dim_param for d in model.graph.input[1].type.tensor_type.shape.dim] == [3, "batch",
                                                                                                       "seq"]
    result = export("vaswani", tmp_path / "pe.onnx", dim=64)
    assert result.passed and all(len(i.dims) <= 1 for i in onnx.load(str(tmp_path / "pe.onnx")).graph.initializer)
    session = G.session(onnx.load(str(tmp_path / "pe.onnx")))
    positions = np.array([[2 ** 20, 2 ** 20 + 3]], np.int64)
    table = session.run(None, {"positions": positions})[0]
    assert compare(table, posenc_np.sinusoidal(positions, 64), tolerance("float32", scale=1.0)).passed
    tabled = export("vaswani", tmp_path / "pe128.onnx", dim=64, max_len=128)
    assert tabled.passed and onnx.load(str(tmp_path / "pe128.onnx")).graph.initializer[0].dims[0] == 128
