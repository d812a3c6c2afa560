"""Presets for today's decoder families: Hugging Face <-> llama.cpp GGUF.

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

Verification: `gguf_check.gguf_logits_check`, per layer the attention logits of each side in its own convention.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np

from ...errors import UsageError
from ...formats.gguf import ROPE_LAYOUT_OF_TYPE, rope_type
from ...formats.gguf_quant import FILE_TYPE, QUANTIZED, tensor_type
from .. import hf_config
from ..mapping import Op, Rules, build_plan
from ..preset import Preset
from .gguf_check import gguf_logits_check, llamacpp_swa_layers
from .gguf_runtime import Rounding, llamacpp_available, llamacpp_check
from .gguf_tokenizer import tokenizer_kv

__all__ = ["FAMILIES", "FAMILY_OF_ARCH", "Family", "LLAMA_LAYER", "hf_to_gguf", "gguf_to_hf", "llama3_rope_freqs",
           "HF_SCALING_KEY", "PRESETS"]

LLAMA_LAYER = (("input_layernorm.weight", "attn_norm.weight"), ("post_attention_layernorm.weight", "ffn_norm.weight"),
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
_GEMMA2_LAYER = (("input_layernorm.weight", "attn_norm.weight"),
                 ("post_attention_layernorm.weight", "post_attention_norm.weight"),
                 ("pre_feedforward_layernorm.weight", "ffn_norm.weight"),
                 ("post_feedforward_layernorm.weight", "post_ffw_norm.weight"),
                 *(pair for pair in LLAMA_LAYER if "proj.weight" in pair[0]))
_GEMMA3_LAYER = (*_GEMMA2_LAYER, ("self_attn.q_norm.weight", "attn_q_norm.weight"),
                 ("self_attn.k_norm.weight", "attn_k_norm.weight"))
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
    swa_pattern: int = 0      # sliding-window layers: llama.cpp's pattern when the file names none (0: none)

    @property
    def permute(self) -> bool:
        """q/k rows re-permuted: HF rotates halves, this arch's llama.cpp rope type pairs neighbours."""
        return rope_type(self.arch) == "norm"


FAMILIES = {
    "llama": Family("llama", "llama", ("llama", "mistral"), "LlamaForCausalLM", "model.layers.{i}.", _LLAMA_GLOBAL,
                    LLAMA_LAYER),
    "qwen2": Family("qwen2", "qwen2", ("qwen2",), "Qwen2ForCausalLM", "model.layers.{i}.", _LLAMA_GLOBAL, LLAMA_LAYER),
    "gemma": Family("gemma", "gemma", ("gemma",), "GemmaForCausalLM", "model.layers.{i}.", _LLAMA_GLOBAL, LLAMA_LAYER,
                    norm_shift=1.0),
    "gemma2": Family("gemma2", "gemma2", ("gemma2",), "Gemma2ForCausalLM", "model.layers.{i}.", _LLAMA_GLOBAL,
                     _GEMMA2_LAYER, norm_shift=1.0, swa_pattern=2),
    "gemma3": Family("gemma3", "gemma3", ("gemma3_text",), "Gemma3ForCausalLM", "model.layers.{i}.", _LLAMA_GLOBAL,
                     _GEMMA3_LAYER, norm_shift=1.0, swa_pattern=6),
    "phi3": Family("phi3", "phi3", ("phi3",), "Phi3ForCausalLM", "model.layers.{i}.", _LLAMA_GLOBAL, _PHI3_LAYER,
                   qkv="blocks"),
    "gpt-neox": Family("gpt-neox", "gptneox", ("gpt_neox",), "GPTNeoXForCausalLM", "gpt_neox.layers.{i}.",
                       _NEOX_GLOBAL, _NEOX_LAYER, qkv="heads", eps=("layer_norm_eps", "attention.layer_norm_epsilon")),
}
FAMILY_OF_ARCH = {f.arch: f for f in FAMILIES.values()}


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


