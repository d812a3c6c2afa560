"""FIRE (functional interpolation for relative positions): the specification (float64 NumPy)."""

from __future__ import annotations

import numpy as np

from ._validate import check_position_pair, check_positive_float, check_real_positions

__all__ = ["fire_bias", "check_fire_params", "check_fire_eps"]


def check_fire_params(c_shape, L_shape, w1_shape, b1_shape, w2_shape, b2_shape) -> tuple[int, int]:
    """Shapes of FIRE's parameters; returns `(width, heads)`."""
    for name, shape in (("c", c_shape), ("L", L_shape)):
        if tuple(shape) not in ((), (1,)):
            raise ValueError(f"{name} must be a scalar (shape () or (1,)), got shape {tuple(shape)}")
    w1_shape, w2_shape = tuple(w1_shape), tuple(w2_shape)
    if len(w1_shape) != 2 or w1_shape[1] != 1:
        raise ValueError(f"w1 must be [width, 1] (nn.Linear(1, width).weight), got shape {w1_shape}")
    width = w1_shape[0]
    if tuple(b1_shape) != (width,):
        raise ValueError(f"b1 must have shape ({width},), got shape {tuple(b1_shape)}")
    if len(w2_shape) != 2 or w2_shape[1] != width:
        raise ValueError(f"w2 must be [heads, {width}] (nn.Linear(width, heads).weight), got shape {w2_shape}")
    heads = w2_shape[0]
    if tuple(b2_shape) != (heads,):
        raise ValueError(f"b2 must have shape ({heads},), got shape {tuple(b2_shape)}")
    return width, heads


def check_fire_eps(eps) -> float:
    """FIRE's `eps` (added to the normaliser `psi(L)`): 0, or a finite real > 0."""
    return 0.0 if eps == 0 else check_positive_float("eps", eps)


def fire_bias(c, L, w1, b1, w2, b2, q_positions, k_positions, *, eps=1e-6):
    """FIRE attention bias: an MLP of the log-transformed, normalised distance, `[..., heads, q, k]`.

    Formula, for query position i and key position j, psi(x) = ln(|c x| + 1):
        u[i, j]       = psi(i - j) / (psi(max(i, |L|)) + eps)
        bias[:, i, j] = w2 @ relu(w1[:, 0] * u[i, j] + b1) + b2
    `|L|` is the threshold that keeps short contexts from being normalised by a tiny i (the
    reference learns it as `L_multiplier * init_L`, init_L = 512); dividing by the query position
    maps every distance into [0, 1] for causal attention, whatever the sequence length.

    Weights are in PyTorch `nn.Linear` orientation (`[out, in]`): `w1 [width, 1]` and `w2 [heads, width]`
    are the reference's `mlp[0].weight` and `mlp[2].weight`; Keras/Flax kernels are their transposes.

    Args:
        c: scalar (shape () or (1,)), the log transform's scale (init 0.1).
        L: scalar (shape () or (1,)), the normalizer's threshold (|L| is used; init 512).
        w1, b1: `[width, 1]`, `[width]`: first layer (1 -> width).
        w2, b2: `[heads, width]`, `[heads]`: second layer (width -> heads).
        q_positions, k_positions: `[..., q]`, `[..., k]` real arrays; leading axes broadcast.
        eps: added to the normalizer (1e-6 in the reference).

    Returns:
        float64 `[..., heads, q, k]` array.

    Raises:
        ValueError/TypeError: parameters of the wrong shape, non-positive eps, bad positions.

    Reference:
        Li et al., "Functional Interpolation for Relative Positions Improves Long Context Transformers",
        ICLR 2024, arXiv:2310.04418, eq. (5)-(7); reference module mcleish7/arithmetic
        `cramming/architectures/embeddings.py` class `FIRE` (commit 86022a57d38c0fde46444d62e8dcbebcc0af614c).

    Examples:
        >>> b = fire_bias(np.array(1.0), np.array(1.0), np.ones((1, 1)), np.zeros(1), np.ones((1, 1)),
        ...               np.zeros(1), np.arange(3), np.arange(3), eps=0.0)
        >>> b[0].round(4).tolist()
        [[0.0, 1.0, 1.585], [1.0, 0.0, 1.0], [1.0, 0.6309, 0.0]]
    """
    c, L = np.asarray(c, np.float64), np.asarray(L, np.float64)
    check_fire_params(c.shape, L.shape, np.shape(w1), np.shape(b1), np.shape(w2), np.shape(b2))
    c, L = c.reshape(()), L.reshape(())
    w1, b1, w2, b2 = (np.asarray(a, np.float64) for a in (w1, b1, w2, b2))
    check_fire_eps(eps)
    q = check_real_positions("q_positions", q_positions).astype(np.float64)
    k = check_real_positions("k_positions", k_positions).astype(np.float64)
    check_position_pair(q.shape, k.shape)

    def psi(x):
        return np.log(np.abs(c * x) + 1.0)

    relative = q[..., :, None] - k[..., None, :]  # [..., q, k]
    normalizer = np.maximum(q, np.abs(L))[..., :, None]  # [..., q, 1]
    u = psi(relative) / (psi(normalizer) + eps)
    hidden = np.maximum(u[..., None] * w1[:, 0] + b1, 0.0)  # [..., q, k, width]
    out = hidden @ w2.T + b2  # [..., q, k, heads]
    return np.moveaxis(out, -1, -3)
