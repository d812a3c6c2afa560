"""Qwen3-Omni's TMRoPE position ids (`posenc_np.tmrope_position_ids`) vs transformers' own `get_rope_index`.

The reference is the method of a tiny `Qwen3OmniMoeThinkerForConditionalGeneration` built from a config
(transformers 5.24 `models/qwen3_omni_moe/modeling_qwen3_omni_moe.py`; nothing is downloaded), called with
the arguments its `_prepare_position_ids_for_generation` passes. HF keeps the ids in float32; every id here
(multiples of 12.5 and small integers) is a float32 number, so ids and deltas must be equal exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from posenc_np.mrope import audio_output_lengths, tmrope_position_ids

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as hf_omni  # noqa: E402
from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeThinkerConfig  # noqa: E402

TOKENS = dict(image_token_id=60, video_token_id=61, audio_token_id=62, audio_start_token_id=63,
              vision_start_token_id=59)
VISION_END, AUDIO_END = 58, 57


@pytest.fixture(scope="module")
def thinker():
    config = Qwen3OmniMoeThinkerConfig(
        text_config=dict(vocab_size=64, hidden_size=16, intermediate_size=16, moe_intermediate_size=8,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                         num_experts=2, num_experts_per_tok=1,
                         rope_scaling=dict(rope_type="default", mrope_section=[2, 1, 1], interleaved=True)),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=16,
                           deepstack_visual_indexes=[0], spatial_merge_size=2, patch_size=2, temporal_patch_size=1),
        audio_config=dict(d_model=16, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=16,
                          output_dim=16, num_mel_bins=8, downsample_hidden_size=8),
        **TOKENS)
    return hf_omni.Qwen3OmniMoeThinkerForConditionalGeneration(config).eval()


def _image(t, h, w):
    return [TOKENS["vision_start_token_id"]] + [TOKENS["image_token_id"]] * (t * h * w // 4) + [VISION_END]


def _video(t, h, w):
    return [TOKENS["vision_start_token_id"]] + [TOKENS["video_token_id"]] * (t * h * w // 4) + [VISION_END]


def _audio(frames):
    n = int(audio_output_lengths(frames))
    return [TOKENS["audio_start_token_id"]] + [TOKENS["audio_token_id"]] * n + [AUDIO_END]


def _audio_in_video(t, h, w, frames):
    """The processor's `<vision_start><audio_start> ... <audio_end><vision_end>` (get_rope_index only counts
    the tokens inside, so their order is not what is tested)."""
    inside = [TOKENS["video_token_id"]] * (t * h * w // 4) + [TOKENS["audio_token_id"]] * int(audio_output_lengths(frames))
    return ([TOKENS["vision_start_token_id"], TOKENS["audio_start_token_id"]] + inside
            + [AUDIO_END, VISION_END])


def _batch(rows, left_pad=True):
    """Rows padded to one length (token 0, mask 0), on the left or right."""
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), np.int64)
    mask = np.zeros_like(ids)
    for b, row in enumerate(rows):
        cols = slice(width - len(row), width) if left_pad else slice(0, len(row))
        ids[b, cols], mask[b, cols] = row, 1
    return ids, mask


def _text(n, first=1):
    return [first + (i % 20) for i in range(n)]


PROMPTS = {
    "text only": dict(rows=[_text(7), _text(4)]),
    "text + audio, no vision (HF's 1-D branch)": dict(rows=[_text(3) + _audio(250) + _text(2)], audio=[250]),
    "text + image": dict(rows=[_text(3) + _image(1, 4, 6) + _text(4), _text(2) + _image(2, 4, 4) + _text(1)],
                         image=[[1, 4, 6], [2, 4, 4]]),
    "text + video": dict(rows=[_text(2) + _video(3, 4, 4) + _text(3), _text(5) + _video(2, 2, 6) + _text(2)],
                         video=[[3, 4, 4], [2, 2, 6]], seconds=[0.5, 2.0], left_pad=False),
    "text + audio + image": dict(rows=[_text(2) + _audio(100) + _text(1) + _image(1, 4, 4) + _text(2)
                                       + _audio(37) + _text(3)], image=[[1, 4, 4]], audio=[100, 37]),
    "audio in video": dict(rows=[_text(3) + _audio_in_video(2, 4, 4, 200) + _text(2),
                                 _text(1) + _audio_in_video(3, 4, 6, 400) + _text(4)],
                           video=[[2, 4, 4], [3, 4, 6]], seconds=[2.0, 0.5], audio=[200, 400], in_video=True),
    # the audio ramp outlasts the video's frames: the end tokens follow the audio tail (13 ids), not the
    # frame's 32 columns
    "audio in video, wide frame": dict(rows=[_text(2) + _audio_in_video(1, 2, 64, 100) + _text(2)],
                                       video=[[1, 2, 64]], seconds=[2.0], audio=[100], in_video=True),
    "image, audio in video, audio": dict(rows=[_text(2) + _image(1, 6, 4) + _text(1) + _audio_in_video(2, 4, 4, 120)
                                               + _audio(60) + _text(1)],
                                         image=[[1, 6, 4]], video=[[2, 4, 4]], seconds=[1.0], audio=[120, 60],
                                         in_video=True),
}


def _optional(value, dtype):
    return None if value is None else torch.tensor(value, dtype=dtype)


@pytest.mark.parametrize("name", list(PROMPTS))
def test_tmrope_position_ids_equal_hf_get_rope_index(thinker, name):
    prompt = PROMPTS[name]
    ids, mask = _batch(prompt["rows"], prompt.get("left_pad", True))
    args = dict(image_grid_thw=prompt.get("image"), video_grid_thw=prompt.get("video"),
                audio_seqlens=prompt.get("audio"), second_per_grids=prompt.get("seconds"),
                use_audio_in_video=prompt.get("in_video", False))
    with torch.no_grad():
        want_ids, want_deltas = thinker.get_rope_index(
            torch.tensor(ids), image_grid_thw=_optional(args["image_grid_thw"], torch.long),
            video_grid_thw=_optional(args["video_grid_thw"], torch.long), attention_mask=torch.tensor(mask),
            use_audio_in_video=args["use_audio_in_video"], audio_seqlens=_optional(args["audio_seqlens"], torch.long),
            second_per_grids=_optional(args["second_per_grids"], torch.float32))
    got_ids, got_deltas = tmrope_position_ids(ids, attention_mask=mask, **args, **TOKENS)
    assert got_ids.dtype == np.float64 and got_ids.shape == (3, *ids.shape)
    np.testing.assert_array_equal(got_ids, want_ids.double().numpy())
    np.testing.assert_array_equal(got_deltas, want_deltas.double().numpy().reshape(got_deltas.shape))
    assert want_deltas.shape == got_deltas.shape


def test_fractional_temporal_ids_are_kept():
    """0.5 s per grid step at 25 ids/s: frames at 0, 12.5, 25 (HF keeps the fraction; no truncation)."""
    ids, _ = tmrope_position_ids([_video(3, 2, 2)], video_grid_thw=[[3, 2, 2]], second_per_grids=[0.5], **TOKENS)
    assert ids[0, 0, 1:4].tolist() == [1.0, 13.5, 26.0]


def test_audio_output_lengths_equal_hf():
    lengths = np.arange(1, 1001)
    want = hf_omni._get_feat_extract_output_lengths(torch.tensor(lengths), 50).numpy()
    np.testing.assert_array_equal(audio_output_lengths(lengths), want)
    want_small = hf_omni._get_feat_extract_output_lengths(torch.tensor(lengths), 8).numpy()
    np.testing.assert_array_equal(audio_output_lengths(lengths, n_window=8), want_small)


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(image_grid_thw=[[1, 4, 4], [1, 4, 4]]), "image: 2 grid rows"),
    (dict(image_grid_thw=[[1, 4, 6]]), "image segment at 3 holds 4 tokens but image_grid_thw gives 6"),
    (dict(image_grid_thw=[[1, 2, 2]]), "image segment at 3 holds 4 tokens but image_grid_thw gives 1"),
    (dict(image_grid_thw=[[1, 3, 4]]), "spatial_merge_size"),
    (dict(video_grid_thw=[[1, 4, 4]]), "second_per_grids is required"),
    (dict(image_grid_thw=[[1, 4, 4]], attention_mask=[[1, 2]]), "attention_mask"),
])
def test_bad_input_names_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tmrope_position_ids([_text(2) + _image(1, 4, 4)], **kwargs, **TOKENS)


def test_a_vision_start_that_starts_no_segment():
    """HF counts one image here but meets the stray `<vision_start> 5` first (and runs off its segments)."""
    with pytest.raises(ValueError, match="after vision_start_token_id at 1"):
        tmrope_position_ids([[1, TOKENS["vision_start_token_id"], 5] + _image(1, 4, 4)], image_grid_thw=[[1, 4, 4]],
                            **TOKENS)
