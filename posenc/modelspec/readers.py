"""Readers: every config dialect to one `ModelSpec` (posenc.modelspec.canonical).

Each reader reproduces one codebase's reading of its own file, at the version named in its docstring, and
records in `ModelSpec.findings` every value it had to assume (a missing base, a dropped key). A key it
does not understand, or settings it cannot express, raise `ValueError` naming the key: never a silent
default.

    read_hf_config      transformers 5.24 `config.json` (v4 flat keys, v5 `rope_parameters`, per layer type)
    read_gguf           a `.gguf` file's metadata and rope tensors, as llama.cpp's loader reads them
    read_meta_params    Meta's `params.json` (meta-llama/llama and llama-models reference code)
    read_keras_hub      keras-hub backbone `get_config()` (or a preset's `config.json`), keras-hub 0.31 / 0.32
    read_maxtext        MaxText YAML config keys (src/MaxText/configs/base.yml)

`posenc.modelspec.source.read_source` sends a path (or dict) to the right reader.
"""

from __future__ import annotations

import copy
import json
import math
import os

import numpy as np

from posenc_np.rope import scaling_from_hf_config
from posenc_np.schedule import rope_schedule_from_hf_config

from ..formats.gguf import ROPE_TYPE_OF_ARCH
from .canonical import Finding, LayerSpec, ModelSpec

__all__ = ["read_hf_config", "read_gguf", "read_meta_params", "read_keras_hub", "read_maxtext",
           "load_config", "DIALECTS", "HF_ROPE_TYPES", "GGUF_PERMUTED_ARCHS", "GGUF_NATIVE_NORM_ARCHS",
           "ATTENTION_TERM_KEYS"]

DIALECTS = ("hf", "gguf", "meta", "keras-hub", "maxtext")
#: transformers 5.24 `ROPE_INIT_FUNCTIONS` plus `default`: the rope types HF itself computes.
HF_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional")
_HF = "transformers 5.24 modeling_rope_utils.py standardize_rope_params + models/*/modeling_*.py"
#: Config keys that scale attention logits besides RoPE (kept as model-level `attention_terms`).
ATTENTION_TERM_KEYS = ("attn_temperature_tuning", "floor_scale", "attn_scale", "query_pre_attn_scalar",
                       "attn_logit_softcapping", "final_logit_softcapping", "llama_4_scaling_beta")


def load_config(path) -> dict:
    """A JSON or YAML file (or a directory holding config.json / params.json) as a dict; ValueError if unreadable."""
    path = str(path)
    if os.path.isdir(path):
        for name in ("config.json", "params.json"):
            if os.path.exists(os.path.join(path, name)):
                return load_config(os.path.join(path, name))
        raise ValueError(f"{path!r} is a directory without config.json or params.json")
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError as error:
        raise ValueError(f"cannot read {path!r}: {error.strerror or error}") from error
    if path.endswith((".yml", ".yaml")):
        import yaml
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ValueError(f"{path!r} is not valid YAML: {error}") from error
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path!r} is not valid JSON: {error}") from error
    if not isinstance(data, dict):
        raise ValueError(f"{path!r} holds a {type(data).__name__}, not a config mapping")
    return data


# --- Hugging Face config.json ---------------------------------------------------------------------------------

def _transformers_default_theta(model_type):
    """The `default_theta` a transformers 5 config class fills in when the file has no rope_theta (None if unknown)."""
    try:
        from transformers import CONFIG_MAPPING
        cls = CONFIG_MAPPING[model_type]
    except Exception:  # transformers absent or the model type unknown to it
        return None
    return getattr(cls, "default_theta", None)


def _hf_params(cfg):
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    return params if isinstance(params, dict) else {}