def _swa_rope_metadata(family, config, schedule, prefix, layers):
    """Gemma 2/3: the rope and sliding-window keys llama.cpp's loader reads (src/models/gemma2.cpp,
    gemma3.cpp `load_arch_hparams`, llama-cpp-python 0.3.36's llama.cpp), or a UsageError naming what it
    would ignore. Full layers rotate with `rope.freq_base` and `rope.scaling.*` (linear only); sliding layers
    with `rope.freq_base_swa` and, Gemma 2, the full layers' scale, Gemma 3, no scaling (`freq_scale_swa` stays
    1: no key sets it). Which layers slide is `attention.sliding_window_pattern`, written as one bool per layer
    (the loader's `get_arr` reads it before falling back to its pattern of `swa_pattern`)."""
    types = config.get("layer_types") or [None] * layers
    sliding = [t == "sliding_attention" for t in types]
    full = [e for e, s in zip(schedule, sliding, strict=True) if not s]
    slide = [e for e, s in zip(schedule, sliding, strict=True) if s]
    what = f"hf-{family.name}-to-gguf"
    for group, name in ((full, "full-attention"), (slide, "sliding-attention")):
        if any(e is None for e in group):
            raise UsageError(f"{what}: a {name} layer without RoPE; llama.cpp's {family.arch} rotates every layer")
        if any(e != group[0] for e in group):
            raise UsageError(f"{what}: the {name} layers' RoPE settings differ; llama.cpp's {family.arch} has one "
                             "setting per kind of layer")
    entry = full[0] if full else slide[0]  # without full layers rope.freq_base is read by no layer
    kv, generated, _ = _rope_metadata(family, config, [entry], prefix)
    if slide:
        local = slide[0]
        if local["rotary_dim"] != entry["rotary_dim"]:
            raise UsageError(f"{what}: sliding layers rotate {local['rotary_dim']} channels, full layers "
                             f"{entry['rotary_dim']}; llama.cpp's {family.arch} reads one rope.dimension_count")
        scale_local = local["scaling"] or {}
        if family.name == "gemma3" and scale_local.get("rope_type", "default") != "default":
            raise UsageError(f"{what}: sliding layers use rope_type {scale_local['rope_type']!r}; llama.cpp's gemma3 "
                             "rotates sliding layers unscaled (its freq_scale_swa is 1: no GGUF key sets it)")
        if family.name == "gemma2" and local["scaling"] != entry["scaling"]:
            raise UsageError(f"{what}: sliding and full layers are scaled differently; llama.cpp's gemma2 gives "
                             "sliding layers the full layers' scale")
        if not config.get("sliding_window"):
            raise UsageError(f"{what}: layer_types has sliding layers but config.json has no sliding_window")
        kv += [(f"{prefix}.rope.freq_base_swa", local["base"], "float32"),
               (f"{prefix}.attention.sliding_window", int(config["sliding_window"]), "uint32"),
               (f"{prefix}.attention.sliding_window_pattern", sliding, "array")]
    elif family.name == "gemma2":
        raise UsageError(f"{what}: no sliding layer; llama.cpp's gemma2 always slides (window 4096 when the file "
                         "names none) on the layers of its pattern")
    return kv, generated, entry


def _refuse_sliding_window(family, config, what):
    """A sliding window narrower than the context is refused for the architectures whose llama.cpp loader has
    none: llama.cpp would attend to every earlier token (src/models/llama.cpp, qwen2.cpp, gemma.cpp read no
    window; phi3.cpp reads it and turns it off, "Phi SWA is currently disabled")."""
    window = config.get("sliding_window")
    if family.name == "qwen2" and not (config.get("use_sliding_window") or
                                       "sliding_attention" in (config.get("layer_types") or ())):
        return  # Qwen2's window applies only with use_sliding_window
    if window and int(window) < int(config["max_position_embeddings"]):
        runs = "turns it off" if family.name == "phi3" else "reads no window for this architecture"
        raise UsageError(f"{what}: sliding_window {window} is narrower than the context "
                         f"({config['max_position_embeddings']}); llama.cpp's {family.arch} attends to every earlier "
                         f"token (its loader {runs}), so prompts longer than {window} tokens would give other logits")


