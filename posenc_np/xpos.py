"""xPos (extrapolatable RoPE with an exponential decay): the specification (float64 NumPy)."""

from __future__ import annotations

import numbers

import numpy as np

from ._validate import check_choice, check_even_dim, check_float_dtype, check_integer_positions, check_positive_float
from .rope import apply_rope, check_rope_shapes

__all__ = ["xpos_zeta", "xpos_scale", "apply_xpos", "XPOS_KINDS", "check_xpos_args"]

XPOS_KINDS = ("query", "key")


def check_xpos_args(dim, scale_base, gamma, center, kind, layout) -> int:
    """Validate the parameters of `apply_xpos` / `xpos_scale`; backends call this before building anything."""
    dim = check_even_dim("dim", dim)
    check_positive_float("scale_base", scale_base)
    check_positive_float("gamma", gamma)
    if isinstance(center, bool) or not isinstance(center, numbers.Integral):
        raise TypeError(f"center={center!r} must be an integer")
    check_choice("kind", kind, XPOS_KINDS)
    check_choice("layout", layout, ("half", "interleaved"))
    return dim


def xpos_zeta(dim, *, gamma=0.4) -> np.ndarray:
    """Per-pair decay bases `zeta_i = (2i + gamma*dim) / ((1 + gamma) * dim)`, i = 0 .. dim/2 - 1 (float64).

    With gamma = 0.4 this is x-transformers' `(arange(0, dim, 2) + 0.4 dim) / (1.4 dim)`.
    """
    dim = check_even_dim("dim", dim)
    check_positive_float("gamma", gamma)
    return (2.0 * np.arange(dim // 2, dtype=np.float64) + gamma * dim) / ((1.0 + gamma) * dim)


def xpos_scale(positions, dim, *, scale_base=512.0, gamma=0.4, center=0, layout="interleaved"):
    """xPos scale `zeta_i ** ((p - center) / scale_base)` per channel: `[...] -> [..., dim]` (float64).

    Each pair's factor is repeated on both channels of the pair: `[z0, z0, z1, z1, ...]` for
    layout="interleaved", `[z0, z1, ..., z0, z1, ...]` for "half".
    """
    check_xpos_args(dim, scale_base, gamma, center, "query", layout)
    positions = check_integer_positions("positions", positions).astype(np.float64)
    power = (positions[..., None] - float(center)) / float(scale_base)
    half = xpos_zeta(dim, gamma=gamma) ** power  # [..., dim/2]
    if layout == "interleaved":
        return np.repeat(half, 2, axis=-1)
    return np.concatenate([half, half], axis=-1)


def apply_xpos(x, positions, *, kind="query", base=10000.0, layout="interleaved", scale_base=512.0, gamma=0.4,
               center=0):
    """xPos: RoPE followed by a per-channel exponential scale, inverse for keys.

    Formula, for a query or key row at position p and pair i (zeta_i from `xpos_zeta`):
        query:  apply_rope(x, p) * zeta_i ** ( (p - center) / scale_base)
        key:    apply_rope(x, p) * zeta_i ** (-(p - center) / scale_base)
    so a query at m and a key at n score `q.k` with pair i weighted by `zeta_i ** ((m - n) / scale_base)`:
    a decay with distance (zeta_i < 1) that does not depend on `center`. The centre keeps q and k
    scales near 1 for long sequences; codebases differ in it (x-transformers: `max_pos // 2`,
    torchscale: `-(L + offset) // 2`), which changes q and k but not their products.

    Args:
        x: `[..., seq, dim]` float array (queries or keys), dim even.
        positions: integer array broadcasting against `x.shape[:-1]`, as for `apply_rope`.
        kind: "query" (scale) or "key" (inverse scale).
        base, layout: RoPE frequencies and pair layout (see `apply_rope`); x-transformers rotates
            interleaved pairs (its `rotate_half` works on `(d r)` with r = 2).
        scale_base: the decay's length scale (512 in the paper and x-transformers).
        gamma: zeta's offset (0.4 in the paper).
        center: integer subtracted from positions in the exponent; `max_pos // 2` reproduces
            x-transformers for positions `0 .. max_pos - 1`.

    Returns:
        Array like `x` (shape and dtype).

    Raises:
        ValueError/TypeError: odd dim, non-positive scale_base or gamma, non-integer center or
            positions, unknown kind or layout, positions that do not broadcast.

    Reference:
        Sun et al., "A Length-Extrapolatable Transformer", 2022, arXiv:2212.10554;
        lucidrains/x-transformers x_transformers/x_transformers.py `RotaryEmbedding(use_xpos=True)` and
        `apply_rotary_pos_emb` (commit 9252ed7838021ee61e6c5be0930b3a9a88efdf06).

    Examples:
        >>> apply_xpos(np.ones((1, 2)), np.array([512]), kind="query", base=1.0).round(4).tolist()
        [[-0.3075, -0.2621]]
    """
    x = np.asarray(x)
    out_dtype = x.dtype
    check_float_dtype("x", out_dtype)
    dim = check_xpos_args(x.shape[-1], scale_base, gamma, center, kind, layout)
    positions = check_integer_positions("positions", positions)
    check_rope_shapes(x.shape, positions.shape)
    rotated = apply_rope(x.astype(np.float64), positions, base=base, layout=layout)
    scale = xpos_scale(positions, dim, scale_base=scale_base, gamma=gamma, center=center, layout=layout)
    if kind == "key":
        scale = 1.0 / scale
    return (rotated * scale).astype(out_dtype)
