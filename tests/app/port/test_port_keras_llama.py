"""`posenc port --preset hf-llama-to-keras` / `keras-to-hf-llama` against keras-hub 0.32.0 itself.

References: keras-hub's own HF converter (keras_hub/src/utils/transformers/convert_llama3.py
`convert_backbone_config`, `convert_weights`) run on the same HF state dict; keras-hub's `LlamaBackbone`
loading the written `.weights.h5` and run against transformers' `LlamaForCausalLM` (tiny random config,
float32, nothing downloaded); `LlamaBackbone.save_to_preset` as the source of the reverse port.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
keras_hub = pytest.importorskip("keras_hub", reason="keras-hub 0.32.0 (requirements-nodeps.txt) is the reference "
                                "LlamaBackbone of the keras presets")
h5py = pytest.importorskip("h5py")

from helpers import cli  # noqa: E402
from posenc.errors import UsageError  # noqa: E402
from posenc.port.presets.keras_llama import keras_hub_llama_config  # noqa: E402
from posenc_np.rope import permute_qk_rows  # noqa: E402
from posenc_np.testing import compare, tolerance  # noqa: E402

LLAMA3 = {"rope_type": "llama3", "rope_theta": 50000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
SMALL = dict(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5)
SEQ = 200  # beyond the original context 64: the llama3 low band and the smooth band are exercised



@pytest.fixture(scope="module")
def ported(tmp_path_factory):
    """A tiny llama3-scaled LlamaForCausalLM saved in shards, ported once to a keras-hub .weights.h5."""
    tmp = tmp_path_factory.mktemp("keras_llama")
    config = transformers.LlamaConfig(**SMALL, rope_parameters=dict(LLAMA3), architectures=["LlamaForCausalLM"])
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # RMSNorm scales away from 1, so that a lost or misplaced scale shows; attention
        for name, p in model.named_parameters():  # scaled up from init std 0.02 so that it, not the residual,
            if p.ndim == 1:  # dominates the hidden states: a wrong rotation then moves them by O(1)
                p.add_(0.1 * torch.randn_like(p))
            elif "self_attn" in name:
                p.mul_(12.0 if ("q_proj" in name or "k_proj" in name) else 6.0)
    model.save_pretrained(tmp / "hf", max_shard_size="40KB")
    assert len([n for n in os.listdir(tmp / "hf") if n.endswith(".safetensors")]) > 1
    target = tmp / "llama.weights.h5"
    assert cli("port", tmp / "hf", target, "--preset", "hf-llama-to-keras", "--json", tmp / "r.json") == 0
    sidecar = json.loads((tmp / "llama.weights.h5.rope.json").read_text())
    backbone = keras_hub.models.LlamaBackbone(**sidecar["keras_hub"]["config"], dtype="float32")
    backbone.load_weights(str(target))  # Keras 3's own loader: proves the layout, not just the numbers
    return dict(tmp=tmp, model=model, target=target, sidecar=sidecar, backbone=backbone,
                report=json.loads((tmp / "r.json").read_text()))


def test_report_checks_logits_per_band_and_every_tensor(ported):
    checks = ported["report"]["checks"]
    kinds = {}
    for c in checks:
        assert c["passed"], c
        kinds[c["kind"]] = kinds.get(c["kind"], 0) + 1
    assert kinds == {"written": 21, "dense": 7, "keras-logits": 2, "keras-dense": 4}
    logits = [c for c in checks if c["kind"] == "keras-logits"]
    assert all("up to 511" in c["note"] for c in logits)  # probes reach the context the config allows


def test_weights_equal_keras_hubs_own_converter(ported):
    """keras-hub's convert_llama3.convert_weights, run on the same HF tensors, fills a backbone with exactly
    the values posenc wrote; its convert_backbone_config agrees except where the docstring says it drops."""
    from keras_hub.src.utils.transformers import convert_llama3

    hf_config = json.loads((ported["tmp"] / "hf" / "config.json").read_text())
    ours = ported["sidecar"]["keras_hub"]["config"]
    theirs = convert_llama3.convert_backbone_config(hf_config)
    llama3_keys = {"rope_frequency_adjustment_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                   "rope_pretraining_sequence_length"}
    # transformers 5 keeps the llama3 factors in rope_parameters, which the converter does not read
    assert {k: v for k, v in ours.items() if k not in llama3_keys | {"layer_norm_epsilon"}} == theirs
    v4_style = {**hf_config, "rope_scaling": dict(LLAMA3), "rope_theta": LLAMA3["rope_theta"]}
    assert {k: v for k, v in ours.items() if k != "layer_norm_epsilon"} == \
        convert_llama3.convert_backbone_config(v4_style)
    assert ours["layer_norm_epsilon"] == SMALL["rms_norm_eps"]

    state = {k: v.detach().numpy() for k, v in ported["model"].state_dict().items()}

    class Loader:  # keras-hub's SafetensorLoader.port_weight contract: hook_fn(hf_tensor, keras_shape)
        def port_weight(self, keras_variable, hf_weight_key, hook_fn=None):
            value = state[hf_weight_key]
            keras_variable.assign(hook_fn(value, tuple(keras_variable.shape)) if hook_fn else value)

    reference = keras_hub.models.LlamaBackbone(**ours, dtype="float32")
    convert_llama3.convert_weights(reference, Loader(), hf_config)
    with h5py.File(ported["target"], "r") as f:
        written = {}
        f.visititems(lambda name, obj: written.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    assert len(written) == len(reference.weights) == 21
    loaded = {v.path: np.asarray(v) for v in ported["backbone"].weights}
    for variable in reference.weights:
        np.testing.assert_array_equal(loaded[variable.path], np.asarray(variable), err_msg=variable.path)


def _hidden(backbone, tokens):
    return np.asarray(backbone({"token_ids": tokens[None].astype("int32"),
                                "padding_mask": np.ones((1, len(tokens)), "int32")}))[0].astype(np.float64)


def _forward_tolerance(model, desired):
    """Two float32 stacks (torch, Keras/TF) with different op orders: 64 float32 ulps of slack plus the
    float32 angle error 2*eps32*angle of the largest RoPE angle, relative to the output's scale."""
    inv = model.model.rotary_emb.inv_freq.double().numpy()
    return tolerance("float32", max_angle=(SEQ - 1) * float(inv.max()), scale=float(np.abs(desired).max()),
                     slack_ulps=64)


