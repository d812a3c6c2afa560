"""Presets for today's decoder families: Hugging Face <-> llama.cpp GGUF, and HF Llama -> Flax.

One table per family (`FAMILIES`) gives the HF tensor names, llama.cpp's names for them
(gguf-py `constants.py` TENSOR_NAMES: `token_embd`, `blk.N.attn_q`, ..., `output_norm`, `output`),
how q and k are stored, and what llama.cpp's converter changes on the way
(ggml-org/llama.cpp `convert_hf_to_gguf.py`, since split into `conversion/*.py`; read at commit
7bca1fd9ca2a681b0182e16f24f832b7be1942af):

* `llama` (LlamaForCausalLM, MistralForCausalLM; arch "llama", rope type NORM): q and k rows are
  permuted per head by `LlamaModel.permute` (`reshape(n_head, 2, hd/2, ...).swapaxes(1, 2)`, k with
  `n_head_kv`) = posenc `permute_qk_rows(source="half", target="interleaved")`; llama3 scaling becomes
  the `rope_freqs` tensor of `LlamaModel.generate_extra_tensors` (1 for the high band, `factor` for
  the low band, `1 / ((1 - s) / factor + s)` between), which llama.cpp divides the frequencies by.
  Linear scaling is `rope.scaling.type = linear` + `rope.scaling.factor`.
* `qwen2` (Qwen2ForCausalLM; arch "qwen2", NEOX): no permutation; q/k/v biases as `attn_{q,k,v}.bias`.
* `gemma` (GemmaForCausalLM; arch "gemma", NEOX): no permutation; every `*norm.weight` is stored
  `w + 1` (`GemmaModel.modify_tensors`: HF's GemmaRMSNorm scales by `1 + w`, llama.cpp by `w`); the
  `sqrt(hidden)` embedding scale is in both runtimes' model code, not in the weights; tied output.
* `phi3` (Phi3ForCausalLM; arch "phi3", NEOX): the fused `qkv_proj` (`[Q; K; V]` rows) is `attn_qkv`,
  the fused `gate_up_proj` is `ffn_up` (llama.cpp's SWIGLU splits it in the same order); LongRoPE
  factors become `rope_factors_long` / `rope_factors_short` and `rope.scaling.attn_factor =
  sqrt(1 + ln(factor) / ln(original))` (`Phi3MiniModel.generate_extra_tensors`).
* `gpt-neox` (GPTNeoXForCausalLM; arch "gptneox", NEOX): `query_key_value` rows per head
  `[q_h; k_h; v_h]` are reordered to blocks `[Q; K; V]` (`GPTNeoXModel.modify_tensors`); partial rotary:
  `rope.dimension_count = int(rotary_pct * head_dim)`; LayerNorm biases.

Common metadata (TextModel.set_gguf_parameters): `{arch}.context_length`, `.embedding_length`,
`.block_count`, `.feed_forward_length`, `.attention.head_count`, `.attention.head_count_kv`,
`.rope.freq_base`, `.rope.dimension_count`, `.attention.layer_norm_rms_epsilon` (GPT-NeoX:
`.attention.layer_norm_epsilon`), `.attention.key_length`/`.value_length` when the config sets
`head_dim`, `.vocab_size`. 1-D tensors are written as F32 (llama.cpp's loaders expect F32 norms).
Where posenc departs from the converter it says so: llama3's original context is taken from the
scaling dict (as transformers does), where the converter reads a top-level key with 8192 as default.

Verification (`gguf_logits_check`): per layer, attention logits `q . k` at probe positions chosen per
frequency band up to the context length (`probe_positions`), computed on the source from its own
convention and on the written target from its own: an HF side from its config.json through
`posenc_np.rope_schedule_from_hf_config` (per-layer), a GGUF side from the metadata and tensors the
`gguf` reader reads back (`rope_type` of `general.architecture`, `rope.dimension_count`,
`rope.freq_base`, `rope.scaling.*`, `rope_freqs`, `rope_factors_*`), q and k taken from the
separate or fused tensors of each side, biases included.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError
from .ggufio import ROPE_LAYOUT_OF_TYPE, rope_type
from .mapping import Op, Rules
from .verify import Check

__all__ = ["FAMILIES", "Family", "hf_to_gguf", "gguf_to_hf", "hf_llama_to_flax", "probe_positions",
           "gguf_logits_check", "llama3_rope_freqs", "hf_config_beside", "FAMILY_PRESETS"]

_LLAMA_LAYER = (("input_layernorm.weight", "attn_norm.weight"), ("post_attention_layernorm.weight", "ffn_norm.weight"),
                ("self_attn.q_proj.weight", "attn_q.weight"), ("self_attn.k_proj.weight", "attn_k.weight"),
                ("self_attn.v_proj.weight", "attn_v.weight"), ("self_attn.o_proj.weight", "attn_output.weight"),
                ("self_attn.q_proj.bias", "attn_q.bias"), ("self_attn.k_proj.bias", "attn_k.bias"),
                ("self_attn.v_proj.bias", "attn_v.bias"), ("self_attn.o_proj.bias", "attn_output.bias"),
                ("mlp.gate_proj.weight", "ffn_gate.weight"), ("mlp.up_proj.weight", "ffn_up.weight"),
                ("mlp.down_proj.weight", "ffn_down.weight"))
_LLAMA_GLOBAL = (("model.embed_tokens.weight", "token_embd.weight"), ("model.norm.weight", "output_norm.weight"),
                 ("lm_head.weight", "output.weight"))
_PHI3_LAYER = (("input_layernorm.weight", "attn_norm.weight"), ("post_attention_layernorm.weight", "ffn_norm.weight"),
               ("self_attn.qkv_proj.weight", "attn_qkv.weight"), ("self_attn.o_proj.weight", "attn_output.weight"),
               ("mlp.gate_up_proj.weight", "ffn_up.weight"), ("mlp.down_proj.weight", "ffn_down.weight"))
_NEOX_LAYER = tuple((f"{hf}.{p}", f"{gg}.{p}") for hf, gg in (
    ("input_layernorm", "attn_norm"), ("post_attention_layernorm", "ffn_norm"),
    ("attention.query_key_value", "attn_qkv"), ("attention.dense", "attn_output"),
    ("mlp.dense_h_to_4h", "ffn_up"), ("mlp.dense_4h_to_h", "ffn_down"))
    for p in ("weight", "bias"))
_NEOX_GLOBAL = (("gpt_neox.embed_in.weight", "token_embd.weight"), ("gpt_neox.final_layer_norm.weight",
                "output_norm.weight"), ("gpt_neox.final_layer_norm.bias", "output_norm.bias"),
                ("embed_out.weight", "output.weight"))


@dataclass(frozen=True)
class Family:
    """How one HF decoder family maps onto one llama.cpp architecture."""

    name: str
    arch: str                 # GGUF general.architecture
    model_types: tuple        # HF config model_type values of the family
    hf_class: str             # transformers class the HF side loads into
    hf_layer: str             # per-layer prefix, "{i}" for the index
    global_names: tuple       # (HF name, GGUF name)
    layer_names: tuple        # (HF suffix, GGUF suffix)
    qkv: str = "separate"     # "separate" | "blocks" ([Q; K; V] rows) | "heads" (per head [q; k; v], HF GPT-NeoX)
    norm_shift: float = 0.0   # added to every *norm.weight on the way to GGUF
    eps: tuple = ("rms_norm_eps", "attention.layer_norm_rms_epsilon")

    @property
    def permute(self) -> bool:
        """q/k rows re-permuted: HF rotates halves, this arch's llama.cpp rope type pairs neighbours."""
        return rope_type(self.arch) == "norm"


