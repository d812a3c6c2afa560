"""Multi-axis RoPE spec vs the real code: transformers' Qwen2-VL / Qwen2.5-VL / Qwen3-VL text and vision
rotary embeddings, Pixtral's, `Qwen2_5_VLModel.get_rope_index`, and diffusers' FLUX `FluxPosEmbed`.

Everything is built from tiny configs (nothing is downloaded). transformers forms angles in float32, so it
is held to the float32 tolerance with the largest angle it forms; diffusers' FLUX tables are float64 angles
cast to float32 (the same bound). The spec's own properties are tests/spec/test_mrope.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc_np as pn
from helpers import assert_close
from posenc_np.conventions import conventions
from posenc_np.mrope import mrope_position_ids
from posenc_np.testing import tolerance

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLTextConfig, Qwen2VLTextConfig, Qwen3VLTextConfig  # noqa: E402
from transformers.models.pixtral.configuration_pixtral import PixtralVisionConfig  # noqa: E402
from transformers.models.pixtral.modeling_pixtral import PixtralVisionRotaryEmbedding  # noqa: E402
from transformers.models.pixtral.modeling_pixtral import apply_rotary_pos_emb as pixtral_apply  # noqa: E402
from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as hf_qwen25  # noqa: E402
from transformers.models.qwen2_vl import modeling_qwen2_vl as hf_qwen2  # noqa: E402
from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig  # noqa: E402
from transformers.models.qwen3_vl import modeling_qwen3_vl as hf_qwen3  # noqa: E402
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig  # noqa: E402
from transformers.vision_utils import get_vision_position_ids  # noqa: E402

HEAD_DIM = 16
ORIGINAL = 64


def _tol(positions, scale=1.0):
    """float32 reference: rounding of the largest angle (inverse frequency <= 1 here) plus a few ulps."""
    return tolerance("float32", max_angle=float(np.abs(positions).max()), scale=scale)


def _text_positions(seed=0, batch=2, seq=7, high=40):
    """[3, batch, seq] ids with different values on each axis (equal ids would hide the axis map)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, high, size=(3, batch, seq)).astype(np.int64)


TEXT_MODELS = {
    # name: (config class, rotary class, apply_rotary_pos_emb, section, interleaved)
    "qwen2-vl": (Qwen2VLTextConfig, hf_qwen2.Qwen2VLRotaryEmbedding, hf_qwen2.apply_rotary_pos_emb, [2, 3, 3], False),
    "qwen2.5-vl": (Qwen2_5_VLTextConfig, hf_qwen25.Qwen2_5_VLRotaryEmbedding, hf_qwen25.apply_rotary_pos_emb,
                   [4, 2, 2], False),
    "qwen3-vl": (Qwen3VLTextConfig, hf_qwen3.Qwen3VLTextRotaryEmbedding, hf_qwen3.apply_rotary_pos_emb, [4, 2, 2],
                 True),
}
SCALINGS = {
    "default": {"rope_type": "default"},
    "linear": {"rope_type": "linear", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": ORIGINAL},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
}


def _text_config(model, scaling, theta=10000.0):
    config_cls, _, _, section, interleaved = TEXT_MODELS[model]
    params = {**scaling, "rope_theta": theta, "mrope_section": section}
    if interleaved:
        params["mrope_interleaved"] = True
    return config_cls(hidden_size=4 * HEAD_DIM, num_attention_heads=4, num_key_value_heads=2, head_dim=HEAD_DIM,
                      max_position_embeddings=ORIGINAL, rope_parameters=params)


@pytest.mark.parametrize("scaling", list(SCALINGS))
@pytest.mark.parametrize("model", list(TEXT_MODELS))
def test_text_rotary_matches_transformers(model, scaling):
    """The model's rotary embedding (cos/sin) and its apply_rotary_pos_emb (q, k) against rope_cos_sin / apply_rope,
    with the keyword arguments scaling_from_hf_config reads from the same config. "long" ids cross the original
    length, so dynamic NTK rescales (HF takes the max over all three streams, as the spec)."""
    _, rotary_cls, hf_apply, _, _ = TEXT_MODELS[model]
    config = _text_config(model, SCALINGS[scaling])
    positions = _text_positions(high=3 * ORIGINAL)
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 3, 7, HEAD_DIM)).astype(np.float32)
    k = rng.standard_normal((2, 2, 7, HEAD_DIM)).astype(np.float32)
    cos, sin = rotary_cls(config)(torch.from_numpy(q), torch.from_numpy(positions))
    q_hf, k_hf = hf_apply(torch.from_numpy(q), torch.from_numpy(k), cos, sin)

    kwargs = pn.scaling_from_hf_config(config.to_dict())
    assert kwargs["mrope_section"] == TEXT_MODELS[model][3]
    assert kwargs["mrope_interleaved"] is TEXT_MODELS[model][4]
    my_cos, my_sin = pn.rope_cos_sin(positions, **kwargs)
    scale = float(np.abs(my_cos).max())
    assert_close(cos.numpy(), my_cos, _tol(positions, scale))
    assert_close(sin.numpy(), my_sin, _tol(positions, scale))
    for hf, x in ((q_hf, q), (k_hf, k)):
        mine = pn.apply_rope(x.astype(np.float64), positions[:, :, None, :], **kwargs)
        assert_close(hf.numpy(), mine, _tol(positions, 2 * scale * float(np.abs(x).max())))


