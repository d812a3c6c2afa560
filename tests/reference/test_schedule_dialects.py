"""Configs as checkpoints ship them, read by `rope_schedule_from_hf_config` and `posenc spec`, against transformers.

Each config below is a `config.json` in the form real checkpoints carry (transformers-4 keys, a multimodal
parent with `text_config`, keys newer families add), shrunk to a few small layers. Its schedule must equal,
layer by layer, the rotary module of the config transformers 5.24 builds from the same dict
(`AutoConfig.for_model(model_type, **dialect)`), compared by tests/reference/schedule_sweep.py's
`compare_schedule` (cos/sin at 12 positions up to 144, atol 2e-5, the family's own `apply_rotary_pos_emb`,
multi-axis ids that differ per axis, the MLA attention's layout); and `posenc spec FILE` must print that
per-layer reading. Ministral 3's query scale is compared with `Ministral3Attention`'s scaled queries.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import posenc_np as pn

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from transformers import AutoConfig  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import schedule_sweep  # noqa: E402
from posenc.cli import main  # noqa: E402

#: google/gemma-3-1b-it config.json as shipped (transformers 4.50 keys), 26 layers.
GEMMA3_1B = {
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": [1, 106],
    "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
    "initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768,
    "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
    "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
    "rope_scaling": None, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": True, "vocab_size": 262144,
}
#: Gemma 3 4B+ (multimodal parent; the decoder's v4 keys, linear scaling on global layers, in text_config).
GEMMA3_4B = {
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "mm_tokens_per_image": 256,
    "text_config": {"model_type": "gemma3_text", "head_dim": 16, "hidden_size": 64, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "num_hidden_layers": 8, "intermediate_size": 64,
                    "max_position_embeddings": 131072, "rope_local_base_freq": 10000.0, "rope_theta": 1000000.0,
                    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window_pattern": 6,
                    "vocab_size": 64},
    "vision_config": {"model_type": "siglip_vision_model", "patch_size": 14},
}
#: Qwen3-VL: the decoder under text_config, v4 rope_scaling with the interleaved section.
QWEN3_VL = {
    "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl", "image_token_id": 151655,
    "text_config": {"model_type": "qwen3_vl_text", "head_dim": 128, "hidden_size": 256, "num_attention_heads": 2,
                    "num_key_value_heads": 1, "num_hidden_layers": 3, "intermediate_size": 64,
                    "max_position_embeddings": 262144, "rope_theta": 5000000,
                    "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
                    "vocab_size": 64},
    "vision_config": {"model_type": "qwen3_vl", "depth": 2, "hidden_size": 32, "num_heads": 2, "patch_size": 16},
}
#: DeepSeek-V3.2: v4 rope_scaling with "type", no rope_interleave (the attention always interleaves).
DEEPSEEK_V32 = {
    "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 3, "q_lora_rank": 16,
    "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 16, "v_head_dim": 8,
    "max_position_embeddings": 163840, "rope_theta": 10000,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "index_head_dim": 16, "index_n_heads": 2, "index_topk": 8, "vocab_size": 64, "intermediate_size": 32,
    "moe_intermediate_size": 16, "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
    "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
}
#: Ministral 3 under a Mistral 3 parent: llama_4_scaling_beta and the dict's own max_position_embeddings.
MINISTRAL3 = {
    "architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
    "text_config": {"model_type": "ministral3", "head_dim": 16, "hidden_size": 64, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 64,
                    "max_position_embeddings": 262144, "vocab_size": 64,
                    "rope_parameters": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 16.0,
                                        "llama_4_scaling_beta": 0.1, "max_position_embeddings": 262144,
                                        "mscale": 1.0, "mscale_all_dim": 1.0,
                                        "original_max_position_embeddings": 16384, "rope_theta": 1e9,
                                        "rope_type": "yarn", "type": "yarn"}},
    "vision_config": {"model_type": "pixtral", "patch_size": 14},
}
#: Granite SWA: per-layer bases, 0 = a layer without RoPE.
GRANITE_SWA = {
    "architectures": ["GraniteMoeSWAForCausalLM"], "model_type": "granitemoe_swa", "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4, "intermediate_size": 32,
    "max_position_embeddings": 32768, "rope_theta": 10000.0, "layer_rope_theta": [10000.0, 50000.0, 10000.0, 0],
    "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
    "sliding_window": 64, "vocab_size": 64, "num_local_experts": 2, "num_experts_per_tok": 1,
}
#: More dialects read through the same comparison (model_type, config.json).
MORE = {
    # Phi-3.5: "type": "longrope" and the pre-training length at the top level
    "phi3-longrope": {"model_type": "phi3", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
                      "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
                      "rope_theta": 10000.0, "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 8,
                                                              "long_factor": [1.5] * 8}},
    # Qwen2-VL: v4 "type": "mrope" at the top level
    "qwen2-vl": {"model_type": "qwen2_vl", "hidden_size": 256, "num_attention_heads": 2, "num_key_value_heads": 1,
                 "num_hidden_layers": 2, "rope_theta": 1000000.0, "max_position_embeddings": 32768,
                 "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}},
    # Qwen3.5: no mrope_section (the module's [11, 11, 10]), partial rotary 0.25
    "qwen3.5": {"model_type": "qwen3_5_text", "hidden_size": 64, "head_dim": 256, "num_attention_heads": 2,
                "num_key_value_heads": 1, "num_hidden_layers": 4, "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                "max_position_embeddings": 262144, "rope_scaling": {"rope_type": "default"},
                "layer_types": ["linear_attention"] * 3 + ["full_attention"]},
    # Cohere2: sliding_window_pattern, RoPE on the sliding layers only
    "cohere2": {"model_type": "cohere2", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 8,
                "rope_theta": 50000.0, "sliding_window_pattern": 4, "max_position_embeddings": 8192},
    # SmolLM3: only the interval (a NoPE layer every 4th)
    "smollm3": {"model_type": "smollm3", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 8,
                "rope_theta": 2000000.0, "no_rope_layer_interval": 4, "max_position_embeddings": 65536},
    # ModernBERT: global_rope_theta / local_rope_theta, a global layer every third from layer 0
    "modernbert": {"model_type": "modernbert", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 6,
                   "global_rope_theta": 160000.0, "local_rope_theta": 10000.0, "global_attn_every_n_layers": 3,
                   "intermediate_size": 32, "vocab_size": 64},
    # ERNIE-4.5-VL: its 3-D rule as an explicit pair -> axis table (mrope_axes)
    "ernie4.5-vl": {"model_type": "ernie4_5_vl_moe_text", "hidden_size": 256, "head_dim": 128,
                    "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 2, "rope_theta": 500000.0,
                    "max_position_embeddings": 131072,
                    "rope_scaling": {"rope_type": "default", "mrope_section": [22, 22, 20]}},
    # Qwen4-exp: the module's [11, 11, 10] over a 128-pair head (no partial_rotary_factor): pairs 33.. on time
    "qwen4-exp": {"model_type": "qwen4_exp_text", "hidden_size": 64, "head_dim": 256, "num_attention_heads": 2,
                  "num_key_value_heads": 1, "num_hidden_layers": 2, "rope_theta": 10000.0,
                  "max_position_embeddings": 32768, "layer_types": ["linear_attention", "indexed_attention"]},
    # Cohere Compass: M-RoPE per layer type (its own base and section; a full-attention section left to the
    # module's default [24, 20, 20], interleaved), a NoPE type
    "cohere-compass": {"model_type": "cohere_compass_text", "hidden_size": 256, "head_dim": 128,
                       "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 4,
                       "max_position_embeddings": 8192, "sliding_window": 16,
                       "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
                       "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0,
                                                                 "mrope_section": [16, 24, 24]},
                                           "full_attention": {"rope_type": "default", "rope_theta": 2000000.0}}},
    # DeepSeek-V4: a flat yarn dict for the compressed layers at compress_rope_theta, plain RoPE on sliding ones
    "deepseek-v4": {"model_type": "deepseek_v4", "hidden_size": 64, "head_dim": 64, "num_attention_heads": 2,
                    "num_key_value_heads": 1, "num_hidden_layers": 3, "partial_rotary_factor": 0.25,
                    "max_position_embeddings": 1048576, "rope_theta": 10000.0, "compress_rope_theta": 160000.0,
                    "rope_scaling": {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                                     "beta_fast": 32, "beta_slow": 1},
                    "layer_types": ["sliding_attention", "compressed_sparse_attention",
                                    "heavily_compressed_attention"]},
    # Molmo2: the scaled rotary only on the listed layers
    "molmo2": {"model_type": "molmo2_text", "hidden_size": 64, "head_dim": 16, "num_attention_heads": 4,
               "num_hidden_layers": 4,
               "rope_theta": 1000000.0, "max_position_embeddings": 65536, "rope_scaling_layers": [1, 3],
               "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192}},
}


def _hf(text):
    """The config transformers builds from the decoder's dict, as loading that config.json does."""
    kwargs = {k: v for k, v in text.items() if k not in ("model_type", "architectures", "transformers_version")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = AutoConfig.for_model(text["model_type"], **kwargs)
    return schedule_sweep._position_config(config)  # a v4 Qwen2-VL file builds the parent: its text config


def _text(config):
    return config.get("text_config", config)


def _small(config):
    """Gemma 3 1B as shipped, with the head and width shrunk so the comparison builds in milliseconds."""
    return {**config, "head_dim": 16, "hidden_size": 64, "intermediate_size": 64, "vocab_size": 64}


SHIPPED = {"gemma3-1b": _small(GEMMA3_1B), "gemma3-4b": GEMMA3_4B, "qwen3-vl": QWEN3_VL,
           "deepseek-v3.2": DEEPSEEK_V32, "ministral3": MINISTRAL3, "granite-swa": GRANITE_SWA, **MORE}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_config_as_shipped_reads_equal_to_transformers_per_layer(name, tmp_path):
    config = SHIPPED[name]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    schedule = pn.rope_schedule_from_hf_config(str(path))
    status, detail = schedule_sweep.compare_schedule(schedule, _hf(_text(config)))
    assert status == "read", detail


def test_gemma3_1b_as_shipped_bases_per_layer():
    schedule = pn.rope_schedule_from_hf_config(GEMMA3_1B)
    assert [e["base"] for e in schedule] == [1e6 if (i + 1) % 6 == 0 else 1e4 for i in range(26)]
    assert all(e["scaling"] is None and e["rotary_dim"] == 256 for e in schedule)
    wide = pn.rope_schedule_from_hf_config(GEMMA3_4B)  # rope_scaling goes to the global layers only
    assert [e["scaling"] for e in wide] == [None] * 5 + [{"rope_type": "linear", "factor": 8.0}] + [None] * 2


def test_code_fixed_settings():
    (entry, *_) = pn.rope_schedule_from_hf_config(DEEPSEEK_V32)
    assert entry["layout"] == "interleaved" and entry["rotary_dim"] == 16  # no rope_interleave in the file
    qwen35 = pn.rope_schedule_from_hf_config(MORE["qwen3.5"])
    assert qwen35[:3] == [None] * 3
    assert qwen35[3]["mrope_section"] == [11, 11, 10] and qwen35[3]["mrope_interleaved"] is True
    granite = pn.rope_schedule_from_hf_config(GRANITE_SWA)
    assert [None if e is None else e["base"] for e in granite] == [1e4, 5e4, 1e4, None]
    molmo = pn.rope_schedule_from_hf_config(MORE["molmo2"])
    assert [e["scaling"] is not None for e in molmo] == [False, True, False, True]
    (ministral, _) = pn.rope_schedule_from_hf_config(MINISTRAL3)
    assert "llama_4_scaling_beta" not in ministral["scaling"]


@pytest.mark.parametrize("patch, match", [
    ({"layer_rope_theta": [1e4, 1e4]}, "layer_rope_theta must hold num_hidden_layers=4"),
    ({"layer_rope_theta": [1e4, -1.0, 1e4, 0]}, "layer_rope_theta"),
    ({"rope_scaling_layers": [7]}, "rope_scaling_layers must hold layer indices in 0..3"),
    ({"sliding_window_pattern": 0, "model_type": "gemma3_text"}, "sliding_window_pattern=0"),
])
def test_bad_new_keys_raise_naming_them(patch, match):
    config = {"model_type": "granitemoe_swa", "num_hidden_layers": 4, "head_dim": 8, "rope_theta": 1e4, **patch}
    with pytest.raises(ValueError, match=match):
        pn.rope_schedule_from_hf_config(config)


def test_ernie_vl_reads_its_pair_axis_table_never_1d():
    (entry, _) = pn.rope_schedule_from_hf_config(MORE["ernie4.5-vl"])
    assert entry["layout"] == "interleaved" and "mrope_section" not in entry
    assert entry["mrope_axes"] == [1, 2] * 22 + [0] * 20
    with pytest.raises(ValueError, match="first two sections must be equal"):
        pn.rope_schedule_from_hf_config({**MORE["ernie4.5-vl"], "rope_scaling": {"mrope_section": [24, 20, 20]}})


def _spec_layers(path, capsys):
    """`posenc spec FILE --json OUT`: exit 0 and the per-layer reading it writes."""
    out = path.with_suffix(".spec.json")
    assert main(["spec", str(path), "--json", str(out)]) == 0
    capsys.readouterr()
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", ["gemma3-1b", "qwen3-vl", "deepseek-v3.2", "ministral3", "granite-swa"])
def test_posenc_spec_prints_the_per_layer_reading(name, tmp_path, capsys):
    config = GEMMA3_1B if name == "gemma3-1b" else SHIPPED[name]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["spec", str(path)]) == 0
    printed = capsys.readouterr().out
    schedule = pn.rope_schedule_from_hf_config(config)
    for i, entry in enumerate(schedule):  # each layer's base (or NoPE) appears in the table
        assert ("NoPE" if entry is None else f"{entry['base']:.6g}") in printed, (i, printed)
    spec = _spec_layers(path, capsys)
    layers = spec["layers"] if isinstance(spec, dict) else spec[0]["layers"]
    assert len(layers) == len(schedule)
    for layer, entry in zip(layers, schedule, strict=True):
        assert layer["rope"] is (entry is not None)
        if entry is not None:
            assert (layer["base"], layer["layout"], layer["rotary_dim"]) == (entry["base"], entry["layout"],
                                                                             entry["rotary_dim"])
            assert (layer.get("mrope_section") and list(layer["mrope_section"])) == entry.get("mrope_section")


