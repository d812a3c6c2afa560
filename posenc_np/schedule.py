"""Per-layer position schedules: which RoPE (or none) each decoder layer of a Hugging Face model uses.

Current models do not use one positional encoding. Gemma 2/3/4 use another `rope_theta` (and scaling)
on sliding-window layers than on global ones, Gemma 4's global layers use the `proportional` type,
Llama 4, SmolLM3 and Mistral Large 4 leave some layers without RoPE (NoPE) through `no_rope_layers`
(whose name is inverted: `1` means the layer *uses* RoPE), Cohere2 rotates only its sliding layers,
and transformers 5.x keys `rope_parameters` by layer type (a `None` entry is a NoPE layer type).
A wrong layer type is invisible at short context, which is why these mistakes survive ports.

`rope_schedule_from_hf_config(config)` reads all of this into one list, one entry per decoder layer:
`None` for a layer without rotary positions, else the keyword arguments of `apply_rope` for that
layer (`base`, `rotary_dim`, `layout`, `scaling`). For DeepSeek-style multi-head latent attention
(MLA: the config has `qk_rope_head_dim`) an entry describes the rope slice: pass it to
`posenc_np.mla.apply_mla_rope`.

Configs are read as checkpoints ship them (docs/schedules.md has the table): transformers-4 keys as each
family's `configuration_*.py` converts them (`V4_LAYER_TYPE_KEYS`, `V4_LAYER_PATTERNS`), a multimodal parent's
`text_config` / `llm_config` / `language_config`, `attribute_map` aliases (`CONFIG_ATTRIBUTE_MAPS`), and the
keys newer families add (`layer_rope_theta`, 0 = NoPE; `rope_scaling_layers`; `llama_4_scaling_beta`, a query
scale: `posenc_np.llama_4_scaling`). Settings the modeling code fixes are read as that code does
(`MLA_ALWAYS_INTERLEAVED`; the default sections of `posenc_np.rope._MROPE_MODEL_DEFAULTS`).

What it reads (transformers 5.24, `modeling_rope_utils.py` `standardize_rope_params` and each family's
`modeling_*.py`):
    rope_parameters (v5; flat, or nested by layer type), rope_scaling + rope_theta (v4 flat keys),
    layer_types, sliding_window_pattern / _sliding_window_pattern (layer i is global iff
    (i + 1) % pattern == 0, Gemma 2/3), no_rope_layers (families in `NO_ROPE_LAYERS_USES_ROPE`),
    partial_rotary_factor / rotary_pct / rotary_dim, head_dim (else hidden_size // num_attention_heads),
    per_layer_config overrides of head_dim (Gemma 4 global layers), qk_rope_head_dim + rope_interleave
    (MLA), max_position_embeddings / original_max_position_embeddings (moved into the scaling dict
    like HF's `standardize_rope_params`).
The layout ("half" = HF `rotate_half`, or "interleaved") is not in any config: it is the family's
code, listed in `INTERLEAVED_FAMILIES`; every other family rotates halves. The test
tests/reference/test_schedule_sweep.py checks both against every model type of the installed transformers.

Multi-axis RoPE: for the Qwen-VL-style text models (model types starting with a key of
`posenc_np.rope._MROPE_MODEL_DEFAULTS`) every entry also holds `mrope_section` and `mrope_interleaved` (the
config's, else the family's modeling-code default, as `scaling_from_hf_config`); feed `apply_rope` the
`[3, ..., seq]` ids of `posenc_np.mrope_position_ids`.

Never a silent default: a position key it does not know, a layer type it cannot place, a missing
`rope_theta`, a `rope_type` outside `posenc_np.scaling.SCALING_TYPES`, or a family whose positions
are not a per-layer RoPE the spec implements (another family's `mrope_section`, per-layer theta lists...)
raise `ValueError` naming the key.
"""

from __future__ import annotations

import copy
from typing import Mapping

from .mrope import mrope_interleaved_axes
from .rope import (
    _MROPE_AXES_DEFAULTS,
    _MROPE_MODEL_DEFAULTS,
    _mrope_from_config,
    load_hf_config,
    resolve_rotary_dim,
    rope_plan,
)
from .scaling import SCALING_TYPES, resolve_scaling

__all__ = [
    "rope_schedule_from_hf_config",
    "indexer_rope_schedule_from_hf_config",
    "decoder_config",
    "INTERLEAVED_FAMILIES",
    "NO_ROPE_LAYERS_USES_ROPE",
    "ROPE_ONLY_ON_SLIDING",
    "ATTENTION_LAYER_TYPES",
    "NON_ATTENTION_LAYER_TYPES",
    "KNOWN_POSITION_KEYS",
    "REFUSED_FAMILIES",
]

