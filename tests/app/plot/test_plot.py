"""`posenc plot`: every figure from one command, the plotted numbers against the spec, bad input exits 2."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

import posenc_np
from posenc.cli import main
from posenc.plot import figures as plot
from posenc_np.testing import compare, tolerance

try:
    import matplotlib.backends.backend_agg  # noqa: F401
except ImportError as error:  # one clear failure rather than a test-by-test traceback
    pytest.fail(f"matplotlib does not import ({error}): install the test dependencies, "
                f"pip install -e '.[all,dev]'", pytrace=False)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

FIGURE_COMMANDS = {
    "table-sinusoidal": ["table", "--encoding", "sinusoidal"],
    "table-t2t-torch": ["table", "--convention", "tensor2tensor", "--backend", "torch"],
    "table-rope-neox": ["table", "--convention", "gpt-neox", "--positions", "32"],
    "table-learned": ["table", "--encoding", "learned", "--positions", "16", "--dim", "8"],
    "rope-decay": ["rope-decay", "--max-distance", "64", "--scaling", '{"rope_type": "linear", "factor": 4}'],
    "bias-alibi": ["bias", "--encoding", "alibi", "--heads", "4", "--length", "16"],
    "bias-t5": ["bias", "--encoding", "t5-decoder", "--heads", "2", "--length", "16"],
    "attention-maps": ["attention-maps", "--encodings", "sinusoidal,learned,rope,alibi,t5"],
    "diff": ["diff", "vaswani", "tensor2tensor", "--positions", "16", "--dim", "8"],
}


@pytest.mark.parametrize("name", list(FIGURE_COMMANDS))
def test_each_figure_is_one_command(name, tmp_path, capsys):
    out = tmp_path / f"{name}.png"
    assert main(["plot", *FIGURE_COMMANDS[name], "--out", str(out), "--dpi", "40"]) == 0, capsys.readouterr().err
    data = out.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 2000
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary file left behind


def test_experiment_report_plot(tmp_path):
    report = {"eval_lengths": [32, 64], "config": {"train_len": 32},
              "rows": [{"encoding": "rope", "ppl": {"32": 5.0, "64": 6.5}},
                       {"encoding": "alibi", "ppl": {"32": 5.5, "64": 5.4}}]}
    (tmp_path / "r.json").write_text(__import__("json").dumps(report))
    out = tmp_path / "ppl.png"
    assert main(["plot", "experiment", str(tmp_path / "r.json"), "--out", str(out)]) == 0
    lines = plot.figure_experiment(str(tmp_path / "r.json")).axes[0].get_lines()
    np.testing.assert_array_equal(lines[0].get_ydata(), [5.0, 6.5])
    assert [line.get_label() for line in lines[:2]] == ["rope", "alibi"]


def test_svg_by_suffix(tmp_path):
    out = tmp_path / "diff.svg"
    saved = os.umask(0o022)
    try:
        assert main(["plot", "diff", "meta-llama", "hf-llama", "--positions", "8", "--dim", "8", "--out",
                     str(out)]) == 0
    finally:
        os.umask(saved)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # an ordinary file, as every posenc output
    text = out.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text


def test_table_matches_spec(backend):
    """The plotted table is the backend's output, within the float32 tolerance of the spec."""
    title, panels, pos = plot.encoding_tables("fairseq", 40, 16, backend=backend.name)
    conv = posenc_np.conventions["fairseq"]
    assert pos[0] == conv.position_offset and backend.name in title
    desired = posenc_np.sinusoidal(np.arange(2, 42), 16, **conv.params)
    result = compare(panels["sinusoidal"], desired, tolerance("float32", max_angle=41.0))
    assert result.passed, result


def test_rope_table_is_cos_sin_in_the_convention_layout():
    _, panels, _ = plot.encoding_tables("meta-llama", 12, 8)
    cos, sin = posenc_np.rope_cos_sin(np.arange(12), 8, layout="interleaved")
    np.testing.assert_array_equal(panels["cos"], cos)
    np.testing.assert_array_equal(panels["sin"], sin)