def test_ministral3_query_scale_equals_hf_attention(monkeypatch):
    from transformers.models.ministral3 import modeling_ministral3 as m3

    torch.manual_seed(0)
    text = dict(MINISTRAL3["text_config"])
    text["rope_parameters"] = {**text["rope_parameters"], "original_max_position_embeddings": 8}
    config = _hf(text)
    config._attn_implementation = "eager"
    attention = m3.Ministral3Attention(config, layer_idx=0).eval()
    rotary = m3.Ministral3RotaryEmbedding(config)
    seq = 40
    positions = np.arange(seq)
    hidden = torch.randn(1, seq, config.hidden_size)
    seen = {}
    original = m3.eager_attention_forward

    def spy(module, query, key, value, attention_mask, scaling=None, **kwargs):
        seen["query"] = query.detach().double().numpy()
        return original(module, query, key, value, attention_mask, scaling=scaling, **kwargs)

    monkeypatch.setattr(m3, "eager_attention_forward", spy)
    ids = torch.tensor(positions)[None]
    with torch.no_grad():
        attention(hidden, rotary(hidden, ids), attention_mask=None, position_ids=ids)
        q = attention.q_proj(hidden).view(1, seq, 4, 16).transpose(1, 2).double().numpy()
    (entry, _) = pn.rope_schedule_from_hf_config({**MINISTRAL3, "text_config": text})
    scale = pn.llama_4_scaling(positions, beta=0.1, original_max_position_embeddings=8)
    assert len(np.unique(scale)) == 5  # floor(p / 8) takes 5 values over 40 positions
    ours = pn.apply_rope(q, positions, **entry) * scale[:, None]
    np.testing.assert_allclose(ours, seen["query"], rtol=1e-4, atol=1e-5)
    # Llama 4's floor((p + 1) / L) is another function: it differs at p = L - 1
    assert pn.llama4_attn_scale([7], floor_scale=8, attn_scale=0.1)[0] != scale[7]


