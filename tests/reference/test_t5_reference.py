"""T5 buckets and bias against HF transformers' own `T5Attention` (5.x, models/t5/modeling_t5.py):
`_relative_position_bucket` at every distance in +-4 max_distance, both directions, and `compute_bias`
with a KV-cache offset; exact (the spec follows HF's float32 log)."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from helpers import EXACT, assert_close

torch = pytest.importorskip("torch")
T5Attention = pytest.importorskip("transformers.models.t5.modeling_t5").T5Attention

# (num_buckets, max_distance): the T5 default, other published sizes, and (18, 128), where a float64
# log would put distances 8, 16 and 64 into different buckets than HF's float32 arithmetic.
CONFIGS = [(32, 128), (32, 256), (64, 256), (128, 128), (16, 64), (8, 16), (18, 128), (4, 3)]


def _hf_bucket(relative, bidirectional, num_buckets, max_distance):
    return T5Attention._relative_position_bucket(torch.from_numpy(np.asarray(relative, np.int64)),
                                                 bidirectional=bidirectional, num_buckets=num_buckets,
                                                 max_distance=max_distance).numpy()


@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
@pytest.mark.parametrize("num_buckets, max_distance", CONFIGS)
def test_bucket_matches_hf_everywhere(num_buckets, max_distance, bidirectional):
    relative = np.arange(-4 * max_distance, 4 * max_distance + 1)
    ours = pn.t5_bucket(relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert ours.dtype == np.int32
    np.testing.assert_array_equal(ours, _hf_bucket(relative, bidirectional, num_buckets, max_distance))


@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
def test_bucket_log_boundaries_default(bidirectional):
    # For (32, 128) the real-valued log term is exactly 2, 4, 6 at n = 16, 32, 64: the float32 rounding decides.
    distance = np.array([7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000])
    for relative in (distance, -distance):
        np.testing.assert_array_equal(pn.t5_bucket(relative, bidirectional=bidirectional),
                                      _hf_bucket(relative, bidirectional, 32, 128))


def test_bucket_float32_not_float64():
    """Where float64 and HF's float32 disagree (18 buckets, 128), the spec follows float32."""
    distance = np.array([8, 16, 64])
    per_direction, max_exact = 9, 4
    scaled = np.log(distance / max_exact) / np.log(128 / max_exact) * (per_direction - max_exact)
    float64 = max_exact + scaled.astype(int)
    hf = _hf_bucket(-distance, True, 18, 128)
    assert not np.array_equal(float64, hf)
    np.testing.assert_array_equal(pn.t5_bucket(-distance, num_buckets=18, max_distance=128), hf)


@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
@pytest.mark.parametrize("past", [0, 37], ids=["prefill", "kv-offset"])
def test_bias_matches_hf_compute_bias(bidirectional, past):
    from transformers import T5Config

    config = T5Config(num_heads=4, d_model=32, d_kv=8, relative_attention_num_buckets=32,
                      relative_attention_max_distance=128, is_decoder=not bidirectional)
    layer = T5Attention(config, has_relative_attention_bias=True).eval()
    table = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    with torch.no_grad():
        layer.relative_attention_bias.weight.copy_(torch.from_numpy(table))
        q_len, k_len = 6, past + 6
        hf = layer.compute_bias(q_len, k_len, past_seen_tokens=past)[0].numpy()  # [heads, q, k]
    ours = pn.t5_bias(table, np.arange(past, past + q_len), np.arange(k_len), bidirectional=bidirectional)
    assert ours.dtype == np.float32
    assert_close(ours, hf, EXACT)