def test_rope_decay_curves_follow_roformer():
    dim = 64
    d, upper, logits = plot.rope_decay_curves(dim, 300)
    inv_freq, _ = posenc_np.rope_frequencies(dim)
    # q = k = ones: each rotated pair contributes 2 cos(m theta_j)
    closed = 2 * np.cos(d[:, None] * inv_freq[None, :]).sum(axis=1)
    result = compare(logits, closed, tolerance("float64", scale=dim))
    assert result.passed, result
    # at m = 0, |S_j| = j + 1, so the bound is the mean of 1 .. d/2; it then decays (RoFormer sec. 3.4.3)
    assert upper[0] == pytest.approx((dim // 2 + 1) / 2)
    assert upper[-100:].mean() < upper[0] / 3


def test_position_interpolation_slows_the_decay():
    _, plain, _ = plot.rope_decay_curves(64, 200)
    _, stretched, _ = plot.rope_decay_curves(64, 200, scaling={"rope_type": "linear", "factor": 4.0})
    # PI divides the frequencies by 4: the bound at distance 4m equals the plain bound at m
    np.testing.assert_allclose(stretched[::4], plain[: len(stretched[::4])], rtol=1e-9)


@pytest.mark.parametrize("encoding", plot.ATTENTION_ENCODINGS)
def test_attention_weights_are_distributions(encoding):
    words = "to be or not to be".split()
    weights, _ = plot.attention_weights(encoding, words, 16, causal=True)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-12)
    assert np.all(np.triu(weights, 1) == 0)


def test_attention_map_repeats_a_repeated_word_only_without_position():
    """'to be' occurs twice: with no encoding both copies attend identically; with sinusoids they differ."""
    words = "to be or not to be".split()
    none, _ = plot.attention_weights("none", words, 32)
    sinus, _ = plot.attention_weights("sinusoidal", words, 32)
    np.testing.assert_allclose(none[0], none[4], rtol=1e-12)
    assert np.abs(sinus[0] - sinus[4]).max() > 1e-3


def test_trained_table_is_used(tmp_path, capsys):
    table = np.random.default_rng(1).normal(size=(30, 12))
    path = tmp_path / "t.npy"
    np.save(path, table)
    figure = plot.figure_table(encoding="learned", table=plot.load_table(str(path)), dim=64, positions=30)
    image = figure.axes[0].images[0].get_array()
    np.testing.assert_array_equal(np.asarray(image), table)


@pytest.mark.parametrize("argv, needle", [
    (["table", "--encoding", "sinusiodal"], "sinusiodal"),
    (["table", "--convention", "t5"], "t5"),
    (["bias", "--encoding", "rope"], "rope"),
    (["attention-maps", "--encodings", "sinusoidal,relative"], "relative"),
    (["rope-decay", "--scaling", "{linear"], "{linear"),
    (["rope-decay", "--scaling", '{"rope_type": "linear"}'], "factor"),
    (["table", "--dim", "7"], "dim"),
    (["diff", "vaswani", "hf-llama"], "different encodings"),
    (["table", "--table", "/nonexistent/t.npy"], "/nonexistent/t.npy"),
    (["experiment", "/nonexistent/r.json"], "/nonexistent/r.json"),
    (["bias", "--encoding", "t5", "--table", "/nonexistent/t.npy"], "/nonexistent/t.npy"),
])
def test_bad_input_exits_2(argv, needle, tmp_path, capsys):
    out = tmp_path / "x.png"
    assert main(["plot", *argv, "--out", str(out)]) == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("out, needle", [("missing/x.png", "does not exist"), ("x.jpg", ".png")])
def test_unwritable_output_exits_2(out, needle, tmp_path, capsys):
    assert main(["plot", "table", "--out", str(tmp_path / out)]) == 2
    assert needle in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_schedule_figure_from_a_config_json(tmp_path, capsys):
    """`posenc plot schedule --config config.json`: layer x (base, scaling type, NoPE) of Llama 4 and Gemma 3."""
    from posenc.check.cases_schedule import CONFIGS

    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS["llama4"]))
    out = tmp_path / "schedule.png"
    assert main(["plot", "schedule", "--config", str(path), "--out", str(out), "--dpi", "40"]) == 0
    assert out.read_bytes().startswith(PNG_SIGNATURE)
    rows, _ = plot.schedule_rows(str(path))
    assert rows == [(i, 500000.0, "llama3", 16, "interleaved") for i in range(3)] + [(3, None, "NoPE", 0, "")]
    gemma, _ = plot.schedule_rows(CONFIGS["gemma3"])  # a dict works too: sliding 1e4 default, global 1e6 linear
    assert [(r[1], r[2]) for r in gemma] == [(1e4, "default"), (1e6, "linear")] * 2
    assert plot.figure_schedule(config=CONFIGS["deepseek-v3"]).get_suptitle().endswith("(MLA rope slice)")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**CONFIGS["llama4"], "model_type": "gemma3_text"}))  # no_rope_layers: meaning unknown
    assert main(["plot", "schedule", "--config", str(bad), "--out", str(tmp_path / "x.png")]) == 2
    assert "no_rope_layers is read only for" in capsys.readouterr().err


# --- the research encodings and the research experiment rows ---------------------------------