def _gemma_kv(family, config, prefix, layers, heads, head_dim):
    """Gemma 2/3 attention keys llama.cpp reads, or a UsageError for what it would compute otherwise: the
    attention scale is fixed by the loader (`1 / sqrt(head_dim)`, for 46/62-layer models `1 / sqrt(hidden /
    heads)`), Gemma 2 always soft-caps attention and final logits (defaults 50 and 30 when the file names
    none), Gemma 3 never soft-caps attention."""
    what = f"hf-{family.name}-to-gguf"
    big = layers == (46 if family.name == "gemma2" else 62)
    llama_scalar = config["hidden_size"] // heads if big else head_dim
    scalar = config.get("query_pre_attn_scalar")
    if scalar is not None and float(scalar) != float(llama_scalar):
        raise UsageError(f"{what}: query_pre_attn_scalar {scalar}, but llama.cpp's {family.arch} scales queries by "
                         f"1/sqrt({llama_scalar}) ({'hidden / heads' if big else 'head_dim'} for {layers} layers)")
    kv = []
    attn_cap, final_cap = config.get("attn_logit_softcapping"), config.get("final_logit_softcapping")
    if family.name == "gemma2":
        if attn_cap is None or final_cap is None:
            raise UsageError(f"{what}: attn_logit_softcapping {attn_cap}, final_logit_softcapping {final_cap}; "
                             "llama.cpp's gemma2 soft-caps both (50 and 30 when the file names none)")
        kv.append((f"{prefix}.attn_logit_softcapping", float(attn_cap), "float32"))
    elif attn_cap is not None:
        raise UsageError(f"{what}: attn_logit_softcapping {attn_cap}; llama.cpp's gemma3 does not soft-cap attention")
    if final_cap is not None:
        kv.append((f"{prefix}.final_logit_softcapping", float(final_cap), "float32"))
    return kv


def _present(reader, names):
    return [n for n in names if n in reader]


def hf_to_gguf(family_name, reader, options):
    """The Preset porting an HF checkpoint of `family_name` to GGUF."""
    family = FAMILIES[family_name]
    what = f"hf-{family_name}-to-gguf"
    config = hf_config.config_beside(reader, what)
    model_type = config.get("model_type")
    if model_type not in family.model_types:
        raise UsageError(f"{what}: config.json says model_type {model_type!r}; this preset converts "
                         f"{', '.join(family.model_types)}")
    heads, kv_heads, head_dim = hf_config.heads(config)
    layers = int(config["num_hidden_layers"])
    schedule = hf_config.schedule(config, what)
    prefix = family.arch
    if family.swa_pattern:
        rope_kv, generated, entry = _swa_rope_metadata(family, config, schedule, prefix, layers)
        rope_kv += _gemma_kv(family, config, prefix, layers, heads, head_dim)
        if family.name == "gemma2" and "lm_head.weight" in reader:
            raise UsageError("hf-gemma2-to-gguf: lm_head.weight is not the embedding (tie_word_embeddings false); "
                             "llama.cpp's gemma2 computes the output with token_embd")
    else:
        _refuse_sliding_window(family, config, what)
        rope_kv, generated, entry = _rope_metadata(family, config, schedule, prefix)
    rules = _hf_to_gguf_rules(family, reader, layers, (heads, kv_heads, head_dim), entry, generated)
    vocab = reader.shape(family.global_names[0][0])[0]
    kv = _hf_to_gguf_kv(family, config, options, layers, (heads, kv_heads, head_dim), vocab) + rope_kv
    token_kv, token_note = tokenizer_kv(os.path.dirname(os.path.abspath(reader.path)), vocab)
    kv += token_kv
    sidecar = {"rope": {"layout": ROPE_LAYOUT_OF_TYPE[rope_type(family.arch)], "base": entry["base"],
                        "rotary_dim": entry["rotary_dim"], "scaling": entry["scaling"], "num_heads": heads,
                        "num_kv_heads": kv_heads, "source_layout": "half"},
               "gguf": {"architecture": family.arch, "rope_type": rope_type(family.arch), "tokenizer": token_note}}
    types, rounded, hf_rounding = _outtype_ops(reader, rules, options.outtype)
    rounding = Rounding(rules, rounded, hf_rounding)
    extra = [gguf_logits_check(family, source=("hf", config), target=("gguf", None), hf_rounding=hf_rounding)]
    if hf_rounding:
        extra.append(rounding.rounding_check)
    if options.outtype:
        sidecar["gguf"].update(outtype=options.outtype, types=types)
    if family.swa_pattern:
        sidecar["rope"]["layers"] = hf_config.sidecar_layers(schedule, hf_config.layer_types(config, schedule), "half")
    if not llamacpp_available():
        sidecar["gguf"]["llama.cpp"] = "not run: llama-cpp-python is not installed"
    elif dict((k, v) for k, v, _ in kv).get("tokenizer.ggml.model") == "none":
        sidecar["gguf"]["llama.cpp"] = "not run: no vocabulary (llama.cpp gives no logits without one)"
    else:
        extra.append(llamacpp_check(family, config, rounding))
        sidecar["gguf"]["llama.cpp"] = "logits checked (llamacpp-logits)"
    block_types = {name: kind for name, kind in types.items() if kind in QUANTIZED}
    return Preset(rules, target_format="gguf", sidecar=sidecar, extra=extra,
                  metadata={"gguf": {"arch": family.arch, "kv": kv, "types": block_types}})


