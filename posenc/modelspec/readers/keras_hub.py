"""`read_keras_hub`: a keras-hub backbone `get_config()` (or a preset's `config.json`), keras-hub 0.31 / 0.32,
to a `ModelSpec`."""

from __future__ import annotations

import math

from ..canonical import Finding, LayerSpec, ModelSpec

__all__ = ["read_keras_hub", "KERAS_HUB_BACKBONES"]

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
