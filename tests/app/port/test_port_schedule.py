"""`posenc port` with per-layer RoPE settings and the DeepSeek MLA preset, on tiny random transformers models.

* A Llama 4 text model (interleaved pairs in HF's own code, NoPE on layer 3) ported to half layout with
  `--hf-config`: the sidecar carries one entry per layer (NoPE as null), the rope-logits check runs per layer and
  names its layer type; a Gemma 3 model (sliding 1e4 default, global 1e6 linear) likewise, half -> interleaved.
* A DeepSeek-V3 model with `rope_interleave=True` ported by `hf-deepseek-mla-to-half`: transformers itself,
  loading TARGET with the written config (`rope_interleave=False`), gives the source model's logits; a port
  that permutes the wrong rows is refused by the MLA logits check.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from posenc.cli import main

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _save(model, path):
    model.save_pretrained(str(path))
    return path / "model.safetensors", path / "config.json"


def _port_args(source, target, config, *, heads, kv_heads, rope_from, rope_to):
    return ["port", str(source), str(target), "--rope-q", "model.layers.*.self_attn.q_proj.weight",
            "--rope-k", "model.layers.*.self_attn.k_proj.weight", "--heads", str(heads), "--kv-heads", str(kv_heads),
            "--rope-from", rope_from, "--rope-to", rope_to, "--hf-config", str(config)]


def test_llama4_port_carries_per_layer_settings_and_checks_each_layer(tmp_path, capsys):
    from transformers import Llama4ForCausalLM, Llama4TextConfig

    torch.manual_seed(0)
    config = Llama4TextConfig(vocab_size=64, hidden_size=32, intermediate_size=16, intermediate_size_mlp=16,
                              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                              num_local_experts=1, attn_temperature_tuning=True)
    source, cfg = _save(Llama4ForCausalLM(config), tmp_path / "llama4")
    target = tmp_path / "half.safetensors"
    code = main(_port_args(source, target, cfg, heads=4, kv_heads=2, rope_from="interleaved", rope_to="half")
                + ["--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == 0, out
    rope = json.loads((tmp_path / "half.safetensors.rope.json").read_text())["rope"]
    assert rope["base"] is None and rope["scaling"] is None  # no one value a loader could use for every layer
    assert rope["layers"][3] is None
    assert [e["layout"] for e in rope["layers"][:3]] == ["half"] * 3
    assert [e["layer_type"] for e in rope["layers"][:3]] == ["chunked_attention"] * 3
    checks = [c for c in json.loads((tmp_path / "r.json").read_text())["checks"] if c["kind"] == "rope-logits"]
    assert len(checks) == 4 and all(c["passed"] for c in checks)
    assert checks[3]["note"] == "layer 3: NoPE (no rotation)"
    assert checks[0]["note"].startswith("layer 0 (chunked_attention): base 500000")
    # the config says interleaved (HF's Llama 4 code): a port claiming half source layout is refused, exit 2
    assert main(_port_args(source, tmp_path / "x.safetensors", cfg, heads=4, kv_heads=2, rope_from="half",
                           rope_to="interleaved")) == 2
    assert "rotates interleaved pairs" in capsys.readouterr().err


def test_gemma3_local_global_port_checks_each_layer_type(tmp_path, capsys):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window_pattern=2,
                              rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                               "full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                  "rope_theta": 1e6}})
    source, cfg = _save(Gemma3ForCausalLM(config), tmp_path / "gemma3")
    assert main(_port_args(source, tmp_path / "t.safetensors", cfg, heads=4, kv_heads=2, rope_from="half",
                           rope_to="interleaved")) == 0
    out = capsys.readouterr().out
    assert "rope-logits  4/4 passed" in out and "(full_attention): base 1e+06, linear scaling" in out
    layers = json.loads((tmp_path / "t.safetensors.rope.json").read_text())["rope"]["layers"]
    assert [(e["base"], e["layer_type"]) for e in layers] == [(1e4, "sliding_attention"), (1e6, "full_attention")] * 2
    # one value for every layer contradicts the config: refused before anything is written
    assert main(_port_args(source, tmp_path / "u.safetensors", cfg, heads=4, kv_heads=2, rope_from="half",
                           rope_to="interleaved") + ["--rope-theta", "10000"]) == 2
    assert "sets RoPE per layer" in capsys.readouterr().err
    assert not (tmp_path / "u.safetensors").exists()


def _deepseek(tmp_path, rope_interleave=True):
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(0)
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "mscale": 0.707,
            "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0, "rope_theta": 10000.0}
    config = DeepseekV3Config(vocab_size=64, hidden_size=32, intermediate_size=32, moe_intermediate_size=16,
                              num_hidden_layers=2, first_k_dense_replace=2, num_attention_heads=4,
                              num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=8, qk_nope_head_dim=6,
                              qk_rope_head_dim=8, v_head_dim=6, max_position_embeddings=64, rope_parameters=rope,
                              rope_interleave=rope_interleave)
    config._attn_implementation = "eager"
    model = DeepseekV3ForCausalLM(config).eval()
    source, _ = _save(model, tmp_path / "deepseek")
    return model, source


def test_deepseek_mla_interleaved_ports_to_half_equal_in_transformers(tmp_path, capsys):
    from transformers import DeepseekV3ForCausalLM

    model, source = _deepseek(tmp_path)
    target = tmp_path / "half/"
    code = main(["port", str(source), str(target) + "/", "--preset", "hf-deepseek-mla-to-half"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "mla-logits   2/2 passed" in out and "mla-rope x4" in out
    sidecar = json.loads((tmp_path / "half.rope.json").read_text())
    assert sidecar["hf_config"]["rope_interleave"] is False
    assert sidecar["rope"]["mla"]["qk_rope_head_dim"] == 8 and len(sidecar["rope"]["layers"]) == 2
    ported = DeepseekV3ForCausalLM.from_pretrained(str(target), attn_implementation="eager").eval()
    assert ported.config.rope_interleave is False
    ids = torch.randint(0, 64, (1, 40))  # past original_max_position_embeddings=16: YaRN's bands all matter
    with torch.no_grad():
        want, got = model(ids).logits, ported(ids).logits
    # float32 transformers on the same weights, rows permuted: equal up to float32 rounding of the sums
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=1e-5)
    assert not torch.equal(ported.model.layers[0].self_attn.kv_a_proj_with_mqa.weight,
                           model.model.layers[0].self_attn.kv_a_proj_with_mqa.weight)


def test_mla_port_with_wrong_rows_is_not_verified(tmp_path, monkeypatch, capsys):
    """A port that permutes the LEADING rope-width rows of each head (the wrong end) fails the MLA logits check."""
    from posenc.port import mapping
    from posenc_np.rope import rope_permutation

    _, source = _deepseek(tmp_path)
    original = mapping.Op.apply

    def wrong_end(self, array):
        if self.kind != "mla-rope":
            return original(self, array)
        heads, head_dim, rotary_dim, src, tgt = self.params
        perm = np.arange(head_dim)
        perm[:rotary_dim] = rope_permutation(rotary_dim, source=src, target=tgt)
        return np.asarray(array).reshape(heads, head_dim, *array.shape[1:])[:, perm].reshape(array.shape)

    monkeypatch.setattr(mapping.Op, "apply", wrong_end)
    assert main(["port", str(source), str(tmp_path / "t.safetensors"), "--preset", "hf-deepseek-mla-to-half"]) == 1
    out = capsys.readouterr().out
    assert "FAIL mla-logits" in out
    assert (tmp_path / "t.safetensors.unverified").exists() and not (tmp_path / "t.safetensors").exists()


def test_mla_preset_refuses_a_half_layout_checkpoint(tmp_path, capsys):
    _, source = _deepseek(tmp_path, rope_interleave=False)
    assert main(["port", str(source), str(tmp_path / "t.safetensors"), "--preset", "hf-deepseek-mla-to-half"]) == 2
    assert "already in half" in capsys.readouterr().err
