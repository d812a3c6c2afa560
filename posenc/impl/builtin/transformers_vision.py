"""transformers' ViT-family position-grid resizes, as `--impl transformers` checks them (transformers 5.24.0):
`interpolate_pos_encoding(embeddings, height, width)` of `ViTEmbeddings`, `CLIPVisionEmbeddings`,
`SiglipVisionEmbeddings`, `Dinov2Embeddings` and `Dinov2WithRegistersEmbeddings`, and Siglip2's
`Siglip2VisionEmbeddings.resize_positional_embeddings(positional, spatial_shapes, max_length)`.

Each model is built from a tiny config (nothing downloaded) whose image and patch sizes give the case's
old grid, its position table set to the case's table; the model is asked for the new grid as an image of
`new_h x new_w` patches. What each computes, and what the adapter therefore requires of a case (anything else
is a skip): ViT, CLIP, SigLIP and Dinov2 resample bicubically (`a = -0.75`, no antialiasing, the size grid;
Dinov2 in float32) with 1 prefix row (SigLIP: 0) from a square grid; Dinov2-with-registers antialiases
(`a = -0.5`, float32; its registers are not in the position table: 1 prefix row); Siglip2 resizes bilinearly
with antialiasing, no prefix row, in float32.
"""

from __future__ import annotations

from ...adapters import NotSupported
from ..implementation import Implementation

__all__ = ["implementations", "NAMES"]

PATCH = 2
#: name -> (model kind, resize settings it computes, prefix rows of its table)
_MODELS = {
    "transformers-vit": ("vit", dict(method="cubic", cubic_a=-0.75, antialias=False), 1),
    "transformers-clip": ("clip", dict(method="cubic", cubic_a=-0.75, antialias=False), 1),
    "transformers-siglip": ("siglip", dict(method="cubic", cubic_a=-0.75, antialias=False), 0),
    "transformers-dinov2": ("dinov2", dict(method="cubic", cubic_a=-0.75, antialias=False), 1),
    "transformers-dinov2-reg": ("dinov2-reg", dict(method="cubic", cubic_a=-0.5, antialias=True), 1),
    "transformers-siglip2": ("siglip2", dict(method="linear", antialias=True), 0),
}
NAMES = tuple(_MODELS)


def _embeddings(kind: str, grid: int, dim: int):
    """A tiny random embeddings module of `kind` whose position table holds a `grid x grid` grid of width `dim`."""
    common = dict(hidden_size=dim, num_hidden_layers=1, num_attention_heads=1, intermediate_size=4,
                  image_size=grid * PATCH, patch_size=PATCH, num_channels=3)
    if kind == "vit":
        from transformers.models.vit.modeling_vit import ViTConfig, ViTEmbeddings

        return ViTEmbeddings(ViTConfig(**common))
    if kind == "dinov2":
        from transformers.models.dinov2.modeling_dinov2 import Dinov2Config, Dinov2Embeddings

        return Dinov2Embeddings(Dinov2Config(**common))
    if kind == "dinov2-reg":
        from transformers.models.dinov2_with_registers import modeling_dinov2_with_registers as m

        return m.Dinov2WithRegistersEmbeddings(m.Dinov2WithRegistersConfig(**common, num_register_tokens=4))
    if kind == "clip":
        from transformers.models.clip.modeling_clip import CLIPVisionConfig, CLIPVisionEmbeddings

        return CLIPVisionEmbeddings(CLIPVisionConfig(**common))
    from transformers.models.siglip.modeling_siglip import SiglipVisionConfig, SiglipVisionEmbeddings

    return SiglipVisionEmbeddings(SiglipVisionConfig(**common))


def _set_table(module, table):
    import torch

    with torch.no_grad():
        if hasattr(module, "position_embedding"):  # CLIP, SigLIP: an nn.Embedding
            module.position_embedding.weight.copy_(table)
        else:
            module.position_embeddings.copy_(table[None])


def _resizer(name: str):
    kind, computes, prefix = _MODELS[name]

    def resize_grid(table, old_grid, new_grid, *, method="cubic", align_corners=False, cubic_a=-0.75,
                    antialias=False, scale=None, prefix_tokens=0):
        """The contract's `resize_grid` through the model's own resize (torch in, torch out)."""
        import torch

        asked = dict(method=method, cubic_a=cubic_a, antialias=antialias)
        if any(asked[k] != v for k, v in computes.items()) or align_corners or scale is not None:
            raise NotSupported(f"{name} resizes with {computes} on the size grid, align_corners=False; the case asks "
                               f"{asked}, align_corners={align_corners}, scale={scale}")
        if prefix_tokens != prefix:
            raise NotSupported(f"{name}'s table has {prefix} prefix row(s), not {prefix_tokens}")
        (old_h, old_w), (new_h, new_w) = (int(n) for n in old_grid), (int(n) for n in new_grid)
        if kind == "siglip2":
            from transformers.models.siglip2.modeling_siglip2 import Siglip2VisionEmbeddings

            positional = table.to(torch.float32).reshape(old_h, old_w, -1)
            spatial = torch.tensor([[new_h, new_w]])
            out = Siglip2VisionEmbeddings.resize_positional_embeddings(positional, spatial, new_h * new_w)[0]
            return out.to(table.dtype)
        if old_h != old_w:
            raise NotSupported(f"{name} reads its stored grid as square (sqrt of its rows); this one is {old_h}x{old_w}")
        module = _embeddings(kind, old_h, table.shape[-1]).to(table.dtype)
        _set_table(module, table)
        tokens = torch.zeros(1, prefix + new_h * new_w, table.shape[-1], dtype=table.dtype)
        with torch.no_grad():
            out = module.interpolate_pos_encoding(tokens, new_h * PATCH, new_w * PATCH)
        return out[0]

    return resize_grid


def implementations(version: str) -> tuple[Implementation, ...]:
    """One `Implementation` per model (float32 class: Dinov2, Dinov2-reg and Siglip2 resize in float32)."""
    return tuple(Implementation(name, "torch", {"resize_grid": _resizer(name)}, version=version, angles="float32",
                                differentiable=False,
                                description=f"{_MODELS[name][0]} interpolate_pos_encoding ({_MODELS[name][1]})")
                 for name in NAMES)

