"""llama.cpp itself judges the GGUF files posenc writes.

The runtime is llama-cpp-python 0.3.36, which compiles the llama.cpp it vendors
(vendor/llama.cpp: src/llama-model.cpp, src/models/*.cpp, conversion/*.py of that sdist);
`posenc.port.presets.gguf_runtime.llamacpp_logits` evaluates a token list in one batch with a float32 KV
cache. The references are transformers' models built from tiny random configs (nothing downloaded).

* Every GGUF preset's file loads in llama.cpp and gives transformers' logits (float32 rounding, 64 ulps of
  the largest logit per layer) for a prompt longer than any sliding window.
* Quantized files (`--outtype q8_0`, ...) give the float port's llama.cpp logits within the tolerance
  derived from the tensors' quantization steps (`gguf_quant.expected_logit_error`), with the same next token
  at most positions.
* What a preset refuses, llama.cpp really computes otherwise: the file written for the nearest expressible
  config gives that config's logits in llama.cpp, not the refused one's.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
pytest.importorskip("llama_cpp")

from test_gguf import save_model, tokenizer_json  # noqa: E402

from helpers import cli  # noqa: E402
from posenc.formats.gguf_quant import quantization_error  # noqa: E402
from posenc.port.presets import gguf_families  # noqa: E402
from posenc.port.presets.gguf_runtime import llamacpp_logits, llamacpp_tolerance, probe_tokens  # noqa: E402

BASE = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
GEMMA = dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=8)
GEMMA3_ROPE = {"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}

#: preset -> (config, prompt length)
PRESETS = {
    "hf-llama-to-gguf": (lambda: transformers.LlamaConfig(**BASE, rope_theta=50000.0, rope_scaling=dict(LLAMA3)), 100),
    "hf-mistral-to-gguf": (lambda: transformers.MistralConfig(**BASE, sliding_window=None), 64),
    "hf-qwen2-to-gguf": (lambda: transformers.Qwen2Config(**BASE, rope_theta=1e6), 64),
    "hf-gemma-to-gguf": (lambda: transformers.GemmaConfig(**{**BASE, "num_key_value_heads": 1}, head_dim=16), 64),
    "hf-phi3-to-gguf": (lambda: transformers.Phi3Config(
        **BASE, original_max_position_embeddings=64, pad_token_id=0,
        rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.2, 1.5, 1.7, 2.0, 2.5, 3.0],
                      "long_factor": [1.0, 2.0, 4.0, 8.0, 8.0, 9.0, 12.0, 16.0]}), 80),
    "hf-gpt-neox-to-gguf": (lambda: transformers.GPTNeoXConfig(
        **{k: v for k, v in BASE.items() if k != "num_key_value_heads"}, rotary_pct=0.5), 64),
    "hf-gemma2-to-gguf": (lambda: transformers.Gemma2Config(**{**BASE, "num_hidden_layers": 4}, **GEMMA), 40),
    "hf-gemma3-to-gguf": (lambda: transformers.Gemma3TextConfig(**{**BASE, "num_hidden_layers": 6}, **GEMMA,
                                                                rope_parameters=GEMMA3_ROPE), 40),
}



#: llama.cpp marks these tokens (src/llama-vocab.cpp, `token_to_id.at`) when general.name names Phi-3: a
#: Phi-3 vocabulary has them, the tiny test tokenizer gets them added
PHI3_TOKENS = ["<unk>", "<|endoftext|>"]
ARCH = {"hf-llama-to-gguf": "llama", "hf-mistral-to-gguf": "llama", "hf-qwen2-to-gguf": "qwen2",
        "hf-gemma-to-gguf": "gemma", "hf-phi3-to-gguf": "phi3", "hf-gpt-neox-to-gguf": "gptneox",
        "hf-gemma2-to-gguf": "gemma2", "hf-gemma3-to-gguf": "gemma3"}


def make(tmp_path, config, name="hf", seed=0):
    """A tiny random HF checkpoint with a tokenizer.json (llama.cpp gives logits only with a vocabulary)."""
    src = tmp_path / name
    cls = getattr(transformers, {"gemma3_text": "Gemma3ForCausalLM"}.get(config.model_type,
                                                                          type(config).__name__.replace(
                                                                              "Config", "ForCausalLM")))
    config.architectures = [cls.__name__]
    model = save_model(src, config, shard="1GB", seed=seed, cls=cls)
    tokenizer_json(src)
    if config.model_type == "phi3":
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(src / "tokenizer.json"))
        tok.add_special_tokens(PHI3_TOKENS)
        tok.save(str(src / "tokenizer.json"))
    return src, model


def tolerance_for(preset, desired, layers, errors=()):
    return llamacpp_tolerance(desired, layers=layers, arch=ARCH[preset], errors=errors)[0]


def hf_logits(model, tokens):
    with torch.no_grad():
        return model.float()(torch.tensor([tokens])).logits[0].double().numpy()


def port(src, target, preset, *extra):
    report = target.with_suffix(".json")
    code = cli("port", src, target, "--preset", preset, "--json", report, *extra)
    return code, json.loads(report.read_text()) if report.exists() else None


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_gguf_preset_file_gives_transformers_logits_in_llamacpp(tmp_path, preset):
    make_config, length = PRESETS[preset]
    config = make_config()
    src, model = make(tmp_path, config)
    target = tmp_path / "m.gguf"
    code, report = port(src, target, preset)
    assert code == 0, report
    check = [c for c in report["checks"] if c["kind"] == "llamacpp-logits"]
    assert len(check) == 1 and check[0]["passed"], check
    window = getattr(config, "sliding_window", None) or 0
    assert length > window
    tokens = probe_tokens(BASE["vocab_size"], length, seed=5)
    desired = hf_logits(model, tokens)
    actual = llamacpp_logits(target, tokens).astype(np.float64)
    tol = tolerance_for(preset, desired, config.num_hidden_layers)
    err = float(np.abs(actual - desired).max())
    assert err <= tol, (preset, err, tol)
    assert (actual.argmax(-1) == desired.argmax(-1)).mean() > 0.95


def test_gemma3_done_when_sixteen_tokens_eight_token_window(tmp_path):
    """A tiny Gemma 3 text model (two bases, linear scaling on full layers, window 8) in llama.cpp gives
    transformers' logits over 16 tokens."""
    config = transformers.Gemma3TextConfig(**{**BASE, "num_hidden_layers": 6}, **GEMMA, rope_parameters=GEMMA3_ROPE)
    src, model = make(tmp_path, config)
    target = tmp_path / "g3.gguf"
    assert port(src, target, "hf-gemma3-to-gguf")[0] == 0
    md = {k: f.contents() for k, f in gguf.GGUFReader(str(target)).fields.items()}
    assert md["gemma3.rope.freq_base"] == 1e6 and md["gemma3.rope.freq_base_swa"] == 1e4
    assert md["gemma3.attention.sliding_window"] == 8 and md["gemma3.rope.scaling.factor"] == 4.0
    assert md["gemma3.attention.sliding_window_pattern"] == [True] * 5 + [False]
    tokens = probe_tokens(BASE["vocab_size"], 16, seed=2)
    desired = hf_logits(model, tokens)
    actual = llamacpp_logits(target, tokens).astype(np.float64)
    assert np.abs(actual - desired).max() <= tolerance_for("hf-gemma3-to-gguf", desired, 6)


