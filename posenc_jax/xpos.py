"""xPos in JAX. Spec: `posenc_np.apply_xpos`, `posenc_np.xpos_scale`."""

from __future__ import annotations

import jax.numpy as jnp

from posenc_np.backend import check_float_dtype
from posenc_np.xpos import check_xpos_args, xpos_zeta

from ._common import resolve_dtype, spec_constant
from .rope import apply_rope

__all__ = ["apply_xpos", "xpos_scale"]


def _scale32(positions, dim, scale_base, gamma, center, layout):
    zeta = spec_constant(("xpos_zeta", dim, float(gamma)), lambda: xpos_zeta(dim, gamma=gamma))
    power = (positions - int(center)).astype(jnp.float32)[..., None] / float(scale_base)
    half = jnp.power(zeta, power)
    return jnp.repeat(half, 2, axis=-1) if layout == "interleaved" else jnp.concatenate([half, half], -1)


def xpos_scale(positions, dim, *, scale_base=512.0, gamma=0.4, center=0, layout="interleaved", dtype=None):
    """`[..., dim]` xPos scale, float32 then `dtype`; see `posenc_np.xpos_scale`."""
    check_xpos_args(dim, scale_base, gamma, center, "query", layout)
    positions = jnp.asarray(positions)
    if not jnp.issubdtype(positions.dtype, jnp.integer):
        raise TypeError(f"positions must be an integer array, got {positions.dtype}")
    return _scale32(positions, dim, scale_base, gamma, center, layout).astype(resolve_dtype(dtype))


def apply_xpos(x, positions, *, kind="query", base=10000.0, layout="interleaved", scale_base=512.0, gamma=0.4,
               center=0):
    """RoPE then the xPos scale (inverse for keys); see `posenc_np.apply_xpos`. float32, one final cast."""
    x = jnp.asarray(x)
    check_float_dtype("x", x.dtype, jnp.issubdtype(x.dtype, jnp.floating))
    dim = check_xpos_args(x.shape[-1], scale_base, gamma, center, kind, layout)
    positions = jnp.asarray(positions)
    rotated = apply_rope(x.astype(jnp.float32), positions, base=base, layout=layout)
    scale = _scale32(positions, dim, scale_base, gamma, center, layout)
    return (rotated * scale if kind == "query" else rotated / scale).astype(x.dtype)