def test_v4_sweep_reads_or_refuses_every_model_type_and_no_dialect_regresses():
    v4 = schedule_sweep.sweep_v4()
    v5 = schedule_sweep.sweep()
    counts = {s: sum(1 for st, _ in v4.values() if st == s) for s in {st for st, _ in v4.values()}}
    print("v4 sweep:", counts)
    mismatches = {mt: d for mt, (st, d) in v4.items() if st == "mismatch"}
    assert not mismatches, mismatches
    assert counts["read"] >= 238  # transformers 5.24: 242
    regressed = [mt for mt, (st, _) in v4.items() if st == "refused" and v5[mt][0] == "read"]
    assert not regressed, f"read as transformers 5 writes them, refused in their transformers-4 form: {regressed}"


# --- what runtimes compute (posenc spec --runtime) -----------------------------------------------------------

YARN = {"model_type": "llama", "num_hidden_layers": 1, "head_dim": 16, "hidden_size": 64, "num_attention_heads": 4,
        "max_position_embeddings": 131072, "rope_theta": 150000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                         "attention_factor": 1.25, "truncate": False, "beta_fast": 32.0, "beta_slow": 1.0}}


def test_vllm_033_forwards_yarn_attention_factor_and_truncate_032_does_not():
    from posenc.modelspec.runtimes import runtime_spec

    new, old = runtime_spec(dict(YARN), "vllm").layers[0], runtime_spec(dict(YARN), "vllm-0.32").layers[0]
    assert new.scaling["attention_factor"] == 1.25 and new.scaling["truncate"] is False
    assert new.plan().attention_scale == pytest.approx(1.25)
    assert "attention_factor" not in old.scaling
    assert old.plan().attention_scale == pytest.approx(0.1 * np.log(32.0) + 1.0)