# model_type -> where the family rotates interleaved pairs (2j, 2j+1) instead of HF's rotate_half.
INTERLEAVED_FAMILIES = {
    "llama4_text": "llama4/modeling_llama4.py apply_rotary_emb (torch.view_as_complex of pairs)",
    "cohere": "cohere/modeling_cohere.py rotate_half on (x[..., ::2], x[..., 1::2]); repeat_interleave(freqs, 2)",
    "cohere2": "cohere2/modeling_cohere2.py (same as cohere)",
    "cohere2_moe": "cohere2_moe/modeling_cohere2_moe.py (same as cohere)",
    "gptj": "gptj/modeling_gptj.py rotate_every_two",
    "codegen": "codegen/modeling_codegen.py rotate_every_two",
    "glm": "glm/modeling_glm.py apply_rotary_pos_emb: cos[..., :r/2].repeat_interleave(2), interleaved rotate_half",
    "glm4": "glm4/modeling_glm4.py (same as glm)",
    "glm_ocr_text": "glm_ocr/modeling_glm_ocr.py (same as glm)",
    "ernie4_5": "ernie4_5/modeling_ernie4_5.py apply_rotary_pos_emb ('glm rope style')",
    "ernie4_5_moe": "ernie4_5_moe/modeling_ernie4_5_moe.py (same as ernie4_5)",
    "ernie4_5_vl_moe_text": "ernie4_5_vl_moe/modeling_ernie4_5_vl_moe.py (same as ernie4_5)",
    "helium": "helium/modeling_helium.py apply_rotary_pos_emb (glm style)",
    "glm4v_text": "glm4v/modeling_glm4v.py rotate_half_llm, recomposition_frequencies repeat_interleave(2)",
    "glm4v_moe_text": "glm4v_moe/modeling_glm4v_moe.py (same as glm4v)",
    "glm_image_text": "glm_image/modeling_glm_image.py (same as glm4v)",
    "hy_v4_vl_text": "hy_v4_vl/modeling_hy_v4_vl.py apply_rotary_pos_emb ('glm rope style')",
    "moonshine": "moonshine/modeling_moonshine.py apply_rotary_pos_emb (glm style)",
    "moonshine_streaming": "moonshine_streaming/modeling_moonshine_streaming.py apply_rotary_pos_emb (glm style)",
    "pe_audio_encoder": "pe_audio/modeling_pe_audio.py apply_rotary_pos_emb (pairs x.reshape(..., -1, 1, 2))",
    "pe_video_encoder": "pe_video/modeling_pe_video.py (same as pe_audio)",
    "pe_audio_video_encoder": "pe_audio_video/modeling_pe_audio_video.py (same as pe_audio)",
}
# Families refused by name: their rotary positions are not `apply_rope` on a 1-D position (reason, source).
REFUSED_FAMILIES = {
    "nanochat": "rotates by the negative angle (rotate_half = cat(x2, -x1), nanochat/modeling_nanochat.py)",
    "blt": "rotates by the negative angle (rotate_half = cat(x2, -x1), blt/modeling_blt.py)",
    "blt_global_transformer": "rotates by the negative angle (blt/modeling_blt.py rotate_half)",
    "blt_local_decoder": "rotates by the negative angle (blt/modeling_blt.py rotate_half)",
    "blt_local_encoder": "rotates by the negative angle (blt/modeling_blt.py rotate_half)",
    "blt_patcher": "rotates by the negative angle (blt/modeling_blt.py rotate_half)",
    "hunyuan_vl_text": "multi-axis xdrope (hunyuan_vl/modeling_hunyuan_vl.py)",
    "qwen2_5_omni_text": "multi-axis mrope in the model code (qwen2_5_omni/modeling_qwen2_5_omni.py)",
    "qwen2_5_omni_talker": "multi-axis mrope in the model code (qwen2_5_omni/modeling_qwen2_5_omni.py)",
    "qwen2_5_omni_thinker": "multi-axis mrope in the model code (qwen2_5_omni/modeling_qwen2_5_omni.py)",
    "qwen3_omni_moe_talker_text": "multi-axis mrope in the model code (qwen3_omni_moe/modeling_qwen3_omni_moe.py)",
    "deepseek_ocr2_encoder": "several rotary classes in deepseek_ocr2/modeling_deepseek_ocr2.py, none built for "
                             "this config class; not read",
    "dots3_note_text": "its indexed_attention rotary width follows a rule other than head_dim * "
                       "partial_rotary_factor (dots3_note/modeling_dots3_note.py); not read",
    "qwen3_omni_moe_talker_code_predictor": "its rotary class is built for another config class in "
                                            "qwen3_omni_moe/modeling_qwen3_omni_moe.py (mrope); not read",
}
# Families whose `no_rope_layers[i] == 1` means layer i USES RoPE (the name reads the other way):
# `self.use_rope = config.no_rope_layers[layer_idx]` in each modeling file.
NO_ROPE_LAYERS_USES_ROPE = {
    "llama4_text": "llama4/modeling_llama4.py Llama4TextAttention: use_rope = no_rope_layers[layer_idx]",
    "smollm3": "smollm3/modeling_smollm3.py SmolLM3Attention: use_rope = no_rope_layers[layer_idx]",
    "mistral_large4_text": "mistral_large4/modeling_mistral_large4.py: use_rope = no_rope_layers[layer_idx]",
}
# Families that rotate only on sliding-window layers (global layers are NoPE).
ROPE_ONLY_ON_SLIDING = {
    "cohere2": "cohere2/modeling_cohere2.py Cohere2Attention: apply_rotary_pos_emb only if sliding_window",
    "cohere2_moe": "cohere2_moe/modeling_cohere2_moe.py (same as cohere2)",
}
# MLA families whose attention always rotates the rope slice as interleaved pairs
# (`apply_rotary_pos_emb_interleave` unconditionally): the config carries no `rope_interleave`, the code fixes it.
MLA_ALWAYS_INTERLEAVED = {
    "deepseek_v32": "deepseek_v32/modeling_deepseek_v32.py:426 DeepseekV32Attention (main MLA path)",
    "glm_moe_dsa": "glm_moe_dsa/modeling_glm_moe_dsa.py:395 GlmMoeDsaAttention",
    "mistral_large4": "mistral_large4/modeling_mistral_large4.py:436-438 MistralLarge4Attention",
    "mistral_large4_text": "mistral_large4/modeling_mistral_large4.py:436-438 MistralLarge4Attention",
    "longcat_flash": "longcat_flash/modeling_longcat_flash.py:415 LongcatFlashMLA",
    "bailing_hybrid": "bailing_hybrid/modeling_bailing_hybrid.py:395",
    "axk2": "axk2/modeling_axk2.py:605",
    "deepseek_v4": "deepseek_v4/modeling_deepseek_v4.py:353-370 apply_rotary_pos_emb (interleaved pairs of the "
                   "trailing rope slice)",
}
# Families whose nested rope_parameters are keyed by rope labels, not layer types: model_type ->
# (label per layer type, the label of every other type, source).
ROPE_TYPE_LABELS = {
    "deepseek_v4": ({"sliding_attention": "main"}, "compress",
                    "deepseek_v4/modeling_deepseek_v4.py:787 DeepseekV4Attention: rope_layer_type = 'main' if "
                    "sliding_attention else 'compress' (the compress_rope_theta rotary of CSA / HCA layers)"),
}
# transformers-4 keys of families whose RoPE differs by layer type, as each `configuration_*.py`
# `convert_rope_params_to_dict` moves them into v5's nested `rope_parameters`: model_type ->
# (key of the full-attention base and the class's default for it, key of the sliding base and its default,
# the layer types a flat v4 `rope_scaling` dict goes to).
V4_LAYER_TYPE_KEYS = {
    **dict.fromkeys(("gemma3_text", "gemma3", "gemma3n_text", "gemma3n", "t5gemma2_text", "t5gemma2_encoder",
                     "t5gemma2_decoder", "t5gemma2"),
                    (("rope_theta", 1e6), ("rope_local_base_freq", 1e4), ("full_attention",))),
    **dict.fromkeys(("modernbert", "modernbert-decoder"),
                    (("global_rope_theta", 160000.0), ("local_rope_theta", 10000.0),
                     ("full_attention", "sliding_attention"))),
    "olmo3": (("rope_theta", 500000.0), ("rope_theta", 500000.0), ("full_attention",)),
}
# Families whose config class derives `layer_types` from a period when a (v4) config has none:
# model_type -> (key, the class's default, offset): layer i is global iff (i + offset) % period == 0.
V4_LAYER_PATTERNS = {
    **dict.fromkeys(("gemma3_text", "gemma3", "t5gemma2_text", "t5gemma2_encoder", "t5gemma2_decoder",
                     "embedding_gemma2", "diffusion_gemma_text"), ("sliding_window_pattern", 6, 1)),
    **dict.fromkeys(("cohere2", "cohere_compass_text", "exaone4", "exaone_moe"), ("sliding_window_pattern", 4, 1)),
    "afmoe": ("global_attn_every_n_layers", 4, 1),
    **dict.fromkeys(("modernbert", "modernbert-decoder"), ("global_attn_every_n_layers", 3, 0)),
}
# Config attributes some families store under another key (each config class's `attribute_map`,
# transformers 5.24): read through it as `config.<alias>` does.
CONFIG_ATTRIBUTE_MAPS = {
    "bailing_hybrid": {"max_position_embeddings": "model_max_length"},
    "bamba": {"layer_types": "layers_block_type"},
    "codegen": {"max_position_embeddings": "n_positions", "hidden_size": "n_embd", "num_attention_heads": "n_head",
                "num_hidden_layers": "n_layer"},
    "dbrx": {"num_attention_heads": "n_heads", "hidden_size": "d_model", "num_hidden_layers": "n_layers",
             "max_position_embeddings": "max_seq_len"},
    "falcon_h1": {"layer_types": "layers_block_type"},
    "glm4_moe_lite": {"head_dim": "qk_rope_head_dim"},
    "gptj": {"max_position_embeddings": "n_positions", "hidden_size": "n_embd", "num_attention_heads": "n_head",
             "num_hidden_layers": "n_layer"},
    "jetmoe": {"head_dim": "kv_channels"},
    "kimi_linear": {"max_position_embeddings": "model_max_length"},
    "moonshine": {"num_attention_heads": "decoder_num_attention_heads",
                  "num_hidden_layers": "decoder_num_hidden_layers"},
    "recurrent_gemma": {"layer_types": "layers_block_type"},
    "zamba2": {"layer_types": "layers_block_type", "head_dim": "attention_head_dim"},
}
# Keys of the multimodal configs that hold the decoder's settings (first match wins).
TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config")
ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "indexed_attention",
                         "compressed_sparse_attention", "heavily_compressed_attention")