FAMILIES = {
    "llama": Family("llama", "llama", ("llama", "mistral"), "LlamaForCausalLM", "model.layers.{i}.", _LLAMA_GLOBAL,
                    _LLAMA_LAYER),
    "qwen2": Family("qwen2", "qwen2", ("qwen2",), "Qwen2ForCausalLM", "model.layers.{i}.", _LLAMA_GLOBAL, _LLAMA_LAYER),
    "gemma": Family("gemma", "gemma", ("gemma",), "GemmaForCausalLM", "model.layers.{i}.", _LLAMA_GLOBAL, _LLAMA_LAYER,
                    norm_shift=1.0),
    "phi3": Family("phi3", "phi3", ("phi3",), "Phi3ForCausalLM", "model.layers.{i}.", _LLAMA_GLOBAL, _PHI3_LAYER,
                   qkv="blocks"),
    "gpt-neox": Family("gpt-neox", "gptneox", ("gpt_neox",), "GPTNeoXForCausalLM", "gpt_neox.layers.{i}.",
                       _NEOX_GLOBAL, _NEOX_LAYER, qkv="heads", eps=("layer_norm_eps", "attention.layer_norm_epsilon")),
}
_FAMILY_OF_ARCH = {f.arch: f for f in FAMILIES.values()}


def hf_config_beside(reader, what) -> dict:
    """config.json in SOURCE's directory (the checkpoint directory for a sharded SOURCE)."""
    path = os.path.join(os.path.dirname(os.path.abspath(reader.path)), "config.json")
    try:
        with open(path) as handle:
            config = json.load(handle)
    except FileNotFoundError:
        raise UsageError(f"{what} reads the model's config.json beside SOURCE; {path!r} does not exist") from None
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"cannot read {path!r}: {error}") from None
    if not isinstance(config, dict):
        raise UsageError(f"{path!r} is not a JSON object")
    return config


def _heads(config):
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or config["hidden_size"] // heads)
    return heads, kv, head_dim


def _schedule(config, what):
    from posenc_np.schedule import rope_schedule_from_hf_config

    try:
        return rope_schedule_from_hf_config(config)
    except (ValueError, TypeError) as error:
        raise UsageError(f"{what}: {error}") from None


# ---------------------------------------------------------------- HF -> GGUF

