"""A Hugging Face `config.json` as the port reads it: the file beside SOURCE, the head counts, and the
per-layer RoPE schedule (`posenc_np.rope_schedule_from_hf_config`), each a UsageError naming the problem.

Per-layer schedules: with `--hf-config` naming a model whose layers differ (Gemma 2/3/4 local/global bases,
Llama 4 / SmolLM3 NoPE layers, Cohere2), `schedule_settings` reads the schedule; the sidecar
`TARGET.rope.json` then carries `rope.layers` (`sidecar_layers`: one entry per decoder layer, `null` for
NoPE, else `base`, `rotary_dim`, `scaling`, the TARGET `layout`, `layer_type`), the top-level
`base`/`scaling` are `null` (there is no one value a loader could use), and the `rope-logits` check runs per
layer with that layer's settings (`posenc.port.checks`). A config whose layers all agree keeps the flat
settings of `scaling_from_hf_config`.
"""

from __future__ import annotations

import json
import os

from posenc_np.rope import load_hf_config
from posenc_np.schedule import rope_schedule_from_hf_config

from ..errors import UsageError

__all__ = ["config_beside", "heads", "schedule", "config_dict", "layer_types", "schedule_settings",
           "sidecar_layers"]


def config_beside(reader, what) -> dict:
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


def heads(config) -> tuple[int, int, int]:
    """`(num_attention_heads, num_key_value_heads, head_dim)`; `head_dim` is the config's when it sets one
    (Gemma, Qwen3, Mistral NeMo: not hidden_size // heads), else hidden_size // num_attention_heads."""
    count = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or count)
    head_dim = int(config.get("head_dim") or config["hidden_size"] // count)
    return count, kv, head_dim


def schedule(config, what) -> list:
    """`rope_schedule_from_hf_config(config)`: per decoder layer None (NoPE) or its RoPE settings."""
    try:
        return rope_schedule_from_hf_config(config)
    except (ValueError, TypeError) as error:
        raise UsageError(f"{what}: {error}") from None


def config_dict(config) -> dict:
    """An HF config (a dict, a path, a directory, a `PretrainedConfig`) as a dict; UsageError if unreadable."""
    try:
        return load_hf_config(config)
    except (ValueError, TypeError) as error:
        raise UsageError(str(error)) from None


def layer_types(cfg, layers) -> list:
    """The config's `layer_types` (of its text config) when it names one per entry of `layers`, else Nones."""
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) and "num_hidden_layers" not in cfg \
        else cfg
    types = text.get("layer_types")
    return list(types) if types and len(types) == len(layers) else [None] * len(layers)


def schedule_settings(config):
    """`(schedule, layer_types)` of an HF config when its layers differ (a NoPE layer, or two different entries),
    else None (one setting serves every layer). A config the reader refuses is a UsageError naming why."""
    cfg = config_dict(config)
    found = schedule(cfg, "--hf-config")
    if all(entry == found[0] for entry in found) and found[0] is not None:
        return None
    return found, layer_types(cfg, found)


def sidecar_layers(layers, types, target_layout) -> list:
    """`rope.layers` of the sidecar: per decoder layer `None` (NoPE) or its settings in TARGET's layout."""
    return [None if entry is None else {**entry, "layout": target_layout or entry["layout"], "layer_type": kind}
            for entry, kind in zip(layers, types, strict=True)]