def test_qwen3_vl_interleaves_whatever_its_config_says():
    """HF's Qwen3-VL never reads mrope_interleaved: scaling_from_hf_config reports interleaving for it anyway."""
    config = Qwen3VLTextConfig(hidden_size=64, num_attention_heads=4, head_dim=HEAD_DIM,
                               rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                "mrope_section": [4, 2, 2]})
    positions = _text_positions(3)
    cos, _ = hf_qwen3.Qwen3VLTextRotaryEmbedding(config)(torch.zeros(1), torch.from_numpy(positions))
    kwargs = pn.scaling_from_hf_config(config.to_dict())
    assert kwargs["mrope_interleaved"] is True
    assert_close(cos.numpy(), pn.rope_cos_sin(positions, **kwargs)[0], _tol(positions))
    contiguous = pn.rope_cos_sin(positions, **{**kwargs, "mrope_interleaved": False})[0]
    assert np.abs(cos.numpy() - contiguous).max() > 0.1


def test_the_model_defaults_apply_when_the_config_has_no_section():
    """Qwen2-VL / Qwen3-VL rotary embeddings fall back to [16, 24, 24] / [24, 20, 20] (head_dim 128)."""
    positions = _text_positions(4, high=300)
    for config, rotary in ((Qwen2VLTextConfig(hidden_size=256, num_attention_heads=2), hf_qwen2.Qwen2VLRotaryEmbedding),
                           (Qwen3VLTextConfig(hidden_size=256, num_attention_heads=2, head_dim=128),
                            hf_qwen3.Qwen3VLTextRotaryEmbedding)):
        assert "mrope_section" not in config.rope_parameters
        cos, sin = rotary(config)(torch.zeros(1), torch.from_numpy(positions))
        kwargs = pn.scaling_from_hf_config(config.to_dict())
        my_cos, my_sin = pn.rope_cos_sin(positions, **kwargs)
        assert_close(cos.numpy(), my_cos, _tol(positions))
        assert_close(sin.numpy(), my_sin, _tol(positions))


def test_named_text_conventions_match_the_default_models():
    """Conventions qwen2-vl / qwen3-vl are the default configs' rotations (head_dim 128, their rope_theta)."""
    positions = _text_positions(5, high=5000)
    for name, config, rotary in (
            ("qwen2-vl", Qwen2VLTextConfig(hidden_size=256, num_attention_heads=2), hf_qwen2.Qwen2VLRotaryEmbedding),
            ("qwen3-vl", Qwen3VLTextConfig(hidden_size=256, num_attention_heads=2, head_dim=128),
             hf_qwen3.Qwen3VLTextRotaryEmbedding)):
        cos, _ = rotary(config)(torch.zeros(1), torch.from_numpy(positions))
        my_cos, _ = pn.rope_cos_sin(positions, 128, **conventions[name].params)
        assert_close(cos.numpy(), my_cos, _tol(positions))


# --- vision towers ---------------------------------------------------------------------------------------------

VISION = {
    # name: (rotary class, config built for a head dim, convention)
    "qwen2-vl": (hf_qwen2.Qwen2VLVisionRotaryEmbedding,
                 lambda d: Qwen2VLVisionConfig(embed_dim=4 * d, num_heads=4), "qwen2-vl-vision"),
    "qwen2.5-vl": (hf_qwen25.Qwen2_5_VLVisionRotaryEmbedding,
                   lambda d: Qwen2_5_VLConfig(vision_config={"hidden_size": 4 * d, "num_heads": 4}).vision_config,
                   "qwen2-vl-vision"),
    "qwen3-vl": (hf_qwen3.Qwen3VLVisionRotaryEmbedding, lambda d: Qwen3VLVisionConfig(hidden_size=4 * d, num_heads=4),
                 "qwen2-vl-vision"),
    "pixtral": (PixtralVisionRotaryEmbedding,
                lambda d: PixtralVisionConfig(hidden_size=4 * d, num_attention_heads=4, head_dim=d), "pixtral"),
}