@pytest.mark.parametrize("outtype", ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "f16", "bf16"])
def test_quantized_llama_against_its_float_port_in_llamacpp(tmp_path, outtype):
    """Done-when: tiny HF Llama -> quantized GGUF -> llama.cpp's logits within the derived tolerance of the
    float port's llama.cpp logits, and the same next token at most positions."""
    src, _ = make(tmp_path, transformers.LlamaConfig(**BASE))
    float_port, quantized = tmp_path / "f32.gguf", tmp_path / f"{outtype}.gguf"
    assert port(src, float_port, "hf-llama-to-gguf")[0] == 0
    code, report = port(src, quantized, "hf-llama-to-gguf", "--outtype", outtype)
    assert code == 0
    rounding = [c for c in report["checks"] if c["kind"] == "rounding"]
    assert len(rounding) == 16 and all(c["passed"] for c in rounding)  # 2 x 7 matmuls, embedding, output; norms F32
    types = gguf.GGUFReader(str(quantized))
    kinds = {t.name: t.tensor_type.name for t in types.tensors}
    assert kinds["blk.0.attn_norm.weight"] == "F32" and kinds["blk.0.attn_q.weight"] == outtype.upper()
    tokens = probe_tokens(BASE["vocab_size"], 64, seed=9)
    reference = llamacpp_logits(float_port, tokens).astype(np.float64)
    actual = llamacpp_logits(quantized, tokens).astype(np.float64)
    f32 = gguf.GGUFReader(str(float_port))
    weights = {t.name: np.array(t.data).reshape(tuple(reversed(t.shape.tolist()))) for t in f32.tensors}
    errors = [quantization_error(name, w, kinds[name]) for name, w in weights.items() if kinds[name] != "F32"]
    tol, shares, _ = llamacpp_tolerance(reference, layers=2, arch="llama", errors=errors)
    err = float(np.abs(actual - reference).max())
    same = float((actual.argmax(-1) == reference.argmax(-1)).mean())
    assert err <= tol, (outtype, err, tol)
    assert err > tol / 20, (outtype, err, tol)  # the derivation is not a loose envelope (measured 0.3-0.5 x tol)
    # a tiny random model's logits are near ties (largest ~0.7): 8-bit keeps the choice almost everywhere,
    # 4/5-bit flips a quarter of the near ties (measured 0.70-0.94)
    assert same >= (0.9 if outtype in ("q8_0", "f16", "bf16") else 0.6), (outtype, same)
    assert sum(shares.values()) == pytest.approx(1.0)


