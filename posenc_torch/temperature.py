"""Llama 4's NoPE-layer query temperature in PyTorch; formula and source: `posenc_np.temperature`.

Computed in float32 from integer positions: `(p + 1) / floor_scale` is correctly rounded, so its floor is
exact whenever the true quotient is an integer (positions < 2**24); positions are data (no recompile).
"""

from __future__ import annotations

import torch

from posenc_np.backend import check_nonnegative_positions
from posenc_np.temperature import check_llama_4_scaling_args, check_temperature_args

from ._common import as_tensor, is_tracing

__all__ = ["llama4_attn_scale", "llama_4_scaling"]


def llama4_attn_scale(positions, *, floor_scale=8192, attn_scale=0.1):
    """`1 + attn_scale * log1p(floor((p + 1) / floor_scale))` as float32; see `posenc_np.llama4_attn_scale`.

    Negative positions raise the spec's ValueError eagerly; under torch.compile they give NaN.
    """
    floor_scale, attn_scale = check_temperature_args(floor_scale, attn_scale)
    positions = as_tensor(positions)
    if positions.is_floating_point() or positions.dtype == torch.bool:
        raise TypeError(f"positions must be an integer tensor, got dtype {positions.dtype}")
    if not is_tracing(positions):
        check_nonnegative_positions("positions", positions.detach().cpu().numpy())
    t = torch.floor((positions.to(torch.float32) + 1.0) / floor_scale)
    # under jit (no raise on data) a negative position is NaN, as documented in the spec
    return torch.where(positions < 0, float("nan"), 1.0 + attn_scale * torch.log1p(t))


def llama_4_scaling(positions, *, beta, original_max_position_embeddings):
    """`1 + beta * ln(1 + floor(p / original_max_position_embeddings))` as float32; see
    `posenc_np.llama_4_scaling`. Negative positions raise the spec's ValueError eagerly; under torch.compile
    they give NaN."""
    beta, original = check_llama_4_scaling_args(beta, original_max_position_embeddings)
    positions = as_tensor(positions)
    if positions.is_floating_point() or positions.dtype == torch.bool:
        raise TypeError(f"positions must be an integer tensor, got dtype {positions.dtype}")
    if not is_tracing(positions):
        check_nonnegative_positions("positions", positions.detach().cpu().numpy())
    t = torch.floor(positions.to(torch.float32) / original)
    return torch.where(positions < 0, float("nan"), 1.0 + beta * torch.log1p(t))