@pytest.mark.parametrize("head_dim", [16, 40])
@pytest.mark.parametrize("model", list(VISION))
def test_vision_rotary_matches_transformers(model, head_dim):
    """Patch RoPE of the vision towers: HF's own position ids (spatial-merge windows, two images) through its
    rotary embedding and its vision apply, against the convention's apply_rope on positions [2, seq]."""
    rotary_cls, make_config, name = VISION[model]
    rotary = rotary_cls(make_config(head_dim))
    grid = torch.tensor([[1, 4, 6], [2, 2, 4]])
    ids = get_vision_position_ids(grid, 2)  # [tokens, 2]: (row, column), merge-window order
    positions = ids.numpy().T
    cos, sin = rotary(torch.zeros(1), ids)
    assert cos.shape == (ids.shape[0], head_dim)
    my_cos, my_sin = pn.rope_cos_sin(positions, head_dim, **conventions[name].params)
    assert_close(cos.float().numpy(), my_cos, _tol(positions))
    assert_close(sin.float().numpy(), my_sin, _tol(positions))

    rng = np.random.default_rng(2)
    q = rng.standard_normal((ids.shape[0], 3, head_dim)).astype(np.float32)  # [seq, heads, dim], as the towers
    if model == "pixtral":
        heads_first = torch.from_numpy(q).transpose(0, 1)  # Pixtral's attention: [heads, seq, dim], unsqueeze_dim=0
        q_hf, _ = pixtral_apply(heads_first, heads_first, cos, sin, unsqueeze_dim=0)
        q_hf = q_hf.transpose(0, 1)
    else:
        q_hf, _ = hf_qwen2.apply_rotary_pos_emb_vision(torch.from_numpy(q), torch.from_numpy(q), cos, sin)
    mine = pn.apply_rope(q.astype(np.float64), positions[:, :, None], **conventions[name].params)
    assert_close(q_hf.numpy(), mine, _tol(positions, 2 * float(np.abs(q).max())))


@pytest.mark.parametrize("head_dim", [10, 22])
def test_pixtral_uneven_halves(head_dim):
    """An odd number of pairs: torch.chunk gives the row one more pair (the even frequencies), as the spec."""
    rotary = PixtralVisionRotaryEmbedding(PixtralVisionConfig(hidden_size=4 * head_dim, num_attention_heads=4,
                                                              head_dim=head_dim))
    positions = np.stack(np.meshgrid(np.arange(5), np.arange(7), indexing="ij")).reshape(2, -1)
    cos, sin = rotary(torch.zeros(1), torch.from_numpy(positions.T.copy()))
    my_cos, my_sin = pn.rope_cos_sin(positions, head_dim, **conventions["pixtral"].params)
    assert_close(cos.numpy(), my_cos, _tol(positions))
    assert_close(sin.numpy(), my_sin, _tol(positions))


# --- FLUX (diffusers) -------------------------------------------------------------------------------------------


def test_flux_matches_diffusers():
    """FluxPosEmbed(theta=10000, axes_dim=(16, 56, 56)) + diffusers' apply_rotary_emb (interleaved pairs) vs the
    flux convention, on FLUX's ids: text tokens (0, 0, 0), image tokens (0, row, column) and a second
    reference image whose axis 0 is 1 (Kontext)."""
    diffusers = pytest.importorskip("diffusers")
    from diffusers.models.embeddings import apply_rotary_emb
    from diffusers.models.transformers.transformer_flux import FluxPosEmbed

    rows, cols = np.meshgrid(np.arange(4), np.arange(6), indexing="ij")
    image = np.stack([np.zeros(24), rows.ravel(), cols.ravel()], -1)
    reference = np.stack([np.ones(24), rows.ravel() + 40, cols.ravel() + 90], -1)
    ids = np.concatenate([np.zeros((5, 3)), image, reference]).astype(np.float32)
    cos, sin = FluxPosEmbed(theta=10000, axes_dim=[16, 56, 56])(torch.from_numpy(ids))
    positions = ids.T.astype(np.int64)
    params = conventions["flux"].params
    my_cos, my_sin = pn.rope_cos_sin(positions, 128, **params)
    assert_close(cos.numpy(), my_cos, _tol(positions))
    assert_close(sin.numpy(), my_sin, _tol(positions))

    x = np.random.default_rng(3).standard_normal((1, 2, len(ids), 128)).astype(np.float32)
    desired = apply_rotary_emb(torch.from_numpy(x), (cos, sin), use_real=True, use_real_unbind_dim=-1)
    mine = pn.apply_rope(x.astype(np.float64), positions, **params)
    assert_close(desired.numpy(), mine, _tol(positions, 2 * float(np.abs(x).max())))
    assert diffusers.__version__