def llama3_rope_freqs(head_dim, base, scaling) -> np.ndarray:
    """llama.cpp's `rope_freqs` factors (convert_hf_to_gguf.py LlamaModel.generate_extra_tensors): the
    frequencies in float32, the band tests and the smooth factor in Python floats, stored float32."""
    exponent = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
    freqs = np.float32(1.0) / (np.float32(base) ** exponent)
    factor, low, high = (float(scaling[k]) for k in ("factor", "low_freq_factor", "high_freq_factor"))
    original = float(scaling["original_max_position_embeddings"])
    out = []
    for freq in freqs.astype(np.float64):
        wavelen = 2 * math.pi / freq
        if wavelen < original / high:
            out.append(1.0)
        elif wavelen > original / low:
            out.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def _rope_metadata(family, config, schedule, prefix):
    """The rope keys and generated tensors for the first rotary layer's settings (one for the whole model)."""
    used = [e for e in schedule if e is not None]
    if not used:
        raise UsageError(f"{family.name}: the config has no rotary layer")
    if any(e != used[0] for e in used):
        kinds = len({json.dumps(e, sort_keys=True) for e in used})
        raise UsageError(f"{family.name}: per-layer RoPE settings differ ({kinds} kinds); this llama.cpp "
                         "architecture has one rope for every layer")
    entry = used[0]
    kv = [(f"{prefix}.rope.freq_base", entry["base"], "float32"),
          (f"{prefix}.rope.dimension_count", entry["rotary_dim"], "uint32")]
    generated = []
    scaling = entry["scaling"] or {}
    kind = scaling.get("rope_type", "default")
    if kind == "linear":
        kv += [(f"{prefix}.rope.scaling.type", "linear", "string"), (f"{prefix}.rope.scaling.factor", scaling["factor"],
                                                                    "float32")]
    elif kind == "llama3" and family.name == "llama":
        generated.append(("rope_freqs.weight", llama3_rope_freqs(entry["rotary_dim"], entry["base"], scaling)))
        # llama.cpp reads only rope_freqs; the HF dict rides along (an extra key llama.cpp ignores) so that
        # gguf-to-hf-llama can give back the exact config, checked against rope_freqs
        kv.append((HF_SCALING_KEY, json.dumps(scaling, sort_keys=True), "string"))
    elif kind == "longrope" and family.name == "phi3":
        original = scaling["original_max_position_embeddings"]
        factor = scaling.get("factor") or config["max_position_embeddings"] / original
        attn = scaling.get("attention_factor")
        if attn is None:
            attn = math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1.0 else 1.0
        kv += [(f"{prefix}.rope.scaling.attn_factor", attn, "float32"),
               (f"{prefix}.rope.scaling.original_context_length", original, "uint32")]
        generated += [("rope_factors_long.weight", np.asarray(scaling["long_factor"], np.float32)),
                      ("rope_factors_short.weight", np.asarray(scaling["short_factor"], np.float32))]
    elif kind != "default":
        raise UsageError(f"{family.name}: rope_type {kind!r} has no {family.arch} GGUF form in posenc (supported: "
                         "default, linear" + (", llama3" if family.name == "llama" else "")
                         + (", longrope" if family.name == "phi3" else "") + ")")
    return kv, generated, entry


def tokenizer_kv(directory, vocab_size):
    """tokenizer.ggml.* from tokenizer.json beside SOURCE with gguf-py's own offline vocab readers
    (`gguf.vocab.BpeVocab` for byte-level BPE, `LlamaHfVocab` for SentencePiece-style BPE, `SpecialVocab`
    for merges and special ids); `(kv, note)`. Without one: `tokenizer.ggml.model = "none"`."""
    from pathlib import Path

    path = Path(directory)
    if not (path / "tokenizer.json").is_file():
        return ([("tokenizer.ggml.model", "none", "string")],
                "no tokenizer.json beside SOURCE: tokenizer.ggml.model = none")
    from gguf.vocab import BpeVocab, LlamaHfVocab, SpecialVocab

    vocab, model = None, None
    errors = []
    for kind, name in ((BpeVocab, "gpt2"), (LlamaHfVocab, "llama")):
        try:
            vocab, model = kind(path), name
            break
        except Exception as error:  # noqa: BLE001 - each reader says "not my format" its own way
            errors.append(f"{kind.__name__}: {type(error).__name__}: {error}")
    if vocab is None:
        return [("tokenizer.ggml.model", "none", "string")], ("tokenizer.json is not a format gguf-py reads ("
                                                              + "; ".join(errors) + "): tokenizer.ggml.model = none")
    tokens, scores, types = [], [], []
    for text, score, kind in vocab.all_tokens():
        tokens.append(text.decode("utf-8", "replace") if isinstance(text, (bytes, bytearray)) else str(text))
        scores.append(float(score))
        types.append(int(kind))
    if len(tokens) > vocab_size:
        return [("tokenizer.ggml.model", "none", "string")], (f"tokenizer.json has {len(tokens)} tokens, the model "
                                                              f"{vocab_size} rows: tokenizer.ggml.model = none")
    for i in range(len(tokens), vocab_size):  # as convert_hf_to_gguf.py get_vocab_base: unused padding rows
        tokens.append(f"[PAD{i}]")
        scores.append(-1000.0)
        types.append(5)  # gguf.TokenType.UNUSED
    kv = [("tokenizer.ggml.model", model, "string"), ("tokenizer.ggml.tokens", tokens, "array"),
          ("tokenizer.ggml.token_type", types, "array")]
    if model == "gpt2":
        kv.append(("tokenizer.ggml.pre", "default", "string"))
    else:
        kv.append(("tokenizer.ggml.scores", scores, "array"))
    special = SpecialVocab(path, load_merges=model == "gpt2", n_vocab=len(tokens))
    if special.merges:
        kv.append(("tokenizer.ggml.merges", list(special.merges), "array"))
    names = {"bos": "bos", "eos": "eos", "unk": "unknown", "sep": "seperator", "pad": "padding"}
    for kind, token_id in special.special_token_ids.items():
        if kind in names:
            kv.append((f"tokenizer.ggml.{names[kind]}_token_id", int(token_id), "uint32"))
    for kind, value in special.add_special_token.items():
        if kind in ("bos", "eos"):
            kv.append((f"tokenizer.ggml.add_{kind}_token", bool(value), "bool"))
    return kv, f"tokenizer.json carried as tokenizer.ggml.model = {model} ({len(tokens)} tokens)"