def test_keras_hub_backbone_matches_hf_hidden_states_and_logits(ported):
    tokens = np.random.default_rng(1).integers(0, SMALL["vocab_size"], SEQ)
    model = ported["model"]
    with torch.no_grad():
        out = model(torch.from_numpy(tokens)[None], output_hidden_states=True)
    desired = out.hidden_states[-1][0].double().numpy()  # after the final RMSNorm, as the backbone's output
    hidden = _hidden(ported["backbone"], tokens)
    result = compare(hidden, desired, _forward_tolerance(model, desired))
    assert result.passed, result.message
    embedding = ported["backbone"].get_layer("token_embedding")
    logits = np.asarray(embedding(hidden[None].astype("float32"), reverse=True))[0]
    desired_logits = out.logits[0].double().numpy()
    assert compare(logits, desired_logits, _forward_tolerance(model, desired_logits)).passed


def test_permuted_qk_rows_break_the_backbone(ported, tmp_path):
    """keras-hub rotates halves like HF: the port keeps q/k rows, and permuting them (half -> interleaved,
    as llama.cpp wants) moves the hidden states far outside the tolerance above."""
    bad = tmp_path / "bad.weights.h5"
    bad.write_bytes(ported["target"].read_bytes())
    heads, kv = SMALL["num_attention_heads"], SMALL["num_key_value_heads"]
    with h5py.File(bad, "r+") as f:
        for name, count in (("_query_dense", heads), ("_key_dense", kv)):
            path = f"layers/llama_transformer_decoder/_self_attention_layer/{name}/vars/0"
            kernel = f[path][()]  # [hidden, heads, head_dim] -> rows [heads * head_dim, hidden], permuted, back
            rows = permute_qk_rows(kernel.reshape(kernel.shape[0], -1).T, count, source="half", target="interleaved")
            f[path][...] = rows.T.reshape(kernel.shape)
    backbone = keras_hub.models.LlamaBackbone(**ported["sidecar"]["keras_hub"]["config"], dtype="float32")
    backbone.load_weights(str(bad))
    tokens = np.random.default_rng(1).integers(0, SMALL["vocab_size"], SEQ)
    with torch.no_grad():
        desired = ported["model"].model(torch.from_numpy(tokens)[None]).last_hidden_state[0].double().numpy()
    tol = _forward_tolerance(ported["model"], desired)
    assert np.abs(_hidden(backbone, tokens) - desired).max() > 100 * tol.atol
    assert np.abs(_hidden(ported["backbone"], tokens) - desired).max() <= tol.atol


def test_keras_preset_back_to_hf(ported, tmp_path):
    """LlamaBackbone.save_to_preset (config.json + model.weights.h5) -> HF checkpoint directory: every tensor
    equals the original, and transformers loads the written config.json into the same model."""
    preset = tmp_path / "preset"
    ported["backbone"].save_to_preset(str(preset))
    back = tmp_path / "back"
    assert cli("port", preset / "model.weights.h5", f"{back}/", "--preset", "keras-to-hf-llama") == 0
    reloaded = transformers.LlamaForCausalLM.from_pretrained(back).eval()
    original = ported["model"].state_dict()
    for name, tensor in reloaded.state_dict().items():
        assert torch.equal(tensor, original[name]), name
    assert reloaded.config.rope_parameters["rope_type"] == "llama3"
    assert reloaded.config.max_position_embeddings == 512  # 64 * factor 8: the llama3 context
    assert reloaded.config.rms_norm_eps == SMALL["rms_norm_eps"]


def test_logits_check_fails_when_the_keras_config_drops_llama3(ported):
    """The preset's own check rotates the Keras side with the settings its config builds: the config
    keras-hub's converter makes of a transformers 5 config.json (llama3 factors dropped) fails it."""
    from posenc.formats import open_reader
    from posenc.port.presets.keras_llama import keras_logits_check

    hf_config = json.loads((ported["tmp"] / "hf" / "config.json").read_text())
    good = ported["sidecar"]["keras_hub"]["config"]
    dropped = {k: v for k, v in good.items() if not k.startswith(("rope_frequency", "rope_low", "rope_high",
                                                                    "rope_pretraining"))}
    source, target = open_reader(ported["tmp"] / "hf"), open_reader(ported["target"])
    for config, passed in ((good, True), (dropped, False)):
        logits = [c for c in keras_logits_check(hf_config, config, source="hf")(source, target)
                  if c.kind == "keras-logits"]
        assert len(logits) == 2 and all(c.passed is passed for c in logits)


@pytest.mark.parametrize("change, message", [
    (dict(attention_bias=True), "attention_bias=true"),
    (dict(head_dim=16), "head_dim 16"),
    (dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}), "never applies"),
])
def test_what_a_llama_backbone_cannot_express_is_refused(change, message):
    config = {**SMALL, "model_type": "llama", "rope_parameters": {"rope_type": "default", "rope_theta": 1e4},
              **change}
    with pytest.raises(UsageError, match=message):
        keras_hub_llama_config(config)