def test_llamacpp_check_catches_what_the_layout_checks_cannot(tmp_path, monkeypatch):
    """Gemma's norms written without llama.cpp's +1: every tensor is what the (broken) plan declares and the
    q/k layouts agree, but llama.cpp's logits are not transformers': the port exits 1."""
    src, _ = make(tmp_path, PRESETS["hf-gemma-to-gguf"][0]())
    families = dict(gguf_families.FAMILIES)
    families["gemma"] = gguf_families.Family(**{**families["gemma"].__dict__, "norm_shift": 0.0})
    monkeypatch.setattr(gguf_families, "FAMILIES", families)
    code, report = port(src, tmp_path / "m.gguf", "hf-gemma-to-gguf")
    assert code == 1
    failed = {c["kind"] for c in report["checks"] if not c["passed"]}
    assert failed == {"llamacpp-logits"}


def _rewrite_without(path, out, key):
    """The GGUF at `path` copied by gguf-py with metadata `key` left out."""
    reader = gguf.GGUFReader(str(path))
    writer = gguf.GGUFWriter(str(out), reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in (key, "general.architecture"):
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), field.types[0], sub_type=sub)
    for t in reader.tensors:
        writer.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _refused(tmp_path, preset, config, needle, capsys):
    src, model = make(tmp_path, config, name="refused")
    capsys.readouterr()
    assert cli("port", src, tmp_path / "refused.gguf", "--preset", preset) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "refused.gguf").exists()
    return model


