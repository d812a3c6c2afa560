"""xPos in MLX. Spec: `posenc_np.apply_xpos`, `posenc_np.xpos_scale`."""

from __future__ import annotations

import mlx.core as mx

from posenc_np.backend import check_float_dtype
from posenc_np.xpos import check_xpos_args, xpos_zeta

from ._common import as_tensor, is_floating, is_integer, resolve_dtype, spec_constant
from .rope import apply_rope

__all__ = ["apply_xpos", "xpos_scale"]


def _scale32(positions, dim, scale_base, gamma, center, layout):
    zeta = spec_constant(("xpos_zeta", dim, float(gamma)), lambda: xpos_zeta(dim, gamma=gamma))
    power = (positions - int(center)).astype(mx.float32)[..., None] / float(scale_base)
    half = mx.power(zeta, power)
    return mx.repeat(half, 2, axis=-1) if layout == "interleaved" else mx.concatenate([half, half], -1)


def xpos_scale(positions, dim, *, scale_base=512.0, gamma=0.4, center=0, layout="interleaved", dtype=None):
    """`[..., dim]` xPos scale, float32 then `dtype`; see `posenc_np.xpos_scale`."""
    check_xpos_args(dim, scale_base, gamma, center, "query", layout)
    positions = as_tensor(positions)
    if not is_integer(positions):
        raise TypeError(f"positions must be an integer array, got {positions.dtype}")
    return _scale32(positions, dim, scale_base, gamma, center, layout).astype(resolve_dtype(dtype))


def apply_xpos(x, positions, *, kind="query", base=10000.0, layout="interleaved", scale_base=512.0, gamma=0.4,
               center=0):
    """RoPE then the xPos scale (inverse for keys); see `posenc_np.apply_xpos`. float32, one final cast."""
    x = as_tensor(x)
    check_float_dtype("x", x.dtype, is_floating(x))
    dim = check_xpos_args(x.shape[-1], scale_base, gamma, center, kind, layout)
    positions = as_tensor(positions)
    rotated = apply_rope(x.astype(mx.float32), positions, base=base, layout=layout)
    scale = _scale32(positions, dim, scale_base, gamma, center, layout)
    return (rotated * scale if kind == "query" else rotated / scale).astype(x.dtype)
