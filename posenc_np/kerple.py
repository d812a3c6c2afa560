"""KERPLE (log and power kernels) and Sandwich relative biases: the specification (float64 NumPy)."""

from __future__ import annotations

import numpy as np

from ._dtypes import spec_output_dtype
from ._validate import (
    check_choice,
    check_even_dim,
    check_position_pair,
    check_positive_float,
    check_positive_int,
    check_real_positions,
)

__all__ = ["kerple_bias", "sandwich_bias", "KERPLE_KERNELS", "check_kerple_params", "check_sandwich_args",
           "sandwich_inv_freq", "sandwich_head_scale"]

KERPLE_KERNELS = ("log", "power")


def check_kerple_params(r1_shape, r2_shape, kernel) -> int:
    """`r1` and `r2` are `[heads]` vectors of the same length; returns heads."""
    check_choice("kernel", kernel, KERPLE_KERNELS)
    r1_shape, r2_shape = tuple(r1_shape), tuple(r2_shape)
    if len(r1_shape) != 1 or r1_shape != r2_shape:
        raise ValueError(f"r1 and r2 must both be [heads] vectors, got shapes {r1_shape} and {r2_shape}")
    return r1_shape[0]


def kerple_bias(r1, r2, q_positions, k_positions, *, kernel="log"):
    """KERPLE kernelized relative bias: `[heads] x [heads] x [..., q] x [..., k] -> [..., heads, q, k]`.

    Formula, for query position i, key position j and per-head parameters r1_h, r2_h > 0:
        kernel="log":    bias[h, i, j] = -r1_h * ln(1 + r2_h * |i - j|)
        kernel="power":  bias[h, i, j] = -r1_h * |i - j| ** r2_h          (0 < r2_h <= 2)
    Both are conditionally positive definite kernels shifted into a bias; ALiBi is the power kernel
    with r2 = 1. KERPLE's code keeps the parameters in range by clamping them in every forward
    pass (r1, r2 >= 0.01; power: r2 <= 2); the modules do that, this function takes the values it
    is given (bias of a valid parameter), so its gradient is the kernel's.

    Args:
        r1, r2: `[heads]` float arrays (the trainable per-head parameters; paper init U(0, 2) for
            r1 and U(0, 1) for r2 in the log kernel).
        q_positions, k_positions: `[..., q]`, `[..., k]` real arrays; leading axes broadcast.
        kernel: "log" or "power".

    Returns:
        float64 `[..., heads, q, k]` array (r1's dtype in the backends).

    Raises:
        ValueError/TypeError: unknown kernel, r1/r2 not matching `[heads]` vectors, scalar or non-real
            positions, leading axes that do not broadcast.

    Reference:
        Chi, Fan, Ramadge, Rudnicky, "KERPLE: Kernelized Relative Positional Embedding for Length
        Extrapolation", NeurIPS 2022, arXiv:2205.09921, eq. (3)-(4); chijames/KERPLE (gpt-neox based)
        `megatron/model/positional_embeddings.py`; NVIDIA/NeMo
        `nemo/collections/nlp/modules/common/megatron/position_embedding/kerple_relative_position_embedding.py`.

    Examples:
        >>> kerple_bias(np.array([1.0]), np.array([1.0]), np.arange(2), np.arange(2))[0].round(4).tolist()
        [[-0.0, -0.6931], [-0.6931, -0.0]]
    """
    r1, r2 = np.asarray(r1, np.float64), np.asarray(r2, np.float64)
    check_kerple_params(r1.shape, r2.shape, kernel)
    q = check_real_positions("q_positions", q_positions).astype(np.float64)
    k = check_real_positions("k_positions", k_positions).astype(np.float64)
    check_position_pair(q.shape, k.shape)
    distance = np.abs(q[..., None, :, None] - k[..., None, None, :])  # [..., 1, q, k]
    a, b = r1[:, None, None], r2[:, None, None]
    if kernel == "log":
        return -a * np.log1p(b * distance)
    return -a * distance ** b


def check_sandwich_args(num_heads, dim, base) -> tuple[int, int, float]:
    """`num_heads >= 1`, an even `dim`, `base > 0`; returns them as `(int, int, float)`, checked before the
    positions in every package (and before a backend builds its cache key from them)."""
    return check_positive_int("num_heads", num_heads), check_even_dim("dim", dim), check_positive_float("base", base)


def sandwich_inv_freq(dim, *, base=10000.0) -> np.ndarray:
    """Sandwich's frequencies `base ** (-2i / dim)` for i = 1 .. dim/2 (note: from 1, as NeMo's code)."""
    dim = check_even_dim("dim", dim)
    check_positive_float("base", base)
    return np.power(float(base), -2.0 * np.arange(1, dim // 2 + 1, dtype=np.float64) / dim)


def sandwich_head_scale(num_heads) -> np.ndarray:
    """Sandwich's per-head factors `H / (8 h)`, h = 1 .. H (float64): head 1 is the sharpest."""
    num_heads = check_positive_int("num_heads", num_heads)
    return num_heads / (8.0 * np.arange(1, num_heads + 1, dtype=np.float64))


def sandwich_bias(num_heads, q_positions, k_positions, *, dim, base=10000.0, dtype=None):
    """Sandwich: the inner product of two sinusoids as a fixed relative bias, `[..., heads, q, k]`.

    Formula, for query position i, key position j, head h = 1 .. H and w_t = base ** (-2t / dim):
        bias[h, i, j] = (sum_{t=1}^{dim/2} cos((i - j) * w_t) - dim / 2) * H / (8 h)
    `sum cos` is `PE(i) . PE(j)` of sinusoids without their t = 0 pair; subtracting dim/2 makes the
    bias 0 at i = j and negative elsewhere, and the head scale gives ALiBi-like per-head slopes.

    Args:
        num_heads: H, >= 1.
        q_positions, k_positions: `[..., q]`, `[..., k]` real arrays; leading axes broadcast.
        dim: the sinusoid width (NeMo: `hidden_size` per head), even.
        base: wavelength base (10000).
        dtype: output dtype (float64 when None).

    Returns:
        `[..., num_heads, q, k]` array.

    Raises:
        ValueError/TypeError: num_heads < 1, odd dim, non-positive base, bad positions.

    Reference:
        Chi, Fan, Rudnicky, Ramadge, "Dissecting Transformer Length Extrapolation via the Lens of
        Receptive Field Analysis", ACL 2023, arXiv:2212.10356; NVIDIA/NeMo
        `nemo/collections/nlp/modules/common/megatron/position_embedding/sandwich_relative_position_embedding.py`
        (commit 000b931e): frequencies from t = 1, scale `(bias - d/2) / (h * 8 / H)`.

    Examples:
        >>> sandwich_bias(1, np.arange(2), np.arange(2), dim=2, base=1.0)[0].round(4).tolist()
        [[0.0, -0.0575], [-0.0575, 0.0]]
    """
    num_heads, dim, base = check_sandwich_args(num_heads, dim, base)
    inv_freq = sandwich_inv_freq(dim, base=base)
    q = check_real_positions("q_positions", q_positions).astype(np.float64)
    k = check_real_positions("k_positions", k_positions).astype(np.float64)
    check_position_pair(q.shape, k.shape)
    relative = q[..., :, None] - k[..., None, :]  # [..., q, k]
    inner = np.cos(relative[..., None] * inv_freq).sum(-1) - dim / 2
    head_scale = sandwich_head_scale(num_heads)  # [heads]
    bias = inner[..., None, :, :] * head_scale[:, None, None]
    return bias.astype(spec_output_dtype(dtype))
