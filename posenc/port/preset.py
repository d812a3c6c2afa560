"""The `Preset` type every preset module builds, the options a user may set on one, and the RoPE sidecar.

A leaf: it imports nothing of `posenc.port`, so every preset module (`posenc.port.presets.*`) can import it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Preset", "PresetOptions", "RESIZING_PRESETS", "rope_sidecar"]


class Preset:
    """`rules`, the formats it expects, the RoPE sidecar and extra verification checks."""

    def __init__(self, rules, *, target_format=None, rope=None, sidecar=None, extra=(), metadata=None, layout=None,
                 stack_config=None):
        self.rules, self.target_format, self.rope = rules, target_format, rope
        self.sidecar, self.extra, self.metadata = sidecar, list(extra), metadata or {}
        # a training stack's tensor layout (posenc.port.stacks) and the stack config written beside its tensors
        self.layout, self.stack_config = layout, stack_config


@dataclass(frozen=True)
class PresetOptions:
    """What a user may set on a preset; None takes the preset's own value (params.json, the head dim...).

    Attributes:
        heads, kv_heads: query and key/value heads (meta-llama-to-hf; default params.json's).
        rope_theta: RoPE base (meta-llama-to-hf; default params.json's `rope_theta`, else 10000).
        rotary_dim: rotated channels per head (meta-llama-to-hf; default the head dim).
        rope_scaling: an HF `rope_scaling` dict (meta-llama-to-hf; default llama3's constants when
            params.json says `use_scaled_rope`).
        resize_positions: resize BERT's position table to this many rows (the BERT presets only).
        resize_method: "linear", "nearest" or "cubic" (`resize_table`'s methods).
        outtype: GGUF tensor type of 2-D weights (the GGUF presets: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0,
            q5_1; `posenc.formats.gguf_quant`); None keeps each tensor's dtype.
    """

    heads: int | None = None
    kv_heads: int | None = None
    rope_theta: float | None = None
    rotary_dim: int | None = None
    rope_scaling: dict | None = None
    resize_positions: int | None = None
    resize_method: str = "linear"
    outtype: str | None = None


#: Presets that honour `PresetOptions.resize_positions`.
RESIZING_PRESETS = ("hf-bert-to-flax", "hf-bert-to-keras")


def rope_sidecar(*, layout, base, rotary_dim, scaling, num_heads, num_kv_heads, source_layout, mrope_section=None,
                 mrope_interleaved=False) -> dict:
    """The `TARGET.rope.json` sidecar: the RoPE settings a loader of TARGET needs, next to the weights.
    A multi-axis RoPE (Qwen2-VL / Qwen3-VL) adds `mrope_section` and `mrope_interleaved`: a loader that
    drops them rotates images and videos with the wrong axes (docs/conventions.md §3.16)."""
    rope = {"layout": layout, "base": base, "rotary_dim": rotary_dim, "scaling": scaling,
            "num_heads": num_heads, "num_kv_heads": num_kv_heads, "source_layout": source_layout}
    if mrope_section is not None:
        rope.update(mrope_section=list(mrope_section), mrope_interleaved=bool(mrope_interleaved))
    return {"rope": rope}
