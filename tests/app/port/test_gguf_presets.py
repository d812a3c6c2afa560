"""GGUF presets without llama.cpp installed: `--outtype`'s files and report, Gemma 2/3's metadata, and the
refusals (exit 2, one line, nothing written). What llama.cpp computes for each is tests/app/port/test_llamacpp.py.

References: the `gguf` package's reader and quantizers (gguf-py 0.19); llama.cpp's loader rules as read in
the llama.cpp llama-cpp-python 0.3.36 vendors (src/models/gemma2.cpp, gemma3.cpp, phi3.cpp, llama.cpp).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from test_gguf import save_model  # noqa: E402

from helpers import cli  # noqa: E402
from posenc.formats import open_reader  # noqa: E402

BASE = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256)
GEMMA = dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=8)



def gguf_file(path):
    reader = gguf.GGUFReader(str(path))
    return ({t.name: t.tensor_type.name for t in reader.tensors},
            {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")})


def test_outtype_q8_0_file_report_and_read_back(tmp_path):
    src = tmp_path / "hf"
    save_model(src, transformers.LlamaConfig(**{**BASE, "intermediate_size": 80}, architectures=["LlamaForCausalLM"]),
               shard="1GB")
    target = tmp_path / "q.gguf"
    assert cli("port", src, target, "--preset", "hf-llama-to-gguf", "--outtype", "q8_0", "--json", tmp_path / "r.json") == 0
    types, md = gguf_file(target)
    assert md["general.file_type"] == gguf.LlamaFileType.MOSTLY_Q8_0
    assert types["blk.0.attn_q.weight"] == types["token_embd.weight"] == types["output.weight"] == "Q8_0"
    assert types["blk.0.ffn_norm.weight"] == types["output_norm.weight"] == "F32"
    assert types["blk.0.ffn_down.weight"] == "F16"  # 80 columns: not whole blocks of 32, the converter's fallback
    report = json.loads((tmp_path / "r.json").read_text())
    rounding = {c["name"]: c for c in report["checks"] if c["kind"] == "rounding"}
    assert set(rounding) == {n for n, t in types.items() if t != "F32"} and all(c["passed"] for c in rounding.values())
    assert rounding["blk.0.attn_q.weight"]["note"].startswith("Q8_0")
    sidecar = json.loads((tmp_path / "q.gguf.rope.json").read_text())
    assert sidecar["gguf"]["types"] == types and sidecar["gguf"]["outtype"] == "q8_0"
    # the q8_0 values: what gguf's own quantizer gives for the (q/k-permuted) float tensors
    state = open_reader(src / "model.safetensors")
    w = np.asarray(state.get("model.layers.1.mlp.up_proj.weight"))
    q8 = gguf.GGMLQuantizationType.Q8_0
    np.testing.assert_array_equal(open_reader(target).get("blk.1.ffn_up.weight"),
                                  gguf.quants.dequantize(gguf.quants.quantize(w, q8), q8))
    # back to HF: dequantized, and said so
    back = tmp_path / "back"
    assert cli("port", target, f"{back}/", "--preset", "gguf-to-hf-llama", "--json", tmp_path / "b.json") == 0
    tensors = {t["target"]: t for t in json.loads((tmp_path / "b.json").read_text())["tensors"]}
    assert tensors["model.layers.1.mlp.up_proj.weight"]["conversions"] == ["dequantized(Q8_0)"]
    assert "dequantized" in json.loads((tmp_path / "back.rope.json").read_text())["gguf"]


def test_outtype_bad_usage_writes_nothing(tmp_path, capsys):
    src = tmp_path / "hf"
    save_model(src, transformers.LlamaConfig(**BASE, architectures=["LlamaForCausalLM"]), shard="1GB")
    before = sorted(os.listdir(tmp_path))
    capsys.readouterr()
    for argv, needle in (([src, tmp_path / "o.gguf", "--preset", "hf-llama-to-gguf", "--outtype", "q4_k_m"],
                          "--outtype 'q4_k_m'"),
                         ([src / "model.safetensors", tmp_path / "o.npz", "--outtype", "q8_0"], "belongs to")):
        assert cli("port", *argv) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err
    assert sorted(os.listdir(tmp_path)) == before


def test_gemma3_metadata_two_bases_and_pattern(tmp_path):
    src = tmp_path / "hf"
    config = transformers.Gemma3TextConfig(
        **{**BASE, "num_hidden_layers": 4}, **GEMMA, final_logit_softcapping=20.0,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
        architectures=["Gemma3ForCausalLM"])
    save_model(src, config, shard="1GB")
    assert cli("port", src, tmp_path / "g.gguf", "--preset", "hf-gemma3-to-gguf") == 0
    types, md = gguf_file(tmp_path / "g.gguf")
    assert md["general.architecture"] == "gemma3"
    assert (md["gemma3.rope.freq_base"], md["gemma3.rope.freq_base_swa"]) == (1e6, 1e4)
    assert (md["gemma3.rope.scaling.type"], md["gemma3.rope.scaling.factor"]) == ("linear", 8.0)
    assert md["gemma3.attention.sliding_window"] == 8 and md["gemma3.final_logit_softcapping"] == 20.0
    assert md["gemma3.attention.sliding_window_pattern"] == [True, False, True, False]
    assert {"blk.0.attn_q_norm.weight", "blk.0.post_attention_norm.weight", "blk.0.post_ffw_norm.weight"} <= set(types)
    state = open_reader(src / "model.safetensors")
    np.testing.assert_array_equal(open_reader(tmp_path / "g.gguf").get("blk.1.attn_k_norm.weight"),
                                  np.asarray(state.get("model.layers.1.self_attn.k_norm.weight")) + np.float32(1))


def test_gemma2_metadata(tmp_path):
    src = tmp_path / "hf"
    save_model(src, transformers.Gemma2Config(**{**BASE, "num_hidden_layers": 4}, **GEMMA,
                                              architectures=["Gemma2ForCausalLM"]), shard="1GB")
    assert cli("port", src, tmp_path / "g.gguf", "--preset", "hf-gemma2-to-gguf") == 0
    _, md = gguf_file(tmp_path / "g.gguf")
    assert (md["gemma2.attn_logit_softcapping"], md["gemma2.final_logit_softcapping"]) == (50.0, 30.0)
    assert md["gemma2.attention.sliding_window_pattern"] == [True, False, True, False]


REFUSED = {
    "gemma3 sliding scaling": ("hf-gemma3-to-gguf", lambda: transformers.Gemma3TextConfig(
        **{**BASE, "num_hidden_layers": 6}, **GEMMA, rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                          "sliding_attention": {"rope_type": "linear", "factor": 2.0,
                                                                "rope_theta": 1e4}}), "rotates sliding layers unscaled"),
    "gemma3 yarn": ("hf-gemma3-to-gguf", lambda: transformers.Gemma3TextConfig(
        **{**BASE, "num_hidden_layers": 6}, **GEMMA, rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e6,
                                                             "original_max_position_embeddings": 128},
                                          "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
        "rope_type 'yarn'"),
    "gemma3 attention scale": ("hf-gemma3-to-gguf", lambda: transformers.Gemma3TextConfig(
        **BASE, **{**GEMMA, "query_pre_attn_scalar": 256}), "query_pre_attn_scalar 256"),
    "gemma2 soft-caps": ("hf-gemma2-to-gguf", lambda: transformers.Gemma2Config(
        **BASE, **GEMMA, final_logit_softcapping=None), "soft-caps both"),
    "mistral window": ("hf-mistral-to-gguf", lambda: transformers.MistralConfig(**BASE, sliding_window=32),
                       "sliding_window 32 is narrower"),
    "qwen2 window": ("hf-qwen2-to-gguf", lambda: transformers.Qwen2Config(**BASE, use_sliding_window=True,
                                                                          sliding_window=32), "reads no window"),
    "phi3 window": ("hf-phi3-to-gguf", lambda: transformers.Phi3Config(**BASE, pad_token_id=0, sliding_window=32),
                    "turns it off"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_llamacpp_would_compute_otherwise_is_refused(tmp_path, case, capsys):
    preset, make, needle = REFUSED[case]
    config = make()
    config.architectures = [{"gemma3_text": "Gemma3ForCausalLM"}.get(config.model_type,
                                                                    type(config).__name__.replace("Config",
                                                                                                  "ForCausalLM"))]
    src = tmp_path / "hf"
    save_model(src, config, shard="1GB", cls=getattr(transformers, config.architectures[0]))
    capsys.readouterr()
    assert cli("port", src, tmp_path / "o.gguf", "--preset", preset) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "o.gguf").exists()


def test_a_wrongly_quantized_file_fails_its_rounding_check(tmp_path, monkeypatch):
    """The writer storing slightly other values than the float tensors (a 1 % gain, as a wrong scale would):
    every rounded tensor's `rounding` check fails and the port exits 1 with the file kept aside."""
    from posenc.formats import gguf_quant

    src = tmp_path / "hf"
    save_model(src, transformers.LlamaConfig(**BASE, architectures=["LlamaForCausalLM"]), shard="1GB")
    real = gguf_quant.quantize
    monkeypatch.setattr(gguf_quant, "quantize", lambda array, kind: real(np.asarray(array) * 1.01, kind))
    target = tmp_path / "q.gguf"
    assert cli("port", src, target, "--preset", "hf-llama-to-gguf", "--outtype", "q8_0", "--json", tmp_path / "r.json") == 1
    checks = json.loads((tmp_path / "r.json").read_text())["checks"]
    assert [c for c in checks if c["kind"] == "rounding"] and all(not c["passed"] for c in checks if c["kind"] == "rounding")
    assert not target.exists() and (tmp_path / "q.gguf.unverified").exists()


