"""`posenc port --preset hf-{llama,qwen2,gemma3}-to-mlx` judged by mlx-lm 0.32.2 itself.

Reference: mlx-lm's own loader, `mlx_lm.utils.load_model` (site-packages mlx_lm/utils.py, 0.32.2: config.json,
`model*.safetensors`, `ModelArgs.from_dict`, `Model.sanitize`, `load_weights(strict=True)`), and its model classes
(mlx_lm/models/llama.py, qwen2.py, gemma3_text.py) run on mlx[cpu] 0.32.4, against transformers 5.24's
LlamaForCausalLM / Qwen2ForCausalLM / Gemma3ForCausalLM built from tiny random configs (nothing downloaded).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
mx = pytest.importorskip("mlx.core", reason="mlx[cpu] 0.32.4 runs mlx-lm's model classes")
mlx_utils = pytest.importorskip("mlx_lm.utils", reason="mlx-lm 0.32.2 (requirements-nodeps.txt) is the judge")

from helpers import cli  # noqa: E402
from posenc.modelspec.runtimes import runtime_spec  # noqa: E402
from posenc.port import mapping  # noqa: E402
from posenc_np.rope import permute_qk_rows  # noqa: E402
from posenc_np.testing import compare, tolerance  # noqa: E402

SMALL = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5)
SEQ = 200  # past llama3's original context 64 and Gemma 3's window 8
LLAMA3 = {"rope_type": "llama3", "rope_theta": 50000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
GEMMA3_ROPE = {"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}



def _config(family, **over):
    if family == "llama":
        return transformers.LlamaConfig(**{**SMALL, "rope_parameters": dict(LLAMA3), **over})
    if family == "qwen2":
        return transformers.Qwen2Config(**{**SMALL, "rope_parameters": {"rope_type": "default", "rope_theta": 20000.0},
                                           **over})
    # 4 layers, sliding/full alternating: mlx-lm's sliding_window_pattern 2; hidden 64 keeps sqrt(hidden) = 8
    # exact in bfloat16 (mlx-lm rounds the embedding scale to bfloat16)
    return transformers.Gemma3TextConfig(**{**SMALL, "num_hidden_layers": 4, "head_dim": 16, "sliding_window": 8,
                                            "query_pre_attn_scalar": 16, "rope_parameters": GEMMA3_ROPE,
                                            "layer_types": ["sliding_attention", "full_attention"] * 2, **over})


_CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "gemma3": "Gemma3ForCausalLM"}


def _save(family, path, **over):
    """A tiny random HF model saved by save_pretrained; norms off 1 and attention scaled up so a wrong rotation,
    base or norm moves the logits by O(1)."""
    torch.manual_seed(0)
    model = getattr(transformers, _CLASSES[family])(_config(family, **over)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
            elif "self_attn" in name:
                p.mul_(6.0)
    model.save_pretrained(path, max_shard_size="40KB" if family == "llama" else "50GB")
    return model


TOKENS = np.random.default_rng(1).integers(0, SMALL["vocab_size"], (1, SEQ))


def _hf_logits(model):
    with torch.no_grad():
        return model(torch.tensor(TOKENS)).logits.double().numpy()


def _mlx_logits(directory):
    model, _ = mlx_utils.load_model(Path(directory))  # mlx-lm's loader: config.json, sanitize, strict weights
    return np.array(model(mx.array(TOKENS)).astype(mx.float32)).astype(np.float64)


def _tolerance(desired):
    """Two float32 stacks (torch, MLX) with different op orders: 64 float32 ulps per layer of slack plus the float32
    angle error 2*eps32*angle at the largest angle (every inv_freq <= 1 rad, positions < SEQ), times max |logit|."""
    return tolerance("float32", max_angle=SEQ - 1.0, scale=float(np.abs(desired).max()), slack_ulps=64)


@pytest.fixture(scope="module", params=["llama", "qwen2", "gemma3"])
def ported(request, tmp_path_factory):
    family = request.param
    tmp = tmp_path_factory.mktemp(f"mlx_{family}")
    model = _save(family, tmp / "hf")
    target = tmp / "mlx"
    assert cli("port", tmp / "hf", f"{target}/", "--preset", f"hf-{family}-to-mlx", "--json", tmp / "r.json") == 0
    return dict(family=family, tmp=tmp, model=model, target=target, desired=_hf_logits(model),
                report=json.loads((tmp / "r.json").read_text()))


def test_mlx_lm_logits_equal_transformers(ported):
    actual = _mlx_logits(ported["target"])
    result = compare(actual, ported["desired"], _tolerance(ported["desired"]))
    print(f"{ported['family']}: max |mlx-lm - transformers| = {result.max_abs_err:.3g} (tol {result.atol:.3g}, "
          f"max |logit| {np.abs(ported['desired']).max():.3g})")
    assert result.passed, result.message
    assert {c["kind"] for c in ported["report"]["checks"]} == {"written", "rope-logits", "mlx-config"}
    assert all(c["passed"] for c in ported["report"]["checks"])


def test_written_config_uses_the_keys_mlx_lm_reads(ported):
    written = json.loads((ported["target"] / "config.json").read_text())
    source = json.loads((ported["tmp"] / "hf" / "config.json").read_text())
    assert "rope_parameters" in source and "rope_parameters" not in written
    if ported["family"] == "gemma3":
        assert (written["rope_theta"], written["rope_local_base_freq"]) == (1e6, 1e4)
        assert written["sliding_window_pattern"] == 2 and written["rope_scaling"]["factor"] == 4.0
        assert "lm_head.weight" not in json.dumps(sorted(p.name for p in ported["target"].iterdir()))
    else:
        assert written["rope_traditional"] is False and written["tie_word_embeddings"] is False
        assert written["rope_theta"] == (50000.0 if ported["family"] == "llama" else 20000.0)
    spec = runtime_spec(written, "mlx")
    assert not spec.findings  # nothing mlx-lm would assume or drop


def test_hf_config_as_saved_is_misread_by_mlx_lm(ported):
    """The control: the same weights with transformers 5's config.json (rope_parameters) in mlx-lm. Llama and
    Qwen2 run base 10000 / 1e6 instead of the model's (other logits; posenc's mlx reading says why); Gemma 3
    takes sliding_window_pattern 6 from its ModelArgs default, and a 4-layer model then fails in
    `Gemma3Model.__call__` (`cache[pattern - 1]`), which posenc's mlx reading refuses to guess."""
    control = ported["tmp"] / "control"
    shutil.copytree(ported["target"], control)
    shutil.copy(ported["tmp"] / "hf" / "config.json", control / "config.json")
    config = json.loads((control / "config.json").read_text())
    if ported["family"] == "gemma3":
        with pytest.raises(IndexError):
            _mlx_logits(control)
        with pytest.raises(ValueError, match="reads no rope_parameters"):
            runtime_spec(config, "mlx")
        return
    err = np.abs(_mlx_logits(control) - ported["desired"]).max()
    assert err > 100 * _tolerance(ported["desired"]).atol
    assert any("never reads rope_parameters" in f.message for f in runtime_spec(config, "mlx").findings)


