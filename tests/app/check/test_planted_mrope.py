"""Multi-axis RoPE porting bugs, planted into one backend at run time: `posenc check` must turn red, and
`posenc doctor` must name each one from the two outputs (docs/conventions.md §3.16).

The plants (written once for every package, the spec included, so the doctor test can feed the spec's
planted output):
* contiguous instead of interleaved sections (a Qwen3-VL model run with Qwen2-VL's map, or the reverse);
* height and width swapped (`position_ids` rows 1 and 2 exchanged);
* the section doubled by value instead of repeated for the two halves (`np.array([16, 24, 24]) * 2` channel
  blocks: the two channels of a pair read different axes).
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np
from helpers import FAST
from posenc.check.cases_mrope import mixed_prompt_positions
from posenc.cli import main
from posenc.port.doctor import diagnose
from posenc_np.conventions import conventions


def _ops(module):
    """(as_array, take rows of the leading axis, concat on the last axis) for the package under test."""
    name = module.__name__
    if name == "posenc_torch":
        import torch
        return (lambda a, like: torch.as_tensor(a, dtype=like.dtype)), (lambda t, idx: t[list(idx)]), \
            (lambda ts: torch.cat(ts, -1))
    if name == "posenc_tf":
        import tensorflow as tf
        return (lambda a, like: tf.constant(a, dtype=like.dtype)), (lambda t, idx: tf.gather(t, list(idx))), \
            (lambda ts: tf.concat(ts, -1))
    if name == "posenc_jax":
        import jax.numpy as jnp
        return (lambda a, like: jnp.asarray(a, dtype=like.dtype)), (lambda t, idx: t[jnp.asarray(idx)]), \
            (lambda ts: jnp.concatenate(ts, -1))
    if name == "posenc_mlx":
        import mlx.core as mx
        return (lambda a, like: mx.array(a, dtype=like.dtype)), (lambda t, idx: t[mx.array(list(idx))]), \
            (lambda ts: mx.concatenate(ts, -1))
    return (lambda a, like: np.asarray(a, dtype=like.dtype)), (lambda t, idx: t[list(idx)]), \
        (lambda ts: np.concatenate(ts, -1))


def _contiguous_for_interleaved(module):
    original = module.apply_rope

    def planted(x, positions, *, mrope_section=None, mrope_interleaved=False, **kwargs):
        if mrope_section is not None:
            mrope_interleaved = not mrope_interleaved
        return original(x, positions, mrope_section=mrope_section, mrope_interleaved=mrope_interleaved, **kwargs)
    return "apply_rope", planted


def _height_width_swapped(module):
    original = module.apply_rope
    _, take, _ = _ops(module)

    def planted(x, positions, *, mrope_section=None, **kwargs):
        if mrope_section is not None:
            axes = int(positions.shape[0])
            positions = take(positions, [0, 2, 1] if axes == 3 else [1, 0])
        return original(x, positions, mrope_section=mrope_section, **kwargs)
    return "apply_rope", planted


def _section_not_doubled(module):
    """Channel c reads axis `repeat(arange(3), 2 * section)[c]`: cos/sin built per axis, then the blocks
    [2 s_t, 2 s_h, 2 s_w] taken over the whole head, and HF's `x * cos + rotate_half(x) * sin`."""
    original = module.apply_rope
    as_array, _, concat = _ops(module)

    def planted(x, positions, *, mrope_section=None, mrope_interleaved=False, layout="half", **kwargs):
        if mrope_section is None or mrope_interleaved or layout != "half" or isinstance(mrope_section, int):
            return original(x, positions, mrope_section=mrope_section, mrope_interleaved=mrope_interleaved,
                            layout=layout, **kwargs)
        r = 2 * sum(mrope_section)
        by_value = np.repeat(np.arange(len(mrope_section)), 2 * np.asarray(mrope_section))
        cos = sin = 0
        for axis in range(len(mrope_section)):
            c, s = module.rope_cos_sin(positions[axis], r, base=kwargs.get("base", 10000.0),
                                       scaling=kwargs.get("scaling"))
            mask = as_array((by_value == axis).astype(np.float32), c)
            cos, sin = cos + c * mask, sin + s * mask
        xf = x[..., :r]
        cos, sin = as_array(np.zeros(()), xf) + cos, as_array(np.zeros(()), xf) + sin
        rotated = xf * cos + concat([-xf[..., r // 2:], xf[..., : r // 2]]) * sin
        return concat([rotated, x[..., r:]]) if x.shape[-1] > r else rotated
    return "apply_rope", planted


PLANTS = {
    "contiguous instead of interleaved": (_contiguous_for_interleaved, "qwen3-vl", "mrope-interleaving"),
    "height/width swapped": (_height_width_swapped, "qwen2-vl", "mrope-height-width"),
    "section not doubled": (_section_not_doubled, "qwen2-vl", "mrope-section-not-doubled"),
    "vision tower height/width swapped": (_height_width_swapped, "pixtral", None),
}


@pytest.mark.parametrize("plant", list(PLANTS))
def test_planted_mrope_mismatch_turns_the_run_red(plant, backend, monkeypatch, capsys):
    make, convention, _ = PLANTS[plant]
    name, planted = make(backend.module)
    monkeypatch.setattr(backend.module, name, planted)
    code = main(["check", "--encoding", convention, "--backend", backend.name, "--dtype", "float32", *FAST])
    out = capsys.readouterr().out
    assert code == 1, out
    failures = out.split("PASSED")[0]
    assert convention in failures and backend.name in failures


@pytest.mark.parametrize("plant", [p for p in PLANTS if PLANTS[p][2]])
def test_doctor_names_the_planted_mismatch(plant):
    """The spec's output and the planted one on a real mixed prompt (text, image, video): doctor names the bug."""
    make, convention, key = PLANTS[plant]
    _, planted = make(posenc_np)
    params = dict(conventions[convention].params)
    positions = mixed_prompt_positions()
    x = np.random.default_rng(0).standard_normal((2, 1, positions.shape[-1], 128)).astype(np.float32)
    good = posenc_np.apply_rope(x, positions, **params)
    bad = planted(x, positions, **params)
    assert np.abs(good - bad).max() > 1e-2
    diagnosis = diagnose(good, bad)
    assert diagnosis.explained and diagnosis.mismatch == key, diagnosis.text()


def test_doctor_sees_no_mismatch_on_text_only_ids():
    """Text tokens carry the same id on every axis: every layout gives the same rotation, nothing to name."""
    params = dict(conventions["qwen3-vl"].params)
    positions = np.broadcast_to(np.arange(12), (3, 12))
    x = np.random.default_rng(1).standard_normal((12, 128))
    _, planted = _contiguous_for_interleaved(posenc_np)
    assert diagnose(posenc_np.apply_rope(x, positions, **params), planted(x, positions, **params)).mismatch == \
        "identical"


def test_plot_draws_the_assignment(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "mrope.png"
    assert main(["plot", "mrope", "--convention", "qwen3-vl", "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000
    assert main(["plot", "mrope", "--convention", "hf-llama", "--out", str(tmp_path / "x.png")]) == 2
    assert "not a multi-axis RoPE convention" in capsys.readouterr().err


def test_plot_assignment_is_the_conventions_table():
    """The figure's data: Pixtral at head dim 16 reads the row on channels 0-3 and 8-11 with the even 1-D
    frequencies, the column elsewhere with the odd ones (docs/conventions.md §3.16)."""
    from posenc.plot.figures import mrope_assignment

    dim, axes, freqs, names = mrope_assignment("pixtral", 16)
    inv, _ = posenc_np.rope_frequencies(16)
    assert names == ("height", "width")
    assert axes.tolist() == [0, 0, 0, 0, 1, 1, 1, 1] * 2
    np.testing.assert_allclose(freqs[:8], np.concatenate([inv[0::2], inv[1::2]]))