@pytest.mark.parametrize("family", ["gemma2", "gemma3"])
def test_gemma2_and_3_round_trip_through_gguf(tmp_path, family):
    """HF -> GGUF -> HF: transformers loads the back-ported directory (its config rebuilt from what llama.cpp
    reads: layer types, window, bases, soft-caps) and gives the original logits (norms within float32's
    `(w + 1) - 1`)."""
    from posenc_np.testing import compare, tolerance

    if family == "gemma2":
        config = transformers.Gemma2Config(**{**BASE, "num_hidden_layers": 4}, **GEMMA,
                                           architectures=["Gemma2ForCausalLM"])
    else:
        config = transformers.Gemma3TextConfig(
            **{**BASE, "num_hidden_layers": 4}, **GEMMA, final_logit_softcapping=20.0,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
            architectures=["Gemma3ForCausalLM"])
    src = tmp_path / "hf"
    model = save_model(src, config, shard="1GB")
    assert cli("port", src, tmp_path / "g.gguf", "--preset", f"hf-{family}-to-gguf") == 0
    back = tmp_path / "back"
    assert cli("port", tmp_path / "g.gguf", f"{back}/", "--preset", f"gguf-to-hf-{family}") == 0
    reloaded = getattr(transformers, config.architectures[0]).from_pretrained(back).eval()
    assert reloaded.config.layer_types == config.layer_types
    tokens = torch.tensor([np.random.default_rng(3).integers(0, 300, 40).tolist()])
    with torch.no_grad():
        desired, actual = (m.float()(tokens).logits[0].double().numpy() for m in (model, reloaded))
    assert compare(actual, desired, tolerance("float32", scale=np.abs(desired).max(), slack_ulps=64)).passed