def _hf_to_gguf_rules(family, reader, layers, head_counts, entry, generated) -> Rules:
    """HF names to llama.cpp's, q/k (and their biases) re-permuted for a NORM architecture, 1-D tensors cast
    to F32, Gemma's norm shift, GPT-NeoX's per-head fused rows to blocks."""
    heads, kv_heads, head_dim = head_counts
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
    return rules


def _hf_to_gguf_kv(family, config, options, layers, head_counts, vocab) -> list:
    """The model's GGUF key/values besides the rope and tokenizer ones (TextModel.set_gguf_parameters)."""
    heads, kv_heads, head_dim = head_counts
    prefix = family.arch
    eps_hf, eps_key = family.eps
    kv = [("general.name", config.get("_name_or_path") or f"posenc port of {family.hf_class}", "string"),
          ("general.file_type", FILE_TYPE.get(options.outtype, 0), "uint32"),
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
    if family.name == "gpt-neox":  # required by llama.cpp's gptneox loader (GPTNeoXModel.set_gguf_parameters)
        kv.append((f"{prefix}.use_parallel_residual", bool(config.get("use_parallel_residual", True)), "bool"))
    return kv


def _outtype_ops(reader, rules, outtype):
    """`--outtype`: per planned tensor, llama.cpp's converter's type (`gguf_quant.tensor_type`), added to
    `rules.ops` as the last conversion of its source tensor (a block type: `quantize`; F16/BF16/F32: a cast).
    Returns `(types, rounded, hf_rounding)`: GGUF name -> type of every tensor, GGUF name -> type of those
    this rounds (a quantize or a cast to F16/BF16), and the same by SOURCE name (for the checks that
    recompute from SOURCE)."""
    if outtype is None:
        return {}, {}, {}
    dtypes = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
    types, rounded, hf_rounding = {}, {}, {}
    for entry in build_plan(reader, rules):  # the plan before the rounding: names, shapes and dtypes only
        kind = tensor_type(entry.target, entry.shape, outtype)
        types[entry.target] = kind
        if entry.source is None:
            continue  # generated 1-D factors (rope_freqs...): F32 as planned
        if kind in QUANTIZED:
            rules.ops.append((entry.source, Op("quantize", (kind,))))
        elif dtypes[kind] != entry.dtype:
            rules.ops.append((entry.source, Op("cast", (dtypes[kind],))))
        if kind in QUANTIZED or (kind != "F32" and dtypes[kind] != entry.dtype):
            rounded[entry.target], hf_rounding[entry.source] = kind, kind
    return types, rounded, hf_rounding


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
        config.update(rotary_pct=n_rot / head_dim,
                      use_parallel_residual=bool(md.get(f"{a}.use_parallel_residual", True)))
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
    if family.swa_pattern:
        _gemma_config_from_gguf(family, md, config)
    return config


def _gemma_config_from_gguf(family, md, config):
    """Gemma 2/3's HF settings from what llama.cpp reads (the inverse of `_swa_rope_metadata` / `_gemma_kv`):
    layer_types from llama.cpp's sliding layers (`llamacpp_swa_layers`), the window, two bases, the soft-caps
    and the attention scale llama.cpp fixes."""
    a, layers = family.arch, config["num_hidden_layers"]
    sliding = llamacpp_swa_layers(md, a, layers)
    config["layer_types"] = ["sliding_attention" if s else "full_attention" for s in sliding]
    window = md.get(f"{a}.attention.sliding_window")
    config["sliding_window"] = int(window) if window else None
    big = layers == (46 if a == "gemma2" else 62)
    config["query_pre_attn_scalar"] = config["hidden_size"] // hf_config.heads(config)[0] if big else config["head_dim"]
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        value = md.get(f"{a}.{key}")
        config[key] = float(value) if value is not None else None
    if a == "gemma3":
        config["model_type"] = "gemma3_text"
        full = {"rope_type": "default", "rope_theta": config.pop("rope_theta")}
        if config.pop("rope_scaling"):
            full = {**full, "rope_type": "linear", "factor": float(md[f"{a}.rope.scaling.factor"])}
        config["rope_parameters"] = {"full_attention": full, "sliding_attention": {
            "rope_type": "default", "rope_theta": float(md.get(f"{a}.rope.freq_base_swa", 10000.0))}}
    elif md.get(f"{a}.rope.freq_base_swa", config["rope_theta"]) != config["rope_theta"]:
        raise UsageError("gguf-to-hf-gemma2: the GGUF's sliding layers have their own base (rope.freq_base_swa); "
                         "transformers' Gemma2 has one rope_theta")


def gguf_to_hf(family_name, reader, options):
    """The Preset porting a GGUF of `family_name`'s llama.cpp architecture back to HF names."""
    what = f"gguf-to-hf-{family_name}"
    arch = reader.metadata.get("general.architecture") if hasattr(reader, "metadata") else None
    if arch is None or not reader.path.endswith(".gguf"):
        raise UsageError(f"{what} reads a .gguf SOURCE")
    family = FAMILY_OF_ARCH.get(arch)
    if family is None or family.name != family_name:
        raise UsageError(f"{what}: the GGUF's general.architecture is {arch!r}; use "
                         + (f"gguf-to-hf-{family.name}" if family else "a family posenc converts: "
                            + ", ".join(f.arch for f in FAMILIES.values())))
    config = _hf_config_from_gguf(family, reader, options)
    heads, kv_heads, head_dim = hf_config.heads(config)
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
    quantized = {name: kind for name, kind in getattr(reader, "gguf_types", {}).items()
                 if kind not in ("F32", "F16", "BF16", "F64") and not kind.startswith("I") and name not in drop}
    ops += [(name, Op("dequantized", (kind,))) for name, kind in quantized.items()]
    rules = Rules(rename=rename, drop=drop, require=require + ["token_embd.weight"], strict=True, ops=ops)
    n_rot = int(reader.metadata.get(f"{arch}.rope.dimension_count", head_dim))
    if family.permute:
        rules.rope_q, rules.rope_k = ["blk.*.attn_q.weight"], ["blk.*.attn_k.weight"]
        rules.heads, rules.kv_heads, rules.rope_from, rules.rope_to = heads, kv_heads, "interleaved", "half"
        rules.rotary_dim = n_rot if n_rot != head_dim else None
        for p, count in (("q", heads), ("k", kv_heads)):
            ops.append((f"blk.*.attn_{p}.bias", Op("rope", (count, "interleaved", "half", rules.rotary_dim))))
    schedule = hf_config.schedule(config, what)
    entry = next(e for e in schedule if e is not None)
    sidecar = {"rope": {"layout": "half", "base": entry["base"], "rotary_dim": entry["rotary_dim"],
                        "scaling": entry["scaling"], "num_heads": heads, "num_kv_heads": kv_heads,
                        "source_layout": ROPE_LAYOUT_OF_TYPE[rope_type(arch)]},
               "hf_config": config,
               "gguf": {"architecture": arch, "rope_type": rope_type(arch),
                        "tokenizer": "not converted (tokenizer.ggml.* stays in the GGUF; HF tokenizer files are not "
                                     "written)"}}
    if quantized:  # the port holds the dequantized values, float32
        counts = {kind: sum(k == kind for k in quantized.values()) for kind in sorted(set(quantized.values()))}
        sidecar["gguf"]["dequantized"] = (f"{len(quantized)} quantized tensors ("
                                          + ", ".join(f"{k} x{n}" for k, n in counts.items())
                                          + ") written as float32, gguf.quants.dequantize's values")
    extra = [gguf_logits_check(family, source=("gguf", None), target=("hf", config))]
    return Preset(rules, target_format="safetensors", sidecar=sidecar, extra=extra)


def _preset(kind, family):
    return lambda reader, options: (hf_to_gguf if kind == "to" else gguf_to_hf)(family, reader, options)


#: preset name -> builder
PRESETS = {"hf-llama-to-gguf": _preset("to", "llama"), "gguf-to-hf-llama": _preset("from", "llama"),
           "hf-mistral-to-gguf": _preset("to", "llama"),
           "hf-qwen2-to-gguf": _preset("to", "qwen2"), "gguf-to-hf-qwen2": _preset("from", "qwen2"),
           "hf-gemma-to-gguf": _preset("to", "gemma"), "gguf-to-hf-gemma": _preset("from", "gemma"),
           "hf-gemma2-to-gguf": _preset("to", "gemma2"), "gguf-to-hf-gemma2": _preset("from", "gemma2"),
           "hf-gemma3-to-gguf": _preset("to", "gemma3"), "gguf-to-hf-gemma3": _preset("from", "gemma3"),
           "hf-phi3-to-gguf": _preset("to", "phi3"), "gguf-to-hf-phi3": _preset("from", "phi3"),
           "hf-gpt-neox-to-gguf": _preset("to", "gpt-neox"), "gguf-to-hf-gpt-neox": _preset("from", "gpt-neox")}