# Layer types that hold no attention (hence no positions): recurrent / convolution mixers.
NON_ATTENTION_LAYER_TYPES = ("linear_attention", "conv", "mamba")
# Position keys this reader interprets; any other config key naming rope/rotary positions is refused.
KNOWN_POSITION_KEYS = frozenset({
    "rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor", "rotary_pct", "rotary_dim",
    "rotary_emb_base", "qk_rope_head_dim", "qk_nope_head_dim", "rope_interleave", "no_rope_layers",
    "no_rope_layer_interval", "layer_types", "sliding_window_pattern", "_sliding_window_pattern",
    "rope_local_base_freq", "global_rope_theta", "local_rope_theta", "layer_rope_theta", "rope_scaling_layers",
    "global_attn_every_n_layers", "compress_rope_theta",
})
# Substrings that mark a key as positional (checked against KNOWN_POSITION_KEYS).
_POSITION_MARKERS = ("rope", "rotary", "nope", "mrope", "xdrope")
# Keys inside a rope_parameters dict that are not scaling parameters.
_NOT_SCALING = ("rope_theta", "partial_rotary_factor")


def _has_positions(cfg: dict) -> bool:
    return any(any(m in key for m in _POSITION_MARKERS) for key in cfg)


def decoder_config(cfg: dict) -> dict:
    """The config that holds the decoder's positions: the top level, else the first of `TEXT_CONFIG_KEYS`
    with position keys (a nested config without `model_type` takes the parent's); the family's
    `CONFIG_ATTRIBUTE_MAPS` aliases filled in."""
    if not _has_positions(cfg):
        for key in TEXT_CONFIG_KEYS:
            sub = cfg.get(key)
            if isinstance(sub, Mapping) and _has_positions(sub):
                sub = dict(sub)
                if sub.get("model_type") is None:
                    sub["model_type"] = cfg.get("model_type")
                cfg = sub
                break
    for alias, source in CONFIG_ATTRIBUTE_MAPS.get(cfg.get("model_type"), {}).items():
        if cfg.get(alias) is None and cfg.get(source) is not None:
            cfg = {**cfg, alias: cfg[source]}
    if cfg.get("model_type") == "deepseek_v4" and cfg.get("qk_rope_head_dim") is None and cfg.get("head_dim") \
            and cfg.get("partial_rotary_factor"):  # configuration_deepseek_v4.py:290 derives the rope slice
        cfg = {**cfg, "qk_rope_head_dim": int(cfg["head_dim"] * cfg["partial_rotary_factor"])}
    return cfg


