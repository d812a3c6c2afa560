"""Llama 4's NoPE-layer query temperature in JAX; formula and source: `posenc_np.temperature`.

Float32 from integer positions (`(p + 1) / floor_scale` correctly rounded, exact floor below 2**24);
positions are data under `jax.jit`.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from posenc_np.backend import check_nonnegative_positions
from posenc_np.temperature import check_llama_4_scaling_args, check_temperature_args

from ._common import as_tensor, is_tracing

__all__ = ["llama4_attn_scale", "llama_4_scaling"]


def llama4_attn_scale(positions, *, floor_scale=8192, attn_scale=0.1):
    """`1 + attn_scale * log1p(floor((p + 1) / floor_scale))` as float32; see `posenc_np.llama4_attn_scale`.

    Negative positions raise the spec's ValueError eagerly; under jax.jit they give NaN.
    """
    floor_scale, attn_scale = check_temperature_args(floor_scale, attn_scale)
    positions = as_tensor(positions)
    if not jnp.issubdtype(positions.dtype, jnp.integer):
        raise TypeError(f"positions must be an integer array, got dtype {positions.dtype}")
    if not is_tracing(positions):
        check_nonnegative_positions("positions", np.asarray(positions))
    t = jnp.floor((positions.astype(jnp.float32) + 1.0) / floor_scale)
    # under jit (no raise on data) a negative position is NaN, as documented in the spec
    return jnp.where(positions < 0, jnp.nan, 1.0 + attn_scale * jnp.log1p(t))


def llama_4_scaling(positions, *, beta, original_max_position_embeddings):
    """`1 + beta * ln(1 + floor(p / original_max_position_embeddings))` as float32; see
    `posenc_np.llama_4_scaling`. Negative positions raise the spec's ValueError eagerly; under jax.jit
    they give NaN."""
    beta, original = check_llama_4_scaling_args(beta, original_max_position_embeddings)
    positions = as_tensor(positions)
    if not jnp.issubdtype(positions.dtype, jnp.integer):
        raise TypeError(f"positions must be an integer array, got dtype {positions.dtype}")
    if not is_tracing(positions):
        check_nonnegative_positions("positions", np.asarray(positions))
    t = jnp.floor(positions.astype(jnp.float32) / original)
    return jnp.where(positions < 0, jnp.nan, 1.0 + beta * jnp.log1p(t))