def _hf_findings(cfg: dict, where: str) -> tuple[dict, list]:
    """Fill what transformers fills silently (with a finding each) and note what runtimes read differently."""
    cfg = copy.deepcopy(cfg)
    findings = []
    params = _hf_params(cfg)
    nested = bool(params) and all(isinstance(v, dict) or v is None for v in params.values())
    dicts = [v for v in params.values() if isinstance(v, dict)] if nested else ([params] if params else [])
    top = cfg.get("rope_theta", cfg.get("rotary_emb_base"))
    if top is None and (not dicts or any(d.get("rope_theta") is None for d in dicts)):
        default = _transformers_default_theta(cfg.get("model_type"))
        if isinstance(default, dict) or default is None:
            raise ValueError(f"{where}: no rope_theta in the config and no single class default for "
                             f"model_type={cfg.get('model_type')!r} (transformers default_theta={default!r})")
        findings.append(Finding("rope_theta", f"not given: transformers fills its class default_theta={default} "
                                "silently (other readers use other defaults)"))
        cfg["rope_theta"] = default
    for d in dicts:
        kind = d.get("rope_type") or d.get("type") or "default"
        if "type" in d and "rope_type" not in d:
            findings.append(Finding("rope_scaling.type", "legacy key 'type' (transformers maps it to rope_type; "
                                    "mlx-lm and serde-based readers have broken on it)", lint=False))
        if kind not in HF_ROPE_TYPES and kind != "mrope":
            findings.append(Finding("rope_type", f"rope_type={kind!r} is not one transformers computes "
                                    f"({', '.join(HF_ROPE_TYPES)}); runtimes disagree on what it means"))
        if kind == "yarn" and "truncate" not in d:
            findings.append(Finding("truncate", "yarn without 'truncate': HF, vLLM and keras-hub >= 0.32 default "
                                    "to True, keras-hub <= 0.31 to False, mlx-lm and llama.cpp always truncate"))
        if kind in ("yarn", "llama3", "longrope") and "original_max_position_embeddings" not in d \
                and "original_max_position_embeddings" not in cfg:
            findings.append(Finding("original_max_position_embeddings", f"{kind} without it: transformers takes "
                                    f"max_position_embeddings={cfg.get('max_position_embeddings')}; mlx-lm "
                                    "defaults to 4096 (yarn) or 8192 (llama3)"))
        if kind in ("yarn", "longrope") and d.get("factor") is None:
            findings.append(Finding("factor", f"{kind} without factor: transformers derives max_position_embeddings"
                                    " / original_max_position_embeddings"))
    return cfg, findings


def _text_config(cfg: dict) -> dict:
    text = cfg.get("text_config")
    if isinstance(text, dict) and not any(k in cfg for k in ("rope_parameters", "rope_scaling", "rope_theta")):
        return {**text, "model_type": text.get("model_type") or cfg.get("model_type")}
    return cfg


def _max_pos(cfg):
    return cfg.get("max_position_embeddings")


def _attention_terms(cfg):
    terms = {k: cfg[k] for k in ATTENTION_TERM_KEYS if cfg.get(k) not in (None, False)}
    params = _hf_params(cfg)
    if params.get("llama_4_scaling_beta") is not None:
        terms["llama_4_scaling_beta"] = params["llama_4_scaling_beta"]
    if cfg.get("qk_rope_head_dim") and params.get("rope_type") == "yarn" and params.get("mscale_all_dim"):
        terms["softmax_mscale_all_dim"] = params["mscale_all_dim"]  # DeepSeek-V3 yarn_get_mscale squared in softmax
    return terms


def _layers_from_schedule(schedule, head_dim_of) -> list:
    out = []
    for entry in schedule:
        if entry is None:
            out.append(LayerSpec(rope=False))
        else:
            out.append(LayerSpec(rope=True, layout=entry["layout"], rotary_dim=int(entry["rotary_dim"]),
                                 head_dim=head_dim_of(entry), base=float(entry["base"]),
                                 scaling=None if entry["scaling"] is None else dict(entry["scaling"])))
    return out


