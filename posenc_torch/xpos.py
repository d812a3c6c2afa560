"""xPos in PyTorch. Spec: `posenc_np.apply_xpos`, `posenc_np.xpos_scale`."""

from __future__ import annotations

import torch

from posenc_np.backend import check_float_dtype
from posenc_np.xpos import check_xpos_args

from ._common import as_tensor, is_tracing, resolve_dtype
from .rope import apply_rope

__all__ = ["apply_xpos", "xpos_scale"]


def _scale32(positions, dim, scale_base, gamma, center, layout, device):
    # zeta in float32 from exact integers (one rounding, like the spec's value cast to float32), not a
    # spec_constant: this graph already holds apply_rope's constants
    zeta = (2.0 * torch.arange(dim // 2, dtype=torch.float32, device=device) + gamma * dim) / ((1.0 + gamma) * dim)
    # integer positions minus the centre stay exact as integers; one float32 division, one pow
    power = (positions.long() - int(center)).float()[..., None] / float(scale_base)
    half = torch.pow(zeta, power)
    return half.repeat_interleave(2, dim=-1) if layout == "interleaved" else torch.cat([half, half], dim=-1)


def xpos_scale(positions, dim, *, scale_base=512.0, gamma=0.4, center=0, layout="interleaved", dtype=None):
    """`[..., dim]` xPos scale `zeta_i ** ((p - center) / scale_base)`, float32 then `dtype`; see `posenc_np.xpos_scale`."""
    check_xpos_args(dim, scale_base, gamma, center, "query", layout)
    positions = as_tensor(positions)
    if positions.is_floating_point():
        raise TypeError(f"positions must be an integer tensor, got {positions.dtype}")
    return _scale32(positions, dim, scale_base, gamma, center, layout, positions.device).to(resolve_dtype(dtype))


def apply_xpos(x, positions, *, kind="query", base=10000.0, layout="interleaved", scale_base=512.0, gamma=0.4,
               center=0):
    """RoPE then the xPos scale (inverse for keys); see `posenc_np.apply_xpos`.

    Rotation and scale are float32 (half-precision x is widened) and the result is rounded once to
    x's dtype. Works under torch.compile(fullgraph=True); positions are data.
    """
    check_float_dtype("x", x.dtype, x.is_floating_point())
    dim = check_xpos_args(x.shape[-1], scale_base, gamma, center, kind, layout)
    positions = as_tensor(positions, device=x.device)
    rotated = apply_rope(x.float(), positions, base=base, layout=layout)
    scale = _scale32(positions, dim, scale_base, gamma, center, layout, x.device)
    if is_tracing(x):
        # a product with the identity is exact (one term times 1.0, the rest exact zeros) and an extern
        # kernel, so Inductor computes the [..., dim] scale once instead of inlining its pow into the
        # rotation's loop for every batch x head copy (3x the time of RoPE alone, docs/performance.md)
        scale = scale @ torch.eye(dim, dtype=scale.dtype, device=scale.device)
    elif not (torch.is_grad_enabled() and x.requires_grad):  # eager: scale the fresh rotation in place
        return (rotated.mul_(scale) if kind == "query" else rotated.div_(scale)).to(x.dtype)
    return (rotated * scale if kind == "query" else rotated / scale).to(x.dtype)
