"""The training stacks' readers (`read_torchtitan`, `read_megatron`, `read_nemo`): what each library computes for
the keys that are easy to misread, and a clear ValueError for settings that are not one rope type.

Each expectation cites the library line it follows (megatron-core 0.16.1, torchtitan 0.3.0, NeMo 008df615;
the readers' docstrings have the files).
"""

from __future__ import annotations

import json
import math

import pytest

from posenc.cli import main
from posenc.modelspec import compare_specs, read_hf_config, read_megatron, read_nemo, read_torchtitan

GPT = {"num_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "num_query_groups": 2, "kv_channels": 16,
       "position_embedding_type": "rope", "rotary_base": 10000}
YARN = {"yarn_rotary_scaling_factor": 4.0, "yarn_original_max_position_embeddings": 4096, "yarn_beta_fast": 32.0,
        "yarn_beta_slow": 1.0, "yarn_mscale": 1.0, "yarn_mscale_all_dim": 0.0,
        "yarn_correction_range_round_to_int": True}
MLA = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "multi_latent_attention": True,
       "qk_pos_emb_head_dim": 64}


def _titan(rope, name="llama3", head_dim=16):
    layer = {"attention": {"n_heads": 4, "n_kv_heads": 2, "head_dim": head_dim, "rope": rope}}
    return {"model_spec": {"name": name, "flavor": "tiny", "model": {"dim": 64, "layers": [layer, layer]}}}


def test_megatron_yarn_rotates_the_whole_head_whatever_rotary_percent_says():
    spec = read_megatron({**GPT, **YARN, "position_embedding_type": "yarn", "rotary_percent": 0.5})
    assert spec.layers[0].rotary_dim == 16  # YarnRotaryEmbedding: inv_freq over self.dim = kv_channels
    assert any(f.key == "rotary_percent" for f in spec.lint_findings)
    assert math.isclose(spec.layers[0].plan().attention_scale, 0.1 * math.log(4.0) + 1.0, rel_tol=1e-15)


def test_megatron_rope_with_a_leftover_yarn_factor_is_not_one_rope_type():
    with pytest.raises(ValueError, match="concentration factor"):
        read_megatron({**GPT, "yarn_rotary_scaling_factor": 4.0})  # attention.py l.1097-1116 still applies m(4)
    assert read_megatron({**GPT, "yarn_rotary_scaling_factor": 1.0}).layers[0].scaling is None  # m(1) = 1


@pytest.mark.parametrize("cfg, message", [
    ({**GPT, "rope_scaling": True, "seq_len_interpolation_factor": 2.0}, "not one rope type"),
    ({**GPT, "position_embedding_type": None}, "learned_absolute"),
    ({**GPT, **YARN, "position_embedding_type": "yarn", "rotary_interleaved": True}, "does not support interleaved"),
    ({**GPT, "no_rope_freq": 3}, "must divide num_layers"),
    ({**GPT, "rotary_percent": 0.05}, "not a positive even number"),
    ({**GPT, "rotary_theta": 5}, "rotary_theta"),
    ({**MLA, "rope_type": "mrope"}, "rope_type='mrope'"),
])
def test_megatron_bad_or_inexpressible_settings_are_named(cfg, message):
    with pytest.raises(ValueError, match=message):
        read_megatron(cfg)


def test_megatron_linear_llama3_nope_and_interleaved():
    assert read_megatron({**GPT, "seq_len_interpolation_factor": 4.0}).layers[0].scaling == \
        {"rope_type": "linear", "factor": 4.0}
    llama3 = read_megatron({**GPT, "rope_scaling": True, "rope_scaling_factor": 32.0}).layers[0].scaling
    assert llama3 == {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192}  # rotary_pos_embedding.py l.92-98 fixed values
    spec = read_megatron({**GPT, "no_rope_freq": 2, "rotary_interleaved": True})
    assert [la.rope for la in spec.layers] == [True, False, True, False]
    assert spec.row_order == "hf" and spec.layers[0].layout == "interleaved"


def test_megatron_mla_left_to_its_class_defaults_is_yarn_40_with_lint_findings():
    spec = read_megatron(MLA)
    assert spec.layers[0].scaling["rope_type"] == "yarn" and spec.layers[0].scaling["factor"] == 40.0
    assert {"rope_type", "rotary_scaling_factor"} <= {f.key for f in spec.lint_findings}
    plain = read_megatron({**MLA, "rope_type": "rope", "rotary_scaling_factor": 40.0, "mscale_all_dim": 1.0})
    assert plain.layers[0].scaling is None
    assert math.isclose(plain.attention_terms["softmax_scale_multiplier"], (0.1 * math.log(40) + 1) ** 2)


def test_compare_names_a_softmax_multiplier_difference():
    hf = read_hf_config({"model_type": "deepseek_v3", "hidden_size": 256, "num_attention_heads": 4,
                         "num_hidden_layers": 2, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                         "kv_lora_rank": 512, "q_lora_rank": None, "rope_theta": 10000.0})
    bad = read_megatron({**MLA, "rope_type": "rope", "rotary_scaling_factor": 40.0, "mscale_all_dim": 1.0})
    result = compare_specs(hf, bad)
    assert not result.same and any("softmax scale multiplier" in d for d in result.differences)


