"""`read_hf_config`: a Hugging Face `config.json` (transformers 5.24: v4 flat keys, v5 `rope_parameters`, per
layer type) to a `ModelSpec`."""

from __future__ import annotations

import copy

from posenc_np.schedule import decoder_config, rope_schedule_from_hf_config

from ..canonical import Finding, LayerSpec, ModelSpec

__all__ = ["read_hf_config", "HF_ROPE_TYPES", "ATTENTION_TERM_KEYS"]

#: transformers 5.24 `ROPE_INIT_FUNCTIONS` plus `default`: the rope types HF itself computes.
HF_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional")
_HF = "transformers 5.24 modeling_rope_utils.py standardize_rope_params + models/*/modeling_*.py"
#: Config keys that scale attention logits besides RoPE (kept as model-level `attention_terms`).
ATTENTION_TERM_KEYS = ("attn_temperature_tuning", "floor_scale", "attn_scale", "query_pre_attn_scalar",
                       "attn_logit_softcapping", "final_logit_softcapping", "llama_4_scaling_beta")


def _transformers_default_theta(model_type):
    """The `default_theta` a transformers 5 config class fills in when the file has no rope_theta (None if unknown)."""
    try:
        from transformers import CONFIG_MAPPING
        cls = CONFIG_MAPPING[model_type]
    except (ImportError, KeyError):  # transformers absent, or the model type unknown to it
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
    """The decoder's config: the schedule reader's rule (text_config / llm_config / language_config)."""
    return decoder_config(cfg)


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
            section = entry.get("mrope_section")
            out.append(LayerSpec(rope=True, layout=entry["layout"], rotary_dim=int(entry["rotary_dim"]),
                                 head_dim=head_dim_of(entry), base=float(entry["base"]),
                                 scaling=None if entry["scaling"] is None else dict(entry["scaling"]),
                                 mrope_section=None if section is None else tuple(section),
                                 mrope_interleaved=bool(entry.get("mrope_interleaved", False)),
                                 mrope_axes=None if entry.get("mrope_axes") is None else tuple(entry["mrope_axes"])))
    return out


def read_hf_config(config, *, source: str = "<dict>") -> ModelSpec:
    """Read a Hugging Face `config.json` (any form) into a `ModelSpec`.

    Follows transformers 5.24: `RotaryEmbeddingConfigMixin.standardize_rope_params` (v4 `rope_scaling` /
    `rope_theta` and v5 `rope_parameters`, `type` -> `rope_type`, original length moved into the dict) and
    the per-layer schedule of `posenc_np.schedule.rope_schedule_from_hf_config` (layer types, NoPE layers,
    Gemma/Cohere/Llama 4 rules, MLA, multi-axis sections with their family's layout). A config without `rope_theta` gets the
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
    try:  # multi-axis text models too: the schedule carries their sections and layout
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
