"""`read_source`: a path (or dict) to the reader of its dialect; `runtime=` re-reads an HF config the way
vLLM, mlx-lm, llama.cpp, keras-hub or Transformer Engine do (`posenc.modelspec.runtimes`)."""

from __future__ import annotations

from .canonical import ModelSpec
from .readers import (
    DIALECTS,
    load_config,
    read_gguf,
    read_hf_config,
    read_keras_hub,
    read_maxtext,
    read_megatron,
    read_meta_params,
    read_nemo,
    read_torchtitan,
)
from .runtimes import runtime_spec

__all__ = ["read_source"]


def _is_nemo(data: dict) -> bool:
    """NeMo 2 `model.yaml` (a `_target_` under nemo.) or NeMo 1 `model_config.yaml` (its own key names)."""
    node = data.get("config") if isinstance(data.get("config"), dict) else data
    if str(node.get("_target_", data.get("_target_", ""))).startswith("nemo."):
        return True
    return any(k in data for k in ("rotary_percentage", "scale_positional_embedding", "encoder_seq_length"))


def _is_megatron(data: dict) -> bool:
    """megatron-core TransformerConfig / GPTModel names (`num_query_groups`, `rotary_base`, `kv_channels`...),
    at the top or under `model:` (Megatron-Bridge run_config.yaml)."""
    if isinstance(data.get("model"), dict):
        data = data["model"]
    return "num_layers" in data and any(k in data for k in ("position_embedding_type", "rotary_base", "kv_channels",
                                                             "num_query_groups", "multi_latent_attention"))


def _detect(data: dict, path: str) -> str:
    if isinstance(data.get("model_spec"), dict) and "model" in data["model_spec"] or "rope_scaling_args" in data:
        return "torchtitan"
    hf_keys = "model_type" in data or "architectures" in data  # ChatGLM's HF config has num_layers, kv_channels
    if not hf_keys and _is_nemo(data):
        return "nemo"
    if not hf_keys and _is_megatron(data):
        return "megatron"
    if path.endswith((".yml", ".yaml")):
        return "maxtext"
    if "class_name" in data and isinstance(data.get("config"), dict) and str(data.get("module", "")).startswith(
            "keras_hub"):
        return "keras-hub"
    if any(k in data for k in ("rope_max_wavelength", "rope_frequency_adjustment_factor")):
        return "keras-hub"
    if "n_layers" in data and "dim" in data:
        return "meta"
    if any(k in data for k in ("rope_max_timescale", "base_num_decoder_layers")):
        return "maxtext"
    return "hf"


def read_source(source, *, dialect: str | None = None, runtime: str | None = None, **options) -> ModelSpec:
    """Read a path (config.json, params.json, .gguf, keras-hub config, MaxText YAML, torchtitan job-config dump,
    Megatron TransformerConfig keys, NeMo model.yaml / model_config.yaml) or a dict.

    Detection: `model_spec.model` or torchtitan 0.2's `rope_scaling_args` -> torchtitan; a `_target_` under `nemo.` or NeMo 1 key names -> nemo;
    `num_layers` with `rotary_base` / `kv_channels` / `num_query_groups` / `position_embedding_type` ->
    megatron; any other YAML -> maxtext; then keras-hub, Meta and HF by their keys.

    Args:
        source: a file or directory path, or an already-loaded dict (then `dialect` defaults to "hf").
        dialect: force a reader (`DIALECTS`); detected from the file otherwise.
        runtime: re-read an HF config the way that runtime does (`posenc.modelspec.runtimes.RUNTIMES`).
        options: runtime options (`max_model_len`, `hf_overrides`, `keras_hub_version`, ...).

    Raises:
        ValueError: unreadable file, unknown dialect, or the reader's own errors.
    """
    if dialect is not None and dialect not in DIALECTS:
        raise ValueError(f"dialect={dialect!r} is not one of {DIALECTS}")
    if isinstance(source, dict):
        data, name = source, "<dict>"
        dialect = dialect or "hf"
    else:
        name = str(source)
        if name.endswith(".gguf") or dialect == "gguf":
            if runtime not in (None, "llama.cpp"):
                raise ValueError(f"--runtime {runtime} applies to HF config.json sources, not to a GGUF file")
            return read_gguf(name)
        data = load_config(name)
        dialect = dialect or _detect(data, name)
    if runtime is not None:
        if dialect != "hf":
            raise ValueError(f"--runtime {runtime} applies to HF config.json sources, not to a {dialect} config")
        return runtime_spec(data, runtime, source=name, **options)
    if dialect == "hf":
        return read_hf_config(data, source=name)
    if dialect == "meta":
        return read_meta_params(data, source=name)
    if dialect == "keras-hub":
        return read_keras_hub(data, source=name, version=options.get("keras_hub_version", "0.32"))
    if dialect == "maxtext":
        return read_maxtext(data, source=name)
    if dialect == "torchtitan":
        return read_torchtitan(data, source=name)
    if dialect == "megatron":
        return read_megatron(data, source=name)
    if dialect == "nemo":
        return read_nemo(data, source=name)
    raise ValueError(f"a {dialect} source must be a file path")