def _llamacpp_runs_the_other_model(tmp_path, preset, refused, expressible, tokens):
    """The file of `expressible` (same weights) in llama.cpp: its logits, not `refused`'s."""
    src, model = make(tmp_path, expressible, name="expressible")
    target = tmp_path / "expressible.gguf"
    assert port(src, target, preset)[0] == 0
    actual = llamacpp_logits(target, tokens).astype(np.float64)
    tol = tolerance_for(preset, hf_logits(model, tokens), expressible.num_hidden_layers)
    assert np.abs(actual - hf_logits(model, tokens)).max() <= tol
    assert np.abs(actual - hf_logits(refused, tokens)).max() > 100 * tol
    return target


REFUSALS = {
    # llama.cpp's gemma3 has no key for a sliding-layer scale (freq_scale_swa stays 1)
    "gemma3 sliding scaling": ("hf-gemma3-to-gguf", lambda **k: transformers.Gemma3TextConfig(
        **{**BASE, "num_hidden_layers": 6}, **GEMMA, rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": k.get("sliding", {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e4})}),
        {"sliding": {"rope_type": "default", "rope_theta": 1e4}}, "llama.cpp's gemma3 rotates sliding layers unscaled"),
    # llama.cpp fixes the attention scale at 1/sqrt(head_dim)
    "gemma3 query_pre_attn_scalar": ("hf-gemma3-to-gguf", lambda **k: transformers.Gemma3TextConfig(
        **{**BASE, "num_hidden_layers": 6}, **{**GEMMA, "query_pre_attn_scalar": k.get("scalar", 256)}),
        {"scalar": 16}, "scales queries by 1/sqrt(16)"),
    # llama.cpp's llama reads no window; its phi3 turns the window off
    "mistral window": ("hf-mistral-to-gguf", lambda **k: transformers.MistralConfig(
        **BASE, sliding_window=k.get("window", 16)), {"window": None}, "attends to every earlier token"),
    "phi3 window": ("hf-phi3-to-gguf", lambda **k: transformers.Phi3Config(
        **BASE, pad_token_id=0, sliding_window=k.get("window", 16)), {"window": None}, "turns it off"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refused_settings_are_what_llamacpp_computes_otherwise(tmp_path, case, capsys):
    preset, make_config, expressible, needle = REFUSALS[case]
    refused = _refused(tmp_path, preset, make_config(), needle, capsys)
    _llamacpp_runs_the_other_model(tmp_path, preset, refused, make_config(**expressible),
                                   probe_tokens(BASE["vocab_size"], 40, seed=4))


def test_sliding_pattern_array_is_what_llamacpp_follows(tmp_path):
    """A Gemma 3 whose sliding layers are not llama.cpp's default pattern (5 sliding, 1 full): the file's
    `sliding_window_pattern` array makes llama.cpp follow config.json's layer_types; without the array
    llama.cpp applies its own pattern and the logits differ."""
    types = ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    config = transformers.Gemma3TextConfig(**{**BASE, "num_hidden_layers": 4}, **GEMMA, layer_types=types,
                                           rope_parameters=GEMMA3_ROPE)
    src, model = make(tmp_path, config)
    target = tmp_path / "g3.gguf"
    assert port(src, target, "hf-gemma3-to-gguf")[0] == 0
    tokens = probe_tokens(BASE["vocab_size"], 40, seed=6)
    desired = hf_logits(model, tokens)
    tol = tolerance_for("hf-gemma3-to-gguf", desired, 4)
    assert np.abs(llamacpp_logits(target, tokens) - desired).max() <= tol
    bare = _rewrite_without(target, tmp_path / "bare.gguf", "gemma3.attention.sliding_window_pattern")
    assert np.abs(llamacpp_logits(bare, tokens) - desired).max() > 100 * tol


def test_gemma2_without_soft_caps_is_refused(tmp_path, capsys):
    config = transformers.Gemma2Config(**{**BASE, "num_hidden_layers": 4}, **GEMMA, attn_logit_softcapping=None)
    _refused(tmp_path, "hf-gemma2-to-gguf", config, "soft-caps both", capsys)
