"""Per-layer schedule pieces against transformers' own model code (installed 5.x, float32).

- llama3 scaling with low_freq_factor == high_freq_factor (Llama 4 Scout's real config) and the
  `proportional` type (Gemma 4) against `ROPE_INIT_FUNCTIONS`;
- decoupled RoPE of MLA (`posenc_np.mla`) against `DeepseekV3Attention` of a tiny random model: the attention
  logits (q k^T times the softmax scale) the module hands to its attention function, with YaRN
  mscale != mscale_all_dim and both `rope_interleave` settings;
- Llama 4's NoPE-layer temperature (`llama4_attn_scale`) against `Llama4TextAttention`'s scaled queries.
transformers works in float32: logits of size ~10 are compared at rtol 1e-4 / atol 1e-4.
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from posenc_np.mla import apply_mla_rope, mla_rope_permutation, mla_softmax_scale
from posenc_np.temperature import llama4_attn_scale

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from transformers import DeepseekV3Config, Llama4TextConfig, LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds  # noqa: E402
from transformers.models.llama4 import modeling_llama4 as l4  # noqa: E402


@pytest.mark.parametrize("factor", [16.0, 8.0])
def test_llama3_equal_low_and_high_freq_factor_equals_hf(factor):
    params = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
              "original_max_position_embeddings": 8192}
    config = LlamaConfig(hidden_size=1024, num_attention_heads=8, max_position_embeddings=131072,
                         rope_parameters={**params, "rope_theta": 500000.0})
    hf, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    ours, scale = pn.rope_frequencies(128, base=500000.0, scaling=params)
    assert scale == 1.0 and np.all(np.isfinite(ours))
    np.testing.assert_allclose(ours, hf.double().numpy(), rtol=2e-7, atol=0)
    assert np.any(ours != pn.rope_frequencies(128, base=500000.0)[0])  # the low band really is divided


@pytest.mark.parametrize("fraction, factor", [(0.25, 1.0), (0.5, 8.0), (1.0, 1.0)])
def test_proportional_equals_hf(fraction, factor):
    params = {"rope_type": "proportional", "partial_rotary_factor": fraction, "factor": factor}
    config = LlamaConfig(hidden_size=512, num_attention_heads=4, head_dim=64,
                         rope_parameters={**params, "rope_theta": 1e6})
    hf, hf_scale = ROPE_INIT_FUNCTIONS["proportional"](config, "cpu")
    ours, scale = pn.rope_frequencies(64, base=1e6, scaling=params)
    assert scale == hf_scale == 1.0
    np.testing.assert_allclose(ours, hf.double().numpy(), rtol=2e-7, atol=0)


def _capture(module_namespace, monkeypatch):
    seen = {}
    original = module_namespace.eager_attention_forward

    def spy(module, query, key, value, attention_mask, scaling=None, **kwargs):
        seen.update(query=query.detach().double(), key=key.detach().double(), scaling=scaling)
        return original(module, query, key, value, attention_mask, scaling=scaling, **kwargs)

    monkeypatch.setattr(module_namespace, "eager_attention_forward", spy)
    return seen


@pytest.mark.parametrize("rope_interleave", [True, False])
def test_mla_logits_equal_deepseek_v3_attention(rope_interleave, monkeypatch):
    torch.manual_seed(0)
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "mscale": 0.707,
            "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0, "rope_theta": 10000.0}
    config = DeepseekV3Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16,
                              kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=8, v_head_dim=6,
                              num_hidden_layers=1, max_position_embeddings=64, rope_parameters=rope,
                              rope_interleave=rope_interleave)
    config._attn_implementation = "eager"
    attention = ds.DeepseekV3Attention(config, layer_idx=0).eval()
    rotary = ds.DeepseekV3RotaryEmbedding(config)
    seq = 40
    positions = np.arange(seq)
    hidden = torch.randn(1, seq, config.hidden_size)
    seen = _capture(ds, monkeypatch)
    with torch.no_grad():
        attention(hidden, rotary(hidden, torch.tensor(positions)[None]), attention_mask=None)
        q = attention.q_b_proj(attention.q_a_layernorm(attention.q_a_proj(hidden)))
        q = q.view(1, seq, 4, 14).transpose(1, 2).double().numpy()
        kv_nope, k_pe = attention.kv_a_proj_with_mqa(hidden).split([8, 8], dim=-1)
        k_nope = attention.kv_b_proj(attention.kv_a_layernorm(kv_nope)).view(1, seq, 4, 12).transpose(1, 2)
        k_nope = k_nope[..., :6].double().numpy()
        k_pe = k_pe.view(1, 1, seq, 8).double().numpy()
    (entry,) = pn.rope_schedule_from_hf_config(config)
    assert entry["layout"] == ("interleaved" if rope_interleave else "half")
    q_rot, k_rot = apply_mla_rope(q, k_pe, positions, qk_nope_head_dim=6, **entry)
    keys = np.concatenate([k_nope, np.broadcast_to(k_rot, (1, 4, seq, 8))], axis=-1)
    scale = mla_softmax_scale(14, entry["scaling"])
    assert scale == pytest.approx(seen["scaling"], rel=1e-12)
    ours = q_rot @ np.swapaxes(keys, -1, -2) * scale
    hf = (seen["query"] @ seen["key"].transpose(-1, -2)).numpy() * seen["scaling"]
    np.testing.assert_allclose(ours, hf, rtol=1e-4, atol=1e-4)
    if rope_interleave:  # HF's rotated slice is in half order: our interleaved slice permuted
        perm = mla_rope_permutation(14, 8)
        np.testing.assert_allclose(q_rot[..., perm], seen["query"].numpy(), rtol=1e-4, atol=1e-4)
    # the wrong end: rotating the leading slice instead of the trailing one changes the logits
    wrong = np.concatenate([pn.apply_rope(q[..., :8], positions, **entry), q[..., 8:]], -1)
    assert np.abs(wrong @ np.swapaxes(keys, -1, -2) * scale - hf).max() > 1e-2


def test_llama4_nope_temperature_equals_hf(monkeypatch):
    torch.manual_seed(0)
    config = Llama4TextConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                              num_hidden_layers=4, intermediate_size=16, intermediate_size_mlp=16,
                              floor_scale=4, attn_scale=0.3, attn_temperature_tuning=True)
    config._attn_implementation = "eager"
    schedule = pn.rope_schedule_from_hf_config(config)
    nope = [i for i, e in enumerate(schedule) if e is None]
    assert nope == [3]
    attention = l4.Llama4TextAttention(config, layer_idx=3).eval()
    assert not attention.use_rope
    seq = 20
    hidden = torch.randn(1, seq, 32)
    seen = _capture(l4, monkeypatch)
    with torch.no_grad():
        attention(hidden, None, attention_mask=None)
        q = attention.q_proj(hidden).view(1, seq, 4, 8).transpose(1, 2).double().numpy()
    scale = llama4_attn_scale(np.arange(seq), floor_scale=4, attn_scale=0.3)
    assert len(np.unique(scale)) == 6  # floor((p + 1) / 4) takes 6 values over 20 positions
    np.testing.assert_allclose(q * scale[:, None], seen["query"].numpy(), rtol=1e-5, atol=1e-6)