def _present(reader, names):
    return [n for n in names if n in reader]


def hf_to_gguf(family_name, reader, options):
    """The Preset porting an HF checkpoint of `family_name` to GGUF."""
    from .presets import Preset

    family = FAMILIES[family_name]
    what = f"hf-{family_name}-to-gguf"
    config = hf_config_beside(reader, what)
    model_type = config.get("model_type")
    if model_type not in family.model_types:
        raise UsageError(f"{what}: config.json says model_type {model_type!r}; this preset converts "
                         f"{', '.join(family.model_types)}")
    heads, kv_heads, head_dim = _heads(config)
    layers = int(config["num_hidden_layers"])
    schedule = _schedule(config, what)
    prefix = family.arch
    rope_kv, generated, entry = _rope_metadata(family, config, schedule, prefix)
    rename = [(hf, gg) for hf, gg in family.global_names if hf in reader]
    layer_glob = family.hf_layer.format(i="*")
    rename += [(layer_glob + hf, "blk.*." + gg) for hf, gg in family.layer_names
               if any(n in reader for n in (family.hf_layer.format(i=i) + hf for i in range(layers)))]
    drop = [n for n in reader.names() if n.endswith(("rotary_emb.inv_freq", "attention.bias", "attention.masked_bias"))]
    if family.qkv == "separate":
        require = [family.hf_layer.format(i=i) + f"self_attn.{p}_proj.weight" for i in range(layers) for p in "qk"]
    elif family.qkv == "blocks":
        require = [family.hf_layer.format(i=i) + "self_attn.qkv_proj.weight" for i in range(layers)]
    else:
        require = [family.hf_layer.format(i=i) + "attention.query_key_value.weight" for i in range(layers)]
    require.append(family.global_names[0][0])
    ops = []
    for name in reader.names():
        if len(reader.shape(name)) == 1 and reader.dtype(name) != "float32" and name not in drop:
            ops.append((name, Op("cast", ("float32",))))
    if family.norm_shift:
        ops.append(("*norm.weight", Op("shift", (family.norm_shift,))))
    if family.qkv == "heads":
        ops.append((layer_glob + "attention.query_key_value.*", Op("qkv-blocks", (heads,))))
    rules = Rules(rename=rename, drop=drop, require=require, strict=True, ops=ops, generated=generated)
    if family.permute:
        rules.rope_q, rules.rope_k = [layer_glob + "self_attn.q_proj.weight"], [layer_glob + "self_attn.k_proj.weight"]
        rules.heads, rules.kv_heads, rules.rope_from, rules.rope_to = heads, kv_heads, "half", "interleaved"
        rules.rotary_dim = entry["rotary_dim"] if entry["rotary_dim"] != head_dim else None
        for p, count in (("q", heads), ("k", kv_heads)):  # llama.cpp permutes q/k biases as the weights
            ops.append((layer_glob + f"self_attn.{p}_proj.bias", Op("rope", (count, "half", "interleaved",
                                                                         rules.rotary_dim))))
    vocab = reader.shape(family.global_names[0][0])[0]
    eps_hf, eps_key = family.eps
    kv = [("general.name", config.get("_name_or_path") or f"posenc port of {family.hf_class}", "string"),
          ("general.file_type", 0, "uint32"),
          (f"{prefix}.context_length", config["max_position_embeddings"], "uint32"),
          (f"{prefix}.embedding_length", config["hidden_size"], "uint32"),
          (f"{prefix}.block_count", layers, "uint32"),
          (f"{prefix}.feed_forward_length", config["intermediate_size"], "uint32"),
          (f"{prefix}.attention.head_count", heads, "uint32"),
          (f"{prefix}.attention.head_count_kv", kv_heads, "uint32"),
          (f"{prefix}.{eps_key}", config[eps_hf], "float32"), (f"{prefix}.vocab_size", vocab, "uint32")]
    if config.get("head_dim") and int(config["head_dim"]) != config["hidden_size"] // heads:
        kv += [(f"{prefix}.attention.key_length", head_dim, "uint32"),
               (f"{prefix}.attention.value_length", head_dim, "uint32")]
    kv += rope_kv
    token_kv, token_note = tokenizer_kv(os.path.dirname(os.path.abspath(reader.path)), vocab)
    kv += token_kv
    sidecar = {"rope": {"layout": ROPE_LAYOUT_OF_TYPE[rope_type(family.arch)], "base": entry["base"],
                        "rotary_dim": entry["rotary_dim"], "scaling": entry["scaling"], "num_heads": heads,
                        "num_kv_heads": kv_heads, "source_layout": "half"},
               "gguf": {"architecture": family.arch, "rope_type": rope_type(family.arch), "tokenizer": token_note}}
    extra = [gguf_logits_check(family, source=("hf", config), target=("gguf", None))]
    return Preset(rules, target_format="gguf", sidecar=sidecar, extra=extra,
                  metadata={"gguf": {"arch": family.arch, "kv": kv}})


