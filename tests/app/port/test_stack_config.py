"""Config translation between HF and the training stacks (`posenc.port.stack_config`): round trips that keep
the angles, refusals of what a target cannot express, and each known conversion bug planted into a
translation and caught.

The planted bugs (issue 34; the upstream issues and pull requests named below):
    Megatron-Bridge PR #5097   linear scaling dropped (seq_len_interpolation_factor not written)
    Megatron-Bridge PR #2791   MLA rotary_scaling_factor left at MLATransformerConfig's 40 (and rope_type "yarn")
    Megatron-Bridge #4271      partial_rotary_factor taken relative to qk_pos_emb_head_dim: 8 rotated dims, not 64
    NeMo PR #12497, #14523     rope_scaling written as null on export to HF
    torchtitan llama3          scaling "llama" with RoPE.Config's default factor 8 / low / high instead of the model's
    MaxText #1774              the Meta permutation applied to a model whose MaxText rope needs none (weights)
    torchtitan PR #1441        the q/k permute missing on the way into ComplexRoPE (weights)
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from posenc.modelspec.readers import read_hf_config, read_megatron, read_nemo, read_torchtitan
from posenc.port.stack_config import (
    STACK_DIALECTS,
    check_qk_row_map,
    qk_row_map,
    read_stack_config,
    source_hf_config,
    target_config,
    verify_angles,
)
from posenc_np.rope import permute_qk_rows

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "num_hidden_layers": 3, "intermediate_size": 128, "vocab_size": 100,
         "rms_norm_eps": 1e-5, "max_position_embeddings": 131072, "rope_theta": 500000.0}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "llama3": LLAMA3,
    "llama3.2": {**LLAMA3, "factor": 32.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192},
}
#: (scaling, dialect) pairs the dialect cannot express, with a word of the reason.
REFUSED = {("linear", "torchtitan"): "'none', 'llama' or 'yarn'",
           ("yarn", "torchtitan"): "no YaRN attention factor",
           ("llama3.2", "maxtext"): "fixes llama3 scaling",
           ("yarn", "nemo"): "no yarn keys"}
DEEPSEEK = {"model_type": "deepseek_v3", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
            "num_hidden_layers": 2, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
            "kv_lora_rank": 512, "q_lora_rank": None, "head_dim": 64, "rope_theta": 10000.0, "vocab_size": 100,
            "intermediate_size": 300, "max_position_embeddings": 163840}
DEEPSEEK_YARN = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32,
                 "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}


def _hf(scaling=None, **extra):
    out = {**LLAMA, **extra}
    if scaling is not None:
        out["rope_scaling"] = dict(scaling)
    return out


# --- round trips and refusals -----------------------------------------------------------------------------

@pytest.mark.parametrize("dialect", STACK_DIALECTS)
@pytest.mark.parametrize("scaling", sorted(SCALINGS))
def test_hf_to_stack_and_back_keeps_the_angles(dialect, scaling):
    hf = _hf(SCALINGS[scaling])
    if (scaling, dialect) in REFUSED:
        with pytest.raises(ValueError, match=REFUSED[scaling, dialect]):
            target_config(dialect, hf)
        return
    stack = target_config(dialect, hf)
    back = source_hf_config(dialect, stack)
    report = verify_angles(read_hf_config(hf), read_hf_config(back))
    assert report.rotary_layers == 3 and report.max_rel_inv_freq <= 1e-12
    for key in ("hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "rope_theta"):
        assert back[key] == hf[key], key
    if scaling != "default":
        assert back["rope_scaling"]["rope_type"] == SCALINGS[scaling]["rope_type"]


def test_each_written_config_names_the_stack_keys():
    hf = _hf(LLAMA3)
    tt = target_config("torchtitan", hf)["model_spec"]["model"]["layers"][0]["attention"]["rope"]
    assert tt == {"dim": 16, "max_seq_len": 131072, "theta": 500000, "scaling": "llama", "scaling_factor": 8.0,
                  "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    assert target_config("maxtext", hf)["rope_type"] == "llama3.1"
    mc = target_config("megatron", hf)
    assert (mc["position_embedding_type"], mc["rope_scaling"], mc["rope_scaling_factor"], mc["rotary_base"]) == \
        ("rope", True, 8, 500000)
    nemo = target_config("nemo", _hf({**LLAMA3, "factor": 32.0}))["config"]
    assert nemo["_target_"].endswith("Llama31Config") and nemo["scale_factor"] == 32


@pytest.mark.parametrize("scaling, dialect, reason", [
    ({"rope_type": "dynamic", "factor": 2.0}, "megatron", "rope_type='dynamic' has no equivalent"),
    ({"rope_type": "dynamic", "factor": 2.0}, "maxtext", "rope_type='dynamic' has no equivalent"),
    ({**LLAMA3, "low_freq_factor": 2.0}, "megatron", "use the nemo dialect"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192, "attention_factor": 1.0},
     "maxtext", None),
])
def test_a_setting_the_target_cannot_express_is_refused_with_the_reason(scaling, dialect, reason):
    hf = _hf(scaling)
    if reason is None:  # attention factor 1 is MaxText's rope_attention_scaling: False: expressible
        assert target_config(dialect, hf)["rope_attention_scaling"] is False
        return
    with pytest.raises(ValueError, match=reason):
        target_config(dialect, hf)


def test_partial_rotary_goes_to_megatron_and_nemo_and_is_refused_by_torchtitan():
    hf = _hf(None, partial_rotary_factor=0.5)
    assert target_config("megatron", hf)["rotary_percent"] == 0.5
    assert source_hf_config("nemo", target_config("nemo", hf))["partial_rotary_factor"] == 0.5
    with pytest.raises(ValueError, match="rotates the whole head"):
        target_config("torchtitan", hf)


def test_nope_layers_become_no_rope_freq_and_torchtitan_refuses_them():
    hf = {**_hf(None), "model_type": "smollm3", "no_rope_layers": [1, 1, 0]}
    spec = read_hf_config(hf)
    assert [la.rope for la in spec.layers] == [True, True, False]
    assert target_config("megatron", hf)["no_rope_freq"] == [0, 0, 1]
    with pytest.raises(ValueError, match="NoPE layers"):
        target_config("torchtitan", hf)


def test_yarn_attention_factor_goes_through_megatron_mscale():
    hf = _hf({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192, "attention_factor": 1.2})
    mc = target_config("megatron", hf)
    factor = 0.1 * mc["yarn_mscale"] * math.log(4.0) + 1.0  # m(f, mscale) / m(f, 0)
    assert math.isclose(factor, 1.2, rel_tol=1e-12)
    assert math.isclose(read_megatron(mc).layers[0].plan().attention_scale, 1.2, rel_tol=1e-12)


def test_deepseek_mla_to_megatron_and_back():
    for scaling in (DEEPSEEK_YARN, None):
        hf = {**DEEPSEEK, **({"rope_scaling": dict(scaling)} if scaling else {})}
        mc = target_config("megatron", hf)
        assert mc["multi_latent_attention"] and mc["qk_pos_emb_head_dim"] == 64
        back = source_hf_config("megatron", mc)
        verify_angles(read_hf_config(hf), read_hf_config(back))
        if scaling:
            assert back["rope_scaling"]["mscale_all_dim"] == 1.0
            assert read_hf_config(back).attention_terms == {"softmax_mscale_all_dim": 1.0}


def test_unknown_dialect_and_model_name_are_named():
    with pytest.raises(ValueError, match="dialect='titan'"):
        target_config("titan", _hf(None))
    with pytest.raises(ValueError, match="model_name='llama4'"):
        target_config("torchtitan", _hf(None), model_name="llama4")
    with pytest.raises(ValueError, match="model_name applies to the torchtitan dialect"):
        target_config("megatron", _hf(None), model_name="qwen3")


# --- planted conversion bugs --------------------------------------------------------------------------------

def _caught(source_spec, target_spec, *words):
    with pytest.raises(ValueError, match="does not keep the angles") as info:
        verify_angles(source_spec, target_spec)
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    return str(info.value)


def test_bridge_5097_linear_scaling_dropped_is_caught():
    hf = _hf(SCALINGS["linear"])
    good = target_config("megatron", hf)
    assert good["seq_len_interpolation_factor"] == 4
    bad = {k: v for k, v in good.items() if k != "seq_len_interpolation_factor"}
    _caught(read_hf_config(hf), read_megatron(bad), "layers 0-2", "inv_freq", "linear vs default")


def test_bridge_2791_mla_rotary_scaling_factor_left_in_place_is_caught():
    hf = dict(DEEPSEEK)  # no rope_scaling: plain RoPE, softmax scale 1/sqrt(d)
    good = target_config("megatron", hf)
    assert (good["rope_type"], good["rotary_scaling_factor"]) == ("rope", 1.0)
    # the buggy translation writes no rope keys: MLATransformerConfig's rope_type "yarn", factor 40 apply
    bad = {k: v for k, v in good.items() if k not in ("rope_type", "rotary_scaling_factor", "mscale", "mscale_all_dim")}
    _caught(read_hf_config(hf), read_megatron(bad), "inv_freq", "default vs yarn", "attention factor")
    # or rope_type fixed to "rope" while the factor 40 stays: MLA's softmax still takes m(40, mscale_all_dim)^2
    bad = {**good, "rotary_scaling_factor": 40, "mscale_all_dim": 1.0}
    message = _caught(read_hf_config(hf), read_megatron(bad), "softmax scale multiplier")
    assert f"{(0.1 * math.log(40) + 1) ** 2:.6g}"[:6] in message


def test_bridge_4271_partial_rotary_relative_to_the_wrong_head_dim_is_caught():
    hf = {**DEEPSEEK, "head_dim": 512, "partial_rotary_factor": 0.125, "qk_nope_head_dim": 448}
    source = read_hf_config(hf)
    assert source.layers[0].rotary_dim == 64  # 0.125 of head_dim 512
    good = target_config("megatron", hf)
    assert (good["qk_pos_emb_head_dim"], good["rotary_percent"]) == (64, 1.0)
    bad = {**good, "rotary_percent": hf["partial_rotary_factor"]}  # 0.125 of qk_pos_emb_head_dim 64
    assert read_megatron(bad).layers[0].rotary_dim == 8
    _caught(source, read_megatron(bad), "rotary_dim: 64 vs 8")


def test_nemo_12497_14523_rope_scaling_null_on_export_is_caught():
    nemo = {"_target_": "nemo.collections.llm.gpt.model.llama.LlamaModel",
            "config": {"_target_": "nemo.collections.llm.gpt.model.llama.Llama32Config1B", "num_layers": 3,
                       "hidden_size": 64, "num_attention_heads": 4, "num_query_groups": 2, "seq_length": 131072}}
    source = read_nemo(nemo)
    assert source.layers[0].scaling["factor"] == 32.0  # Llama32Config1B's scale_factor, from the class
    good = source_hf_config("nemo", nemo)
    assert good["rope_scaling"]["factor"] == 32.0
    bad = {**good, "rope_scaling": None}  # HFLlamaExporter.config writes no rope_scaling
    _caught(source, read_hf_config(bad), "inv_freq", "llama3 vs default")


def test_torchtitan_llama3_scaling_args_left_at_rope_config_defaults_is_caught():
    hf = _hf(SCALINGS["llama3.2"])  # Llama 3.2: factor 32
    good = target_config("torchtitan", hf)
    bad = copy.deepcopy(good)
    for layer in bad["model_spec"]["model"]["layers"]:  # only `scaling="llama"`, as the debug flavours write it
        rope = layer["attention"]["rope"]
        layer["attention"]["rope"] = {k: rope[k] for k in ("dim", "max_seq_len", "theta", "scaling")}
    _caught(read_hf_config(hf), read_torchtitan(bad), "inv_freq")
    custom = _hf({**LLAMA3, "low_freq_factor": 2.0, "high_freq_factor": 8.0})
    good = target_config("torchtitan", custom)
    bad = copy.deepcopy(good)
    for layer in bad["model_spec"]["model"]["layers"]:
        del layer["attention"]["rope"]["low_freq_factor"], layer["attention"]["rope"]["high_freq_factor"]
    _caught(read_hf_config(custom), read_torchtitan(bad), "inv_freq")


# --- q/k rows ------------------------------------------------------------------------------------------------

def _meta_permute(weight, num_heads):
    return permute_qk_rows(weight, num_heads, source="half", target="interleaved")


def test_maxtext_1774_permutation_not_needed_is_caught():
    hf = _hf(None, max_position_embeddings=8192)  # Llama 3 (no scaling): MaxText rope_type "default", half rows
    source = read_hf_config(hf)
    target = read_stack_config("maxtext", target_config("maxtext", hf))
    assert target.row_order == "hf"
    assert check_qk_row_map(source, target, qk_row_map(source, target), num_heads=4, num_kv_heads=2) <= 1e-12
    with pytest.raises(ValueError, match="logits differ after the row map"):
        check_qk_row_map(source, target, _meta_permute, num_heads=4, num_kv_heads=2)


def test_torchtitan_1441_missing_permute_is_caught_and_llama31_needs_it_too():
    hf = _hf(LLAMA3)
    source = read_hf_config(hf)
    for dialect in ("torchtitan", "maxtext"):  # ComplexRoPE / LLaMARotaryEmbedding: Meta rows
        target = read_stack_config(dialect, target_config(dialect, hf))
        assert target.row_order == "meta"
        assert check_qk_row_map(source, target, qk_row_map(source, target), num_heads=4, num_kv_heads=2) <= 1e-12
        with pytest.raises(ValueError, match="logits differ after the row map"):
            check_qk_row_map(source, target, lambda w, n: np.asarray(w), num_heads=4, num_kv_heads=2)
        back = qk_row_map(target, source)
        w = np.arange(64 * 3, dtype=np.float64).reshape(64, 3)
        np.testing.assert_array_equal(back(qk_row_map(source, target)(w, 4), 4), w)


def test_megatron_keeps_hf_rows_and_rotary_interleaved_needs_a_permute():
    hf = _hf(LLAMA3)
    source = read_hf_config(hf)
    mc = target_config("megatron", hf)
    target = read_megatron(mc)
    assert check_qk_row_map(source, target, qk_row_map(source, target), num_heads=4, num_kv_heads=2) <= 1e-12
    interleaved = read_megatron({**mc, "rotary_interleaved": True})
    _caught(source, interleaved, "layout in HF row order: half vs interleaved")
    # the interleaved config is right for Meta-ordered weights: a row map that permutes them keeps the logits
    assert check_qk_row_map(source, interleaved, _meta_permute, num_heads=4, num_kv_heads=2) <= 1e-12


def test_length_dependent_scaling_is_compared_beyond_its_switch():
    """Dynamic NTK equals the unscaled frequencies up to the original length: the check evaluates it there,
    one past it and beyond, and names the length where it differs."""
    dynamic = read_hf_config(_hf({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8192}))
    assert np.array_equal(dynamic.layers[0].plan().turns_at(8192), read_hf_config(_hf(None)).layers[0].plan().turns)
    message = _caught(dynamic, read_hf_config(_hf(None)), "inv_freq at seq_len", "dynamic vs default")
    assert "seq_len 8192:" not in message  # equal there: the reported length is one beyond the switch
    assert verify_angles(dynamic, dynamic).max_rel_inv_freq == 0.0
