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
    read_torchtitan     torchtitan 0.3.0 job-config dump (`RoPE.Config` per layer), JSON or TOML
    read_megatron       megatron-core 0.16.1 TransformerConfig / GPTModel keys (Megatron-Bridge providers)
    read_nemo           NeMo 2 `context/model.yaml`, NeMo 1 `model_config.yaml`

One module per dialect (`hf`, `gguf`, `meta`, `keras_hub`, `maxtext`, `torchtitan`, `megatron` (with NeMo));
`load_config` reads a JSON, YAML or TOML file; `posenc.modelspec.source.read_source` sends a path (or dict) to the right reader.
"""

from __future__ import annotations

import json
import os

from .gguf import GGUF_NATIVE_NORM_ARCHS, GGUF_PERMUTED_ARCHS, read_gguf
from .hf import ATTENTION_TERM_KEYS, HF_ROPE_TYPES, read_hf_config
from .keras_hub import read_keras_hub
from .maxtext import read_maxtext
from .megatron import read_megatron, read_nemo
from .meta import read_meta_params
from .torchtitan import read_torchtitan

__all__ = ["read_hf_config", "read_gguf", "read_meta_params", "read_keras_hub", "read_maxtext", "read_torchtitan",
           "read_megatron", "read_nemo", "load_config", "CONFIG_NAMES",
           "DIALECTS", "HF_ROPE_TYPES", "GGUF_PERMUTED_ARCHS", "GGUF_NATIVE_NORM_ARCHS", "ATTENTION_TERM_KEYS"]

DIALECTS = ("hf", "gguf", "meta", "keras-hub", "maxtext", "torchtitan", "megatron", "nemo")


#: The config files `load_config` looks for in a directory, in order: HF, Meta, then the training stacks'
#: (torchtitan's job-config dump, MaxText's YAML, Megatron's TransformerConfig, NeMo 2's context/model.yaml,
#: NeMo 1's model_config.yaml, Megatron-Bridge's run_config.yaml; the names `posenc port` writes beside them).
CONFIG_NAMES = ("config.json", "params.json", "job_config.json", "job_config.toml", "maxtext.yml",
                "transformer_config.json", "transformer_config.yaml", os.path.join("context", "model.yaml"),
                "model_config.yaml", "run_config.yaml")


def load_config(path) -> dict:
    """A JSON, YAML or TOML file (or a directory holding one of `CONFIG_NAMES`) as a dict; ValueError if unreadable."""
    path = str(path)
    if os.path.isdir(path):
        for name in CONFIG_NAMES:
            if os.path.exists(os.path.join(path, name)):
                return load_config(os.path.join(path, name))
        raise ValueError(f"{path!r} is a directory without any of {', '.join(CONFIG_NAMES)}")
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError as error:
        raise ValueError(f"cannot read {path!r}: {error.strerror or error}") from error
    if path.endswith(".toml"):
        import tomllib
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"{path!r} is not valid TOML: {error}") from error
    elif path.endswith((".yml", ".yaml")):
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