def test_mlx_lm_032_drops_yarn_attention_factor_and_truncate_and_runs_mrope_1d():
    from posenc.modelspec.runtimes import runtime_spec

    spec = runtime_spec(dict(YARN), "mlx")
    assert spec.layers[0].scaling["rope_type"] == "mlx-yarn"
    assert any("attention_factor" in f.message and "truncate" in f.message for f in spec.findings)
    vl = runtime_spec(json.loads(json.dumps(MORE["qwen2-vl"])), "mlx")
    assert all(layer.mrope_section is None for layer in vl.layers)
    # the cited lines of the installed mlx-lm say so
    mlx_lm = pytest.importorskip("mlx_lm")
    lines = (Path(mlx_lm.__file__).parent / "models" / "rope_utils.py").read_text().splitlines()
    yarn = "\n".join(lines[325:345])
    assert 'rope_type in ("yarn"' in yarn and "attention_factor" not in yarn and "truncate" not in yarn
    mrope = "\n".join(lines[365:371])
    assert 'rope_type == "mrope"' in mrope and "return nn.RoPE(dims, traditional=traditional, base=base)" in mrope


def test_llamacpp_imrope_unrotated_pairs_equal_ggml():
    from posenc.modelspec.runtimes import imrope_unrotated_pairs, runtime_spec

    assert imrope_unrotated_pairs([24, 20, 20], 64) == [61, 62]
    assert imrope_unrotated_pairs([11, 11, 10], 32) == []  # Qwen3.5: none
    spec = runtime_spec(json.loads(json.dumps(QWEN3_VL)), "llama.cpp")
    assert any("[61, 62]" in f.message and "ops.cpp:5897-5906" in f.message for f in spec.findings)
    pytest.importorskip("ggml")
    from posenc.impl.builtin import ggml as ggml_impl

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 9, 128)).astype(np.float32)
    positions = np.arange(9) * 911
    ids = np.stack([positions] * 3)[:, None, :]  # a text token: the same id on every axis
    got = np.asarray(ggml_impl.apply_rope(x, ids, base=5e6, mrope_section=[24, 20, 20], mrope_interleaved=True))
    want = pn.apply_rope(x.astype(np.float64), ids, base=5e6, mrope_section=[24, 20, 20], mrope_interleaved=True)
    differ = sorted({j % 64 for j in np.nonzero(np.abs(got - want).max(axis=(0, 1)) > 1e-3)[0]})
    assert differ == [61, 62]
    np.testing.assert_allclose(got[..., [61, 62, 125, 126]], x[..., [61, 62, 125, 126]], atol=1e-6)


