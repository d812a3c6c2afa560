"""`posenc port` to and from GGUF, checked against llama.cpp's rules and transformers' models.

References: llama.cpp `convert_hf_to_gguf.py` (LlamaModel.permute, generate_extra_tensors, GemmaModel
+1 norms, GPTNeoXModel qkv reorder, Phi3MiniModel rope factors), re-implemented here independently in
a few lines; the `gguf` package's own reader; transformers' model classes with tiny random configs
(nothing downloaded) for logits.
"""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from helpers import cli  # noqa: E402
from posenc.formats import open_reader  # noqa: E402
from posenc.port import mapping  # noqa: E402
from posenc_np.testing import compare, tolerance  # noqa: E402

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
SMALL = dict(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=256)



def save_model(directory, config, *, shard="40KB", seed=0, cls=None):
    torch.manual_seed(seed)
    model = (cls or getattr(transformers, config.architectures[0]))(config).eval()
    with torch.no_grad():  # norms away from 1 and zero biases away from 0, so that a lost shift or bias shows
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(directory, max_shard_size=shard)
    return model


def tokenizer_json(directory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["rotary positions rotate pairs of channels"] * 8, trainer)
    tok.save(str(directory / "tokenizer.json"))
    return json.loads((directory / "tokenizer.json").read_text())


def hf_state(directory):
    from safetensors.numpy import load_file

    out = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".safetensors"):
            out.update(load_file(str(directory / name)))
    return out