def test_interleaving_converter_fails_verification(tmp_path, monkeypatch):
    """A converter that permutes q/k as if mlx-lm rotated pairs (traditional=True) is caught (exit 1, kept aside),
    and mlx-lm agrees: its logits on the kept-aside port are wrong."""
    model = _save("qwen2", tmp_path / "hf")
    monkeypatch.setattr(mapping, "permute_qk_rows",
                        lambda w, n, **k: permute_qk_rows(w, n, source="half", target="interleaved"))
    assert cli("port", tmp_path / "hf", f"{tmp_path / 'mlx'}/", "--preset", "hf-qwen2-to-mlx") == 1
    kept = tmp_path / "mlx.unverified"
    assert kept.is_dir() and not (tmp_path / "mlx").exists()
    desired = _hf_logits(model)
    assert np.abs(_mlx_logits(kept) - desired).max() > 100 * _tolerance(desired).atol


@pytest.mark.parametrize("family, over, reason", [
    ("llama", dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "truncate": False,
                                    "original_max_position_embeddings": 128}), "truncate"),
    ("llama", dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "attention_factor": 1.5,
                                    "original_max_position_embeddings": 128}), "attention_factor"),
    ("gemma3", dict(layer_types=["sliding_attention"] * 4), "sliding_window_pattern"),
    ("qwen2", dict(hidden_act="gelu"), "hidden_act"),
])
def test_refused_when_mlx_lm_would_compute_something_else(tmp_path, capsys, family, over, reason):
    _save(family, tmp_path / "hf", **over)
    capsys.readouterr()  # save_pretrained's progress bar
    assert cli("port", tmp_path / "hf", f"{tmp_path / 'mlx'}/", "--preset", f"hf-{family}-to-mlx") == 2
    err = capsys.readouterr().err
    assert reason in err and "\n" not in err.strip()
    assert not (tmp_path / "mlx").exists()


def test_a_file_target_is_refused(tmp_path, capsys):
    _save("qwen2", tmp_path / "hf")
    capsys.readouterr()
    assert cli("port", tmp_path / "hf", tmp_path / "m.safetensors", "--preset", "hf-qwen2-to-mlx") == 2
    assert "safetensors-dir" in capsys.readouterr().err