def _check_known_keys(cfg: dict, where: str) -> None:
    unknown = sorted(k for k in cfg if any(m in k for m in _POSITION_MARKERS) and k not in KNOWN_POSITION_KEYS
                     and cfg[k] not in (None, False, [], {}))
    if unknown:
        raise ValueError(f"{where}: position key(s) {unknown} are not read by rope_schedule_from_hf_config "
                         f"(known: {sorted(KNOWN_POSITION_KEYS)})")


def _layer_types(cfg: dict, num_layers: int, where: str) -> list:
    types = cfg.get("layer_types")
    if types is not None:
        types = list(types)
        if len(types) != num_layers:
            raise ValueError(f"{where}: layer_types has {len(types)} entries for num_hidden_layers={num_layers}")
        return types
    key, default, offset = V4_LAYER_PATTERNS.get(cfg.get("model_type"), ("sliding_window_pattern", None, 1))
    pattern = next((cfg[k] for k in (key, f"_{key}") if cfg.get(k) is not None), default)
    if pattern is not None:  # every pattern-th layer is global (e.g. configuration_gemma3.py's layer_types default)
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            raise ValueError(f"{where}: {key}={pattern!r} must be a positive integer")
        return ["full_attention" if (i + offset) % pattern == 0 else "sliding_attention" for i in range(num_layers)]
    return ["full_attention"] * num_layers


def _rope_parameters(cfg: dict, model_type, where: str):
    """v5 `rope_parameters` (flat, or nested by layer type) from the config as shipped: v5's own dict, or the
    v4 keys (`rope_scaling` with `type`, top-level `rope_theta`, the per-type bases of `V4_LAYER_TYPE_KEYS`)."""
    params = cfg.get("rope_parameters")
    if params is None:
        params = cfg.get("rope_scaling")
    params = {} if params is None else params
    if not isinstance(params, Mapping):
        raise ValueError(f"{where}: rope_parameters={params!r} must be a dict")
    params = copy.deepcopy(dict(params))
    if model_type in ROPE_TYPE_LABELS and not {"main", "compress"} <= set(params):
        return _deepseek_v4_labels(cfg, params, where)
    if model_type in V4_LAYER_TYPE_KEYS and cfg.get("rope_parameters") is None:
        (full_key, full_default), (local_key, local_default), scaled = V4_LAYER_TYPE_KEYS[model_type]
        flat = {k: v for k, v in params.items() if k not in ("rope_theta",)}
        nested = {}
        for layer_type, key, default in (("full_attention", full_key, full_default),
                                         ("sliding_attention", local_key, local_default)):
            value = cfg.get(key)
            nested[layer_type] = {"rope_type": "default", **(flat if layer_type in scaled else {}),
                                  "rope_theta": default if value is None else value}
        return nested
    return params


def _deepseek_v4_labels(cfg: dict, flat: dict, where: str) -> dict:
    """DeepSeek-V4 from a flat dict (configuration_deepseek_v4.py): `main` = default RoPE at `rope_theta`,
    `compress` = the flat dict (YaRN with `attention_factor` 1.0 unless given) at `compress_rope_theta`."""
    if cfg.get("compress_rope_theta") is None or cfg.get("rope_theta") is None:
        raise ValueError(f"{where}: a flat rope dict needs rope_theta and compress_rope_theta (the compressed "
                         "layers' base); no default base is assumed")
    fraction = {} if cfg.get("partial_rotary_factor") is None else {"partial_rotary_factor": cfg["partial_rotary_factor"]}
    kind = flat.get("rope_type") or flat.get("type") or "default"
    compress = {**{k: v for k, v in flat.items() if k not in ("rope_theta", "type")}, "rope_type": kind,
                "rope_theta": cfg["compress_rope_theta"], **fraction}
    if kind == "yarn":
        compress.setdefault("attention_factor", 1.0)
    return {"main": {"rope_type": "default", "rope_theta": cfg["rope_theta"], **fraction}, "compress": compress}