def convert_permute(w, n_head):
    """convert_hf_to_gguf.py LlamaModel.permute, in NumPy."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def logits_of(model, tokens):
    with torch.no_grad():
        return model(torch.from_numpy(tokens)[None]).logits[0].double().numpy()


def gguf_tensors(path):
    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: np.array(t.data).reshape(tuple(reversed(t.shape.tolist()))) for t in reader.tensors}
    return reader, tensors, {k: f.contents() for k, f in reader.fields.items()}


def llama_forward_from_gguf(path, tokens):
    """A NumPy float64 llama forward written from the GGUF's own metadata and tensors (llama.cpp's
    semantics: NORM rope = consecutive pairs, frequencies divided by rope_freqs)."""
    _, t, md = gguf_tensors(path)
    heads, kv = md["llama.attention.head_count"], md["llama.attention.head_count_kv"]
    hidden, eps = md["llama.embedding_length"], md["llama.attention.layer_norm_rms_epsilon"]
    n_rot, base = md["llama.rope.dimension_count"], md["llama.rope.freq_base"]
    hd = hidden // heads
    inv = base ** (-np.arange(0, n_rot, 2) / n_rot) / t.get("rope_freqs.weight", np.ones(n_rot // 2))
    seq = len(tokens)
    ang = np.arange(seq)[:, None] * inv[None]
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(x):  # x [heads, seq, hd], pairs (2i, 2i+1)
        a, b = x[..., 0::2], x[..., 1::2]
        return np.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(x.shape)

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    w = {k: v.astype(np.float64) for k, v in t.items()}
    h = w["token_embd.weight"][tokens]
    mask = np.triu(np.full((seq, seq), -np.inf), 1)
    for i in range(md["llama.block_count"]):
        p = f"blk.{i}."
        x = rms(h, w[p + "attn_norm.weight"])
        q = rope((x @ w[p + "attn_q.weight"].T).reshape(seq, heads, hd).transpose(1, 0, 2))
        k = np.repeat(rope((x @ w[p + "attn_k.weight"].T).reshape(seq, kv, hd).transpose(1, 0, 2)), heads // kv, 0)
        v = np.repeat((x @ w[p + "attn_v.weight"].T).reshape(seq, kv, hd).transpose(1, 0, 2), heads // kv, 0)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        h = h + (s @ v).transpose(1, 0, 2).reshape(seq, -1) @ w[p + "attn_output.weight"].T
        x = rms(h, w[p + "ffn_norm.weight"])
        g = x @ w[p + "ffn_gate.weight"].T
        h = h + (g / (1 + np.exp(-g)) * (x @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
    return rms(h, w["output_norm.weight"]) @ w.get("output.weight", w["token_embd.weight"]).T


def test_done_when_sharded_llama_to_gguf_and_back(tmp_path):
    """The issue's done-when: sharded HF Llama -> GGUF -> HF, every tensor equal, metadata = config,
    logits from the GGUF's tensors and metadata = HF's."""
    src = tmp_path / "hf"
    config = transformers.LlamaConfig(**SMALL, num_key_value_heads=2, rope_theta=50000.0, rope_scaling=dict(LLAMA3),
                                      rms_norm_eps=1e-5, architectures=["LlamaForCausalLM"])
    model = save_model(src, config)
    shards = sorted(n for n in os.listdir(src) if n.startswith("model-"))
    assert len(shards) > 2 and (src / "model.safetensors.index.json").exists()
    vocab = tokenizer_json(src)["model"]["vocab"]
    target = tmp_path / "llama.gguf"
    assert cli("port", src, target, "--preset", "hf-llama-to-gguf", "--json", tmp_path / "r.json") == 0
    report = json.loads((tmp_path / "r.json").read_text())
    logit_checks = [c for c in report["checks"] if c["kind"] == "gguf-logits"]
    assert report["verified"] and len(logit_checks) == 2 * config.num_hidden_layers
    assert any("up to 255" in c["note"] for c in logit_checks)  # probes reach the context length

    reader, tensors, md = gguf_tensors(target)
    head_dim = SMALL["hidden_size"] // SMALL["num_attention_heads"]
    assert md["general.architecture"] == "llama"
    assert {k: md[f"llama.{k}"] for k in ("context_length", "embedding_length", "block_count", "feed_forward_length",
                                          "attention.head_count", "attention.head_count_kv", "rope.dimension_count",
                                          "vocab_size")} == {
        "context_length": 256, "embedding_length": 32, "block_count": 2, "feed_forward_length": 48,
        "attention.head_count": 4, "attention.head_count_kv": 2, "rope.dimension_count": head_dim, "vocab_size": 300}
    assert md["llama.rope.freq_base"] == 50000.0
    assert md["llama.attention.layer_norm_rms_epsilon"] == np.float32(1e-5)
    # the llama3 factors against transformers' own llama3 frequencies (float32 storage)
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_hf, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    default = 50000.0 ** (-np.arange(0, head_dim, 2) / head_dim)
    np.testing.assert_allclose(tensors["rope_freqs.weight"], default / inv_hf.double().numpy(), rtol=2e-6)
    assert tensors["rope_freqs.weight"].dtype == np.float32 and tensors["rope_freqs.weight"].max() == 8.0
    # tensors: q/k rows by llama.cpp's permute, the rest unchanged
    state = hf_state(src)
    np.testing.assert_array_equal(tensors["blk.1.attn_q.weight"],
                                  convert_permute(state["model.layers.1.self_attn.q_proj.weight"], 4))
    np.testing.assert_array_equal(tensors["blk.1.attn_k.weight"],
                                  convert_permute(state["model.layers.1.self_attn.k_proj.weight"], 2))
    np.testing.assert_array_equal(tensors["blk.0.ffn_gate.weight"], state["model.layers.0.mlp.gate_proj.weight"])
    # the tokenizer, by gguf-py's BPE reader
    assert md["tokenizer.ggml.model"] == "gpt2" and len(md["tokenizer.ggml.tokens"]) == 300
    assert md["tokenizer.ggml.tokens"][:len(vocab)] == sorted(vocab, key=vocab.get)
    assert len(md["tokenizer.ggml.merges"]) > 0
    # logits from the GGUF alone vs transformers' LlamaForCausalLM (float64; HF forms inv_freq in float32)
    tokens = np.random.default_rng(0).integers(0, 300, 100)
    desired = logits_of(model.double(), tokens)
    actual = llama_forward_from_gguf(target, tokens)
    assert compare(actual, desired, tolerance("float32", max_angle=100, scale=np.abs(desired).max())).passed
    # and back, sharded again: every tensor equal, transformers loads the directory and gives the same logits
    back = tmp_path / "back"
    assert cli("port", target, f"{back}/", "--preset", "gguf-to-hf-llama", "--max-shard-size", "40KB") == 0
    assert (back / "model.safetensors.index.json").exists() and (back / "config.json").exists()
    again = hf_state(back)
    assert set(again) == set(state)
    for name, value in state.items():
        assert again[name].dtype == value.dtype
        np.testing.assert_array_equal(again[name], value, err_msg=name)
    reloaded = transformers.LlamaForCausalLM.from_pretrained(back).eval()
    assert reloaded.config.rope_parameters["rope_type"] == "llama3"
    np.testing.assert_array_equal(logits_of(reloaded, tokens), logits_of(model.float(), tokens))


def test_broken_permutation_fails_the_gguf_logits_check(tmp_path, monkeypatch):
    src = tmp_path / "hf"
    save_model(src, transformers.LlamaConfig(**SMALL, architectures=["LlamaForCausalLM"]))
    monkeypatch.setattr(mapping, "permute_qk_rows", lambda w, *a, **k: w)
    assert cli("port", src, tmp_path / "m.gguf", "--preset", "hf-llama-to-gguf") == 1
    assert not (tmp_path / "m.gguf").exists() and (tmp_path / "m.gguf.unverified").exists()


FAMILIES = {
    "qwen2": lambda: transformers.Qwen2Config(**SMALL, num_key_value_heads=2, rope_theta=1e6,
                                              architectures=["Qwen2ForCausalLM"]),
    "mistral": lambda: transformers.MistralConfig(**SMALL, num_key_value_heads=2, architectures=["MistralForCausalLM"]),
    "gemma": lambda: transformers.GemmaConfig(**SMALL, num_key_value_heads=1, head_dim=16,
                                              architectures=["GemmaForCausalLM"]),
    "phi3": lambda: transformers.Phi3Config(**{**SMALL, "max_position_embeddings": 256}, num_key_value_heads=2,
                                            original_max_position_embeddings=64, pad_token_id=0,
                                            rope_scaling={"rope_type": "longrope",
                                                          "short_factor": [1.0, 1.1, 1.2, 1.5],
                                                          "long_factor": [1.0, 2.0, 4.0, 8.0]},
                                            architectures=["Phi3ForCausalLM"]),
    "gpt-neox": lambda: transformers.GPTNeoXConfig(**SMALL, rotary_pct=0.5, architectures=["GPTNeoXForCausalLM"]),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_round_trip_through_gguf(tmp_path, family):
    """Each family ports to GGUF under llama.cpp's rule, verifies, comes back, and transformers gives
    the original logits from the back-ported checkpoint."""
    src = tmp_path / "hf"
    config = FAMILIES[family]()
    model = save_model(src, config, shard="1GB")
    state = hf_state(src)
    preset = "mistral" if family == "mistral" else family
    target = tmp_path / "m.gguf"
    assert cli("port", src, target, "--preset", f"hf-{preset}-to-gguf", "--json", tmp_path / "r.json") == 0
    checks = json.loads((tmp_path / "r.json").read_text())["checks"]
    assert [c["passed"] for c in checks if c["kind"] == "gguf-logits"] and all(c["passed"] for c in checks)
    _, t, md = gguf_tensors(target)
    arch = md["general.architecture"]
    if family == "qwen2":  # NEOX: rows as HF, biases carried
        assert arch == "qwen2"
        np.testing.assert_array_equal(t["blk.0.attn_q.weight"], state["model.layers.0.self_attn.q_proj.weight"])
        np.testing.assert_array_equal(t["blk.0.attn_k.bias"], state["model.layers.0.self_attn.k_proj.bias"])
    if family == "mistral":
        assert arch == "llama"
        np.testing.assert_array_equal(t["blk.0.attn_k.weight"],
                                      convert_permute(state["model.layers.0.self_attn.k_proj.weight"], 2))
    if family == "gemma":  # GemmaModel.modify_tensors: norm + 1
        np.testing.assert_array_equal(t["blk.1.ffn_norm.weight"],
                                      state["model.layers.1.post_attention_layernorm.weight"] + np.float32(1))
        assert md["gemma.attention.key_length"] == 16 and "output.weight" not in t
    if family == "phi3":  # Phi3MiniModel: fused tensors kept, LongRoPE factors as tensors
        np.testing.assert_array_equal(t["blk.0.attn_qkv.weight"], state["model.layers.0.self_attn.qkv_proj.weight"])
        np.testing.assert_array_equal(t["rope_factors_long.weight"], np.float32([1.0, 2.0, 4.0, 8.0]))
        assert md["phi3.rope.scaling.attn_factor"] == pytest.approx(math.sqrt(1 + math.log(4) / math.log(64)), 1e-6)
    if family == "gpt-neox":  # GPTNeoXModel.modify_tensors: per-head [q; k; v] -> [Q; K; V]
        w = state["gpt_neox.layers.0.attention.query_key_value.weight"]
        blocks = w.reshape(4, 3, 8, 32)
        np.testing.assert_array_equal(t["blk.0.attn_qkv.weight"],
                                      np.concatenate([blocks[:, j].reshape(-1, 32) for j in range(3)]))
        assert md["gptneox.rope.dimension_count"] == 4
    back = tmp_path / "back"
    assert cli("port", target, f"{back}/", "--preset", f"gguf-to-hf-{'llama' if family == 'mistral' else family}") == 0
    reloaded = getattr(transformers, config.architectures[0] if family != "mistral" else "LlamaForCausalLM")
    reloaded = reloaded.from_pretrained(back).eval()
    tokens = np.random.default_rng(1).integers(0, 300, 90)
    desired = logits_of(model.float(), tokens)
    # Gemma's norms come back as (w + 1) - 1 in float32: a rounding of w, nothing else
    tol = tolerance("float32", scale=np.abs(desired).max(), slack_ulps=64) if family == "gemma" else \
        tolerance("float32", exact=True)
    assert compare(logits_of(reloaded, tokens), desired, tol).passed


def test_hf_llama_to_flax(tmp_path):
    flax_serialization = pytest.importorskip("flax.serialization")
    src = tmp_path / "hf"
    save_model(src, transformers.LlamaConfig(**SMALL, architectures=["LlamaForCausalLM"]), shard="1GB")
    assert cli("port", src, tmp_path / "flax.msgpack", "--preset", "hf-llama-to-flax",
               "--json", tmp_path / "r.json") == 0
    tree = flax_serialization.msgpack_restore((tmp_path / "flax.msgpack").read_bytes())
    state = hf_state(src)
    np.testing.assert_array_equal(tree["model"]["layers"]["1"]["self_attn"]["k_proj"]["kernel"],
                                  state["model.layers.1.self_attn.k_proj.weight"].T)
    np.testing.assert_array_equal(tree["model"]["embed_tokens"]["embedding"], state["model.embed_tokens.weight"])
    checks = json.loads((tmp_path / "r.json").read_text())["checks"]
    assert sum(c["kind"] == "rope-logits" and c["passed"] for c in checks) == 2


def test_doctor_names_what_is_wrong_in_a_gguf(tmp_path, monkeypatch, capsys):
    src = tmp_path / "hf"
    save_model(src, transformers.LlamaConfig(**SMALL, num_key_value_heads=2, rope_scaling=dict(LLAMA3),
                                             architectures=["LlamaForCausalLM"]), shard="1GB")
    good = tmp_path / "good.gguf"
    assert cli("port", src, good, "--preset", "hf-llama-to-gguf") == 0
    assert cli("doctor", good, src) == 0
    out = capsys.readouterr().out
    assert "consistent" in out and "q/k rows permuted" in out

    def rewrite(name, drop=(), kv=None, arch="llama", permute=True):
        """The good GGUF re-written by gguf-py with one thing changed."""
        _, t, md = gguf_tensors(good)
        writer = gguf.GGUFWriter(str(tmp_path / name), arch)
        for key, value in md.items():
            if key.startswith(("GGUF.", "general.architecture", "tokenizer.")):
                continue
            key = key.replace("llama.", f"{arch}.")
            value = (kv or {}).get(key, value)
            if isinstance(value, str):
                writer.add_string(key, value)
            elif isinstance(value, float):
                writer.add_float32(key, value)
            elif isinstance(value, int):
                writer.add_uint32(key, value)
        for tensor, value in t.items():
            if tensor in drop:
                continue
            if not permute and tensor.endswith(("attn_q.weight", "attn_k.weight")):
                n = 4 if "attn_q" in tensor else 2
                value = value.reshape(n, 8 // 2, 2, -1).swapaxes(1, 2).reshape(value.shape)  # undo the permute
            writer.add_tensor(tensor, np.ascontiguousarray(value))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return tmp_path / name

    cases = {
        "not permuted": (rewrite("np.gguf", permute=False), "q/k rows not permuted"),
        "rope type": (rewrite("qwen.gguf", arch="qwen2"), "wrong rope type for this architecture"),
        "llama3": (rewrite("nofreqs.gguf", drop=("rope_freqs.weight",)), "llama3 factors missing"),
        "base": (rewrite("base.gguf", kv={"llama.rope.freq_base": 20000.0}), "base differs"),
    }
    for case, (path, needle) in cases.items():
        assert cli("doctor", path, src, "--json", tmp_path / f"{case}.json") == 0, case
        out = capsys.readouterr().out
        assert needle in out, (case, out)
        assert "layers 0-1" in out or case in ("llama3", "base"), (case, out)
    # two HF checkpoints: the Meta (interleaved) layout against the HF one, per layer
    state = hf_state(src)
    from safetensors.numpy import save_file

    meta = dict(state)
    for i in range(2):
        for p, n in (("q", 4), ("k", 2)):
            name = f"model.layers.{i}.self_attn.{p}_proj.weight"
            meta[name] = np.ascontiguousarray(convert_permute(state[name], n))
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(src / "config.json", other / "config.json")
    save_file(meta, str(other / "model.safetensors"))
    assert cli("doctor", other, src) == 0
    assert "q/k rows permuted, but A rotates half and B half" in capsys.readouterr().out


def test_gguf_failures_exit_2(tmp_path, capsys):
    src = tmp_path / "hf"
    save_model(src, transformers.LlamaConfig(**SMALL, architectures=["LlamaForCausalLM"]), shard="1GB")
    good = tmp_path / "m.gguf"
    assert cli("port", src, good, "--preset", "hf-llama-to-gguf") == 0
    data = good.read_bytes()
    (tmp_path / "trunc.gguf").write_bytes(data[: len(data) - 100])
    (tmp_path / "junk.gguf").write_bytes(b"GGUF" + b"\x00" * 20)
    cases = [
        (["port", tmp_path / "trunc.gguf", tmp_path / "o.safetensors"], "truncated"),
        (["port", tmp_path / "junk.gguf", tmp_path / "o.safetensors"], "corrupt"),
        (["port", src, tmp_path / "o.gguf"], "use a preset"),
        (["port", good, tmp_path / "o.safetensors", "--preset", "gguf-to-hf-qwen2"], "gguf-to-hf-llama"),
        (["port", src, tmp_path / "o.gguf", "--preset", "hf-qwen2-to-gguf"], "model_type 'llama'"),
        (["doctor", tmp_path / "trunc.gguf", src], "truncated"),
    ]
    before = sorted(os.listdir(tmp_path))
    capsys.readouterr()  # save_pretrained's progress bar
    for argv, needle in cases:
        assert cli(*argv) == 2, argv
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert sorted(os.listdir(tmp_path)) == before
    assert good.read_bytes() == data


def test_quantized_gguf_reads_dequantized(tmp_path):
    """Q8_0 / Q4_0 tensors come out as gguf.quants.dequantize gives them, float32; F16 stays F16."""
    rng = np.random.default_rng(3)
    weights = rng.standard_normal((4, 64)).astype(np.float32)
    writer = gguf.GGUFWriter(str(tmp_path / "q.gguf"), "llama")
    quantized = {}
    for kind in ("Q8_0", "Q4_0"):
        qtype = getattr(gguf.GGMLQuantizationType, kind)
        quantized[kind] = (gguf.quants.quantize(weights, qtype), qtype)
        writer.add_tensor(f"{kind}.weight", quantized[kind][0], raw_dtype=qtype)
    writer.add_tensor("half.weight", weights.astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert cli("port", tmp_path / "q.gguf", tmp_path / "out.safetensors") == 0
    out = open_reader(tmp_path / "out.safetensors")
    for kind, (data, qtype) in quantized.items():
        assert out.dtype(f"{kind}.weight") == "float32"
        np.testing.assert_array_equal(out.get(f"{kind}.weight"), gguf.quants.dequantize(data, qtype))
    assert out.dtype("half.weight") == "float16"
    np.testing.assert_array_equal(out.get("half.weight"), weights.astype(np.float16))
