"""Presets: the declared rules (and verifications) of well-known ports.

* `meta-llama-to-hf`: Meta's `consolidated.*.pth` / safetensors names -> HF `LlamaForCausalLM`, q/k rows
  permuted interleaved -> half per head (k with `n_kv_heads`), as transformers'
  `convert_llama_weights_to_hf.py`. Reads `params.json` beside SOURCE; flags override it.
* `hf-bert-to-flax`: HF `BertModel` state dict -> the FlaxBertModel parameter tree (msgpack names joined
  by "/"), Linear kernels transposed to `[in, out]`, LayerNorm weight -> scale.
* `hf-bert-to-keras`: HF `BertModel` -> a Keras 3 `.weights.h5` laid out as `keras_bert_embeddings`
  builds the embeddings (`Embedding`, posenc_tf `LearnedEncoding`, `Embedding`, `LayerNormalization`,
  in that order) followed by one `Dense` / `LayerNormalization` per HF module, in HF's forward order;
  `model.load_weights(TARGET)` loads it.
* `hf-{llama,mistral,qwen2,gemma,phi3,gpt-neox}-to-gguf`, `gguf-to-hf-{llama,qwen2,gemma,phi3,gpt-neox}`,
  `hf-llama-to-flax`: `families.py`.
* `hf-llama-to-keras`, `keras-to-hf-llama`: HF `LlamaForCausalLM` <-> keras-hub `LlamaBackbone` `.weights.h5`:
  `keras_llama.py`.
* `t5x-to-hf-t5`: t5x parameter names (`[target/]encoder/layers_0/attention/query/kernel`, ...) -> HF
  `T5ForConditionalGeneration`; kernels transposed; relative bias tables `[heads, buckets]` ->
  `[buckets, heads]`, checked as encoder (bidirectional) and decoder (causal) T5 biases.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

import numpy as np

from posenc_np.testing import compare, tolerance

from ..errors import UsageError
from .core import rope_sidecar
from .mapping import Rules, glob_regex
from .verify import Check

__all__ = ["PRESETS", "PresetOptions", "get_preset", "keras_bert_embeddings", "bert_embeddings_reference",
           "LAYER_NORM_EPS"]

LAYER_NORM_EPS = 1e-12  # BERT's layer_norm_eps


class Preset:
    """`rules`, the formats it expects, the RoPE sidecar and extra verification checks."""

    def __init__(self, rules, *, target_format=None, rope=None, sidecar=None, extra=(), metadata=None):
        self.rules, self.target_format, self.rope = rules, target_format, rope
        self.sidecar, self.extra, self.metadata = sidecar, list(extra), metadata or {}


@dataclass(frozen=True)
class PresetOptions:
    """What a user may set on a preset; None takes the preset's own value (params.json, the head dim...).

    Attributes:
        heads, kv_heads: query and key/value heads (meta-llama-to-hf; default params.json's).
        rope_theta: RoPE base (meta-llama-to-hf; default params.json's `rope_theta`, else 10000).
        rotary_dim: rotated channels per head (meta-llama-to-hf; default the head dim).
        rope_scaling: an HF `rope_scaling` dict (meta-llama-to-hf; default llama3's constants when
            params.json says `use_scaled_rope`).
        resize_positions: resize BERT's position table to this many rows (the BERT presets only).
        resize_method: "linear", "nearest" or "cubic" (`resize_table`'s methods).
    """

    heads: int | None = None
    kv_heads: int | None = None
    rope_theta: float | None = None
    rotary_dim: int | None = None
    rope_scaling: dict | None = None
    resize_positions: int | None = None
    resize_method: str = "linear"


#: Presets that honour `PresetOptions.resize_positions`.
RESIZING_PRESETS = ("hf-bert-to-flax", "hf-bert-to-keras")


def get_preset(name, reader, options: PresetOptions | None = None) -> Preset:
    """The `Preset` `name` builds for the checkpoint `reader` reads."""
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    options = PresetOptions() if options is None else options
    if options.resize_positions is not None and name not in RESIZING_PRESETS:
        raise UsageError(f"--resize-positions belongs to the BERT presets ({', '.join(RESIZING_PRESETS)}); "
                         f"use --resize GLOB=LEN otherwise")
    return PRESETS[name](reader, options)


# ---------------------------------------------------------------- meta-llama-to-hf

def _meta_params(reader, options: PresetOptions):
    path = os.path.join(os.path.dirname(os.path.abspath(reader.path)), "params.json")
    params = {}
    if os.path.exists(path):
        try:
            with open(path) as f:
                params = json.load(f)
        except (OSError, json.JSONDecodeError) as error:
            raise UsageError(f"cannot read {path!r}: {error}") from None
    dim = params.get("dim")
    layers = params.get("n_layers")
    heads = options.heads or params.get("n_heads")
    kv_heads = options.kv_heads or params.get("n_kv_heads") or heads
    theta = options.rope_theta or params.get("rope_theta") or 10000.0
    if not heads:
        raise UsageError(f"meta-llama-to-hf needs n_heads: put params.json beside SOURCE ({path!r}) or pass --heads")
    if dim is None:
        dim = reader.shape("tok_embeddings.weight")[1] if "tok_embeddings.weight" in reader else None
    if layers is None:
        layers = len({m.group(1) for n in reader.names() if (m := re.match(r"layers\.(\d+)\.", n))})
    return dict(dim=dim, layers=int(layers), heads=int(heads), kv_heads=int(kv_heads), theta=float(theta),
                norm_eps=params.get("norm_eps", 1e-5), scaled=params.get("use_scaled_rope", False))


def meta_llama_to_hf(reader, options: PresetOptions):
    p = _meta_params(reader, options)
    layer = [("attention.wq.weight", "self_attn.q_proj.weight"), ("attention.wk.weight", "self_attn.k_proj.weight"),
             ("attention.wv.weight", "self_attn.v_proj.weight"), ("attention.wo.weight", "self_attn.o_proj.weight"),
             ("feed_forward.w1.weight", "mlp.gate_proj.weight"), ("feed_forward.w3.weight", "mlp.up_proj.weight"),
             ("feed_forward.w2.weight", "mlp.down_proj.weight"), ("attention_norm.weight", "input_layernorm.weight"),
             ("ffn_norm.weight", "post_attention_layernorm.weight")]
    rename = [("tok_embeddings.weight", "model.embed_tokens.weight"), ("norm.weight", "model.norm.weight"),
              ("output.weight", "lm_head.weight")]
    rename += [(f"layers.*.{src}", f"model.layers.*.{dst}") for src, dst in layer]
    require = [src for src, _ in rename[:3]] + [f"layers.{i}.{src}" for i in range(p["layers"]) for src, _ in layer]
    rules = Rules(rename=rename, rope_q=["layers.*.attention.wq.weight"], rope_k=["layers.*.attention.wk.weight"],
                  heads=p["heads"], kv_heads=p["kv_heads"], rope_from="interleaved", rope_to="half",
                  rotary_dim=options.rotary_dim, require=require, strict=True,
                  drop=[n for n in ("rope.freqs",) if n in reader])
    missing = [n for n in require if n not in reader]
    if missing:
        return Preset(rules)  # build_plan names the missing tensors
    hidden = reader.shape("tok_embeddings.weight")[1]
    if p["dim"] is not None and hidden != p["dim"]:
        raise UsageError(f"params.json dim={p['dim']} but tok_embeddings.weight has shape "
                         f"{reader.shape('tok_embeddings.weight')}")
    head_dim = hidden // p["heads"]
    for i in range(p["layers"]):
        for name, rows in (("wq", p["heads"] * head_dim), ("wk", p["kv_heads"] * head_dim)):
            shape = reader.shape(f"layers.{i}.attention.{name}.weight")
            if shape != (rows, hidden):
                raise UsageError(f"layers.{i}.attention.{name}.weight has shape {shape}; n_heads={p['heads']}, "
                                 f"n_kv_heads={p['kv_heads']}, dim={hidden} imply {(rows, hidden)}")
    scaling = None
    if options.rope_scaling:
        scaling = options.rope_scaling
    elif p["scaled"]:  # Meta's apply_scaling constants (llama-models model.py)
        scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192}
    rotary_dim = options.rotary_dim or head_dim
    rope = dict(base=p["theta"], scaling=scaling, rotary_dim=rotary_dim, source="interleaved", target="half")
    hf_config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
                 "intermediate_size": reader.shape("layers.0.feed_forward.w1.weight")[0],
                 "num_hidden_layers": p["layers"], "num_attention_heads": p["heads"],
                 "num_key_value_heads": p["kv_heads"], "head_dim": head_dim, "rms_norm_eps": p["norm_eps"],
                 "vocab_size": reader.shape("tok_embeddings.weight")[0], "rope_theta": p["theta"],
                 "rope_scaling": scaling, "tie_word_embeddings": False}
    sidecar = {**rope_sidecar(layout="half", base=p["theta"], rotary_dim=rotary_dim, scaling=scaling,
                              num_heads=p["heads"], num_kv_heads=p["kv_heads"], source_layout="interleaved"),
               "hf_config": hf_config}
    return Preset(rules, rope=rope, sidecar=sidecar)


# ---------------------------------------------------------------- BERT

_BERT_EMB = ("embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
             "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias")
# one encoder layer's Linear / LayerNorm modules in forward order
_BERT_LAYER = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
               "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm")


def _bert_modules(reader):
    """`(module, kind)` of every known BertModel module in forward order; kind: embedding, norm, dense."""
    layers = sorted({int(m.group(1)) for n in reader.names() if (m := re.match(r"encoder\.layer\.(\d+)\.", n))})
    modules = [("embeddings.word_embeddings", "embedding"), ("embeddings.position_embeddings", "embedding"),
               ("embeddings.token_type_embeddings", "embedding"), ("embeddings.LayerNorm", "norm")]
    modules += [(f"encoder.layer.{i}.{m}", "norm" if "LayerNorm" in m else "dense")
                for i in layers for m in _BERT_LAYER]
    modules.append(("pooler.dense", "dense"))
    return [(m, kind) for m, kind in modules if f"{m}.weight" in reader]


def _bert_rules(reader, options: PresetOptions, target_names):
    """Rules of both BERT presets: `target_names(module, kind)` -> {"weight": name, "bias": name}.

    Strict: a tensor of any other module (a pre-training head, an unknown layer) is an error rather
    than a pass-through that might need a transpose nobody declared.
    """
    rename, transpose = [], []
    for module, kind in _bert_modules(reader):
        for suffix, target in target_names(module, kind).items():
            if f"{module}.{suffix}" in reader:
                rename.append((f"{module}.{suffix}", target))
        if kind == "dense":
            transpose.append(f"{module}.weight")
    resize = []
    if options.resize_positions:
        resize = [("embeddings.position_embeddings.weight", options.resize_positions, options.resize_method)]
    drop = [n for n in reader.names() if n.endswith("position_ids")]
    return Rules(rename=rename, transpose=transpose, resize=resize, drop=drop, require=list(_BERT_EMB), strict=True)


def hf_bert_to_flax(reader, options: PresetOptions):
    leaf = {"embedding": {"weight": "embedding"}, "norm": {"weight": "scale", "bias": "bias"},
            "dense": {"weight": "kernel", "bias": "bias"}}
    rules = _bert_rules(reader, options, lambda module, kind: {
        suffix: module.replace(".", "/") + "/" + name for suffix, name in leaf[kind].items()})
    names = dict(word="embeddings/word_embeddings/embedding", position="embeddings/position_embeddings/embedding",
                 token_type="embeddings/token_type_embeddings/embedding", gamma="embeddings/LayerNorm/scale",
                 beta="embeddings/LayerNorm/bias")
    return Preset(rules, target_format="msgpack", extra=[_embeddings_check("jax", names, options.resize_method)])


def _keras_layer_paths(reader):
    """Keras 3 `.weights.h5` group and layer name of every HF module, in the order `keras_bert_embeddings`
    (then one layer per encoder module, in forward order) creates them: Keras names a group after the
    layer's class in snake case, with `_1`, `_2`... for repeats, and stores the layer name as an attribute."""
    classes = {"embedding": "embedding", "norm": "layer_normalization", "dense": "dense"}
    names = {"embeddings.word_embeddings": "word_embeddings", "embeddings.LayerNorm": "embeddings_layer_norm",
             "embeddings.position_embeddings": "position_embeddings",
             "embeddings.token_type_embeddings": "token_type_embeddings"}
    counts, paths = {}, {}
    for module, kind in _bert_modules(reader):
        cls = "learned_encoding" if module == "embeddings.position_embeddings" else classes[kind]
        n = counts.get(cls, 0)
        counts[cls] = n + 1
        paths[module] = (f"layers/{cls}" + (f"_{n}" if n else ""), names.get(module, module.replace(".", "_")))
    return paths


def hf_bert_to_keras(reader, options: PresetOptions):
    paths = _keras_layer_paths(reader)
    rules = _bert_rules(reader, options, lambda module, kind: {
        "weight": f"{paths[module][0]}/vars/0", "bias": f"{paths[module][0]}/vars/1"})
    attrs = {f"{group}/vars": {"name": layer_name} for group, layer_name in paths.values()}
    attrs["vars"] = {"name": "functional"}
    names = dict(word="layers/embedding/vars/0", position="layers/learned_encoding/vars/0",
                 token_type="layers/embedding_1/vars/0", gamma="layers/layer_normalization/vars/0",
                 beta="layers/layer_normalization/vars/1")
    return Preset(rules, target_format="keras-h5", extra=[_embeddings_check("tf", names, options.resize_method)],
                  metadata={"h5_attrs": attrs})


def bert_embeddings_reference(word, position, token_type, gamma, beta, ids, positions, types):
    """Float64 NumPy: LayerNorm(word[ids] + position[positions] + token_type[types]) (HF BertEmbeddings)."""
    from posenc_np.learned import learned

    x = (np.asarray(word, np.float64)[ids] + learned(np.asarray(position, np.float64), positions)
         + np.asarray(token_type, np.float64)[types])
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + LAYER_NORM_EPS) * np.asarray(gamma, np.float64) + np.asarray(beta, np.float64)


def _torch_embeddings(tables, ids, positions, types):
    import torch
    import torch.nn.functional as F

    import posenc_torch

    t = {k: torch.from_numpy(np.array(v, np.float32)) for k, v in tables.items()}
    pos_table = t["position"]
    x = (F.embedding(torch.from_numpy(ids), t["word"]) + posenc_torch.learned(pos_table, torch.from_numpy(positions))
         + F.embedding(torch.from_numpy(types), t["token_type"]))
    return F.layer_norm(x, (x.shape[-1],), t["gamma"], t["beta"], eps=LAYER_NORM_EPS).numpy()


def _jax_embeddings(tables, ids, positions, types):
    import jax.numpy as jnp

    import posenc_jax

    t = {k: jnp.asarray(np.asarray(v, np.float32)) for k, v in tables.items()}
    x = t["word"][ids] + posenc_jax.learned(t["position"], jnp.asarray(positions)) + t["token_type"][types]
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return np.asarray((x - mean) / jnp.sqrt(var + LAYER_NORM_EPS) * t["gamma"] + t["beta"])


def keras_bert_embeddings(vocab_size, max_len, type_vocab_size, hidden):
    """The Keras 3 BERT embeddings model whose `.weights.h5` layout `hf-bert-to-keras` writes.

    Inputs `(input_ids, token_type_ids, position_ids)`, int32 `[batch, seq]`; output `[batch, seq, hidden]`.
    """
    import keras

    import posenc_tf

    ids, types, positions = (keras.Input((None,), dtype="int32", name=n)
                             for n in ("input_ids", "token_type_ids", "position_ids"))
    word = keras.layers.Embedding(vocab_size, hidden, name="word_embeddings")(ids)
    pos = posenc_tf.LearnedEncoding(max_len, hidden, name="position_embeddings")(positions)
    tt = keras.layers.Embedding(type_vocab_size, hidden, name="token_type_embeddings")(types)
    out = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPS, name="embeddings_layer_norm")(
        keras.layers.Add()([word, pos, tt]))
    return keras.Model([ids, types, positions], out)


def _keras_embeddings(target_path, shapes, ids, positions, types):
    model = keras_bert_embeddings(shapes["word"][0], shapes["position"][0], shapes["token_type"][0],
                                  shapes["word"][1])
    model.load_weights(target_path)  # the Keras 3 loader itself: proves the layout, not just the numbers
    return np.asarray(model([ids.astype(np.int32), types.astype(np.int32), positions.astype(np.int32)]))


def _embeddings_check(framework, target_names, resize_method):
    """Extra verification: BERT embeddings in torch (source) and `framework` (target) vs float64 NumPy."""

    def run(source, target):
        from ..adapters import adapter

        src = {k: source.get(n) for k, n in zip(("word", "position", "token_type", "gamma", "beta"), _BERT_EMB)}
        tgt = {k: np.asarray(target.get(n)) for k, n in target_names.items()}
        rows = tgt["position"].shape[0]
        if rows != src["position"].shape[0]:  # resized: the source side resizes with posenc_torch
            src["position"] = adapter("torch").call("resize_table", (np.array(src["position"]), rows),
                                                    {"method": resize_method})
        rng = np.random.default_rng(1)
        positions = np.concatenate([np.arange(8), rng.integers(0, rows, 8), [rows - 1]])[None]
        ids = rng.integers(0, src["word"].shape[0], positions.shape)
        types = rng.integers(0, src["token_type"].shape[0], positions.shape)
        desired = bert_embeddings_reference(*(tgt[k] for k in ("word", "position", "token_type", "gamma", "beta")),
                                            ids, positions, types)
        tol = tolerance("float32", scale=float(np.abs(desired).max()))
        out = []
        torch_out = _torch_embeddings(src, ids, positions, types)
        if framework == "jax":
            target_out = _jax_embeddings(tgt, ids, positions, types)
        else:
            target_out = _keras_embeddings(target.path, {k: v.shape for k, v in tgt.items()}, ids, positions, types)
        for label, got in (("torch, source", torch_out), (f"{framework}, target", target_out)):
            r = compare(got, desired, tol)
            out.append(Check("embeddings", f"BERT embeddings ({label})", r.max_abs_err, r.atol, r.tol_why, r.passed,
                             f"{positions.shape[1]} probe positions up to {rows - 1}"))
        return out

    return run


# ---------------------------------------------------------------- t5x

_T5X_ATTN = (("query", "q"), ("key", "k"), ("value", "v"), ("out", "o"))


def t5x_to_hf_t5(reader, options: PresetOptions):
    names = reader.names()
    prefix = "target/" if any(n.startswith("target/") for n in names) else ""
    rename, transpose = [(f"{prefix}token_embedder/embedding", "shared.weight")], []
    t5_tags = {}

    def kernel(src, dst):
        rename.append((f"{prefix}{src}", dst))
        transpose.append(f"{prefix}{src}")

    for stack in ("encoder", "decoder"):
        bias = f"{prefix}{stack}/relpos_bias/rel_embedding"
        kernel(f"{stack}/relpos_bias/rel_embedding",
               f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight")
        t5_tags[bias] = {"source_layout": "heads-buckets", "target_layout": "buckets-heads"}
        rename.append((f"{prefix}{stack}/{stack}_norm/scale", f"{stack}.final_layer_norm.weight"))
    for t5x, hf in _T5X_ATTN:
        kernel(f"encoder/layers_*/attention/{t5x}/kernel", f"encoder.block.*.layer.0.SelfAttention.{hf}.weight")
        kernel(f"decoder/layers_*/self_attention/{t5x}/kernel", f"decoder.block.*.layer.0.SelfAttention.{hf}.weight")
        kernel(f"decoder/layers_*/encoder_decoder_attention/{t5x}/kernel",
               f"decoder.block.*.layer.1.EncDecAttention.{hf}.weight")
    for stack, mlp in (("encoder", 1), ("decoder", 2)):
        for wi in ("wi", "wi_0", "wi_1", "wo"):  # T5 1.0 has wi, T5 1.1 (gated) wi_0 and wi_1
            kernel(f"{stack}/layers_*/mlp/{wi}/kernel", f"{stack}.block.*.layer.{mlp}.DenseReluDense.{wi}.weight")
        rename.append((f"{prefix}{stack}/layers_*/pre_mlp_layer_norm/scale",
                       f"{stack}.block.*.layer.{mlp}.layer_norm.weight"))
    for t5x, hf in (("encoder/layers_*/pre_attention_layer_norm", "encoder.block.*.layer.0"),
                    ("decoder/layers_*/pre_self_attention_layer_norm", "decoder.block.*.layer.0"),
                    ("decoder/layers_*/pre_cross_attention_layer_norm", "decoder.block.*.layer.1")):
        rename.append((f"{prefix}{t5x}/scale", f"{hf}.layer_norm.weight"))
    kernel("decoder/logits_dense/kernel", "lm_head.weight")  # absent when tied to the embedding (T5 1.0)
    require = [f"{prefix}token_embedder/embedding"] + list(t5_tags)
    used = {g for g, _ in rename if any(glob_regex(g).match(n) for n in names)}
    rules = Rules(rename=[(g, t) for g, t in rename if g in used], transpose=[g for g in transpose if g in used],
                  require=require, tags=[(name, {"t5": tags}) for name, tags in t5_tags.items()], strict=True)
    return Preset(rules)


PRESETS = {"meta-llama-to-hf": meta_llama_to_hf, "hf-bert-to-flax": hf_bert_to_flax,
           "hf-bert-to-keras": hf_bert_to_keras, "t5x-to-hf-t5": t5x_to_hf_t5}

from .families import FAMILY_PRESETS  # noqa: E402 - families builds Presets lazily, no import cycle

PRESETS.update(FAMILY_PRESETS)

from .schedule import SCHEDULE_PRESETS  # noqa: E402 - per-layer / MLA presets (issue 13)

PRESETS.update(SCHEDULE_PRESETS)

from .keras_llama import KERAS_PRESETS  # noqa: E402 - HF Llama <-> keras-hub LlamaBackbone

PRESETS.update(KERAS_PRESETS)
