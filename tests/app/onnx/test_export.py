"""`posenc export` and `torch.onnx.export` of posenc's torch modules: models that ONNX Runtime loads and
that agree with the float64 spec (and with `onnx.reference` where it implements the operator)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import posenc_np  # noqa: E402
from posenc.cli import main  # noqa: E402
from posenc.onnx import graphs as G  # noqa: E402
from posenc.onnx.export import export  # noqa: E402
from posenc_np.rope import rope_plan  # noqa: E402
from posenc_np.testing import tolerance  # noqa: E402

LLAMA3 = '{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, ' \
         '"original_max_position_embeddings": 256}'


def _load(path):
    model = onnx.load(str(path))
    assert (model.ir_version, model.opset_import[0].version) == (G.IR_VERSION, G.OPSET) == (11, 23)
    return model


def _x(shape, dtype=np.float32):
    return np.random.default_rng(3).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("argv, params", [
    (["hf-llama", "--head-dim", "32", "--max-len", "1024", "--base", "500000", "--scaling", LLAMA3],
     dict(layout="half", base=500000.0)),
    (["meta-llama", "--head-dim", "32", "--max-len", "1024"], dict(layout="interleaved")),
    (["gpt-neox", "--head-dim", "32", "--max-len", "1024"], dict(layout="half", rotary_pct=0.25)),
    (["gptj", "--head-dim", "80", "--max-len", "1024", "--dtype", "float16"], dict(layout="interleaved", rotary_dim=64)),
])
def test_rotary_export_runs_with_new_batch_and_length(argv, params, tmp_path, capsys):
    out = tmp_path / "rope.onnx"
    assert main(["export", *argv, "--out", str(out)]) == 0, capsys.readouterr()
    model = _load(out)
    assert [n.op_type for n in model.graph.node if n.op_type == "RotaryEmbedding"] == ["RotaryEmbedding"]
    assert [i.name for i in model.graph.input] == ["x", "positions"] and model.graph.output[0].name == "y"
    dtype = np.float16 if "float16" in argv else np.float32
    head_dim = int(argv[argv.index("--head-dim") + 1])
    x = _x((3, 2, 5, head_dim), dtype)  # batch and seq differ from export's own check
    positions = np.array([[0, 1, 2, 3, 4], [1019, 1020, 1021, 1022, 1023], [7, 8, 0, 1, 2]])  # offsets, packed
    scaling = {"scaling": __import__("json").loads(LLAMA3)} if "--scaling" in argv else {}
    desired = posenc_np.apply_rope(x.astype(np.float64), positions[:, None, :], **params, **scaling)
    tol = tolerance(np.dtype(dtype).name, scale=float(np.abs(desired).max()))
    for optimize in (False, True):
        y = G.run_model(model, {"x": x, "positions": positions}, optimize=optimize)
        assert y.dtype == dtype and np.abs(y - desired).max() <= tol.atol
    if dtype == np.float32:  # onnx.reference implements RotaryEmbedding (opset 23)
        from onnx.reference import ReferenceEvaluator

        reference = ReferenceEvaluator(model).run(None, {"x": x, "positions": positions})[0]
        assert np.abs(reference - desired).max() <= tol.atol


@pytest.mark.parametrize("name, argv, feeds, spec", [
    ("vaswani", ["--dim", "16", "--max-len", "64"], {"positions": np.array([[0, 5, 63], [1, 2, 3]])},
     lambda f, t: posenc_np.sinusoidal(f["positions"], 16)),
    ("tensor2tensor", ["--dim", "16", "--max-len", "64"], {"positions": np.array([[0, 5, 63]])},
     lambda f, t: posenc_np.sinusoidal(f["positions"], 16, layout="concat", denominator="half-1")),
    ("roberta", ["--table", "T:[514,8]"], {"positions": np.array([[1, 2, 513]])},
     lambda f, t: posenc_np.learned(t, f["positions"])),
    ("bloom-alibi", ["--heads", "12"], {"q_positions": np.arange(3, 6), "k_positions": np.arange(6)},
     lambda f, t: posenc_np.alibi_bias(12, f["q_positions"], f["k_positions"], form="bloom")),
    ("press-alibi", ["--heads", "6"], {"q_positions": np.arange(3, 6), "k_positions": np.arange(6)},
     lambda f, t: posenc_np.alibi_bias(6, f["q_positions"], f["k_positions"], form="causal")),
    ("t5", ["--table", "T:[32,4]"], {"q_positions": np.arange(0, 300, 7), "k_positions": np.arange(0, 300, 11)},
     lambda f, t: posenc_np.t5_bias(t, f["q_positions"], f["k_positions"])),
    ("t5-decoder", ["--table", "T:[32,4]"], {"q_positions": np.arange(40), "k_positions": np.arange(40)},
     lambda f, t: posenc_np.t5_bias(t, f["q_positions"], f["k_positions"], bidirectional=False)),
    ("hf-bert-relative-key", ["--table", "T:[15,4]"], {"q_positions": np.arange(8), "k_positions": np.arange(8)},
     lambda f, t: posenc_np.relative_embeddings(t, f["q_positions"], f["k_positions"], max_distance=7,
                                                sign="query-key")),
])
def test_absolute_and_bias_exports_match_spec_and_reference(name, argv, feeds, spec, tmp_path, capsys):
    table = None
    if "--table" in argv:
        shape = tuple(int(n) for n in argv[-1][3:-1].split(","))
        table = _x(shape)
        np.save(tmp_path / "t.npy", table)
        argv = [*argv[:-1], str(tmp_path / "t.npy")]
    out = tmp_path / f"{name}.onnx"
    assert main(["export", name, "--out", str(out), *argv]) == 0, capsys.readouterr()
    model = _load(out)
    desired = spec(feeds, None if table is None else table.astype(np.float64))
    exact = table is not None
    for optimize in (False, True):
        got = G.run_model(model, feeds, optimize=optimize)
        assert got.shape == desired.shape
        err = np.abs(got - desired).max()
        assert err == 0 if exact else err <= tolerance("float32", scale=float(np.abs(desired).max())).atol
    from onnx.reference import ReferenceEvaluator

    reference = ReferenceEvaluator(model).run(None, feeds)[0]
    assert np.array_equal(reference, G.run_model(model, feeds)) or not exact


@pytest.mark.parametrize("argv, words", [
    (["llama", "--head-dim", "8"], ["'llama'"]),
    (["hf-llama"], ["--head-dim"]),
    (["hf-llama", "--head-dim", "8", "--scaling", "{bad"], ["--scaling", "JSON"]),
    (["hf-llama", "--head-dim", "8", "--scaling", '{"rope_type": "dynamic", "factor": 2.0, '
                                                   '"original_max_position_embeddings": 8}'], ["dynamic"]),
    (["hf-llama", "--head-dim", "9"], ["9"]),
    (["gptj", "--head-dim", "32"], ["rotary_dim=64"]),
    (["t5"], ["--table"]),
    (["vaswani", "--dim", "8", "--scaling", "{}"], ["scaling"]),
    (["bloom-alibi"], ["--heads"]),
    (["kerple-log"], ["'kerple-log'", "kerple_bias"]),
])
def test_bad_input_exits_2_naming_it_and_writes_nothing(argv, words, tmp_path, capsys):
    out = tmp_path / "m.onnx"
    assert main(["export", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_bad_output_path_and_table_file_exit_2(tmp_path, capsys):
    assert main(["export", "vaswani", "--dim", "8", "--out", str(tmp_path / "no" / "m.onnx")]) == 2
    assert main(["export", "vaswani", "--dim", "8", "--out", str(tmp_path / "m.txt")]) == 2
    assert main(["export", "t5", "--table", str(tmp_path / "missing.npy"), "--out", str(tmp_path / "m.onnx")]) == 2
    assert "missing.npy" in capsys.readouterr().err


# --- plants: the export's own ONNX Runtime check must catch them, and nothing is written ---------------

def _float32_caches(max_len, rotary_dim, *, base=10000.0, scaling=None, cache_positions=None):
    plan = rope_plan(rotary_dim, base=base, scaling=scaling)
    angles = np.arange(max_len, dtype=np.float32)[:, None] * (plan.turns * 2 * np.pi).astype(np.float32)
    return np.cos(angles), np.sin(angles)


def _flip_interleaved(model):
    for node in model.graph.node:
        for attribute in node.attribute:
            if node.op_type == "RotaryEmbedding" and attribute.name == "interleaved":
                attribute.i = 1 - attribute.i
    return model


@pytest.mark.parametrize("plant", ["float32 caches", "interleaved flipped"])
def test_planted_export_fails_its_check(plant, monkeypatch, tmp_path, capsys):
    if plant == "float32 caches":
        monkeypatch.setattr(G, "rope_caches", _float32_caches)
    else:
        original = G.rope_model
        monkeypatch.setattr(G, "rope_model", lambda **kw: _flip_interleaved(original(**kw)))
    out = tmp_path / "m.onnx"
    assert main(["export", "hf-llama", "--head-dim", "64", "--max-len", "65536", "--out", str(out)]) == 1
    assert "FAILED" in capsys.readouterr().out and not out.exists()


def test_python_function_returns_the_checked_model():
    result = export("meta-llama", head_dim=16, max_len=32)
    assert result.passed and result.written is None and result.max_abs_err < 1e-6
    assert result.inputs == {"x": ["batch", "heads", "seq", 16], "positions": ["batch", "seq"]}


# --- torch.onnx.export (dynamo) of posenc_torch's modules --------------------------------------------------

def _torch_export(module, args, dynamic_shapes):
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, args, dynamo=True, dynamic_shapes=dynamic_shapes, verbose=False)
    return program.model_proto


@pytest.fixture(scope="module")
def torch_modules():
    torch = pytest.importorskip("torch")
    import posenc_torch

    torch.manual_seed(0)
    return torch, posenc_torch


def _run_two_lengths(model, make_feeds, spec):
    for n in (5, 11):  # the export traced length 8: both lengths must run and agree
        feeds = make_feeds(n)
        got = G.run_model(model.SerializeToString(), feeds)
        desired = spec(feeds)
        assert got.shape == desired.shape
        assert np.abs(got - desired).max() <= tolerance("float32", scale=float(np.abs(desired).max()),
                                                        slack_ulps=16).atol


def test_torch_modules_export_with_a_dynamic_length(torch_modules):
    torch, T = torch_modules
    seq, keys = torch.export.Dim("seq", min=2, max=4096), torch.export.Dim("keys", min=2, max=4096)
    rows = lambda n: np.stack([np.arange(n), np.arange(n) + 20])  # noqa: E731

    model = _torch_export(T.SinusoidalEncoding(16), (torch.tensor(rows(8)),), ({1: seq},))
    _run_two_lengths(model, lambda n: {model.graph.input[0].name: rows(n)},
                     lambda f: posenc_np.sinusoidal(next(iter(f.values())), 16))

    learned = T.LearnedEncoding(64, 16)
    model = _torch_export(learned, (torch.tensor(rows(8)),), ({1: seq},))
    table = learned.state_dict()[next(iter(learned.state_dict()))].numpy().astype(np.float64)
    _run_two_lengths(model, lambda n: {model.graph.input[0].name: rows(n)},
                     lambda f: posenc_np.learned(table, next(iter(f.values()))))

    x, positions = torch.randn(2, 2, 8, 16), torch.tensor(rows(8))[:, None, :]
    for rope in (T.RotaryEmbedding(16), T.RotaryEmbedding(16, max_len=64)):  # spec table / own cache
        model = _torch_export(rope, (x, positions), ({2: seq}, {2: seq}))
        names = [i.name for i in model.graph.input]
        _run_two_lengths(model, lambda n, names=names: {names[0]: _x((2, 2, n, 16)), names[1]: rows(n)[:, None, :] * 7},
                         lambda f, names=names: posenc_np.apply_rope(f[names[0]].astype(np.float64), f[names[1]]))

    model = _torch_export(T.ALiBi(4, form="causal"), (torch.arange(8), torch.arange(8)), ({0: seq}, {0: keys}))
    names = [i.name for i in model.graph.input]
    _run_two_lengths(model, lambda n: {names[0]: np.arange(n) + 3, names[1]: np.arange(n + 3)},
                     lambda f: posenc_np.alibi_bias(4, f[names[0]], f[names[1]], form="causal"))


def test_torch_modules_that_cannot_export_fail_as_documented(torch_modules):
    """docs/export.md lists these with the reason; when one starts exporting, this test says so."""
    torch, T = torch_modules
    seq, keys = torch.export.Dim("seq", min=2, max=4096), torch.export.Dim("keys", min=2, max=4096)
    # T5RelativeBias: the int32 buckets (t5_bucket's dtype) become GatherND indices, which ONNX refuses
    model = _torch_export(T.T5RelativeBias(4), (torch.arange(8), torch.arange(8)), ({0: seq}, {0: keys}))
    with pytest.raises(Exception, match="int32"):
        G.session(model.SerializeToString())
