"""`posenc port`: the LLaMA Meta -> HF preset, conversion options, formats, and every failure path.

Each port is verified by the tool itself; the tests also check the written tensors against an
independent expectation (transformers' LlamaForCausalLM, the documented permutation, the spec) and
that a broken conversion is caught (exit 1, output kept aside) rather than trusted.
"""

from __future__ import annotations

import json
import os
import pickle
import stat

import numpy as np
import pytest

from helpers import cli
from posenc.formats import open_reader
from posenc.port import mapping
from posenc_np import apply_rope, permute_qk_rows, resize_table
from posenc_np.testing import compare, tolerance

DIM, LAYERS, HEADS, KV_HEADS, VOCAB, FFN = 64, 2, 4, 2, 50, 96
HEAD_DIM = DIM // HEADS
THETA = 500000.0
HF_LAYER = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
            "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm")



def meta_state(rng, dtype=np.float32):
    shapes = {"tok_embeddings.weight": (VOCAB, DIM), "norm.weight": (DIM,), "output.weight": (VOCAB, DIM)}
    for i in range(LAYERS):
        shapes.update({f"layers.{i}.attention.wq.weight": (HEADS * HEAD_DIM, DIM),
                       f"layers.{i}.attention.wk.weight": (KV_HEADS * HEAD_DIM, DIM),
                       f"layers.{i}.attention.wv.weight": (KV_HEADS * HEAD_DIM, DIM),
                       f"layers.{i}.attention.wo.weight": (DIM, HEADS * HEAD_DIM),
                       f"layers.{i}.feed_forward.w1.weight": (FFN, DIM),
                       f"layers.{i}.feed_forward.w3.weight": (FFN, DIM),
                       f"layers.{i}.feed_forward.w2.weight": (DIM, FFN), f"layers.{i}.attention_norm.weight": (DIM,),
                       f"layers.{i}.ffn_norm.weight": (DIM,)})
    state = {k: (rng.standard_normal(s) * (0.2 if len(s) == 2 else 1.0)).astype(dtype) for k, s in shapes.items()}
    for k in state:
        if k.endswith("norm.weight"):
            state[k] = (1.0 + 0.1 * rng.standard_normal(state[k].shape)).astype(dtype)
    return state


def save_safetensors(path, state):
    from safetensors.numpy import save_file

    save_file(state, str(path))


@pytest.fixture
def meta_dir(tmp_path):
    state = meta_state(np.random.default_rng(0))
    save_safetensors(tmp_path / "consolidated.safetensors", state)
    (tmp_path / "params.json").write_text(json.dumps(dict(dim=DIM, n_layers=LAYERS, n_heads=HEADS,
                                                          n_kv_heads=KV_HEADS, rope_theta=THETA, norm_eps=1e-5)))
    return tmp_path, state


def leftovers(directory):
    return [n for n in os.listdir(directory) if n.startswith(".posenc-")]


def test_meta_llama_to_hf_one_command(meta_dir, capsys):
    directory, state = meta_dir
    target = directory / "model.safetensors"
    saved = os.umask(0o022)
    try:
        assert cli("port", directory / "consolidated.safetensors", target, "--preset", "meta-llama-to-hf",
                   "--json", directory / "report.json") == 0
    finally:
        os.umask(saved)
    for written in (target, directory / "report.json", directory / "model.safetensors.rope.json"):
        assert stat.S_IMODE(written.stat().st_mode) == 0o644, written  # ordinary files, as every posenc output
    out = capsys.readouterr().out
    assert "rope-logits" in out and "verified: wrote" in out
    report = json.loads((directory / "report.json").read_text())
    assert report["verified"] and {c["kind"] for c in report["checks"]} >= {"written", "rope-logits"}
    assert sum(c["kind"] == "rope-logits" for c in report["checks"]) == LAYERS
    written = open_reader(target)
    expected = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    expected |= {f"model.layers.{i}.{m}.weight" for i in range(LAYERS) for m in HF_LAYER}
    assert set(written.names()) == expected
    # the permutation is convert_llama_weights_to_hf.py's, k with the kv head count
    np.testing.assert_array_equal(written.get("model.layers.1.self_attn.k_proj.weight"),
                                  permute_qk_rows(state["layers.1.attention.wk.weight"], KV_HEADS,
                                                  source="interleaved", target="half"))
    np.testing.assert_array_equal(written.get("model.layers.1.self_attn.v_proj.weight"),
                                  state["layers.1.attention.wv.weight"])
    sidecar = json.loads((directory / "model.safetensors.rope.json").read_text())
    assert sidecar["rope"] == {"layout": "half", "base": THETA, "rotary_dim": HEAD_DIM, "scaling": None,
                               "num_heads": HEADS, "num_kv_heads": KV_HEADS, "source_layout": "interleaved"}
    assert not leftovers(directory)