def _layer_rope_theta(cfg: dict, num_layers: int, where: str):
    """`layer_rope_theta` (Granite SWA, Muse: configuration_granitemoe_swa.py): one base per layer, 0 = NoPE."""
    thetas = cfg.get("layer_rope_theta")
    if thetas is None:
        return None
    thetas = list(thetas)
    if len(thetas) != num_layers or any(isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0
                                        for t in thetas):
        raise ValueError(f"{where}: layer_rope_theta must hold num_hidden_layers={num_layers} bases >= 0 "
                         f"(0 = no RoPE), got {thetas}")
    return [float(t) for t in thetas]


def _rope_scaling_layers(cfg: dict, num_layers: int, where: str):
    """`rope_scaling_layers` (Molmo2, modeling_molmo2.py Molmo2TextModel): the layers that use the scaled
    rotary embedding; the others use `default` frequencies of the same base over the whole head."""
    layers = cfg.get("rope_scaling_layers")
    if layers is None:
        return None
    layers = list(layers)
    if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_layers for i in layers):
        raise ValueError(f"{where}: rope_scaling_layers must hold layer indices in 0..{num_layers - 1}, got {layers}")
    return set(layers)


def _uses_rope(cfg: dict, model_type, num_layers: int, where: str) -> list:
    """Per layer: does it rotate (`no_rope_layers`, 1 = uses RoPE; else the family's `no_rope_layer_interval`
    default, a NoPE layer every interval-th layer, as its config class builds the list)."""
    flags = cfg.get("no_rope_layers")
    if not flags and model_type in NO_ROPE_LAYERS_USES_ROPE:
        interval = cfg.get("no_rope_layer_interval") or 4
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ValueError(f"{where}: no_rope_layer_interval={interval!r} must be a positive integer")
        return [(i + 1) % interval != 0 for i in range(num_layers)]
    if not flags:
        return [True] * num_layers
    if model_type not in NO_ROPE_LAYERS_USES_ROPE:
        raise ValueError(f"{where}: no_rope_layers is read only for {sorted(NO_ROPE_LAYERS_USES_ROPE)}, whose "
                         "modeling code says 1 = the layer uses RoPE; this family's meaning is unknown")
    flags = list(flags)
    if len(flags) != num_layers or any(f not in (0, 1, True, False) for f in flags):
        raise ValueError(f"{where}: no_rope_layers must hold num_hidden_layers={num_layers} flags 0/1, got {flags}")
    return [bool(f) for f in flags]


def _reads_mrope(model_type) -> bool:
    """Multi-axis RoPE is read for the families whose convention posenc_np.mrope implements (Qwen2-VL,
    Qwen2.5-VL, Qwen3-VL and their MoE / text variants: `posenc_np.rope._MROPE_MODEL_DEFAULTS` prefixes)."""
    return any(str(model_type or "").startswith(prefix) for prefix in (*_MROPE_MODEL_DEFAULTS, *_MROPE_AXES_DEFAULTS))


def _nested(params) -> bool:
    return bool(params) and all(isinstance(v, Mapping) or v is None for v in params.values())


def _per_layer_overrides(cfg: dict, num_layers: int, where: str) -> list:
    """`per_layer_config` ({"05": {"head_dim": 512}, ...}, transformers' heterogeneous configs) per layer."""
    raw = cfg.get("per_layer_config") or {}
    out = [{} for _ in range(num_layers)]
    for key, overrides in raw.items():
        try:
            index = int(key)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: per_layer_config key {key!r} is not a layer index") from None
        if not 0 <= index < num_layers:
            raise ValueError(f"{where}: per_layer_config key {key!r} is outside 0..{num_layers - 1}")
        overrides = dict(overrides or {})
        _check_known_keys(overrides, f"{where} per_layer_config[{key!r}]")
        out[index] = overrides
    return out


def _head_dim(cfg: dict, where: str) -> int:
    if cfg.get("head_dim"):
        return int(cfg["head_dim"])
    if cfg.get("hidden_size") and cfg.get("num_attention_heads"):
        return int(cfg["hidden_size"]) // int(cfg["num_attention_heads"])
    raise ValueError(f"{where}: neither head_dim nor hidden_size and num_attention_heads are set")


