"""Llama 4's NoPE-layer query temperature in MLX; formula and source: `posenc_np.temperature`.

Float32 from integer positions (`(p + 1) / floor_scale` correctly rounded, exact floor below 2**24);
positions are data under `mx.compile`.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from posenc_np.backend import check_nonnegative_positions
from posenc_np.temperature import check_llama_4_scaling_args, check_temperature_args

from ._common import as_tensor, is_integer, is_tracing

__all__ = ["llama4_attn_scale", "llama_4_scaling"]


def _check_positions(positions):
    """Integer positions; readable ones non-negative (the spec's ValueError)."""
    positions = as_tensor(positions)
    if not is_integer(positions):
        raise TypeError(f"positions must be an integer array, got dtype {positions.dtype}")
    if not is_tracing(positions):
        check_nonnegative_positions("positions", np.asarray(positions))
    return positions


def llama4_attn_scale(positions, *, floor_scale=8192, attn_scale=0.1):
    """`1 + attn_scale * log1p(floor((p + 1) / floor_scale))` as float32; see `posenc_np.llama4_attn_scale`.

    Negative positions raise the spec's ValueError eagerly; under mx.compile they give NaN.
    """
    floor_scale, attn_scale = check_temperature_args(floor_scale, attn_scale)
    positions = _check_positions(positions)
    t = mx.floor((positions.astype(mx.float32) + 1.0) / floor_scale)
    # under mx.compile (no raise on data) a negative position is NaN, as documented in the spec
    return mx.where(positions < 0, float("nan"), 1.0 + attn_scale * mx.log1p(t))


def llama_4_scaling(positions, *, beta, original_max_position_embeddings):
    """`1 + beta * ln(1 + floor(p / original_max_position_embeddings))` as float32; see
    `posenc_np.llama_4_scaling`. Negative positions raise the spec's ValueError eagerly; under mx.compile
    they give NaN."""
    beta, original = check_llama_4_scaling_args(beta, original_max_position_embeddings)
    positions = _check_positions(positions)
    t = mx.floor(positions.astype(mx.float32) / original)
    return mx.where(positions < 0, float("nan"), 1.0 + beta * mx.log1p(t))