@pytest.mark.parametrize("encoding", plot.RESEARCH_ENCODINGS)
def test_research_figure_is_one_command(encoding, tmp_path, capsys):
    out = tmp_path / f"{encoding}.png"
    assert main(["plot", "research", "--encoding", encoding, "--heads", "2", "--length", "12", "--dim", "8",
                 "--out", str(out), "--dpi", "40"]) == 0
    assert out.read_bytes().startswith(PNG_SIGNATURE)


def test_research_arrays_are_the_spec_and_the_backend():
    """The plotted arrays are posenc_np's (the init drawn from the seed), and torch's agree within the float32
    tolerance."""
    pos = np.arange(10)
    rng = np.random.default_rng(3)
    r1, r2 = rng.uniform(0, 2, 4), rng.uniform(0, 1, 4)
    _, bias = plot.research_arrays("kerple-log", heads=4, length=10, seed=3)
    np.testing.assert_array_equal(bias, posenc_np.kerple_bias(np.maximum(r1, 0.01), np.maximum(r2, 0.01), pos, pos))
    _, sandwich = plot.research_arrays("sandwich", heads=4, length=10, dim=16)
    np.testing.assert_array_equal(sandwich, posenc_np.sandwich_bias(4, pos, pos, dim=16))
    _, buckets = plot.research_arrays("deberta", length=40)
    np.testing.assert_array_equal(buckets[0], posenc_np.build_relative_position(
        np.arange(40), np.arange(40), bucket_size=16, max_position=40))
    _, scale = plot.research_arrays("xpos", length=10, dim=8)
    np.testing.assert_array_equal(scale, posenc_np.xpos_scale(pos, 8))
    for encoding in ("fire", "dynamic"):
        spec = plot.research_arrays(encoding, heads=3, length=10, dim=8)[1]
        torch_values = plot.research_arrays(encoding, heads=3, length=10, dim=8, backend="torch")[1]
        compare(torch_values, spec, tolerance("float32"))


def test_research_figure_uses_trained_weights(tmp_path):
    """`--weights` from `posenc experiment --save-weights`: KERPLE's r1, r2 (clamped as the module does), the
    dynamic projection."""
    np.save(tmp_path / "r1.npy", np.array([0.5, 1.0]))
    np.save(tmp_path / "r2.npy", np.array([0.001, 3.0]))
    weights = [plot.load_table(str(tmp_path / f"r{i}.npy"), ndim=None) for i in (1, 2)]
    _, bias = plot.research_arrays("kerple-power", length=6, weights=weights)
    pos = np.arange(6)
    np.testing.assert_allclose(bias, posenc_np.kerple_bias([0.5, 1.0], [0.01, 2.0], pos, pos, kernel="power"))
    weight, b = np.eye(4), np.arange(4.0)
    _, table = plot.research_arrays("dynamic", length=5, weights=[weight, b])
    np.testing.assert_allclose(table, posenc_np.sinusoidal(np.arange(5), 4) + b)
    assert main(["plot", "research", "--encoding", "kerple-log", "--weights", str(tmp_path / "r1.npy"),
                 "--out", str(tmp_path / "x.png")]) == 2


def test_experiment_plot_shows_the_spread_over_seeds(tmp_path):
    report = {"eval_lengths": [32, 64], "config": {"train_len": 32}, "seeds": [0, 1],
              "rows": [{"encoding": "kerple-log", "ppl": {"32": 5.0, "64": 5.1}, "ppl_std": {"32": 0.1, "64": 0.2}},
                       {"encoding": "learned+crop", "ppl": {"32": 5.5, "64": 7.0}, "ppl_std": {"32": 0.0, "64": 0.3}}]}
    (tmp_path / "r.json").write_text(json.dumps(report))
    ax = plot.figure_experiment(str(tmp_path / "r.json")).axes[0]
    labelled = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert [line.get_label() for line in labelled] == ["kerple-log", "learned+crop"]
    assert [line.get_linestyle() for line in labelled] == ["--", ":"]  # research dashed, tricks dotted
    bars = [c for c in ax.collections if len(c.get_segments()) == 2]  # one vertical bar per length
    spans = sorted(round(float(np.ptp([p[1] for p in seg])), 6) for c in bars for seg in c.get_segments())
    assert spans == [0.0, 0.2, 0.4, 0.6]  # 2 std


@pytest.mark.parametrize("argv, needle", [
    (["--encoding", "rope"], "kerple-log"),
    (["--encoding", "sandwich", "--dim", "7"], "dim"),
    (["--encoding", "kerple-log", "--heads", "0"], "--heads=0"),
])
def test_research_bad_input_exits_2(argv, needle, tmp_path, capsys):
    assert main(["plot", "research", *argv, "--out", str(tmp_path / "x.png")]) == 2
    assert needle in capsys.readouterr().err