def test_torchtitan_class_follows_the_model_name():
    rope = {"dim": 16, "max_seq_len": 4096, "theta": 500000.0}
    llama = read_torchtitan(_titan(rope))
    assert (llama.row_order, llama.layers[0].layout) == ("meta", "interleaved")  # ComplexRoPE on Meta rows
    qwen = read_torchtitan(_titan(rope, "qwen3"))
    assert (qwen.row_order, qwen.layers[0].layout) == ("hf", "half")  # CosSinRoPE
    yarn = {**rope, "scaling": "yarn", "rope_factor": 32.0, "original_seq_len": 4096}
    assert read_torchtitan(_titan(yarn)).layers[0].plan().attention_scale == 1.0  # rope applies no mscale
    folded = read_torchtitan(_titan(yarn, "gpt_oss")).layers[0].plan().attention_scale  # gpt_oss/model.py l.73-78
    assert math.isclose(folded, 0.1 * math.log(32.0) + 1.0, rel_tol=1e-15)
    assert read_torchtitan(_titan({**yarn, "rope_factor": 1.0})).layers[0].scaling is None  # only when > 1
    bare = read_torchtitan(_titan(rope)["model_spec"]["model"])
    assert bare.row_order == "meta" and any(f.key == "model_spec.name" for f in bare.lint_findings)


@pytest.mark.parametrize("config, message", [
    (_titan({"dim": 16, "max_seq_len": 4096}, "deepseek_v3"), "deepseek_v3"),
    (_titan({"dim": 8, "max_seq_len": 4096}), "rope.dim=8 != head_dim=16"),
    (_titan({"dim": 16, "max_seq_len": 4096, "scaling": "llama"}, "qwen3"), "CosSinRoPE raises"),
    (_titan({"dim": 16, "max_seq_len": 4096, "rope_theta": 5.0}), "rope_theta"),
    (_titan({"dim": 16, "max_seq_len": 4096, "scaling": "ntk"}), "scaling='ntk'"),
    ({"model_spec": {"name": "llama3"}}, "model_spec.model.layers"),
])
def test_torchtitan_bad_configs_are_named(config, message):
    with pytest.raises(ValueError, match=message):
        read_torchtitan(config)


def test_nemo2_class_defaults_and_unknown_classes():
    node = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_query_groups": 2}
    code = read_nemo({"config": {"_target_": "nemo.collections.llm.gpt.model.llama.CodeLlamaConfig7B", **node}})
    assert code.layers[0].base == 1_000_000.0 and code.layers[0].scaling is None
    other = read_nemo({"config": {"_target_": "my.ModelConfig", "position_embedding_type": "rope",
                                  "rotary_base": 10000, **node}})
    assert any(f.key == "_target_" for f in other.lint_findings)
    with pytest.raises(ValueError, match="Llama31Config scaling on top of linear"):
        read_nemo({"config": {"_target_": "nemo.collections.llm.gpt.model.llama.Llama31Config8B",
                              "seq_len_interpolation_factor": 2.0, **node}})


def test_nemo1_keys():
    spec = read_nemo({"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "position_embedding_type": "rope",
                      "rotary_percentage": 0.5, "rotary_base": 10000, "encoder_seq_length": 4096,
                      "max_position_embeddings": 4096, "scale_positional_embedding": False})
    assert (spec.dialect, spec.layers[0].rotary_dim, spec.layers[0].head_dim, spec.layers[0].scaling) == \
        ("nemo", 8, 16, None)


#: torchtitan 0.2.2 llama3 flavour "8B" (models/llama3/__init__.py), as train.py l.145 logs asdict(model_args)
TITAN02_8B = {"dim": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "vocab_size": 128256, "multiple_of": 1024,
              "ffn_dim_multiplier": 1.3, "norm_eps": 1e-5, "rope_theta": 500000,
              "rope_scaling_args": {"scaling_factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 8192},
              "max_seq_len": 8192, "depth_init": True, "attn_type": "sdpa", "attn_mask_type": "causal", "eos_id": 0}
HF_LLAMA3_8B = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                "num_hidden_layers": 32, "max_position_embeddings": 8192, "rope_theta": 500000.0}


def test_torchtitan_02_scales_every_llama3_flavour(tmp_path, capsys):
    spec = read_torchtitan(TITAN02_8B)
    assert (spec.row_order, spec.layers[0].rope_type, spec.layers[0].head_dim) == ("meta", "llama3", 128)
    unset = read_torchtitan({k: v for k, v in TITAN02_8B.items() if k != "rope_scaling_args"})
    assert unset.layers[0].scaling == spec.layers[0].scaling  # RoPEScalingArgs' defaults apply all the same
    titan = tmp_path / "model_args.json"
    titan.write_text(json.dumps(TITAN02_8B))
    llama3 = tmp_path / "config.json"
    llama3.write_text(json.dumps(HF_LLAMA3_8B))
    assert main(["spec", str(llama3), str(titan)]) == 1  # Meta-Llama-3-8B is unscaled
    assert "scaling: 'default' vs 'llama3'" in capsys.readouterr().out
    llama31 = tmp_path / "config31.json"
    llama31.write_text(json.dumps({**HF_LLAMA3_8B, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}}))
    assert main(["spec", str(llama31), str(titan)]) == 0
    with pytest.raises(ValueError, match="TransformerModelArgs"):
        read_torchtitan({**TITAN02_8B, "rope_type": "llama3"})
    from posenc.port.stack_config import source_hf_config
    assert source_hf_config("torchtitan", TITAN02_8B)["rope_scaling"]["factor"] == 8.0  # never dropped


def test_an_hf_config_with_megatron_like_names_stays_hf():
    """ChatGLM's HF config.json carries num_layers and kv_channels: model_type keeps it with the HF reader."""
    from posenc.modelspec.source import _detect
    assert _detect({"model_type": "chatglm", "num_layers": 2, "kv_channels": 128}, "config.json") == "hf"
    assert _detect({"num_layers": 2, "kv_channels": 128, "rotary_base": 10000}, "config.json") == "megatron"
