"""The canonical position spec: one reading of a model's rotary settings, whatever file it came from.

Every reader (`posenc.modelspec.readers`) returns a `ModelSpec`: one `LayerSpec` per decoder layer (rotary
or NoPE; layout, rotary dim, base, scaling dict in `posenc_np.scaling`'s registry terms, multi-axis
section), the model-level keys that shape positions (context lengths, q/k row order, attention scale
terms), where it was read from, and the findings a `--lint` reports (a value the reader had to assume).

Layouts are relative to the q/k rows as stored: a GGUF of a Llama model rotates "interleaved" (llama.cpp
NORM) rows that the converter permuted into Meta order, which is the same encoding as "half" on the HF
rows. `LayerSpec.hf_layout(row_order)` gives the layout in HF row order, which is what `compare` uses.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from posenc_np.rope import rope_plan

__all__ = ["LayerSpec", "ModelSpec", "Finding", "ROW_ORDERS"]

#: q/k row orders: "hf" (the rows rotate as the layout says), "meta" (rows permuted into Meta's interleaved
#: order, as llama.cpp's converter and Meta's consolidated checkpoints store them).
ROW_ORDERS = ("hf", "meta")


@dataclass(frozen=True)
class Finding:
    """Something a reader had to assume or could not read.

    Attributes:
        key: the config key (or "" for the file as a whole).
        message: what was assumed and by whom.
        lint: True when `posenc spec --lint` fails on it (a silently defaulted value, an unknown key, a rope
            type no runtime knows); False for a note.
    """

    key: str
    message: str
    lint: bool = True

    def as_dict(self):
        return {"key": self.key, "message": self.message, "lint": self.lint}


@dataclass(frozen=True)
class LayerSpec:
    """The rotary positions of one decoder layer.

    Attributes:
        rope: False for a layer without rotary positions (NoPE); the other fields are then None.
        layout: "half" or "interleaved", relative to the stored q/k rows.
        rotary_dim: rotated channels per head (the first `rotary_dim`; `proportional` keeps the head dim).
        head_dim: channels per head the rotation acts on (the rope slice for MLA).
        base: `rope_theta`.
        scaling: None or a dict of `posenc_np.scaling.SCALING_TYPES` (`rope_type` + its keys).
        mrope_section: pairs per position axis (multi-axis RoPE), None for 1-D.
        mrope_interleaved: Qwen3-VL's interleaved pair -> axis map.
        mrope_axes: an explicit pair -> axis table instead of a section (ERNIE-4.5-VL), None otherwise.
    """

    rope: bool = True
    layout: str | None = None
    rotary_dim: int | None = None
    head_dim: int | None = None
    base: float | None = None
    scaling: dict | None = None
    mrope_section: tuple | None = None
    mrope_interleaved: bool = False
    mrope_axes: tuple | None = None

    def plan(self):
        """`posenc_np.rope.rope_plan` of this layer (None for NoPE): the frequencies every backend uses."""
        if not self.rope:
            return None
        extra = {}
        if self.mrope_section is not None:
            extra = dict(mrope_section=list(self.mrope_section), mrope_interleaved=self.mrope_interleaved)
        if self.mrope_axes is not None:
            extra = dict(mrope_axes=list(self.mrope_axes))
        return rope_plan(self.rotary_dim, base=self.base, scaling=self.scaling, layout=self.layout, **extra)

    @property
    def rope_type(self) -> str | None:
        if not self.rope:
            return None
        return (self.scaling or {}).get("rope_type", "default")

    def hf_layout(self, row_order: str) -> str | None:
        """The layout on HF-ordered rows: Meta-ordered rows rotated interleaved are HF rows rotated by halves."""
        if not self.rope or row_order == "hf":
            return self.layout
        return "half" if self.layout == "interleaved" else "interleaved"

    def as_dict(self) -> dict:
        if not self.rope:
            return {"rope": False}
        plan = self.plan()
        out = {"rope": True, "layout": self.layout, "rotary_dim": self.rotary_dim, "head_dim": self.head_dim,
               "base": self.base, "scaling": _jsonable(self.scaling),
               "attention_scale": plan.attention_scale, "frequencies": plan.kind,
               "inv_freq": (plan.turns * 2 * math.pi).tolist()}
        if self.mrope_section is not None:
            out.update(mrope_section=list(self.mrope_section), mrope_interleaved=self.mrope_interleaved)
        if self.mrope_axes is not None:
            out.update(mrope_axes=list(self.mrope_axes))
        return out


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass
class ModelSpec:
    """One model's rotary settings, per layer, as read from one source.

    Attributes:
        source: the file (or "<dict>").
        dialect: "hf", "gguf", "meta", "mlx", "vllm", "keras-hub", "maxtext", "torchtitan", "megatron", "nemo".
        follows: the file and version of the code whose reading this reproduces.
        layers: one `LayerSpec` per decoder layer.
        row_order: "hf" or "meta" (see `ROW_ORDERS`).
        max_position_embeddings: the context length the settings claim (None when absent).
        original_max_position_embeddings: the pre-extension length of scaled settings (None when unscaled).
        attention_terms: model-level keys that scale attention logits (Llama 4 temperature, query
            pre-attention scalar, softcapping, DeepSeek's YaRN softmax mscale...), as read.
        runtime: the runtime whose computation this is (`posenc spec --runtime`), None for the file's own.
        findings: what the reader had to assume (`Finding`).
    """

    source: str
    dialect: str
    follows: str
    layers: list
    row_order: str = "hf"
    max_position_embeddings: int | None = None
    original_max_position_embeddings: int | None = None
    attention_terms: dict = field(default_factory=dict)
    runtime: str | None = None
    findings: list = field(default_factory=list)

    @property
    def lint_findings(self) -> list:
        return [f for f in self.findings if f.lint]

    def groups(self) -> list:
        """`[(first, last, layer)]`: runs of consecutive identical layers (for printing)."""
        out = []
        for i, layer in enumerate(self.layers):
            if out and out[-1][2] == layer and out[-1][1] == i - 1:
                out[-1] = (out[-1][0], i, layer)
            else:
                out.append((i, i, layer))
        return out

    def as_dict(self) -> dict:
        return {"source": self.source, "dialect": self.dialect, "follows": self.follows, "runtime": self.runtime,
                "num_layers": len(self.layers), "row_order": self.row_order,
                "max_position_embeddings": self.max_position_embeddings,
                "original_max_position_embeddings": self.original_max_position_embeddings,
                "attention_terms": _jsonable(self.attention_terms),
                "layers": [layer.as_dict() for layer in self.layers],
                "findings": [f.as_dict() for f in self.findings]}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2) + "\n"

    def table(self) -> str:
        """A terminal table: one row per run of identical layers, then model-level keys and findings."""
        head = f"{self.source}  ({self.dialect}; reads as {self.follows})"
        if self.runtime:
            head += f"\nas computed by runtime {self.runtime!r}"
        rows = [("layers", "rope", "layout", "rotary_dim", "base", "scaling", "attn_scale", "freqs")]
        for first, last, layer in self.groups():
            span = str(first) if first == last else f"{first}-{last}"
            if not layer.rope:
                rows.append((span, "NoPE", "", "", "", "", "", ""))
                continue
            plan = layer.plan()
            scaling = _short_scaling(layer.scaling)
            if layer.mrope_section is not None:
                scaling += f" mrope{list(layer.mrope_section)}{' interleaved' if layer.mrope_interleaved else ''}"
            if layer.mrope_axes is not None:
                counts = [list(layer.mrope_axes).count(i) for i in range(max(layer.mrope_axes) + 1)]
                scaling += f" mrope_axes(pairs per axis {counts}; --json has the table)"
            rows.append((span, "rope", layer.layout, f"{layer.rotary_dim}/{layer.head_dim}", f"{layer.base:g}",
                         scaling, f"{plan.attention_scale:.6g}", plan.kind))
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
        lines = [head] + ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        lines.append(f"q/k row order: {self.row_order}; max_position_embeddings: {self.max_position_embeddings}; "
                     f"original: {self.original_max_position_embeddings}")
        if self.attention_terms:
            lines.append("attention terms: " + ", ".join(f"{k}={v}" for k, v in self.attention_terms.items()))
        for f in self.findings:
            lines.append(f"{'lint' if f.lint else 'note'}: {f.key + ': ' if f.key else ''}{f.message}")
        return "\n".join(lines) + "\n"


def _short_scaling(scaling) -> str:
    if not scaling:
        return "default"
    parts = []
    for key, value in scaling.items():
        if key == "rope_type":
            continue
        if isinstance(value, (list, tuple, np.ndarray)):
            value = f"[{len(value)} values]"
        parts.append(f"{key}={value}")
    return f"{scaling.get('rope_type', 'default')}(" + ", ".join(parts) + ")"