def read_hf_config(config, *, source: str = "<dict>") -> ModelSpec:
    """Read a Hugging Face `config.json` (any form) into a `ModelSpec`.

    Follows transformers 5.24: `RotaryEmbeddingConfigMixin.standardize_rope_params` (v4 `rope_scaling` /
    `rope_theta` and v5 `rope_parameters`, `type` -> `rope_type`, original length moved into the dict) and
    the per-layer schedule of `posenc_np.schedule.rope_schedule_from_hf_config` (layer types, NoPE layers,
    Gemma/Cohere/Llama 4 rules, MLA). Multi-axis configs (`mrope_section`) are read with
    `posenc_np.rope.scaling_from_hf_config` (every layer alike). A config without `rope_theta` gets the
    transformers class `default_theta`, with a lint finding.

    Raises:
        ValueError: an unknown position key or rope type, per-layer settings it cannot place.
    """
    raw = _text_config(copy.deepcopy(dict(config)))
    where = f"{source}: model_type={raw.get('model_type')!r}"
    cfg, findings = _hf_findings(raw, where)
    params = _hf_params(cfg)
    nested = bool(params) and all(isinstance(v, dict) or v is None for v in params.values())
    flat = params if not nested else {}
    num_layers = cfg.get("num_hidden_layers")
    if flat.get("mrope_section") is not None or flat.get("rope_type") in ("mrope", "axial") or (
            flat.get("type") == "mrope"):
        settings = scaling_from_hf_config(cfg)
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        layer = LayerSpec(rope=True, layout="half", rotary_dim=settings["rotary_dim"], head_dim=int(head_dim),
                          base=settings["base"], scaling=settings["scaling"],
                          mrope_section=tuple(settings.get("mrope_section") or ()) or None,
                          mrope_interleaved=bool(settings.get("mrope_interleaved", False)))
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"{where}: num_hidden_layers={num_layers!r} must be a positive integer")
        layers = [layer] * num_layers
    else:
        try:
            schedule = rope_schedule_from_hf_config(cfg)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{source}: {error}") from None
        mla = cfg.get("qk_rope_head_dim")

        def head_dim_of(entry):
            if mla:
                return int(mla)
            hd = cfg.get("head_dim") or (cfg.get("hidden_size", 0) // max(cfg.get("num_attention_heads") or 1, 1))
            return int(max(hd, entry["rotary_dim"]))

        layers = _layers_from_schedule(schedule, head_dim_of)
    original = cfg.get("original_max_position_embeddings") or next(
        (d.get("original_max_position_embeddings") for d in ([flat] if flat else [v for v in params.values()
                                                                                  if isinstance(v, dict)])
         if d.get("original_max_position_embeddings")), None)
    return ModelSpec(source=source, dialect="hf", follows=_HF, layers=layers, row_order="hf",
                     max_position_embeddings=_max_pos(cfg), original_max_position_embeddings=original,
                     attention_terms=_attention_terms(cfg), findings=findings)


# --- GGUF -----------------------------------------------------------------------------------------------------

#: llama.cpp NORM architectures whose convert_hf_to_gguf.py permutes HF's rotate-half q/k rows into Meta's
#: interleaved order (`LlamaModel.permute` and the same in the classes listed): NORM on those rows = HF "half".
GGUF_PERMUTED_ARCHS = frozenset({"llama", "deci", "granite", "granitemoe", "granitehybrid", "baichuan", "internlm2",
                                 "minicpm", "xverse", "olmo", "arcee", "smollm3", "plm", "bailingmoe", "llada"})
#: NORM architectures whose HF code itself rotates interleaved pairs (no permutation in the converter).
GGUF_NATIVE_NORM_ARCHS = frozenset({"llama4", "command-r", "cohere2", "chatglm", "glm4", "ernie4_5", "ernie4_5-moe",
                                    "deepseek", "deepseek2"})


def _gguf_value(field):
    value = field.contents()
    return value


def read_gguf(path) -> ModelSpec:
    """Read a `.gguf` file's rotary settings from its metadata and rope tensors, as llama.cpp does.

    Keys (gguf-py `Keys.Rope`, llama.cpp src/llama-model.cpp `load_hparams`): `general.architecture`,
    `<arch>.block_count`, `<arch>.context_length`, `<arch>.embedding_length`, `<arch>.attention.head_count`,
    `<arch>.attention.key_length`, `<arch>.rope.dimension_count` (default: the head dim),
    `<arch>.rope.freq_base` (default 10000, with a lint finding), `<arch>.rope.scaling.type` (none, linear,
    yarn, longrope), `.factor`, `.original_context_length`, `.attn_factor`, `.yarn_beta_fast/slow`,
    `<arch>.rope.dimension_sections` (multi-axis). Tensors `rope_freqs.weight` (llama3: divides the
    frequencies, `llamacpp-freq-factors`), `rope_factors_long.weight` / `rope_factors_short.weight`
    (LongRoPE). The layout is the rope type llama.cpp hard-codes per architecture
    (`llama_model_rope_type`, ggml-org/llama.cpp src/llama-model.cpp; verified at commit a5410f04 for
    the architectures it lists then, the full table `posenc.formats.gguf.ROPE_TYPE_OF_ARCH` at 00342301);
    llama.cpp's YaRN always floors and ceils the correction range (ggml `ggml_rope_yarn_corr_dims`).

    Raises:
        ValueError: not a GGUF file, no architecture, an architecture whose rope type is not in the table,
            a scaling type llama.cpp does not know.
    """
    import gguf
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as error:  # gguf raises ValueError / struct errors / OSError for bad files
        raise ValueError(f"{str(path)!r} is not a readable GGUF file: {error}") from error
    fields = {name: _gguf_value(field) for name, field in reader.fields.items() if not name.startswith("GGUF.")}
    tensors = {t.name: t for t in reader.tensors}
    arch = fields.get("general.architecture")
    if not arch:
        raise ValueError(f"{str(path)!r}: no general.architecture key")
    where = f"{path}: architecture {arch!r}"
    if arch not in ROPE_TYPE_OF_ARCH:
        raise ValueError(f"{where} is not in llama.cpp's llama_model_rope_type table ({len(ROPE_TYPE_OF_ARCH)} "
                         "architectures); its rope type is unknown")
    findings = []
    key = lambda name: f"{arch}.{name}"  # noqa: E731
    num_layers = fields.get(key("block_count"))
    if not num_layers:
        raise ValueError(f"{where}: no {key('block_count')}")
    rope_type = ROPE_TYPE_OF_ARCH[arch]
    if rope_type == "none":
        return ModelSpec(source=str(path), dialect="gguf", follows="llama.cpp llama_model_rope_type (NONE)",
                         layers=[LayerSpec(rope=False)] * int(num_layers), findings=findings)
    heads = fields.get(key("attention.head_count"))
    if isinstance(heads, list):
        heads = heads[0]
    head_dim = fields.get(key("attention.key_length"))
    if head_dim is None:
        if not heads or not fields.get(key("embedding_length")):
            raise ValueError(f"{where}: neither attention.key_length nor embedding_length and head_count")
        head_dim = int(fields[key("embedding_length")]) // int(heads)
    rotary_dim = fields.get(key("rope.dimension_count"))
    if rotary_dim is None:
        findings.append(Finding(key("rope.dimension_count"), f"absent: llama.cpp rotates the whole head dim "
                                f"({head_dim})"))
        rotary_dim = head_dim
    base = fields.get(key("rope.freq_base"))
    if base is None:
        findings.append(Finding(key("rope.freq_base"), "absent: llama.cpp uses 10000 silently"))
        base = 10000.0
    if fields.get(key("rope.freq_base_swa")) is not None:
        findings.append(Finding(key("rope.freq_base_swa"), "sliding-window layers use another base in llama.cpp; "
                                "posenc spec reads the global base for every layer"))
    context = fields.get(key("context_length"))
    kind = fields.get(key("rope.scaling.type"), "none")
    factor = fields.get(key("rope.scaling.factor"))
    original = fields.get(key("rope.scaling.original_context_length"))
    rotary_dim, head_dim = int(rotary_dim), int(head_dim)
    scaling = None
    if "rope_freqs.weight" in tensors:
        freq_factors = np.asarray(tensors["rope_freqs.weight"].data, dtype=np.float64).reshape(-1)
        scaling = {"rope_type": "llamacpp-freq-factors", "freq_factors": freq_factors.tolist()}
        if kind not in ("none", None):
            raise ValueError(f"{where}: rope_freqs tensor and rope.scaling.type={kind!r} together are not modelled")
    elif kind == "linear":
        scaling = {"rope_type": "linear", "factor": float(factor)}
    elif kind == "yarn":
        if original is None:
            raise ValueError(f"{where}: yarn without {key('rope.scaling.original_context_length')}")
        scaling = {"rope_type": "yarn", "factor": float(factor), "original_max_position_embeddings": int(original),
                   "truncate": True, "beta_fast": float(fields.get(key("rope.scaling.yarn_beta_fast"), 32.0)),
                   "beta_slow": float(fields.get(key("rope.scaling.yarn_beta_slow"), 1.0))}
        attn = fields.get(key("rope.scaling.attn_factor"))
        if attn is not None:  # llama.cpp multiplies its own 0.1 ln(s) + 1 by this factor
            scaling["attention_factor"] = float(attn) * (0.1 * math.log(float(factor)) + 1.0)
    elif kind == "longrope" or "rope_factors_long.weight" in tensors:
        if "rope_factors_long.weight" not in tensors or "rope_factors_short.weight" not in tensors:
            raise ValueError(f"{where}: longrope needs rope_factors_long and rope_factors_short tensors")
        if original is None or context is None:
            raise ValueError(f"{where}: longrope needs context_length and rope.scaling.original_context_length")
        scaling = {"rope_type": "longrope", "original_max_position_embeddings": int(original),
                   "factor": float(context) / float(original),
                   "long_factor": np.asarray(tensors["rope_factors_long.weight"].data, np.float64).ravel().tolist(),
                   "short_factor": np.asarray(tensors["rope_factors_short.weight"].data, np.float64).ravel().tolist()}
        attn = fields.get(key("rope.scaling.attn_factor"))
        if attn is not None:
            scaling["attention_factor"] = float(attn)
        findings.append(Finding("rope_factors_long", "llama.cpp picks long or short factors once per context "
                                "(n_ctx > original), not per sequence as transformers does", lint=False))
    elif kind not in ("none", None):
        raise ValueError(f"{where}: rope.scaling.type={kind!r} is not one llama.cpp knows (none, linear, yarn, "
                         "longrope)")
    section = fields.get(key("rope.dimension_sections"))
    mrope = None
    if rope_type == "mrope" or section:
        mrope = tuple(int(s) for s in (section or []) if int(s) > 0) or None
        if mrope is None:
            raise ValueError(f"{where}: multi-axis rope type without rope.dimension_sections")
    layout = "interleaved" if rope_type == "norm" else "half"
    row_order = "hf"
    if rope_type == "norm":
        if arch in GGUF_PERMUTED_ARCHS:
            row_order = "meta"
        elif arch not in GGUF_NATIVE_NORM_ARCHS:
            findings.append(Finding("general.architecture", f"NORM architecture {arch!r}: whether the converter "
                                    "permuted HF's q/k rows is not listed; read as not permuted"))
    layer = LayerSpec(rope=True, layout=layout, rotary_dim=rotary_dim, head_dim=head_dim, base=float(base),
                      scaling=scaling, mrope_section=mrope)
    layer.plan()  # validate now (bad factor lengths, bad values)
    return ModelSpec(source=str(path), dialect="gguf",
                     follows="llama.cpp src/llama-model.cpp load_hparams / llama_model_rope_type; gguf-py Keys.Rope",
                     layers=[layer] * int(num_layers), row_order=row_order,
                     max_position_embeddings=None if context is None else int(context),
                     original_max_position_embeddings=None if original is None else int(original), findings=findings)


# --- Meta params.json -----------------------------------------------------------------------------------------

_META_KEYS = {"dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "multiple_of", "ffn_dim_multiplier",
              "norm_eps", "rope_theta", "use_scaled_rope", "rope_scaling_factor", "rope_high_freq_factor",
              "max_seq_len", "max_batch_size", "use_qk_norm", "nope_layer_interval", "attn_temperature_tuning",
              "floor_scale", "attn_scale", "moe_args", "vision_args", "quantization_args", "lora_args",
              "vision_chunk_size", "vision_max_num_chunks", "vision_num_cross_attention_layers",
              "interleave_moe_layer_step", "num_experts", "head_dim"}


def read_meta_params(params, *, source: str = "<dict>") -> ModelSpec:
    """Read Meta's `params.json` (consolidated checkpoints).

    Follows meta-llama/llama-models `models/llama3/args.py` + `reference_impl/model.py`
    (`precompute_freqs_cis(dim, end, theta, use_scaled, scale_factor, high_freq_factor)`; `apply_scaling`
    with low_freq_factor 1 and old_context_len 8192 fixed) and meta-llama/llama `llama/model.py` (Llama 2,
    theta 10000). Layout: Meta's complex form, interleaved pairs on Meta-ordered rows. A file without
    `rope_theta` is ambiguous (Llama 2 reference 10000, llama-models default 500000): read as 10000 with a
    lint finding. Llama 4 `nope_layer_interval`: layer i is NoPE when (i + 1) % interval == 0.
    """
    params = dict(params)
    findings = []
    unknown = sorted(k for k in params if k not in _META_KEYS)
    if unknown:
        raise ValueError(f"{source}: params.json keys {unknown} are not read by this reader")
    for k in ("dim", "n_layers", "n_heads"):
        if not isinstance(params.get(k), int):
            raise ValueError(f"{source}: params.json needs integer {k!r}")
    head_dim = params.get("head_dim") or params["dim"] // params["n_heads"]
    base = params.get("rope_theta")
    if base is None:
        findings.append(Finding("rope_theta", "absent: Llama 2's reference uses 10000, llama-models' ModelArgs "
                                "defaults to 500000; read as 10000"))
        base = 10000.0
    scaling = None
    if params.get("use_scaled_rope"):
        factor = params.get("rope_scaling_factor")
        high = params.get("rope_high_freq_factor")
        if factor is None:
            findings.append(Finding("rope_scaling_factor", "use_scaled_rope without it: llama-models uses 8"))
            factor = 8.0
        if high is None:
            high = 4.0
        scaling = {"rope_type": "llama3", "factor": float(factor), "low_freq_factor": 1.0,
                   "high_freq_factor": float(high), "original_max_position_embeddings": 8192}
    layer = LayerSpec(rope=True, layout="interleaved", rotary_dim=int(head_dim), head_dim=int(head_dim),
                      base=float(base), scaling=scaling)
    interval = params.get("nope_layer_interval")
    layers = [LayerSpec(rope=False) if interval and (i + 1) % int(interval) == 0 else layer
              for i in range(params["n_layers"])]
    terms = {k: params[k] for k in ("attn_temperature_tuning", "floor_scale", "attn_scale") if params.get(k)}
    return ModelSpec(source=source, dialect="meta", follows="meta-llama/llama-models models/llama3/args.py, "
                     "reference_impl/model.py precompute_freqs_cis / apply_scaling", layers=layers,
                     row_order="meta", max_position_embeddings=params.get("max_seq_len"),
                     original_max_position_embeddings=8192 if scaling else None, attention_terms=terms,
                     findings=findings)


# --- keras-hub ------------------------------------------------------------------------------------------------

#: backbone class -> its rope keys (keras_hub/src/models/*/*_backbone.py get_config, keras-hub 0.32.0).
KERAS_HUB_BACKBONES = {
    "LlamaBackbone": "llama", "Llama3Backbone": "llama", "MistralBackbone": "plain", "MixtralBackbone": "plain",
    "QwenBackbone": "plain", "Qwen3Backbone": "plain", "QwenMoeBackbone": "plain", "Qwen3MoeBackbone": "plain",
    "Phi3Backbone": "phi3", "GptOssBackbone": "gpt_oss",
}


def _keras_hub_class(config):
    if "class_name" in config and isinstance(config.get("config"), dict):
        return config["class_name"], dict(config["config"])
    if "rope_frequency_adjustment_factor" in config or "rope_position_scaling_factor" in config:
        return "LlamaBackbone", dict(config)
    if "rope_scaling_short_factor" in config or "rope_scaling_type" in config:
        return "Phi3Backbone", dict(config)
    raise ValueError("a bare keras-hub get_config() dict is ambiguous for this backbone: pass the preset's "
                     "config.json (with class_name) so the rotary layer it builds is known")


def read_keras_hub(config, *, source: str = "<dict>", version: str = "0.32") -> ModelSpec:
    """Read a keras-hub backbone config (`get_config()`, or a preset `config.json` with `class_name`).

    Follows keras-hub 0.32.0 (and 0.31.x with `version="0.31"`): `RotaryEmbedding(max_wavelength,
    scaling_factor, rope_type)` in layers/modeling/rotary_embedding.py (half layout), Llama's
    `LlamaRotaryEmbedding` (llama3 frequencies from rope_frequency_adjustment_factor, rope_low/high_freq_factor,
    rope_pretraining_sequence_length; its `_get_inverse_freq` never applies rope_position_scaling_factor),
    Phi-3's `Phi3SuScaledRotaryEmbedding` (LongRoPE, switched by start_index + seq_len > pretraining length),
    GPT-OSS's attention (YaRN with original 4096, beta 32/1, truncate False hard-coded; keras-hub <= 0.31
    computes `keras-hub-yarn`). The rows are in HF order (keras-hub's HF converters copy them).
    """
    cls, cfg = _keras_hub_class(dict(config))
    if cls not in KERAS_HUB_BACKBONES:
        raise ValueError(f"{source}: keras-hub backbone {cls!r} is not read (known: {sorted(KERAS_HUB_BACKBONES)})")
    findings = []
    family = KERAS_HUB_BACKBONES[cls]
    heads = cfg.get("num_query_heads")
    head_dim = cfg.get("head_dim") or (cfg["hidden_dim"] // heads if heads and cfg.get("hidden_dim") else None)
    if not head_dim or not cfg.get("num_layers"):
        raise ValueError(f"{source}: {cls} config needs num_layers and head_dim (or hidden_dim, num_query_heads)")
    if "rope_max_wavelength" not in cfg:
        findings.append(Finding("rope_max_wavelength", "absent: keras-hub's default 10000 applies"))
    base = float(cfg.get("rope_max_wavelength", 10000))
    scaling = None
    if family == "llama":
        if cfg.get("rope_position_scaling_factor", 1.0) not in (None, 1, 1.0):
            findings.append(Finding("rope_position_scaling_factor", f"={cfg['rope_position_scaling_factor']} is "
                                    "ignored by LlamaRotaryEmbedding._get_inverse_freq (keras-hub 0.32.0)"))
        if cfg.get("rope_frequency_adjustment_factor") is not None:
            scaling = {"rope_type": "llama3", "factor": float(cfg["rope_frequency_adjustment_factor"]),
                       "low_freq_factor": float(cfg["rope_low_freq_factor"]),
                       "high_freq_factor": float(cfg["rope_high_freq_factor"]),
                       "original_max_position_embeddings": int(cfg["rope_pretraining_sequence_length"])}
    elif family == "plain":
        factor = cfg.get("rope_scaling_factor", 1.0)
        if factor not in (None, 1, 1.0):
            scaling = {"rope_type": "linear", "factor": float(factor)}
    elif family == "phi3":
        if cfg.get("rope_scaling_type") in ("su", "longrope"):
            original = int(cfg["pretraining_sequence_length"])
            scaling = {"rope_type": "longrope", "short_factor": list(cfg["rope_scaling_short_factor"]),
                       "long_factor": list(cfg["rope_scaling_long_factor"]),
                       "original_max_position_embeddings": original,
                       "factor": float(cfg["max_sequence_length"]) / original}
        elif cfg.get("rope_scaling_type") is not None:
            raise ValueError(f"{source}: rope_scaling_type={cfg['rope_scaling_type']!r} is not built by Phi3Attention")
    elif family == "gpt_oss":
        factor = float(cfg.get("rope_scaling_factor", 1.0))
        if version.startswith("0.31"):
            scaling = {"rope_type": "keras-hub-yarn", "factor": factor, "original_max_position_embeddings": 4096,
                       "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}
        else:
            scaling = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": 4096,
                       "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                       "attention_factor": 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0}
    layer = LayerSpec(rope=True, layout="half", rotary_dim=int(head_dim), head_dim=int(head_dim), base=base,
                      scaling=scaling)
    layer.plan()
    return ModelSpec(source=source, dialect="keras-hub",
                     follows=f"keras-hub {version} {cls} (keras_hub/src/models, layers/modeling/rotary_embedding.py)",
                     layers=[layer] * int(cfg["num_layers"]), row_order="hf",
                     max_position_embeddings=cfg.get("max_sequence_length"),
                     original_max_position_embeddings=(scaling or {}).get("original_max_position_embeddings"),
                     findings=findings)


# --- MaxText --------------------------------------------------------------------------------------------------

#: MaxText src/MaxText/configs/base.yml (commit 003b4169) defaults of the keys this reader uses.
MAXTEXT_DEFAULTS = {"rope_type": "default", "rope_linear_scaling_factor": 1.0, "rope_use_scale": True,
                    "rope_min_timescale": 1, "rope_max_timescale": 10_000, "local_rope_max_timescale": -1,
                    "max_position_embeddings": 163840, "original_max_position_embeddings": 4096, "rope_factor": 40,
                    "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "rope_interleave": True, "rope_truncate": True,
                    "rope_attention_scaling": False, "head_dim": 128, "base_num_decoder_layers": 16,
                    "nope_layer_interval": -1}
_MAXTEXT_ROPE_KEYS = {k for k in MAXTEXT_DEFAULTS if "rope" in k} | {"rope_theta_for_vit"}


def read_maxtext(config, *, source: str = "<dict>") -> ModelSpec:
    """Read MaxText config keys (a model YAML over src/MaxText/configs/base.yml, commit 003b4169).

    Follows src/maxtext/layers/embeddings.py: `RotaryEmbedding` (timescale = min * (max / min) ** (2i / d),
    angle = position / timescale, half layout, `rope_linear_scaling_factor` multiplies the timescale),
    `LLaMARotaryEmbedding` (rope_type "llama3.1": interleaved pairs, llama3 scaling with factor 8, low 1,
    high 4, original 8192 fixed in `_apply_scaling_factor` when `rope_use_scale`), `YarnRotaryEmbedding`
    (rope_type "yarn": rope_factor, original_max_position_embeddings, beta_fast/slow, rope_truncate
    (clamp high to d - 1), rope_interleave: interleaved input pairs; the output is written in half order
    for q and k alike, which leaves q . k as interleaved RoPE; attention scale 0.1 ln(factor) + 1 only when
    rope_attention_scaling, else 1). Keys the file leaves to base.yml are lint findings. `nope_layer_interval`
    > 0: layer i is NoPE when (i + 1) % interval == 0.
    """
    cfg = dict(config)
    findings = []
    unknown = sorted(k for k in cfg if ("rope" in k or "timescale" in k) and k not in _MAXTEXT_ROPE_KEYS)
    if unknown:
        raise ValueError(f"{source}: MaxText rope keys {unknown} are not read by this reader")

    def get(k, lint=True):
        if k not in cfg:
            findings.append(Finding(k, f"not set: base.yml's {MAXTEXT_DEFAULTS[k]!r} applies", lint))
            return MAXTEXT_DEFAULTS[k]
        return cfg[k]

    kind = get("rope_type")
    if get("rope_min_timescale", lint=False) != 1:
        raise ValueError(f"{source}: rope_min_timescale={cfg['rope_min_timescale']} != 1 gives inv_j = "
                         "min^-1 (max/min)^(-2j/d), not a base^(-2j/d) RoPE")
    if get("local_rope_max_timescale", lint=False) not in (-1, None):
        raise ValueError(f"{source}: local_rope_max_timescale (per-layer bases) is not read by this reader")
    head_dim = int(cfg.get("head_dim", MAXTEXT_DEFAULTS["head_dim"]))
    base = float(get("rope_max_timescale"))
    if kind == "llama3.1":
        layout = "interleaved"
        scaling = ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192} if get("rope_use_scale", lint=False) else None)
    elif kind == "yarn":
        layout = "interleaved" if get("rope_interleave") else "half"
        factor = float(get("rope_factor"))
        scaling = {"rope_type": "yarn", "factor": factor,
                   "original_max_position_embeddings": int(get("original_max_position_embeddings")),
                   "beta_fast": float(get("beta_fast")), "beta_slow": float(get("beta_slow")),
                   "truncate": bool(get("rope_truncate")),
                   "attention_factor": (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)
                   if get("rope_attention_scaling") else 1.0}
    elif kind == "default":
        layout = "half"
        factor = float(get("rope_linear_scaling_factor"))
        scaling = None if factor == 1.0 else {"rope_type": "linear", "factor": factor}
    else:
        raise ValueError(f"{source}: rope_type={kind!r} is not one of MaxText's default, llama3.1, yarn")
    layer = LayerSpec(rope=True, layout=layout, rotary_dim=head_dim, head_dim=head_dim, base=base, scaling=scaling)
    layer.plan()
    num_layers = int(cfg.get("base_num_decoder_layers", MAXTEXT_DEFAULTS["base_num_decoder_layers"]))
    interval = get("nope_layer_interval", lint=False)
    layers = [LayerSpec(rope=False) if interval and interval > 0 and (i + 1) % interval == 0 else layer
              for i in range(num_layers)]
    return ModelSpec(source=source, dialect="maxtext", follows="MaxText base.yml (003b4169) + layers/embeddings.py",
                     layers=layers, row_order="meta" if kind == "llama3.1" else "hf",
                     max_position_embeddings=cfg.get("max_position_embeddings"),
                     original_max_position_embeddings=(scaling or {}).get("original_max_position_embeddings"),
                     findings=findings)