# ---------------------------------------------------------------- GGUF -> HF

#: GGUF key with the HF llama3 rope_scaling dict (posenc's, ignored by llama.cpp)
HF_SCALING_KEY = "posenc.hf_rope_scaling"
_LLAMA3_CANDIDATES = ({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192},
                      {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192})


def _hf_config_from_gguf(family, reader, options):
    md = reader.metadata
    a = family.arch

    def get(key, default=None, required=True):
        value = md.get(f"{a}.{key}", default)
        if value is None and required:
            raise UsageError(f"GGUF {reader.path!r} lacks {a}.{key}")
        return value

    heads = int(get("attention.head_count"))
    kv_heads = int(get("attention.head_count_kv", heads))
    hidden = int(get("embedding_length"))
    head_dim = int(get("attention.key_length", hidden // heads))
    n_rot = int(get("rope.dimension_count", head_dim))
    base = float(get("rope.freq_base", 10000.0))
    vocab = reader.shape("token_embd.weight")[0]
    config = {"architectures": [family.hf_class], "model_type": family.model_types[0], "hidden_size": hidden,
              "intermediate_size": int(get("feed_forward_length")), "num_hidden_layers": int(get("block_count")),
              "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
              "max_position_embeddings": int(get("context_length")), "vocab_size": vocab,
              family.eps[0]: float(get(family.eps[1])), "rope_theta": base,
              "tie_word_embeddings": "output.weight" not in reader, "torch_dtype": "float32",
              # the token ids the GGUF's tokenizer section names; None rather than a family default outside the vocab
              "bos_token_id": md.get("tokenizer.ggml.bos_token_id"),
              "eos_token_id": md.get("tokenizer.ggml.eos_token_id"),
              "pad_token_id": md.get("tokenizer.ggml.padding_token_id")}
    if family.name == "gpt-neox":
        config.update(rotary_pct=n_rot / head_dim, use_parallel_residual=True)
        config.pop("head_dim")
    elif n_rot != head_dim:
        config["partial_rotary_factor"] = n_rot / head_dim
    scaling = None
    stype = md.get(f"{a}.rope.scaling.type", "none")
    if options.rope_scaling is not None:
        scaling = dict(options.rope_scaling)
    elif stype == "linear":
        scaling = {"rope_type": "linear", "factor": float(md[f"{a}.rope.scaling.factor"])}
    elif "rope_freqs.weight" in reader:
        factors = np.asarray(reader.get("rope_freqs.weight"), np.float32)
        candidates = list(_LLAMA3_CANDIDATES)
        if md.get(HF_SCALING_KEY):
            candidates.insert(0, json.loads(md[HF_SCALING_KEY]))
        found = [c for c in candidates if np.array_equal(llama3_rope_freqs(n_rot, base, c), factors)]
        if not found:
            raise UsageError("the GGUF's rope_freqs tensor matches none of Llama 3.1/3.2's llama3 parameters; pass "
                             "the HF rope_scaling dict with --rope-scaling (it is checked against rope_freqs)")
        scaling = {**found[0], "rope_type": "llama3"}
    elif "rope_factors_long.weight" in reader:
        original = int(md.get(f"{a}.rope.scaling.original_context_length") or config["max_position_embeddings"])
        scaling = {"rope_type": "longrope", "long_factor": np.asarray(reader.get("rope_factors_long.weight")).tolist(),
                   "short_factor": np.asarray(reader.get("rope_factors_short.weight")).tolist(),
                   "original_max_position_embeddings": original,
                   "factor": config["max_position_embeddings"] / original}
        attn = md.get(f"{a}.rope.scaling.attn_factor")
        if attn is not None:
            scaling["attention_factor"] = float(attn)
        # Phi3Config has its own top-level original_max_position_embeddings (default 4096) that the rotary
        # module reads first: leaving it out would switch to the long factors at 4096, not at `original`
        config["original_max_position_embeddings"] = original
    elif stype not in ("none", None):
        raise UsageError(f"GGUF rope.scaling.type {stype!r} has no HF form in posenc")
    if scaling and scaling.get("rope_type") == "llama3" and "rope_freqs.weight" in reader:
        if not np.array_equal(llama3_rope_freqs(n_rot, base, scaling),
                              np.asarray(reader.get("rope_freqs.weight"), np.float32)):
            raise UsageError("--rope-scaling does not reproduce the GGUF's rope_freqs tensor")
    config["rope_scaling"] = scaling
    return config


def gguf_to_hf(family_name, reader, options):
    """The Preset porting a GGUF of `family_name`'s llama.cpp architecture back to HF names."""
    from .presets import Preset

    what = f"gguf-to-hf-{family_name}"
    arch = reader.metadata.get("general.architecture") if hasattr(reader, "metadata") else None
    if arch is None or not reader.path.endswith(".gguf"):
        raise UsageError(f"{what} reads a .gguf SOURCE")
    family = _FAMILY_OF_ARCH.get(arch)
    if family is None or family.name != family_name:
        raise UsageError(f"{what}: the GGUF's general.architecture is {arch!r}; use "
                         + (f"gguf-to-hf-{family.name}" if family else "a family posenc converts: "
                            + ", ".join(f.arch for f in FAMILIES.values())))
    config = _hf_config_from_gguf(family, reader, options)
    heads, kv_heads, head_dim = config["num_attention_heads"], config["num_key_value_heads"], \
        config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    layers = config["num_hidden_layers"]
    rename = [(gg, hf) for hf, gg in family.global_names if gg in reader]
    layer_glob = family.hf_layer.format(i="*")
    rename += [("blk.*." + gg, layer_glob + hf) for hf, gg in family.layer_names
               if any(f"blk.{i}.{gg}" in reader for i in range(layers))]
    drop = _present(reader, ["rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"])
    if family.qkv == "separate":
        require = [f"blk.{i}.attn_{p}.weight" for i in range(layers) for p in "qk"]
    else:
        require = [f"blk.{i}.attn_qkv.weight" for i in range(layers)]
    ops = []
    if family.norm_shift:
        ops.append(("*norm.weight", Op("shift", (-family.norm_shift,))))
    if family.qkv == "heads":
        ops.append(("blk.*.attn_qkv.*", Op("qkv-heads", (heads,))))
    rules = Rules(rename=rename, drop=drop, require=require + ["token_embd.weight"], strict=True, ops=ops)
    n_rot = int(reader.metadata.get(f"{arch}.rope.dimension_count", head_dim))
    if family.permute:
        rules.rope_q, rules.rope_k = ["blk.*.attn_q.weight"], ["blk.*.attn_k.weight"]
        rules.heads, rules.kv_heads, rules.rope_from, rules.rope_to = heads, kv_heads, "interleaved", "half"
        rules.rotary_dim = n_rot if n_rot != head_dim else None
        for p, count in (("q", heads), ("k", kv_heads)):
            ops.append((f"blk.*.attn_{p}.bias", Op("rope", (count, "interleaved", "half", rules.rotary_dim))))
    schedule = _schedule(config, what)
    entry = next(e for e in schedule if e is not None)
    sidecar = {"rope": {"layout": "half", "base": entry["base"], "rotary_dim": entry["rotary_dim"],
                        "scaling": entry["scaling"], "num_heads": heads, "num_kv_heads": kv_heads,
                        "source_layout": ROPE_LAYOUT_OF_TYPE[rope_type(arch)]},
               "hf_config": config,
               "gguf": {"architecture": arch, "rope_type": rope_type(arch),
                        "tokenizer": "not converted (tokenizer.ggml.* stays in the GGUF; HF tokenizer files are not "
                                     "written)"}}
    extra = [gguf_logits_check(family, source=("gguf", None), target=("hf", config))]
    return Preset(rules, target_format="safetensors", sidecar=sidecar, extra=extra)


# ---------------------------------------------------------------- HF Llama -> Flax

def hf_llama_to_flax(reader, options):
    """HF LlamaForCausalLM -> the FlaxLlamaForCausalLM parameter tree (transformers 4.x
    `modeling_flax_llama.py`: `model/embed_tokens/embedding`, `model/layers/{i}/self_attn/q_proj/kernel`
    `[in, out]`, `.../input_layernorm/weight`, `model/norm/weight`, `lm_head/kernel`); both sides rotate
    halves, so q/k keep their rows and the RoPE logits check runs on the transposed kernels."""
    from .presets import Preset

    config = hf_config_beside(reader, "hf-llama-to-flax")
    heads, kv_heads, head_dim = _heads(config)
    schedule = _schedule(config, "hf-llama-to-flax")
    entry = next(e for e in schedule if e is not None)
    rename = [("model.embed_tokens.weight", "model/embed_tokens/embedding"), ("model.norm.weight", "model/norm/weight"),
              ("lm_head.weight", "lm_head/kernel")]
    layer = [(s, s.replace(".", "/").replace("/weight", "/kernel").replace("/bias", "/bias"))
             for s, _ in _LLAMA_LAYER if "layernorm" not in s]
    layer += [("input_layernorm.weight", "input_layernorm/weight"),
              ("post_attention_layernorm.weight", "post_attention_layernorm/weight")]
    rename += [(f"model.layers.*.{s}", f"model/layers/*/{t}") for s, t in layer]
    rename = [(s, t) for s, t in rename if any(glob_like(n, s) for n in reader.names())]
    transpose = [s for s, t in rename if t.endswith("/kernel")]
    rules = Rules(rename=rename, transpose=transpose, strict=True, rope_q=["model.layers.*.self_attn.q_proj.weight"],
                  rope_k=["model.layers.*.self_attn.k_proj.weight"], heads=heads, kv_heads=kv_heads, rope_from="half",
                  rope_to="half", require=["model.embed_tokens.weight"],
                  drop=[n for n in reader.names() if n.endswith("rotary_emb.inv_freq")])
    rope = dict(base=entry["base"], scaling=entry["scaling"], rotary_dim=entry["rotary_dim"], source="half",
                target="half")
    sidecar = {"rope": {"layout": "half", "base": entry["base"], "rotary_dim": entry["rotary_dim"],
                        "scaling": entry["scaling"], "num_heads": heads, "num_kv_heads": kv_heads,
                        "source_layout": "half"}, "hf_config": config}
    return Preset(rules, target_format="msgpack", rope=rope, sidecar=sidecar)


def glob_like(name, pattern):
    from .mapping import glob_match

    return glob_match(name, pattern)


# ---------------------------------------------------------------- verification

def probe_positions(inv_freq, context, *, bands=6, boundaries=()):
    """Positions where each frequency band is informative, up to `context - 1`.

    Start 0..3, then for `bands` pairs spread from the fastest to the slowest frequency, a quarter, a
    half and a whole wavelength `2 pi / w_j` (where a wrong layout or a wrong frequency moves the
    logits by O(1)), the given `boundaries` (scaling thresholds: the original context) and the last
    position the settings allow."""
    inv_freq = np.asarray(inv_freq, np.float64)
    positions = {0, 1, 2, 3, int(context) - 1, *[int(b) for b in boundaries if 0 <= b < context]}
    for j in np.unique(np.linspace(0, len(inv_freq) - 1, min(bands, len(inv_freq))).round().astype(int)):
        if inv_freq[j] <= 0:
            continue
        wavelength = 2 * math.pi / inv_freq[j]
        for fraction in (0.25, 0.5, 1.0):
            p = int(round(wavelength * fraction))
            if 0 < p < context:
                positions.add(p)
    return np.array(sorted(positions), dtype=np.int64)


class _Side:
    """q/k projections and the rope of one checkpoint, read in its own convention."""

    def __init__(self, family, convention, reader, config):
        self.family, self.convention, self.reader = family, convention, reader
        if convention == "gguf":
            md = reader.metadata
            arch = md.get("general.architecture")
            self.arch = arch
            a = lambda key, default=None: md.get(f"{arch}.{key}", default)  # noqa: E731
            self.heads = int(a("attention.head_count"))
            self.kv_heads = int(a("attention.head_count_kv", self.heads))
            hidden = int(a("embedding_length"))
            self.head_dim = int(a("attention.key_length", hidden // self.heads))
            self.layers = int(a("block_count"))
            self.context = int(a("context_length"))
            self.layout = ROPE_LAYOUT_OF_TYPE.get(rope_type(arch))
            if self.layout is None:
                raise ValueError(f"GGUF architecture {arch!r} has llama.cpp rope type {rope_type(arch)}")
            self.n_rot = int(a("rope.dimension_count", self.head_dim))
            self.base = float(a("rope.freq_base", 10000.0))
            self.md = md
        else:
            self.heads, self.kv_heads, self.head_dim = _heads(config)
            self.layers = int(config["num_hidden_layers"])
            self.context = int(config["max_position_embeddings"])
            self.schedule = _schedule(config, "verification")

    # the q and k rows (and biases) of layer i, float64, rows in this side's own order
    def qk(self, i, x):
        r, f = self.reader, self.family
        q_rows, k_rows = self.heads * self.head_dim, self.kv_heads * self.head_dim

        def proj(name_w, name_b, rows=None):
            w = np.asarray(r.get(name_w), np.float64)
            b = np.asarray(r.get(name_b), np.float64) if name_b in r else None
            if rows is not None:
                w, b = w[rows], (b[rows] if b is not None else None)
            out = x @ w.T
            return out + b if b is not None else out

        if self.convention == "gguf":
            p = f"blk.{i}."
            if f.qkv == "separate":
                return proj(p + "attn_q.weight", p + "attn_q.bias"), proj(p + "attn_k.weight", p + "attn_k.bias")
            return (proj(p + "attn_qkv.weight", p + "attn_qkv.bias", slice(0, q_rows)),
                    proj(p + "attn_qkv.weight", p + "attn_qkv.bias", slice(q_rows, q_rows + k_rows)))
        p = f.hf_layer.format(i=i)
        if f.qkv == "separate":
            return (proj(p + "self_attn.q_proj.weight", p + "self_attn.q_proj.bias"),
                    proj(p + "self_attn.k_proj.weight", p + "self_attn.k_proj.bias"))
        if f.qkv == "blocks":
            return (proj(p + "self_attn.qkv_proj.weight", p + "self_attn.qkv_proj.bias", slice(0, q_rows)),
                    proj(p + "self_attn.qkv_proj.weight", p + "self_attn.qkv_proj.bias",
                         slice(q_rows, q_rows + k_rows)))
        rows = np.arange(3 * q_rows).reshape(self.heads, 3, self.head_dim)  # HF GPT-NeoX: per head [q; k; v]
        name = p + "attention.query_key_value."
        return (proj(name + "weight", name + "bias", rows[:, 0].ravel()),
                proj(name + "weight", name + "bias", rows[:, 1].ravel()))

    def rope(self, i, seq_len):
        """(layout, rotary_dim, inv_freq, attention_scale, float32_factors) of layer i at `seq_len`."""
        if self.convention == "hf":
            from posenc_np.rope import rope_frequencies

            entry = self.schedule[i]
            if entry is None:
                return None
            inv, scale = rope_frequencies(entry["rotary_dim"], base=entry["base"], scaling=entry["scaling"],
                                          seq_len=seq_len)
            return entry["layout"], entry["rotary_dim"], inv, scale, False
        md, a, r = self.md, self.arch, self.reader
        inv = self.base ** (-np.arange(0, self.n_rot, 2, dtype=np.float64) / self.n_rot)
        f32 = False
        if md.get(f"{a}.rope.scaling.type", "none") == "linear":
            inv = inv / float(md[f"{a}.rope.scaling.factor"])
        if "rope_freqs.weight" in r:  # llama.cpp divides theta by the per-pair factors (ggml_rope_ext freq_factors)
            inv, f32 = inv / np.asarray(r.get("rope_freqs.weight"), np.float64), True
        if "rope_factors_long.weight" in r:
            original = int(md.get(f"{a}.rope.scaling.original_context_length") or self.context)
            which = "rope_factors_long.weight" if seq_len > original else "rope_factors_short.weight"
            inv, f32 = inv / np.asarray(r.get(which), np.float64), True
        scale = float(md.get(f"{a}.rope.scaling.attn_factor", 1.0))
        return self.layout, self.n_rot, inv, scale, f32

    def boundaries(self):
        if self.convention == "gguf":
            original = self.md.get(f"{self.arch}.rope.scaling.original_context_length")
            return [original - 1, original] if original else []
        entry = next((e for e in self.schedule if e is not None), None)
        original = ((entry or {}).get("scaling") or {}).get("original_max_position_embeddings")
        return [original - 1, original] if original else []


def _rotate(x, positions, layout, rotary_dim, inv_freq, scale):
    """x `[heads, seq, head_dim]` rotated in float64 with explicit frequencies (GGUF factors included)."""
    angles = positions[:, None].astype(np.float64) * inv_freq[None, :]
    cos, sin = np.cos(angles) * scale, np.sin(angles) * scale
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if layout == "half":
        a, b = rot[..., : rotary_dim // 2], rot[..., rotary_dim // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos, rest], -1)
    a, b = rot[..., 0::2], rot[..., 1::2]
    out = np.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(rot.shape)
    return np.concatenate([out, rest], -1)


def gguf_logits_check(family, *, source, target, seed=11):
    """Extra verification: per layer, logits of the source in its convention vs the written target in
    its own (GGUF metadata + tensors read back through gguf.GGUFReader), at `probe_positions`."""

    def run(src_reader, tgt_reader):
        from posenc_np.testing import compare, tolerance

        sides = []
        for (convention, config), reader in ((source, src_reader), (target, tgt_reader)):
            sides.append(_Side(family, convention, reader, config))
        src, tgt = sides
        hidden_name = "token_embd.weight" if src.convention == "gguf" else family.global_names[0][0]
        hidden = src_reader.shape(hidden_name)[1]
        rng = np.random.default_rng(seed)
        context = min(src.context, tgt.context)
        checks = []
        for i in range(src.layers):
            first = src.rope(i, 1)
            if first is None:
                continue
            boundaries = src.boundaries() + tgt.boundaries()
            regimes = [probe_positions(first[2], context, boundaries=boundaries)]
            if boundaries:  # seq-dependent factors (longrope): a run that stays below the original context too
                short = [p for p in regimes[0] if p < min(boundaries)]
                regimes.insert(0, np.array(short))
            for positions in regimes:
                x = rng.standard_normal((len(positions), hidden))
                logits = []
                used_f32 = False
                for side in (src, tgt):
                    layout, rotary_dim, inv, scale, f32 = side.rope(i, int(positions.max()) + 1)
                    used_f32 |= f32
                    q, k = side.qk(i, x)
                    q = q.reshape(len(positions), side.heads, side.head_dim).transpose(1, 0, 2)
                    k = k.reshape(len(positions), side.kv_heads, side.head_dim).transpose(1, 0, 2)
                    q, k = (_rotate(t, positions, layout, rotary_dim, inv, scale) for t in (q, k))
                    k = np.repeat(k, side.heads // side.kv_heads, axis=0)
                    logits.append(q @ k.transpose(0, 2, 1))
                desired, actual = logits
                scale = float(np.abs(desired).max())
                max_angle = float(positions.max()) * float(np.max(src.rope(i, int(positions.max()) + 1)[2]))
                tol = (tolerance("float32", max_angle=max_angle, scale=scale) if used_f32
                       else tolerance("float64", scale=scale))
                result = compare(actual, desired, tol)
                checks.append(Check("gguf-logits", f"layer {i} ({src.convention} -> {tgt.convention})",
                                    result.max_abs_err, result.atol, result.tol_why, result.passed,
                                    f"{len(positions)} probe positions per frequency band up to {positions.max()}"
                                    + (" (float32 rope factors of the GGUF)" if used_f32 else "")))
        if not checks:
            checks.append(Check("gguf-logits", "no rotary layer", float("inf"), 0.0, "", False, "nothing compared"))
        return checks

    run.__name__ = "gguf_logits_check"
    return run


def _preset(kind, family):
    return lambda reader, options: (hf_to_gguf if kind == "to" else gguf_to_hf)(family, reader, options)


#: preset name -> builder
FAMILY_PRESETS = {"hf-llama-to-gguf": _preset("to", "llama"), "gguf-to-hf-llama": _preset("from", "llama"),
                  "hf-mistral-to-gguf": _preset("to", "llama"),
                  "hf-qwen2-to-gguf": _preset("to", "qwen2"), "gguf-to-hf-qwen2": _preset("from", "qwen2"),
                  "hf-gemma-to-gguf": _preset("to", "gemma"), "gguf-to-hf-gemma": _preset("from", "gemma"),
                  "hf-phi3-to-gguf": _preset("to", "phi3"), "gguf-to-hf-phi3": _preset("from", "phi3"),
                  "hf-gpt-neox-to-gguf": _preset("to", "gpt-neox"), "gguf-to-hf-gpt-neox": _preset("from", "gpt-neox"),
                  "hf-llama-to-flax": hf_llama_to_flax}
