"""xPos in TensorFlow. Spec: `posenc_np.apply_xpos`, `posenc_np.xpos_scale`."""

from __future__ import annotations

import tensorflow as tf

from posenc_np.backend import check_float_dtype
from posenc_np.xpos import check_xpos_args, xpos_zeta

from ._common import as_tensor, resolve_dtype, spec_constant
from .rope import apply_rope

__all__ = ["apply_xpos", "xpos_scale"]


def _scale32(positions, dim, scale_base, gamma, center, layout):
    zeta = spec_constant(("xpos_zeta", dim, float(gamma)), lambda: xpos_zeta(dim, gamma=gamma))
    power = tf.cast(tf.cast(positions, tf.int64) - int(center), tf.float32)[..., None] / float(scale_base)
    half = tf.pow(zeta, power)
    if layout == "interleaved":
        return tf.reshape(tf.stack([half, half], -1), tf.concat([tf.shape(half)[:-1], [dim]], 0))
    return tf.concat([half, half], -1)


def xpos_scale(positions, dim, *, scale_base=512.0, gamma=0.4, center=0, layout="interleaved", dtype=None):
    """`[..., dim]` xPos scale, float32 then `dtype`; see `posenc_np.xpos_scale`."""
    check_xpos_args(dim, scale_base, gamma, center, "query", layout)
    positions = as_tensor(positions)
    if positions.dtype.is_floating:
        raise TypeError(f"positions must be an integer tensor, got {positions.dtype.name}")
    return tf.cast(_scale32(positions, dim, scale_base, gamma, center, layout), resolve_dtype(dtype))


def apply_xpos(x, positions, *, kind="query", base=10000.0, layout="interleaved", scale_base=512.0, gamma=0.4,
               center=0):
    """RoPE then the xPos scale (inverse for keys); see `posenc_np.apply_xpos`. float32, one final cast."""
    x = as_tensor(x)
    check_float_dtype("x", tf.as_dtype(x.dtype).name, tf.as_dtype(x.dtype).is_floating)
    dim = check_xpos_args(x.shape[-1], scale_base, gamma, center, kind, layout)
    positions = as_tensor(positions)
    rotated = apply_rope(tf.cast(x, tf.float32), positions, base=base, layout=layout)
    scale = _scale32(positions, dim, scale_base, gamma, center, layout)
    return tf.cast(rotated * scale if kind == "query" else rotated / scale, x.dtype)