def _entry(cfg: dict, params: dict, *, head_dim: int, layout: str, model_type, where: str) -> dict:
    """apply_rope kwargs for one layer type from its (flat) rope parameters."""
    params = dict(params)
    kind = params.pop("rope_type", None)
    legacy = params.pop("type", None)
    if legacy == "mrope" and kind == "default":  # what configuration_qwen2_vl.py writes next to a v4 "mrope"
        legacy = kind
    if kind is not None and legacy is not None and kind != legacy:
        raise ValueError(f"{where}: rope_type={kind!r} and type={legacy!r} disagree")
    kind = kind or legacy or "default"
    # Ministral 3 / Mistral 4: a query scale (posenc_np.llama_4_scaling), not a frequency parameter; and the
    # dict's own max_position_embeddings, which no ROPE_INIT_FUNCTIONS reads (they read the config's)
    params.pop("llama_4_scaling_beta", None)
    params.pop("max_position_embeddings", None)
    # multi-axis RoPE of the Qwen-VL text models: mrope_section / mrope_interleaved (or the family's defaults,
    # posenc_np.rope._MROPE_MODEL_DEFAULTS) become keys of the entry; v4's "type": "mrope" is default frequencies
    mrope = _mrope_from_config(cfg, params) if _reads_mrope(model_type) else {}
    if kind == "mrope" and mrope:
        kind = "default"
    if kind not in SCALING_TYPES:
        raise ValueError(f"{where}: rope_type={kind!r} is not one of {sorted(SCALING_TYPES)}")
    base = params.pop("rope_theta", None)
    if base is None:
        base = cfg.get("rope_theta", cfg.get("rotary_emb_base"))
    if base is None:
        raise ValueError(f"{where}: no rope_theta (neither in rope_parameters nor at the top level); "
                         "no default base is assumed")
    fraction = params.pop("partial_rotary_factor", None)
    if fraction is None:
        fraction = cfg.get("partial_rotary_factor", cfg.get("rotary_pct"))
    mla = bool(cfg.get("qk_rope_head_dim"))
    if mla:  # DeepSeek MLA: RoPE acts on the qk_rope_head_dim slice (configuration_deepseek_v3.py head_dim)
        rope_dim = int(cfg["qk_rope_head_dim"])
        if fraction is not None and int(head_dim * float(fraction)) != rope_dim:  # Mistral 4: head_dim * 0.5
            raise ValueError(f"{where}: int(head_dim * partial_rotary_factor) = {int(head_dim * float(fraction))} "
                             f"is not the MLA rope slice qk_rope_head_dim={rope_dim}")
        head_dim, fraction = rope_dim, None
    if kind == "proportional":  # its output always spans the whole head dim; the fraction shapes inv_freq
        rotary_dim = resolve_rotary_dim(head_dim, head_dim)
        params["partial_rotary_factor"] = 1.0 if fraction is None else float(fraction)
    elif model_type in ("gptj", "codegen") and fraction is None:  # rotary_dim is read only by these two
        rotary_dim = resolve_rotary_dim(head_dim, cfg.get("rotary_dim") or head_dim)
    else:
        rotary_dim = resolve_rotary_dim(head_dim, int(head_dim * (1.0 if fraction is None else float(fraction))))
        if cfg.get("rotary_dim") and int(cfg["rotary_dim"]) != rotary_dim:
            raise ValueError(f"{where}: rotary_dim={cfg['rotary_dim']} disagrees with int(head_dim * "
                             f"partial_rotary_factor) = {rotary_dim}, which transformers' rotary module uses")
    max_pos = cfg.get("max_position_embeddings")
    if kind == "dynamic":  # HF's dynamic NTK reads the model's max_position_embeddings, never the dict's
        params["original_max_position_embeddings"] = max_pos
    if kind in ("yarn", "llama3", "longrope"):  # standardize_rope_params: the top-level value wins (Phi-3)
        original = cfg.get("original_max_position_embeddings") or params.get("original_max_position_embeddings") \
            or max_pos
        params["original_max_position_embeddings"] = original
        if kind in ("yarn", "longrope") and params.get("factor") is None and max_pos and original:
            params["factor"] = max_pos / original
    scaling = None if kind == "default" and not params else {"rope_type": kind, **params}
    try:
        resolve_scaling(scaling, rotary_dim=rotary_dim, base=float(base))
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: {error}") from None
    entry = dict(base=float(base), rotary_dim=rotary_dim, layout=layout, scaling=scaling)
    if mrope.get("mrope_interleaved") and sum(mrope["mrope_section"]) != rotary_dim // 2:
        # Qwen3-VL's interleave slices `j < 3 * s_a` over every rotary pair; a section that covers fewer pairs
        # leaves the rest on axis 0 (modeling_qwen3_5.py recomposition_frequencies): an explicit table says it
        mrope = dict(mrope_axes=mrope_interleaved_axes(mrope["mrope_section"], rotary_dim // 2))
    if mrope:
        try:
            rope_plan(rotary_dim, base=float(base), scaling=scaling, layout=layout, **mrope)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{where}: {error}") from None
        entry.update(mrope)
    if mla:  # rope_interleave: the rope slice is stored as interleaved pairs (HF de-interleaves it before rotate_half)
        interleaved = layout == "interleaved" or model_type in MLA_ALWAYS_INTERLEAVED or bool(cfg.get("rope_interleave"))
        entry["layout"] = "interleaved" if interleaved else "half"
    return entry


def rope_schedule_from_hf_config(config) -> list:
    """One entry per decoder layer: `None` (no rotary positions) or the `apply_rope` kwargs of that layer.

    Formula: layer i gets the rope parameters of its layer type `layer_types[i]` (a nested
    `rope_parameters` dict), or the one flat dict; it is NoPE when that dict is `None`, when
    `no_rope_layers[i] == 0` (families in `NO_ROPE_LAYERS_USES_ROPE`), when it is a global layer of a
    family in `ROPE_ONLY_ON_SLIDING`, or when its type holds no attention (`NON_ATTENTION_LAYER_TYPES`).
    `rotary_dim = int(head_dim * partial_rotary_factor)` as in HF's `compute_default_rope_parameters`
    (`proportional` keeps the whole head dim and passes the fraction in `scaling`).

    Args:
        config: a transformers config, its `to_dict()`, or a config.json path. A multimodal config
            whose top level has no position keys is read through its `text_config` (the decoder).

    Returns:
        list of length `num_hidden_layers`; entries `None` or
        `dict(base=float, rotary_dim=int, layout="half"|"interleaved", scaling=dict|None)`; for MLA
        configs (`qk_rope_head_dim`) the entry describes the rope slice (`posenc_np.mla.apply_mla_rope`).

    Raises:
        ValueError: an unknown position key or layer type, no `rope_theta`, a scaling the spec does not
            implement, `no_rope_layers` in a family whose meaning is not listed, mismatched lengths.
        TypeError: `config` is not a config, a mapping or a path.

    Reference:
        transformers 5.24 `modeling_rope_utils.py` (`standardize_rope_params`, `ROPE_INIT_FUNCTIONS`),
        `models/{gemma3,gemma4,llama4,cohere2,smollm3,mistral_large4,deepseek_v3}/modeling_*.py`.

    Examples:
        >>> cfg = {"model_type": "gemma3_text", "num_hidden_layers": 3, "head_dim": 8,
        ...        "sliding_window_pattern": 3,
        ...        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        ...                            "full_attention": {"rope_type": "default", "rope_theta": 1e6}}}
        >>> [e["base"] for e in rope_schedule_from_hf_config(cfg)]
        [10000.0, 10000.0, 1000000.0]
        >>> rope_schedule_from_hf_config({"model_type": "llama4_text", "num_hidden_layers": 2, "head_dim": 4,
        ...     "rope_parameters": {"rope_type": "default", "rope_theta": 5e5}, "no_rope_layers": [1, 0]})[1] is None
        True
    """
    cfg = decoder_config(load_hf_config(config))
    model_type = cfg.get("model_type")
    where = f"model_type={model_type!r}"
    if not _has_positions(cfg):
        raise ValueError(f"{where}: the config has no rotary position keys (rope_parameters, rope_theta, ...)")
    if model_type in REFUSED_FAMILIES:
        raise ValueError(f"{where}: {REFUSED_FAMILIES[model_type]}")
    if cfg.get("position_embedding_type") not in (None, "rope", "rotary"):
        raise ValueError(f"{where}: position_embedding_type={cfg['position_embedding_type']!r} is not rotary")
    if cfg.get("patch_size") is not None:
        raise ValueError(f"{where}: patch_size is set: an image/video encoder, whose rotary positions are patch "
                         "coordinates, not a decoder-layer schedule")
    _check_known_keys(cfg, where)
    num_layers = cfg.get("num_hidden_layers")
    if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 1:
        raise ValueError(f"{where}: num_hidden_layers={num_layers!r} must be a positive integer")
    types = _layer_types(cfg, num_layers, where)
    overrides = _per_layer_overrides(cfg, num_layers, where)
    params = _rope_parameters(cfg, model_type, where)
    nested = _nested(params)
    for kind in (params.values() if nested else [params]):
        kind_type = kind and (kind.get("rope_type") or kind.get("type"))
        multi_axis = kind and (kind.get("mrope_section") is not None or kind_type in ("mrope", "axial"))
        if multi_axis and (kind_type == "axial" or not _reads_mrope(model_type)):
            raise ValueError(f"{where}: multi-axis RoPE (mrope_section / rope_type={kind_type!r}) is "
                             f"read only for the conventions of {', '.join(_MROPE_MODEL_DEFAULTS)} (sections, "
                             "interleaving and position ids as posenc_np.mrope); this family's is not known")
    uses_rope = _uses_rope(cfg, model_type, num_layers, where)
    thetas = _layer_rope_theta(cfg, num_layers, where)
    scaled_layers = _rope_scaling_layers(cfg, num_layers, where)
    layout = "interleaved" if model_type in INTERLEAVED_FAMILIES else "half"
    schedule, cache = [], {}
    for i, layer_type in enumerate(types):
        if layer_type in NON_ATTENTION_LAYER_TYPES or not uses_rope[i] or (thetas is not None and thetas[i] == 0):
            schedule.append(None)
            continue
        if layer_type not in ATTENTION_LAYER_TYPES:
            raise ValueError(f"{where}: layer_types[{i}]={layer_type!r} is neither an attention type "
                             f"{ATTENTION_LAYER_TYPES} nor a non-attention type {NON_ATTENTION_LAYER_TYPES}")
        if model_type in ROPE_ONLY_ON_SLIDING and layer_type != "sliding_attention":
            schedule.append(None)
            continue
        if nested and model_type in ROPE_TYPE_LABELS:
            labels, other, _ = ROPE_TYPE_LABELS[model_type]
            layer_params = params.get(labels.get(layer_type, other))
            if layer_params is None:
                raise ValueError(f"{where}: rope_parameters has no {labels.get(layer_type, other)!r} entry for layer "
                                 f"type {layer_type!r} (has {sorted(params)})")
        elif nested:
            if layer_type not in params:
                raise ValueError(f"{where}: rope_parameters has no entry for layer type {layer_type!r} "
                                 f"(has {sorted(params)})")
            layer_params = params[layer_type]
            if layer_params is None:
                schedule.append(None)
                continue
        else:
            layer_params = params
        layer_params = dict(layer_params)
        if thetas is not None:  # the layer's own base overrides rope_theta (granitemoe_swa/modeling: theta_config)
            layer_params["rope_theta"] = thetas[i]
        if scaled_layers is not None and i not in scaled_layers:  # Molmo2RotaryEmbedding(config, scaled=False)
            layer_params = {"rope_type": "default", "partial_rotary_factor": 1.0,
                            "rope_theta": layer_params.get("rope_theta", cfg.get("rope_theta"))}
        layer_cfg = {**cfg, **overrides[i]}
        head_dim = _head_dim(layer_cfg, where)
        key = (layer_type, head_dim, repr(sorted(layer_params.items())))
        if key not in cache:
            here = f"{where} layer type {layer_type!r}"
            try:
                cache[key] = _entry(layer_cfg, layer_params, head_dim=head_dim, layout=layout, model_type=model_type,
                                    where=here)
            except (TypeError, ValueError) as error:
                if str(error).startswith(where):
                    raise
                raise ValueError(f"{here}: {error}") from None
        schedule.append(copy.deepcopy(cache[key]))
    return schedule


#: Sparse-attention (DSA) indexers that rotate the leading `qk_rope_head_dim` channels of their own q/k
#: (`index_head_dim` wide) with the layer's cos/sin, in a layout of their own: model_type -> (layout, source).
DSA_INDEXER_LAYOUTS = {
    "deepseek_v32": ("half", "deepseek_v32/modeling_deepseek_v32.py:215-221 DeepseekV32Indexer.forward: "
                             "apply_rotary_pos_emb, 'NON-interleaved ... unlike the main MLA attention'"),
    "glm_moe_dsa": ("interleaved", "glm_moe_dsa/modeling_glm_moe_dsa.py:222 GlmMoeDsaIndexer.forward: "
                                   "apply_rotary_pos_emb_interleave"),
    "mistral_large4": ("interleaved", "mistral_large4/modeling_mistral_large4.py:252-258 MistralLarge4TextIndexer"
                                      ".forward: apply_rotary_pos_emb_interleave if use_rope"),
    "mistral_large4_text": ("interleaved", "mistral_large4/modeling_mistral_large4.py:252-258 (as mistral_large4)"),
}


def indexer_rope_schedule_from_hf_config(config) -> list:
    """The second rotary of DeepSeek-sparse-attention layers: per decoder layer, `None` (no indexer of its own, or
    a NoPE layer) or the `apply_rope` kwargs for the indexer's q and k `[..., index_head_dim]`.

    Formula: the indexer rotates its leading `rotary_dim = qk_rope_head_dim` channels (`[rope | pass]`, where
    the main MLA path rotates the trailing slice of `[nope | rope]`) by the layer's own cos/sin (same base,
    scaling and attention factor as the layer's `rope_schedule_from_hf_config` entry), in the family's indexer
    layout (`DSA_INDEXER_LAYOUTS`: DeepSeek-V3.2 rotates halves although its main path interleaves). Layers whose
    `indexer_types[i] == "shared"` reuse the previous layer's top-k and rotate nothing (`None`).

    Raises:
        ValueError: a family without a known indexer rotary, `index_head_dim` narrower than the rope slice,
            `indexer_types` of the wrong length; and whatever `rope_schedule_from_hf_config` raises.

    Reference:
        transformers 5.24 (files and lines in `DSA_INDEXER_LAYOUTS`).

    Examples:
        >>> cfg = {"model_type": "deepseek_v32", "num_hidden_layers": 1, "head_dim": 4, "qk_rope_head_dim": 4,
        ...        "qk_nope_head_dim": 4, "index_head_dim": 8, "rope_theta": 1e4}
        >>> indexer_rope_schedule_from_hf_config(cfg)[0]["layout"], rope_schedule_from_hf_config(cfg)[0]["layout"]
        ('half', 'interleaved')
    """
    cfg = decoder_config(load_hf_config(config))
    model_type = cfg.get("model_type")
    where = f"model_type={model_type!r}"
    if model_type not in DSA_INDEXER_LAYOUTS:
        raise ValueError(f"{where}: no sparse-attention indexer rotary is known for this family "
                         f"(known: {sorted(DSA_INDEXER_LAYOUTS)})")
    layout = DSA_INDEXER_LAYOUTS[model_type][0]
    schedule = rope_schedule_from_hf_config(cfg)
    width = cfg.get("index_head_dim")
    types = cfg.get("indexer_types")
    if types is not None and len(types) != len(schedule):
        raise ValueError(f"{where}: indexer_types has {len(types)} entries for num_hidden_layers={len(schedule)}")
    out = []
    for i, entry in enumerate(schedule):
        if entry is None or (types is not None and types[i] == "shared"):
            out.append(None)
            continue
        if not isinstance(width, int) or width < entry["rotary_dim"]:
            raise ValueError(f"{where}: index_head_dim={width!r} must be an integer >= the rope slice "
                             f"qk_rope_head_dim={entry['rotary_dim']}")
        out.append({**entry, "layout": layout})
    return out


def modules_per_layer(schedule, build):
    """`[build(entry) or None for entry in schedule]`, one module per distinct entry (equal entries share it).

    The framework-free half of each backend's `rope_modules_from_schedule`: `build` is the backend's
    `RotaryEmbedding` constructor with its options bound.
    """
    modules, shared = [], {}
    for entry in schedule:
        if entry is None:
            modules.append(None)
            continue
        key = repr(sorted(entry.items()))
        if key not in shared:
            shared[key] = build(entry)
        modules.append(shared[key])
    return modules