def test_meta_llama_attention_logits_independently(meta_dir):
    """Meta's interleaved RoPE on the source vs HF's half layout on the target: same logits."""
    directory, state = meta_dir
    target = directory / "hf.npz"
    assert cli("port", directory / "consolidated.safetensors", target, "--preset", "meta-llama-to-hf") == 0
    hf = np.load(target)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, DIM))
    positions = np.array([0, 1, 5, 900, 4000, 8000])

    def logits(wq, wk, layout):
        q = apply_rope((x @ wq.T).reshape(6, HEADS, HEAD_DIM).transpose(1, 0, 2), positions, base=THETA, layout=layout)
        k = apply_rope((x @ wk.T).reshape(6, KV_HEADS, HEAD_DIM).transpose(1, 0, 2), positions, base=THETA,
                       layout=layout)
        return q @ np.repeat(k, HEADS // KV_HEADS, 0).transpose(0, 2, 1)

    desired = logits(state["layers.0.attention.wq.weight"].astype(np.float64),
                     state["layers.0.attention.wk.weight"].astype(np.float64), "interleaved")
    actual = logits(hf["model.layers.0.self_attn.q_proj.weight"].astype(np.float64),
                    hf["model.layers.0.self_attn.k_proj.weight"].astype(np.float64), "half")
    assert compare(actual, desired, tolerance("float64", scale=np.abs(desired).max())).passed
    wrong = logits(state["layers.0.attention.wq.weight"].astype(np.float64),
                   state["layers.0.attention.wk.weight"].astype(np.float64), "half")
    assert np.abs(wrong - desired).max() > 1.0  # the check has teeth: an unpermuted port differs


def _meta_forward(state, tokens):
    """Meta's Llama forward (llama/model.py), NumPy float64: interleaved RoPE on unpermuted weights."""
    w = {k: v.astype(np.float64) for k, v in state.items()}

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * g

    seq = len(tokens)
    positions = np.arange(seq)
    h = w["tok_embeddings.weight"][tokens]
    mask = np.triu(np.full((seq, seq), -np.inf), 1)
    for i in range(LAYERS):
        p = f"layers.{i}."
        x = rms(h, w[p + "attention_norm.weight"])
        q = (x @ w[p + "attention.wq.weight"].T).reshape(seq, HEADS, HEAD_DIM).transpose(1, 0, 2)
        k = (x @ w[p + "attention.wk.weight"].T).reshape(seq, KV_HEADS, HEAD_DIM).transpose(1, 0, 2)
        v = (x @ w[p + "attention.wv.weight"].T).reshape(seq, KV_HEADS, HEAD_DIM).transpose(1, 0, 2)
        q = apply_rope(q, positions, base=THETA, layout="interleaved")
        k = np.repeat(apply_rope(k, positions, base=THETA, layout="interleaved"), HEADS // KV_HEADS, 0)
        v = np.repeat(v, HEADS // KV_HEADS, 0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(HEAD_DIM) + mask
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        h = h + (probs @ v).transpose(1, 0, 2).reshape(seq, -1) @ w[p + "attention.wo.weight"].T
        x = rms(h, w[p + "ffn_norm.weight"])
        gate = x @ w[p + "feed_forward.w1.weight"].T
        h = h + ((gate / (1 + np.exp(-gate))) * (x @ w[p + "feed_forward.w3.weight"].T)) @ w[
            p + "feed_forward.w2.weight"].T
    return rms(h, w["norm.weight"]) @ w["output.weight"].T


def test_meta_llama_port_loads_into_transformers(meta_dir):
    """External reference: the ported state dict in transformers' LlamaForCausalLM (float64) gives Meta's logits."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    directory, state = meta_dir
    target = directory / "pytorch_model.bin"
    assert cli("port", directory / "consolidated.safetensors", target, "--preset", "meta-llama-to-hf") == 0
    config = json.loads((directory / "pytorch_model.bin.rope.json").read_text())["hf_config"]
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).double().eval()
    loaded = torch.load(target, weights_only=True)
    missing, unexpected = model.load_state_dict({k: v.double() for k, v in loaded.items()}, strict=False)
    assert not unexpected and all("rotary_emb" in m for m in missing)
    tokens = np.array([3, 17, 42, 8, 0, 29, 11, 5])
    with torch.no_grad():
        actual = model(torch.from_numpy(tokens)[None]).logits[0].numpy()
    desired = _meta_forward(state, tokens)
    # the model runs in float64, but transformers forms RoPE's inv_freq and cos/sin in float32 whatever
    # the model dtype (LlamaRotaryEmbedding), so the bound is float32's at angles up to seq_len
    assert compare(actual, desired, tolerance("float32", max_angle=len(tokens),
                                              scale=np.abs(desired).max())).passed


def test_broken_permutation_is_caught_and_kept_aside(meta_dir, monkeypatch, capsys):
    directory, _ = meta_dir
    monkeypatch.setattr(mapping, "permute_qk_rows", lambda w, *a, **k: w)  # a converter that forgets the permute
    target = directory / "model.safetensors"
    assert cli("port", directory / "consolidated.safetensors", target, "--preset", "meta-llama-to-hf",
               "--json", directory / "r.json") == 1
    out = capsys.readouterr().out
    assert "FAIL rope-logits" in out and "NOT verified" in out
    assert not target.exists() and (directory / "model.safetensors.unverified").exists()
    report = json.loads((directory / "r.json").read_text())
    assert not report["verified"] and report["written"].endswith(".unverified")
    assert not leftovers(directory)


def test_meta_pth_source_and_flag_overrides(meta_dir):
    torch = pytest.importorskip("torch")
    directory, state = meta_dir
    torch.save({k: torch.from_numpy(v) for k, v in state.items()}, directory / "consolidated.00.pth")
    (directory / "params.json").write_text(json.dumps(dict(dim=DIM, n_layers=LAYERS, n_heads=HEADS)))  # no kv
    target = directory / "out.safetensors"
    assert cli("port", directory / "consolidated.00.pth", target, "--preset", "meta-llama-to-hf",
               "--kv-heads", KV_HEADS, "--rope-theta", THETA) == 0
    sidecar = json.loads((directory / "out.safetensors.rope.json").read_text())["rope"]
    assert sidecar["num_kv_heads"] == KV_HEADS and sidecar["base"] == THETA


@pytest.mark.parametrize("rotary_dim", [None, 8])
def test_fused_qkv_gqa_partial_rotary(tmp_path, rotary_dim):
    """Fused QKV split first, then q with 4 heads and k with 2 kv heads permuted (partial rotary)."""
    rng = np.random.default_rng(1)
    qkv = rng.standard_normal(((HEADS + 2 * KV_HEADS) * HEAD_DIM, DIM)).astype(np.float32)
    save_safetensors(tmp_path / "src.safetensors", {"blocks.0.attn.qkv.weight": qkv,
                                                    "blocks.0.attn.proj.weight": qkv[:DIM]})
    extra = ["--rotary-dim", rotary_dim] if rotary_dim else []
    assert cli("port", tmp_path / "src.safetensors", tmp_path / "dst.safetensors",
               "--split-qkv", "blocks.*.attn.qkv.weight=layers.*.q.weight,layers.*.k.weight,layers.*.v.weight",
               "--heads", HEADS, "--kv-heads", KV_HEADS, "--rope-from", "interleaved", "--rope-to", "half",
               "--rope-theta", 10000, *extra, "--json", tmp_path / "r.json") == 0
    out = open_reader(tmp_path / "dst.safetensors")
    q_rows, kv_rows = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    np.testing.assert_array_equal(out.get("layers.0.q.weight"), permute_qk_rows(
        qkv[:q_rows], HEADS, source="interleaved", target="half", rotary_dim=rotary_dim))
    np.testing.assert_array_equal(out.get("layers.0.k.weight"), permute_qk_rows(
        qkv[q_rows:q_rows + kv_rows], KV_HEADS, source="interleaved", target="half", rotary_dim=rotary_dim))
    np.testing.assert_array_equal(out.get("layers.0.v.weight"), qkv[q_rows + kv_rows:])
    checks = json.loads((tmp_path / "r.json").read_text())["checks"]
    assert [c["passed"] for c in checks if c["kind"] == "rope-logits"] == [True]


def test_learned_offset_resize_and_relative_reversal(tmp_path):
    rng = np.random.default_rng(2)
    roberta = rng.standard_normal((514, 8)).astype(np.float32)
    distance = rng.standard_normal((2 * 16 - 1, 4)).astype(np.float32)  # HF relative_key, max_position 16
    np.savez(tmp_path / "src.npz", **{"pos.weight": roberta, "distance_embedding.weight": distance,
                                      "other.weight": roberta[:4]})
    assert cli("port", tmp_path / "src.npz", tmp_path / "a.npz", "--strip-offset", "pos.weight=2",
               "--reverse", "distance_embedding.weight", "--json", tmp_path / "a.json") == 0
    a = np.load(tmp_path / "a.npz")
    np.testing.assert_array_equal(a["pos.weight"], roberta[2:])
    np.testing.assert_array_equal(a["distance_embedding.weight"], distance[::-1])
    kinds = {c["kind"] for c in json.loads((tmp_path / "a.json").read_text())["checks"]}
    assert {"table", "relative"} <= kinds
    # to a Keras file: the relative embeddings are recomputed by posenc_tf on the written table too
    assert cli("port", tmp_path / "src.npz", tmp_path / "rel.weights.h5", "--drop", "*pos*", "--drop", "other*",
               "--rename", "distance_embedding.weight=layers/relative/vars/0", "--reverse", "distance_embedding.weight",
               "--json", tmp_path / "rel.json") == 0
    relative = [c for c in json.loads((tmp_path / "rel.json").read_text())["checks"] if c["kind"] == "relative"]
    assert [c["name"].split("(")[-1] for c in relative] == ["spec)", "tf)"] and all(c["passed"] for c in relative)
    # back to the offset convention (zero rows in front), and a resize to a longer context
    assert cli("port", tmp_path / "a.npz", tmp_path / "b.safetensors", "--add-offset", "pos.weight=2") == 0
    b = open_reader(tmp_path / "b.safetensors").get("pos.weight")
    np.testing.assert_array_equal(b[2:], roberta[2:])
    assert not b[:2].any()
    assert cli("port", tmp_path / "a.npz", tmp_path / "c.npz", "--resize", "pos.weight=1024",
               "--resize-method", "cubic") == 0
    np.testing.assert_array_equal(np.load(tmp_path / "c.npz")["pos.weight"],
                                  resize_table(roberta[2:], 1024, method="cubic"))


def test_rope_settings_from_hf_config_reach_verification_and_sidecar(tmp_path):
    """Llama-3 scaling from a config.json: the logits check rotates with it; the sidecar carries it."""
    rng = np.random.default_rng(6)
    save_safetensors(tmp_path / "src.safetensors", {"attn.q.weight": rng.standard_normal((64, 32)).astype(np.float32),
                                                    "attn.k.weight": rng.standard_normal((32, 32)).astype(np.float32)})
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 1024}
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 32, "num_attention_heads": 4,
                                                      "num_key_value_heads": 2, "head_dim": 16, "rope_theta": 50000.0,
                                                      "max_position_embeddings": 8192, "rope_scaling": scaling}))
    assert cli("port", tmp_path / "src.safetensors", tmp_path / "dst.safetensors", "--rope-q", "attn.q.weight",
               "--rope-k", "attn.k.weight", "--heads", 4, "--kv-heads", 2, "--rope-from", "half",
               "--rope-to", "interleaved", "--hf-config", tmp_path / "config.json", "--json", tmp_path / "r.json") == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["rope"]["scaling"]["factor"] == 8.0 and report["rope"]["base"] == 50000.0
    assert [c["passed"] for c in report["checks"] if c["kind"] == "rope-logits"] == [True]
    rope = json.loads((tmp_path / "dst.safetensors.rope.json").read_text())["rope"]
    assert rope["base"] == 50000.0 and rope["scaling"]["rope_type"] == "llama3" and rope["layout"] == "interleaved"
    assert rope["scaling"]["original_max_position_embeddings"] == 1024 and rope["rotary_dim"] == 16


def test_t5x_preset_and_t5_bias_option(tmp_path):
    flax_serialization = pytest.importorskip("flax.serialization")
    pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    heads, buckets, d = 4, 32, 16

    def dense(i, o):
        return {"kernel": rng.standard_normal((i, o)).astype(np.float32)}

    attn = {n: dense(d, d) for n in ("query", "key", "value", "out")}
    tree = {"target": {
        "token_embedder": {"embedding": rng.standard_normal((30, d)).astype(np.float32)},
        "encoder": {"relpos_bias": {"rel_embedding": rng.standard_normal((heads, buckets)).astype(np.float32)},
                    "encoder_norm": {"scale": np.ones(d, np.float32)},
                    "layers_0": {"attention": attn, "mlp": {"wi": dense(d, 24), "wo": dense(24, d)},
                                 "pre_attention_layer_norm": {"scale": np.ones(d, np.float32)},
                                 "pre_mlp_layer_norm": {"scale": np.ones(d, np.float32)}}},
        "decoder": {"relpos_bias": {"rel_embedding": rng.standard_normal((heads, buckets)).astype(np.float32)},
                    "decoder_norm": {"scale": np.ones(d, np.float32)},
                    "layers_0": {"self_attention": attn, "encoder_decoder_attention": attn,
                                 "mlp": {"wi": dense(d, 24), "wo": dense(24, d)},
                                 "pre_self_attention_layer_norm": {"scale": np.ones(d, np.float32)},
                                 "pre_cross_attention_layer_norm": {"scale": np.ones(d, np.float32)},
                                 "pre_mlp_layer_norm": {"scale": np.ones(d, np.float32)}}}}}
    (tmp_path / "t5x.msgpack").write_bytes(flax_serialization.msgpack_serialize(tree))
    assert cli("port", tmp_path / "t5x.msgpack", tmp_path / "hf.safetensors", "--preset", "t5x-to-hf-t5",
               "--json", tmp_path / "r.json") == 0
    hf = open_reader(tmp_path / "hf.safetensors")
    enc = tree["target"]["encoder"]
    np.testing.assert_array_equal(hf.get("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
                                  enc["relpos_bias"]["rel_embedding"].T)
    np.testing.assert_array_equal(hf.get("encoder.block.0.layer.0.SelfAttention.q.weight"),
                                  enc["layers_0"]["attention"]["query"]["kernel"].T)
    assert "decoder.block.0.layer.1.EncDecAttention.o.weight" in hf and "shared.weight" in hf
    t5_checks = [c for c in json.loads((tmp_path / "r.json").read_text())["checks"] if c["kind"] == "t5-bias"]
    assert all(c["passed"] for c in t5_checks)
    assert {(c["name"].split(".")[0], c["name"].split("(")[-1], c["note"]) for c in t5_checks} == {
        (stack, label, f"bidirectional={stack == 'encoder'}") for stack in ("encoder", "decoder")
        for label in ("spec)", "torch)")}  # the safetensors target is recomputed by posenc_torch
    # the generic option: back from HF [buckets, heads] to [heads, buckets]
    assert cli("port", tmp_path / "hf.safetensors", tmp_path / "back.npz", "--t5-bias",
               "*relative_attention_bias.weight", "--t5-source-layout", "buckets-heads") == 0
    np.testing.assert_array_equal(
        np.load(tmp_path / "back.npz")["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
        tree["target"]["decoder"]["relpos_bias"]["rel_embedding"])


FORMATS = [".safetensors", ".npz", ".pt", ".weights.h5", ".msgpack"]


@pytest.mark.parametrize("suffix", FORMATS)
def test_formats_round_trip_preserve_dtypes(tmp_path, suffix):
    import ml_dtypes

    rng = np.random.default_rng(4)
    state = {"a.weight": rng.standard_normal((3, 5)).astype(np.float16),
             "b.weight": rng.standard_normal((5, 5)).astype(np.float32),
             "c.bias": rng.standard_normal(5).astype(ml_dtypes.bfloat16)}
    save_safetensors(tmp_path / "src.safetensors", state)
    if suffix == ".npz":  # NumPy's format has no bfloat16: a clear refusal, nothing written
        assert cli("port", tmp_path / "src.safetensors", tmp_path / f"out{suffix}") == 2
        assert not (tmp_path / f"out{suffix}").exists() and not leftovers(tmp_path)
        state.pop("c.bias")
        save_safetensors(tmp_path / "src.safetensors", state)
    names = {"a.weight": "a/weight", "b.weight": "b/weight", "c.bias": "c/bias"}
    rename = [f"--rename={k}={v}" for k, v in names.items()] if suffix in (".weights.h5", ".msgpack") else []
    assert cli("port", tmp_path / "src.safetensors", tmp_path / f"out{suffix}", *rename) == 0
    back = open_reader(tmp_path / f"out{suffix}")
    for name, value in state.items():
        key = names[name] if rename else name
        assert back.dtype(key) == value.dtype.name
        np.testing.assert_array_equal(np.asarray(back.get(key)), value)  # the square b.weight is not transposed


def test_transpose_is_explicit(tmp_path):
    w = np.arange(16, dtype=np.float32).reshape(4, 4)
    save_safetensors(tmp_path / "src.safetensors", {"q.weight": w, "k.weight": w})
    assert cli("port", tmp_path / "src.safetensors", tmp_path / "out.npz", "--transpose", "q.*") == 0
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(out["q.weight"], w.T)
    np.testing.assert_array_equal(out["k.weight"], w)


class _Payload:
    def __reduce__(self):
        return (print, ("unpickled!",))


def _failure_cases(tmp_path, meta):
    directory, state = meta
    src = directory / "consolidated.safetensors"
    torch = pytest.importorskip("torch")
    with open(tmp_path / "pickled.pt", "wb") as f:
        pickle.dump({"w": _Payload()}, f, protocol=2)
    torch.save({"w": torch.zeros(2), "step": {"nested": _Payload()}}, tmp_path / "pickled2.pt")
    (tmp_path / "garbage.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all")
    partial = dict(state)
    partial.pop("layers.1.attention.wk.weight")
    save_safetensors(tmp_path / "partial.safetensors", partial)
    os.link(src, tmp_path / "hardlink.safetensors")
    save_safetensors(tmp_path / "extra.safetensors",
                     {**state, "layers.0.attention.lora_a.weight": state["norm.weight"]})
    return {
        "same path": (["port", src, src, "--preset", "meta-llama-to-hf"], "never overwrites"),
        "same file": (["port", src, tmp_path / "hardlink.safetensors"], "never overwrites"),
        "pickle": (["port", tmp_path / "pickled.pt", tmp_path / "o.safetensors"], "refuses"),
        "pickle in state": (["port", tmp_path / "pickled2.pt", tmp_path / "o.safetensors"], "refuses"),
        "unreadable": (["port", tmp_path / "garbage.safetensors", tmp_path / "o.npz"], "cannot read"),
        "missing file": (["port", tmp_path / "nope.safetensors", tmp_path / "o.npz"], "does not exist"),
        "missing tensor": (["port", tmp_path / "partial.safetensors", tmp_path / "o.safetensors", "--preset",
                            "meta-llama-to-hf"], "layers.1.attention.wk.weight"),
        "unknown preset": (["port", src, tmp_path / "o.safetensors", "--preset", "gpt2-to-mars"], "unknown preset"),
        "unknown format": (["port", src, tmp_path / "o.ckpt"], "unknown checkpoint format"),
        "shape mismatch": (["port", src, tmp_path / "o.safetensors", "--preset", "meta-llama-to-hf", "--heads", "8"],
                           "has shape"),
        "pattern matches nothing": (["port", src, tmp_path / "o.npz", "--transpose", "nothing.*"], "matches no tensor"),
        "bad split": (["port", src, tmp_path / "o.npz", "--split-qkv", "norm.weight=a,b,c", "--heads", "3"],
                      "do not add up"),
        "collision": (["port", src, tmp_path / "o.npz", "--rename", "layers.*=x"], "map to 'x'"),
        "missing directory": (["port", src, tmp_path / "no" / "o.npz"], "does not exist"),
        "tensor unknown to preset": (["port", tmp_path / "extra.safetensors", tmp_path / "o.safetensors", "--preset",
                                      "meta-llama-to-hf"], "layers.0.attention.lora_a.weight"),
        "preset with options": (["port", src, tmp_path / "o.safetensors", "--preset", "meta-llama-to-hf",
                                 "--transpose", "*"], "takes no conversion options"),
        "preset format": (["port", src, tmp_path / "o.npz", "--preset", "hf-bert-to-flax"], "this preset writes"),
        "wrong checkpoint for preset": (["port", src, tmp_path / "o.msgpack", "--preset", "hf-bert-to-flax"],
                                        "lacks required"),
        "resize without bert": (["port", src, tmp_path / "o.npz", "--resize-positions", "9"], "BERT presets"),
        "report directory missing": (["port", src, tmp_path / "o.npz", "--json", tmp_path / "no" / "r.json"],
                                     "does not exist"),
        "target is a directory": (["port", src, tmp_path], "is a directory"),
        "bad rope scaling": (["port", src, tmp_path / "o.npz", "--preset", "meta-llama-to-hf", "--rope-scaling",
                              '{"rope_type": "warp", "factor": 2}'], "RoPE settings"),
        "bad rope layout": (["port", src, tmp_path / "o.npz", "--rope-q", "layers.*.attention.wq.weight",
                             "--heads", "4"], "need --rope-from"),
    }


FAILURES = ["same path", "same file", "pickle", "pickle in state", "unreadable", "missing file", "missing tensor",
            "unknown preset", "unknown format", "shape mismatch", "pattern matches nothing", "bad split", "collision",
            "missing directory", "tensor unknown to preset", "preset with options", "preset format",
            "wrong checkpoint for preset", "resize without bert", "report directory missing", "target is a directory",
            "bad rope scaling", "bad rope layout"]


@pytest.mark.parametrize("case", FAILURES)
def test_failures_exit_2_with_one_message_and_nothing_written(tmp_path, meta_dir, capsys, case):
    argv, needle = _failure_cases(tmp_path, meta_dir)[case]
    before = {p: sorted(os.listdir(p)) for p in (tmp_path, meta_dir[0])}
    source_bytes = (meta_dir[0] / "consolidated.safetensors").read_bytes()
    assert cli(*argv) == 2
    captured = capsys.readouterr()
    assert needle in captured.err and "Traceback" not in captured.err + captured.out
    assert "unpickled!" not in captured.out
    assert len(captured.err.strip().splitlines()) == 1
    assert {p: sorted(os.listdir(p)) for p in before} == before  # nothing half-written, no temporary file
    assert (meta_dir[0] / "consolidated.safetensors").read_bytes() == source_bytes


def test_peak_memory_stays_under_twice_the_largest_tensor(tmp_path):
    """benchmarks/bench_port_memory.py at a small scale: 4 tensors of 32 MiB, all transposed."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))), "benchmarks",
                        "bench_port_memory.py")
    spec = importlib.util.spec_from_file_location("bench_port_memory", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    row = bench.run("kernels", {f"w{i}": (2048, 4096) for i in range(4)}, ["--transpose", "*"], str(tmp_path))
    assert row["status"] == 0 and row["peak_mib"] <= row["bound_mib"], row
    assert not os.listdir(tmp_path)  # the generated checkpoint is deleted


def test_posenc_cli_has_port_and_doctor(meta_dir, capsys):
    from posenc import cli

    directory, _ = meta_dir
    assert cli.main(["port", str(directory / "consolidated.safetensors"), str(directory / "hf.safetensors"),
                     "--preset", "meta-llama-to-hf"]) == 0
    assert cli.main(["port", str(directory / "consolidated.safetensors"), str(directory / "x.safetensors"),
                     "--preset", "nope"]) == 2
    assert "unknown preset" in capsys.readouterr().err
    hf = open_reader(directory / "hf.safetensors")
    np.save(directory / "meta_q.npy", meta_dir[1]["layers.0.attention.wq.weight"])
    np.save(directory / "hf_q.npy", hf.get("model.layers.0.self_attn.q_proj.weight"))
    assert cli.main(["doctor", str(directory / "meta_q.npy"), str(directory / "hf_q.npy")]) == 0
    assert f"head_dim {HEAD_DIM}" in capsys.readouterr().out