def test_gemma3_embedding_scale_is_bfloat16_in_mlx_lm(tmp_path):
    """hidden 48: mlx-lm scales the embeddings by bfloat16(sqrt(48)) = 6.9375, transformers by 6.9282 (float32). The
    sidecar says so; mlx-lm's logits then differ beyond float32 rounding, and transformers with its scale set to
    the bfloat16 value agrees with mlx-lm again: that scale is the whole difference."""
    model = _save("gemma3", tmp_path / "hf", hidden_size=48)
    assert cli("port", tmp_path / "hf", f"{tmp_path / 'mlx'}/", "--preset", "hf-gemma3-to-mlx") == 0
    sidecar = json.loads((tmp_path / "mlx.rope.json").read_text())
    assert any("bfloat16(sqrt(48)) = 6.9375" in f for f in sidecar["mlx_lm"]["findings"])
    actual, desired = _mlx_logits(tmp_path / "mlx"), _hf_logits(model)
    differs = compare(actual, desired, _tolerance(desired))
    with torch.no_grad():
        model.model.embed_tokens.embed_scale.fill_(6.9375)
    rescaled = _hf_logits(model)
    agrees = compare(actual, rescaled, _tolerance(rescaled))
    print(f"gemma3 hidden 48: {differs.max_abs_err:.3g} (tol {differs.atol:.3g}); bfloat16 scale in transformers: "
          f"{agrees.max_abs_err:.3g}")
    assert not differs.passed and agrees.passed and agrees.max_abs_err < differs.max_abs_err / 100


@pytest.mark.parametrize("rope_parameters, context", [
    ({"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0}, 512),
    ({"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}, 64),  # SEQ past the context: the base grows
    ({"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 64}, 256),
])
def test_other_scalings_mlx_lm_computes_as_transformers(tmp_path, rope_parameters, context):
    """The scalings posenc's mlx reading calls equal (YaRN without attention_factor / truncate) are ported, and
    mlx-lm's logits equal transformers' on them."""
    model = _save("llama", tmp_path / "hf", rope_parameters=rope_parameters, max_position_embeddings=context)
    assert cli("port", tmp_path / "hf", f"{tmp_path / 'mlx'}/", "--preset", "hf-llama-to-mlx") == 0
    desired = _hf_logits(model)
    result = compare(_mlx_logits(tmp_path / "mlx"), desired, _tolerance(desired))
    print(f"llama {rope_parameters['rope_type']}: max |mlx-lm - transformers| = {result.max_abs_err:.3g}")
    assert result.passed, result.message


def test_a_config_without_rope_theta_is_refused(tmp_path, capsys):
    """A v4 config.json with rope_scaling but no rope_theta: mlx-lm would run its ModelArgs default (qwen2: 1e6), and
    no base is assumed for it."""
    _save("qwen2", tmp_path / "hf")
    path = tmp_path / "hf" / "config.json"
    config = json.loads(path.read_text())
    del config["rope_parameters"]
    config["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
    path.write_text(json.dumps(config))
    capsys.readouterr()
    assert cli("port", tmp_path / "hf", f"{tmp_path / 'mlx'}/", "--preset", "hf-qwen2-to-mlx") == 2
    assert "no rope_theta" in capsys.readouterr().err
    assert not (tmp_path / "mlx").exists()


def test_a_transformers_4_gemma3_config_ports(tmp_path):
    """A transformers 4 Gemma 3 config.json (top-level rope_theta, rope_local_base_freq, rope_scaling,
    sliding_window_pattern, no layer_types) gives the same mlx-lm logits as transformers' from_pretrained of it."""
    _save("gemma3", tmp_path / "hf")
    path = tmp_path / "hf" / "config.json"
    config = json.loads(path.read_text())
    for key in ("rope_parameters", "layer_types"):
        del config[key]
    config.update(rope_theta=1e6, rope_local_base_freq=1e4, rope_scaling={"rope_type": "linear", "factor": 4.0},
                  sliding_window_pattern=2)
    path.write_text(json.dumps(config))
    model = transformers.Gemma3ForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert model.config.layer_types == ["sliding_attention", "full_attention"] * 2
    assert cli("port", tmp_path / "hf", f"{tmp_path / 'mlx'}/", "--preset", "hf-gemma3-to-mlx") == 0
    desired = _hf_logits(model)
    assert compare(_mlx_logits(tmp_path / "mlx"), desired, _tolerance(desired)).passed


def test_a_directory_target_is_taken_as_named_without_a_trailing_slash(tmp_path):
    """`posenc port hf_dir mlx_out --preset hf-llama-to-mlx`, as a new user types it, writes the directory."""
    model = _save("llama", tmp_path / "hf")
    assert cli("port", tmp_path / "hf", tmp_path / "mlx_out", "--preset", "hf-llama-to-mlx") == 0
    assert (tmp_path / "mlx_out" / "config.json").is_file()
    desired = _hf_logits(model)
    assert compare(_mlx_logits(tmp_path / "mlx_out"), desired, _tolerance(desired)).passed


def test_an_unknown_target_names_every_accepted_form(tmp_path, capsys):
    _save("llama", tmp_path / "hf")
    capsys.readouterr()
    assert cli("port", tmp_path / "hf", tmp_path / "out.weird") == 2
    err = capsys.readouterr().err
    assert ".safetensors" in err and ".gguf" in err and "checkpoint directory" in err
