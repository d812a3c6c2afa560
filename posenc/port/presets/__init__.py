"""Presets: the declared rules (and verifications) of well-known ports, one module per family group.

* `meta_llama`: `meta-llama-to-hf`.
* `bert`: `hf-bert-to-flax`, `hf-bert-to-keras`.
* `t5x`: `t5x-to-hf-t5`.
* `gguf_families`: `hf-{llama,mistral,qwen2,gemma,phi3,gpt-neox}-to-gguf`, `gguf-to-hf-{llama,qwen2,gemma,phi3,gpt-neox}`.
* `flax_llama`: `hf-llama-to-flax`.
* `keras_llama`: `hf-llama-to-keras`, `keras-to-hf-llama`.
* `deepseek_mla`: `hf-deepseek-mla-to-half`.
* `mlx_lm`: `hf-llama-to-mlx`, `hf-qwen2-to-mlx`, `hf-gemma3-to-mlx`.
* `training_stacks`: `hf-llama-to-{torchtitan,maxtext,megatron}`, `{torchtitan,maxtext,megatron}-to-hf-llama`.

Each module exports `PRESETS` (name -> builder `(reader, PresetOptions) -> Preset`); this package merges them.
"""

from __future__ import annotations

from ...errors import UsageError
from ..preset import RESIZING_PRESETS, Preset, PresetOptions
from . import bert, deepseek_mla, flax_llama, gguf_families, keras_llama, meta_llama, mlx_lm, t5x, training_stacks

__all__ = ["PRESETS", "Preset", "PresetOptions", "get_preset"]

#: preset name -> builder, in the order `posenc port --help` lists them
PRESETS = {**meta_llama.PRESETS, **bert.PRESETS, **t5x.PRESETS, **gguf_families.PRESETS, **flax_llama.PRESETS,
           **deepseek_mla.PRESETS, **keras_llama.PRESETS, **mlx_lm.PRESETS, **training_stacks.PRESETS}


def get_preset(name, reader, options: PresetOptions | None = None) -> Preset:
    """The `Preset` `name` builds for the checkpoint `reader` reads."""
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    options = PresetOptions() if options is None else options
    if options.resize_positions is not None and name not in RESIZING_PRESETS:
        raise UsageError(f"--resize-positions belongs to the BERT presets ({', '.join(RESIZING_PRESETS)}); "
                         f"use --resize GLOB=LEN otherwise")
    return PRESETS[name](reader, options)