# --- the sparse-attention indexer's own rotary -----------------------------------------------------------------

GLM5 = {"model_type": "glm_moe_dsa", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
        "num_hidden_layers": 2, "q_lora_rank": 16, "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 16,
        "v_head_dim": 8, "max_position_embeddings": 4096, "rope_theta": 1000000.0, "index_head_dim": 32,
        "index_n_heads": 2, "index_topk": 8, "indexer_types": ["full", "shared"], "vocab_size": 64,
        "intermediate_size": 32, "moe_intermediate_size": 16, "n_routed_experts": 4, "n_shared_experts": 1,
        "num_experts_per_tok": 2, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1}


@pytest.mark.parametrize("name, config, apply_name", [
    ("deepseek_v32", DEEPSEEK_V32, "apply_rotary_pos_emb"),
    ("glm_moe_dsa", GLM5, "apply_rotary_pos_emb_interleave"),
])
def test_indexer_rope_equals_hf_indexer(name, config, apply_name, monkeypatch):
    import importlib

    module = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    hf = _hf(config)
    indexer_cls = next(v for k, v in vars(module).items() if k.endswith("Indexer") and isinstance(v, type))
    rotary_cls = next(v for k, v in vars(module).items() if k.endswith("RotaryEmbedding") and isinstance(v, type))
    torch.manual_seed(0)
    indexer = indexer_cls(hf, 0).eval()
    seen = []
    original = getattr(module, apply_name)

    def spy(q, k, cos, sin, *args, **kwargs):
        out = original(q, k, cos, sin, *args, **kwargs)
        if kwargs.get("unsqueeze_dim") == 2:  # the indexer's call ([B, S, H, D] q)
            seen.append((q.detach().double().numpy(), out[0].detach().double().numpy()))
        return out

    monkeypatch.setattr(module, apply_name, spy)
    seq = 24
    positions = np.arange(seq) * 37
    ids = torch.tensor(positions)[None]
    hidden = torch.randn(1, seq, hf.hidden_size)
    with torch.no_grad():
        embeddings = rotary_cls(hf)(hidden, ids)
        mask = torch.zeros(1, 1, seq, seq)
        indexer(hidden, torch.randn(1, seq, hf.q_lora_rank), embeddings, mask, ids)
    (q_in, q_out), = seen
    entries = pn.indexer_rope_schedule_from_hf_config(config)
    entry = entries[0]
    assert entry["rotary_dim"] == hf.qk_rope_head_dim == q_in.shape[-1]
    ours = pn.apply_rope(q_in, positions[:, None], **entry)
    if entry["layout"] == "interleaved":  # HF returns the rotated pairs in half order
        ours = ours[..., pn.rope_permutation(entry["rotary_dim"], source="interleaved", target="half")]
    np.testing.assert_allclose(ours, q_out, rtol=1e-4, atol=1e-4)
    main = pn.rope_schedule_from_hf_config(config)[0]
    assert main["layout"] == "interleaved" and entry["layout"] == ("half" if name == "deepseek_v32" else "interleaved")
    if name == "glm_moe_dsa":
        assert entries[1] is None  # "shared": the layer reuses the previous top-k


