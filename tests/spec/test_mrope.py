"""Multi-axis RoPE spec: its properties and its errors (NumPy only).

Properties: equal positions on every axis give plain 1-D RoPE (every scaling type); shifting one axis rotates
only that axis's pairs, and attention logits depend on each axis only through its relative offset; a swapped
section or a swapped (height, width) is visible; "per-axis" frequencies are 1-D RoPEs of each axis's width
side by side; "strided" frequencies are 1-D RoPE with the pairs reordered. The comparisons against
transformers and diffusers are tests/reference/test_mrope_reference.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from helpers import assert_close
from posenc_np.conventions import conventions
from posenc_np.mrope import mrope_axis_of_pair, mrope_channel_axes, mrope_position_ids, resolve_mrope_section
from posenc_np.testing import tolerance

F64 = tolerance("float64", scale=10.0)
ORIGINAL = 64
SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": ORIGINAL},
    "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": ORIGINAL},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": ORIGINAL},
    "longrope": {"rope_type": "longrope", "short_factor": [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0],
                 "long_factor": [1.0, 2.0, 3.0, 5.0, 8.0, 12.0, 16.0, 20.0], "factor": 8.0,
                 "original_max_position_embeddings": ORIGINAL},
}
LAYOUTS = [("contiguous", [2, 3, 3], False), ("interleaved", [4, 2, 2], True)]


def _x(shape=(2, 3, 9, 16), seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("scaling", list(SCALINGS))
@pytest.mark.parametrize("name, section, interleaved", LAYOUTS, ids=[layout[0] for layout in LAYOUTS])
def test_equal_positions_on_every_axis_give_1d_rope(name, section, interleaved, scaling):
    positions = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 8], [100, 101, 102, 103, 104, 105, 106, 107, 300]])[:, None, :]
    x = _x()
    one_d = pn.apply_rope(x, positions, scaling=SCALINGS[scaling])
    multi = pn.apply_rope(x, np.stack([positions] * 3), scaling=SCALINGS[scaling], mrope_section=section,
                          mrope_interleaved=interleaved)
    assert_close(multi, one_d, F64)
    cos_1d, sin_1d = pn.rope_cos_sin(positions, 16, scaling=SCALINGS[scaling])
    cos, sin = pn.rope_cos_sin(np.stack([positions] * 3), 16, scaling=SCALINGS[scaling], mrope_section=section,
                               mrope_interleaved=interleaved)
    assert cos.shape == cos_1d.shape
    assert_close(cos, cos_1d, F64)
    assert_close(sin, sin_1d, F64)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("name, section, interleaved", LAYOUTS, ids=[layout[0] for layout in LAYOUTS])
def test_shifting_one_axis_rotates_only_its_pairs(name, section, interleaved, layout):
    rng = np.random.default_rng(1)
    positions = rng.integers(0, 50, size=(3, 9))
    x = _x()
    kwargs = dict(layout=layout, mrope_section=section, mrope_interleaved=interleaved)
    base = pn.apply_rope(x, positions, **kwargs)
    channel_axis = mrope_channel_axes(16, mrope_section=section, mrope_interleaved=interleaved, layout=layout)
    for axis in range(3):
        shifted = positions.copy()
        shifted[axis] += 7
        moved = np.abs(pn.apply_rope(x, shifted, **kwargs) - base).max(axis=(0, 1, 2))
        assert np.all(moved[channel_axis != axis] == 0), (axis, moved)
        assert np.all(moved[channel_axis == axis] > 1e-3), (axis, moved)


@pytest.mark.parametrize("name", ["qwen2-vl-vision", "pixtral", "flux"])
def test_logits_depend_on_each_axis_only_through_the_offset(name):
    """q_m . k_n is unchanged when one axis of both q and k positions moves by the same amount."""
    params = conventions[name].params
    axes = 3 if name == "flux" else 2
    head_dim = 128 if name == "flux" else 24
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((2, 10, head_dim))
    pos = rng.integers(0, 30, size=(axes, 10))
    logits = pn.apply_rope(q, pos, **params) @ pn.apply_rope(k, pos, **params).T
    for axis in range(axes):
        moved = pos.copy()
        moved[axis] += 1000 + 17 * axis
        again = pn.apply_rope(q, moved, **params) @ pn.apply_rope(k, moved, **params).T
        assert_close(again, logits, tolerance("float64", max_angle=1100, scale=float(np.abs(logits).max())))


def test_swapped_sections_and_axes_are_visible():
    rng = np.random.default_rng(3)
    positions = rng.integers(0, 50, size=(3, 2, 9))
    x = _x((2, 3, 9, 16))
    ref = pn.apply_rope(x, positions[:, :, None], mrope_section=[2, 3, 3])
    swapped_section = pn.apply_rope(x, positions[:, :, None], mrope_section=[3, 2, 3])
    swapped_axes = pn.apply_rope(x, positions[[0, 2, 1]][:, :, None], mrope_section=[2, 3, 3])
    assert np.abs(ref - swapped_section).max() > 0.1
    assert np.abs(ref - swapped_axes).max() > 0.1
    # ... and invisible only when the swapped axes carry the same ids (text tokens)
    text = np.stack([positions[0]] * 3)
    assert_close(pn.apply_rope(x, text[:, :, None], mrope_section=[3, 2, 3]),
                 pn.apply_rope(x, text[:, :, None], mrope_section=[2, 3, 3]), F64)


def test_per_axis_frequencies_are_1d_ropes_side_by_side():
    """FLUX: channels [0, 16) are 1-D RoPE of width 16 over axis 0, [16, 72) width 56 over axis 1, ... ."""
    rng = np.random.default_rng(4)
    positions = rng.integers(0, 64, size=(3, 12))
    x = _x((2, 12, 128))
    mine = pn.apply_rope(x, positions, **conventions["flux"].params)
    start = 0
    for axis, width in enumerate((16, 56, 56)):
        block = pn.apply_rope(x[..., start:start + width], positions[axis], layout="interleaved")
        assert_close(mine[..., start:start + width], block, F64)
        start += width


@pytest.mark.parametrize("head_dim", [16, 20])
def test_strided_frequencies_are_1d_rope_reordered(head_dim):
    """Pixtral: the row turns with 1-D frequencies 0, 2, 4, ..., the column with 1, 3, 5, ... of the whole head."""
    inv, _ = pn.rope_frequencies(head_dim)
    positions = np.array([[3, 0, 5], [0, 4, 9]])
    cos, _ = pn.rope_cos_sin(positions, head_dim, **conventions["pixtral"].params)
    half = head_dim // 2
    rows, cols = inv[0::2], inv[1::2]
    expected = np.concatenate([positions[0][:, None] * rows, positions[1][:, None] * cols], -1)
    assert_close(cos[:, :half], np.cos(expected), F64)
    assert_close(cos[:, half:], np.cos(expected), F64)


def test_qwen2_vl_vision_gives_each_axis_its_own_frequency_set():
    inv_axis, _ = pn.rope_frequencies(8)  # head_dim 16: each axis a 1-D RoPE of width 8
    positions = np.array([[2, 7], [5, 1]])
    cos, _ = pn.rope_cos_sin(positions, 16, **conventions["qwen2-vl-vision"].params)
    expected = np.concatenate([positions[0][:, None] * inv_axis, positions[1][:, None] * inv_axis], -1)
    assert_close(cos[:, :8], np.cos(expected), F64)


def test_pair_maps():
    assert resolve_mrope_section(2, 10) == (3, 2)
    assert resolve_mrope_section([16, 24, 24], 128) == (16, 24, 24)
    assert mrope_axis_of_pair((2, 3, 3)).tolist() == [0, 0, 1, 1, 1, 2, 2, 2]
    # Qwen3-VL [24, 20, 20]: height on 1, 4, ..., 58; width on 2, 5, ..., 59; time on 0, 3, ..., 57 and 60..63
    axis = mrope_axis_of_pair((24, 20, 20), interleaved=True)
    assert np.flatnonzero(axis == 1).tolist() == list(range(1, 60, 3))
    assert np.flatnonzero(axis == 2).tolist() == list(range(2, 60, 3))
    assert np.flatnonzero(axis == 0).tolist() == list(range(0, 60, 3)) + [60, 61, 62, 63]


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(mrope_section=[16, 24, 24]), ValueError, "sums to 64 pairs, but rotary_dim=16 has 8"),
    (dict(mrope_section=[2, 0, 6]), ValueError, "positive integers"),
    (dict(mrope_section="thw"), TypeError, "mrope_section='thw'"),
    (dict(mrope_section=9), ValueError, "cannot share"),
    (dict(mrope_interleaved=True), ValueError, "need mrope_section"),
    (dict(mrope_frequencies="per-axis"), ValueError, "need mrope_section"),
    (dict(mrope_section=[2, 3, 3], mrope_frequencies="axial"), ValueError, "mrope_frequencies='axial'"),
    (dict(mrope_section=[4, 4], mrope_frequencies="strided", layout="half"), None, None),
    (dict(mrope_section=[5, 3], mrope_frequencies="strided"), ValueError, r"must be \[4, 4\]"),
    (dict(mrope_section=[2, 3, 3], mrope_interleaved="yes"), TypeError, "must be a bool"),
])
def test_bad_multi_axis_arguments(kwargs, error, match):
    positions = np.zeros((len(kwargs.get("mrope_section", [1])) if not isinstance(kwargs.get("mrope_section"), int)
                          else 2, 4), np.int64)
    if error is None:
        pn.apply_rope(_x((4, 16)), positions, **kwargs)
        return
    with pytest.raises(error, match=match):
        pn.apply_rope(_x((4, 16)), positions, **kwargs)


def test_positions_need_the_leading_axis():
    with pytest.raises(ValueError, match=r"need a leading axis of size 3"):
        pn.apply_rope(_x((4, 16)), np.arange(4), mrope_section=[2, 3, 3])
    with pytest.raises(ValueError, match=r"do not broadcast"):
        pn.apply_rope(_x((4, 16)), np.zeros((3, 5), np.int64), mrope_section=[2, 3, 3])
    with pytest.raises(ValueError, match=r"need a leading axis of size 3"):
        pn.rope_cos_sin(np.zeros((2, 5), np.int64), 16, mrope_section=[2, 3, 3])


def test_scaling_from_hf_config_reads_the_section():
    v4 = {"model_type": "qwen2_vl", "hidden_size": 3584, "num_attention_heads": 28, "rope_theta": 1000000.0,
          "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}
    assert pn.scaling_from_hf_config(v4) == dict(base=1000000.0, rotary_dim=128, scaling=None,
                                                 mrope_section=[16, 24, 24], mrope_interleaved=False)
    yarn = {"head_dim": 16, "max_position_embeddings": 64, "rope_parameters": {
        "rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}}
    out = pn.scaling_from_hf_config(yarn)
    assert out["scaling"]["rope_type"] == "yarn" and "mrope_section" not in out["scaling"]
    assert out["mrope_section"] == [2, 3, 3]
    assert "mrope_section" not in pn.scaling_from_hf_config({"head_dim": 16, "rope_theta": 10000.0})


# --- mrope_position_ids -----------------------------------------------------------------------------------------


def test_text_only_rows_count_up_on_every_axis():
    ids, deltas = mrope_position_ids(np.zeros((2, 5), np.int64), attention_mask=[[0, 0, 1, 1, 1], [1] * 5])
    assert ids[:, 0].tolist() == [[0, 0, 0, 1, 2]] * 3
    assert ids[:, 1].tolist() == [[0, 1, 2, 3, 4]] * 3
    assert deltas.tolist() == [[0], [0]]


def test_video_frames_are_spaced_by_time():
    types = np.array([[2] * 8 + [0]])
    ids, deltas = mrope_position_ids(types, video_grid_thw=[[2, 4, 4]], second_per_grid_ts=[2.0], tokens_per_second=25)
    assert ids[0, 0].tolist() == [0, 0, 0, 0, 50, 50, 50, 50, 2]  # text resumes at max(h', w') = 2
    assert deltas.tolist() == [[51 - 9]]


@pytest.mark.parametrize("kwargs, match", [
    (dict(mm_token_type_ids=[[0, 3]]), "0 \\(text\\), 1 \\(image\\) or 2 \\(video\\)"),
    (dict(mm_token_type_ids=[[1, 1, 1, 1]]), "more image runs than image_grid_thw has rows \\(0\\)"),
    (dict(mm_token_type_ids=[[1, 1, 1]], image_grid_thw=[[1, 4, 4]]), "a run of 3 image tokens"),
    (dict(mm_token_type_ids=[[0, 0]], image_grid_thw=[[1, 4, 4]]), "has 1 rows but the token types hold 0"),
    (dict(mm_token_type_ids=[[2, 2, 2, 2]], video_grid_thw=[[1, 4, 4]]), "tokens_per_second is required"),
    (dict(mm_token_type_ids=[[1, 1, 1, 1]], image_grid_thw=[[1, 4, 3]]), "divisible by spatial_merge_size=2"),
    (dict(mm_token_type_ids=[[2, 2, 2, 2]], video_grid_thw=[[1, 4, 4]], tokens_per_second=2,
          second_per_grid_ts=[1.0, 2.0]), "one finite value per video \\(1\\)"),
    (dict(mm_token_type_ids=[[0, 0]], attention_mask=[[1, 2]]), "attention_mask must be 0/1"),
    (dict(mm_token_type_ids=[0, 0]), "must have shape \\[batch, seq\\]"),
])
def test_bad_position_id_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mrope_position_ids(**kwargs)


# --- explicit pair -> axis tables (mrope_axes) ---------------------------------------------------------------

@pytest.mark.parametrize("section, interleaved", [((16, 24, 24), False), ((24, 20, 20), True), ((2, 1, 1), True)])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_mrope_axes_of_a_section_equal_the_section(section, interleaved, layout):
    rotary_dim = 2 * sum(section)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, rotary_dim + 4))
    positions = rng.integers(0, 5000, size=(len(section), 5))
    axes = mrope_axis_of_pair(section, interleaved)
    want = pn.apply_rope(x, positions, rotary_dim=rotary_dim, layout=layout, mrope_section=list(section),
                         mrope_interleaved=interleaved, scaling={"rope_type": "yarn", "factor": 4.0,
                                                                 "original_max_position_embeddings": 64})
    got = pn.apply_rope(x, positions, rotary_dim=rotary_dim, layout=layout, mrope_axes=axes,
                        scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})
    np.testing.assert_array_equal(got, want)


def test_mrope_axes_pair_j_turns_by_its_axis_with_its_1d_frequency():
    axes = [1, 2] * 3 + [0] * 2  # ERNIE-4.5-VL's rule at 8 pairs
    positions = np.array([[5], [70], [900]])
    cos, sin = pn.rope_cos_sin(positions, 16, base=500.0, layout="interleaved", mrope_axes=axes)
    inv, _ = pn.rope_frequencies(16, base=500.0)
    angles = positions[np.array(axes), 0] * inv
    np.testing.assert_allclose(cos[0, 0::2], np.cos(angles), rtol=0, atol=1e-15)
    np.testing.assert_allclose(sin[0, 1::2], np.sin(angles), rtol=0, atol=1e-15)
    # equal ids on every axis: plain 1-D RoPE
    x = np.random.default_rng(0).standard_normal((3, 16))
    np.testing.assert_allclose(pn.apply_rope(x, np.full((3, 3), 7), mrope_axes=axes),
                               pn.apply_rope(x, np.full(3, 7)), rtol=0, atol=1e-15)


def test_ernie_axes_follow_its_section():
    from posenc_np.rope import ernie_mrope_axes

    assert ernie_mrope_axes([2, 2, 1]) == [1, 2, 1, 2, 0]
    with pytest.raises(ValueError, match="first two sections must be equal"):
        ernie_mrope_axes([3, 2, 1])


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(mrope_axes=[0] * 7), ValueError, "rotary_dim // 2 = 8 axis indices"),
    (dict(mrope_axes=[0] * 7 + [-1]), ValueError, "axis indices >= 0"),
    (dict(mrope_axes=[0] * 7 + [0.5]), ValueError, "axis indices >= 0"),
    (dict(mrope_axes="01"), TypeError, "sequence of axis indices"),
    (dict(mrope_axes=[0] * 8, mrope_section=[4, 4]), ValueError, "replaces mrope_section"),
    (dict(mrope_axes=[0] * 8, mrope_frequencies="per-axis"), ValueError, "shared"),
])
def test_bad_mrope_axes(kwargs, error, match):
    with pytest.raises(error, match=match):
        pn.apply_rope(np.ones((4, 16)), np.zeros((2, 4), int), **kwargs)


def test_mrope_axes_positions_need_max_plus_one_axes():
    with pytest.raises(ValueError, match="leading axis"):
        pn.apply_rope(np.ones((4, 16)), np.zeros((2, 4), int), mrope_axes=[0, 1, 2] + [0] * 5)