# --- get_rope_index ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen25_model():
    config = Qwen2_5_VLConfig(
        text_config={"hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                     "num_key_value_heads": 1, "vocab_size": 64,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}},
        vision_config={"depth": 1, "hidden_size": 16, "intermediate_size": 16, "num_heads": 2, "out_hidden_size": 32,
                       "spatial_merge_size": 2, "tokens_per_second": 2, "fullatt_block_indexes": [0]},
        image_token_id=60, video_token_id=61, vision_start_token_id=62)
    return hf_qwen25.Qwen2_5_VLModel(config).eval()


def _sequence(parts):
    """Token types from (kind, count) parts: 0 text, 1 image, 2 video."""
    return np.concatenate([np.full(n, kind) for kind, n in parts]).astype(np.int64)


ROPE_INDEX_CASES = {
    "text-image-text": dict(rows=[[(0, 3), (1, 8), (0, 4)]], image=[[1, 4, 8]]),
    "two-images-and-video": dict(rows=[[(0, 2), (1, 4), (0, 1), (2, 12), (0, 2), (1, 4), (0, 3)]],
                                 image=[[1, 4, 4], [1, 2, 8]], video=[[3, 2, 8]], seconds=[0.5]),
    "video-frames-far-apart": dict(rows=[[(0, 1), (2, 8), (0, 5)]], video=[[4, 4, 2]], seconds=[2.0]),
    "video-fractional-spacing": dict(rows=[[(2, 16), (0, 3)]], video=[[4, 4, 4]], seconds=[0.25]),
    "batch-left-padding": dict(rows=[[(0, 3), (1, 4), (0, 2)], [(0, 1), (2, 8), (0, 2)]], image=[[1, 4, 4]],
                               video=[[2, 4, 4]], seconds=[1.5], pad=[0, 2]),
}


@pytest.mark.parametrize("case", list(ROPE_INDEX_CASES))
def test_position_ids_match_get_rope_index(qwen25_model, case):
    """mrope_position_ids vs Qwen2_5_VLModel.get_rope_index: text runs, images, videos spaced by
    tokens_per_second * second_per_grid_ts, left padding via the attention mask, the decoding deltas."""
    spec = ROPE_INDEX_CASES[case]
    rows = [_sequence(parts) for parts in spec["rows"]]
    pads = spec.get("pad", [0] * len(rows))
    width = max(len(r) + p for r, p in zip(rows, pads, strict=True))
    types = np.zeros((len(rows), width), np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    for b, row in enumerate(rows):
        start = width - len(row)  # left padding
        types[b, start:] = row
        mask[b, start:] = 1
    input_ids = np.where(types == 1, 60, np.where(types == 2, 61, 5))
    image = spec.get("image")
    video = spec.get("video")
    seconds = spec.get("seconds")
    with torch.no_grad():
        hf_ids, hf_deltas = qwen25_model.get_rope_index(
            torch.from_numpy(input_ids), torch.from_numpy(types),
            image_grid_thw=None if image is None else torch.tensor(image),
            video_grid_thw=None if video is None else torch.tensor(video),
            second_per_grid_ts=None if seconds is None else torch.tensor(seconds),
            attention_mask=torch.from_numpy(mask))
    ids, deltas = mrope_position_ids(types, image_grid_thw=image, video_grid_thw=video, second_per_grid_ts=seconds,
                                     attention_mask=mask, spatial_merge_size=2, tokens_per_second=2)
    np.testing.assert_array_equal(ids, hf_ids.numpy())
    np.testing.assert_array_equal(deltas, hf_deltas.numpy())
    assert ids.dtype == np.int64 and deltas.shape == (len(rows), 1)


def test_position_ids_feed_the_rotation(qwen25_model):
    """End to end: get_rope_index's ids through Qwen2.5-VL's text rotary embedding = the spec's ids through
    rope_cos_sin with the config's keywords."""
    types = _sequence([(0, 2), (1, 8), (0, 1), (2, 8), (0, 2)])[None]
    grids = dict(image_grid_thw=[[1, 4, 8]], video_grid_thw=[[2, 4, 4]], second_per_grid_ts=[1.0])
    with torch.no_grad():
        hf_ids, _ = qwen25_model.get_rope_index(torch.from_numpy(np.where(types > 0, 60 + types - 1, 5)),
                                                torch.from_numpy(types),
                                                **{k: torch.tensor(v) for k, v in grids.items()})
        cos, _ = qwen25_model.language_model.rotary_emb(torch.zeros(1), hf_ids)
    ids, _ = mrope_position_ids(types, spatial_merge_size=2, tokens_per_second=2, **grids)
    kwargs = pn.scaling_from_hf_config(qwen25_model.config.to_dict())
    assert_close(cos.numpy(), pn.rope_cos_sin(ids, **kwargs)[0], _tol(ids))
    assert math.isclose(kwargs["base"], 10000.0)