def test_deepseek_v4_main_and_compress_rotaries_equal_hf_on_the_trailing_slice():
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as v4

    config = MORE["deepseek-v4"]
    hf = _hf(config)
    schedule = pn.rope_schedule_from_hf_config(config)
    assert [e["base"] for e in schedule] == [1e4, 1.6e5, 1.6e5]
    assert schedule[0]["scaling"] is None and schedule[1]["scaling"]["attention_factor"] == 1.0
    rotary = v4.DeepseekV4RotaryEmbedding(hf)
    rng = np.random.default_rng(0)
    positions = np.arange(16) * 9  # float32 angles in HF: small positions keep its error below 1e-5
    q = rng.standard_normal((1, 16, 2, 64))
    for entry, label in ((schedule[0], "main"), (schedule[1], "compress")):
        with torch.no_grad():
            cos, sin = rotary(torch.zeros(1, 16, 8), torch.tensor(positions)[None], layer_type=label)
            want = v4.apply_rotary_pos_emb(torch.tensor(q, dtype=torch.float32), cos, sin, unsqueeze_dim=2)
        ours = pn.apply_mla_rope(q, q[..., :1, -16:], positions[:, None], qk_nope_head_dim=48, **entry)[0]
        np.testing.assert_allclose(ours, want.double().numpy(), rtol=1e-4, atol=1e-4)
