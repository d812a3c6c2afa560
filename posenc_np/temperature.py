"""Position-dependent query scales ("attention temperature"): Llama 4's tuning on NoPE layers, and the
Ministral 3 / Mistral 4 query scale of `llama_4_scaling_beta`.

Llama 4 multiplies the queries of its layers without RoPE by
`s(p) = 1 + attn_scale * ln(1 + floor((p + 1) / floor_scale))` (`attn_temperature_tuning`; Nakanishi,
"Scalable-Softmax Is Superior for Attention", 2025, arXiv:2501.19399), so that attention stays sharp at
long context where no rotary angle separates far tokens. It is 1 for p < floor_scale - 1.

Reference: transformers 5.24 `models/llama4/modeling_llama4.py` `Llama4TextAttention.forward`
(`torch.log1p(torch.floor((positions.float() + 1.0) / self.floor_scale)) * self.attn_scale + 1.0`),
defaults `floor_scale=8192`, `attn_scale=0.1` (`configuration_llama4.py`).

Ministral 3 and Mistral 4 multiply every layer's (rotated) queries by
`s(p) = 1 + beta * ln(1 + floor(p / L))`, `beta = rope_parameters["llama_4_scaling_beta"]`,
`L = rope_parameters["original_max_position_embeddings"]`: another floor than Llama 4's (`p`, not `p + 1`), so
it is 1 for p < L. Reference: transformers 5.24 `models/ministral3/modeling_ministral3.py`
`get_llama_4_attn_scale` (`1 + beta * torch.log(1 + torch.floor(positions_ids / max_position_embeddings))`),
applied in `Ministral3Attention.forward` after `apply_rotary_pos_emb`; `models/mistral4/modeling_mistral4.py`.
"""

from __future__ import annotations

import math

import numpy as np

from ._validate import check_integer_positions, check_nonnegative_positions, check_positive_float

__all__ = ["llama4_attn_scale", "llama_4_scaling", "check_temperature_args", "check_llama_4_scaling_args"]


def check_temperature_args(floor_scale, attn_scale) -> tuple[float, float]:
    """Validate `floor_scale` (> 0) and `attn_scale` (finite); shared by the backends (no NumPy, trace-safe)."""
    return check_positive_float("floor_scale", floor_scale), _finite("attn_scale", attn_scale)


def llama4_attn_scale(positions, *, floor_scale=8192, attn_scale=0.1) -> np.ndarray:
    """Llama 4's query scale on NoPE layers: `1 + attn_scale * log1p(floor((p + 1) / floor_scale))`.

    Multiply the queries (`[..., seq, heads, dim]` with `positions[..., seq, None, None]`, or
    `[..., heads, seq, dim]` with `positions[..., :, None]`) by it before the dot product; keys are not
    scaled. Apply it only on layers whose schedule entry is `None` (NoPE) when the config has
    `attn_temperature_tuning`.

    Args:
        positions: integer array (absolute positions, KV-cache offset included).
        floor_scale: `config.floor_scale` (> 0).
        attn_scale: `config.attn_scale` (finite, may be 0).

    Returns:
        float64 array of `positions.shape`.

    Raises:
        ValueError: non-integer or negative positions (the formula gives `-inf` at p = -2, NaN below),
            `floor_scale <= 0`, non-finite `attn_scale`. Backends check eagerly; under jit, where values
            cannot raise, a negative position gives NaN.
        TypeError: non-numeric positions.

    Examples:
        >>> llama4_attn_scale([0, 8190, 8191, 3 * 8192 - 1]).round(6).tolist()
        [1.0, 1.0, 1.069315, 1.138629]
    """
    positions = check_integer_positions("positions", positions)
    check_nonnegative_positions("positions", positions)  # p <= -2 gives log1p(-1) = -inf, or NaN
    floor_scale, attn_scale = check_temperature_args(floor_scale, attn_scale)
    return 1.0 + attn_scale * np.log1p(np.floor((positions.astype(np.float64) + 1.0) / floor_scale))


def check_llama_4_scaling_args(beta, original_max_position_embeddings) -> tuple[float, float]:
    """Validate `beta` (finite) and `original_max_position_embeddings` (> 0); shared by the backends."""
    return _finite("beta", beta), check_positive_float("original_max_position_embeddings",
                                                       original_max_position_embeddings)


def _finite(name, value) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} must be a finite number") from None
    if not math.isfinite(value):
        raise ValueError(f"{name}={value!r} must be a finite number")
    return value


def llama_4_scaling(positions, *, beta, original_max_position_embeddings) -> np.ndarray:
    """Ministral 3 / Mistral 4's query scale: `1 + beta * ln(1 + floor(p / original_max_position_embeddings))`.

    Multiply every layer's queries by it after RoPE (`[..., heads, seq, dim]` with `positions[..., :, None]`);
    keys are not scaled. `beta` and the length are the config's `rope_parameters["llama_4_scaling_beta"]` and
    `rope_parameters["original_max_position_embeddings"]`.

    Args:
        positions: integer array (absolute positions, KV-cache offset included).
        beta: `llama_4_scaling_beta` (finite, may be 0).
        original_max_position_embeddings: the pre-training length `L` (> 0).

    Returns:
        float64 array of `positions.shape`.

    Raises:
        ValueError: non-integer or negative positions (below -L the logarithm is of a negative number),
            `L <= 0`, non-finite `beta`. Under jit a negative position gives NaN.
        TypeError: non-numeric positions.

    Examples:
        >>> llama_4_scaling([0, 16383, 16384, 3 * 16384], beta=0.1, original_max_position_embeddings=16384).round(6).tolist()
        [1.0, 1.0, 1.069315, 1.138629]
    """
    positions = check_integer_positions("positions", positions)
    check_nonnegative_positions("positions", positions)
    beta, original = check_llama_4_scaling_args(beta, original_max_position_embeddings)
    return 1.0 + beta * np.log(1.0 + np.floor(positions.astype(np.float64) / original))
