"""Sinusoidal absolute encodings in JAX / Flax NNX. The math and its conventions: `posenc_np.sinusoidal`."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from posenc_np.backend import SinusoidalConfig
from posenc_np.sinusoidal import check_sinusoidal_2d_args, check_sinusoidal_args, sinusoid_2d_axes, sinusoid_inv_freq

from ._common import is_tracing, resolve_dtype, spec_constant

__all__ = ["sinusoidal", "sinusoidal_2d", "SinusoidalEncoding"]


def sinusoidal(positions, dim, *, base=10000.0, layout="interleaved", denominator="dim", dtype=None):
    """`[*positions.shape] -> [*positions.shape, dim]`; see `posenc_np.sinusoidal`.

    Angles are float32 whatever `dtype` is (also with jax_enable_x64, so results do not depend on
    that flag); the result is cast to `dtype` (float32 when None) at the end.
    """
    dim = check_sinusoidal_args(dim, base, layout, denominator)
    inv_freq = spec_constant(("sinusoid", dim, float(base), denominator),
                             lambda: sinusoid_inv_freq(dim, base=base, denominator=denominator))
    return _table(jnp.asarray(positions), inv_freq, layout=layout, dtype=resolve_dtype(dtype))


@partial(jax.jit, static_argnames=("layout", "dtype"))  # one compile per shape instead of one per eager op
def _table(positions, inv_freq, *, layout, dtype):
    angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [..., dim/2]
    sin, cos = jnp.sin(angles), jnp.cos(angles)
    if layout == "interleaved":
        table = jnp.stack([sin, cos], axis=-1).reshape(*angles.shape[:-1], 2 * angles.shape[-1])
    elif layout == "concat":
        table = jnp.concatenate([sin, cos], axis=-1)
    else:  # concat-cos
        table = jnp.concatenate([cos, sin], axis=-1)
    return table.astype(dtype)


def sinusoidal_2d(positions, dim, *, base=10000.0, axis_order="xy", blocks="per-axis", layout="concat",
                  denominator="dim", dtype=None):
    """`[..., 2] -> [..., dim]` 2-D sin-cos table; see `posenc_np.sinusoidal_2d`.

    Each axis is this backend's `sinusoidal` of width dim/2 (float32 angles); the blocks are joined
    and cast to `dtype` (float32 when None) at the end.
    """
    positions = jnp.asarray(positions)
    dim = check_sinusoidal_2d_args(positions.shape, dim, base, axis_order, blocks, layout, denominator)
    first, second = (sinusoidal(positions[..., axis], dim // 2, base=base, layout=layout, denominator=denominator)
                     for axis in sinusoid_2d_axes(axis_order))
    if blocks == "per-axis":
        table = jnp.concatenate([first, second], axis=-1)
    else:  # sin-cos: [S(a) | S(b) | C(a) | C(b)]
        q = dim // 4
        table = jnp.concatenate([first[..., :q], second[..., :q], first[..., q:], second[..., q:]], axis=-1)
    return table.astype(resolve_dtype(dtype))


class SinusoidalEncoding(nnx.Module):
    """`sinusoidal` with its parameters bound (Flax NNX); called with `positions`.

    With `max_len`, rows 0..max_len-1 come from the float64 spec (a constant, not a parameter) and
    are gathered; positions beyond are computed (under jit by a `where`, since nothing can branch on
    traced values). `dtype` is the output dtype; angles stay float32.
    """

    def __init__(self, dim, *, base=10000.0, layout="interleaved", denominator="dim", max_len=None, dtype=None):
        config = SinusoidalConfig(dim, base=base, layout=layout, denominator=denominator, max_len=max_len)
        config.bind(self)
        self.dtype = dtype
        self.cache = nnx.Cache(jnp.asarray(config.cache_table().astype(np.float32)))

    def __call__(self, positions):
        positions = jnp.asarray(positions)
        computed = sinusoidal(positions, self.dim, base=self.base, layout=self.layout,
                              denominator=self.denominator, dtype=self.dtype)
        cache = self.cache[...]
        rows = cache.shape[0]
        if rows == 0 or not jnp.issubdtype(positions.dtype, jnp.integer):  # the cache holds integer rows
            return computed
        if not is_tracing(positions) and positions.size and int(positions.max()) >= rows:
            return computed
        inside = (positions >= 0) & (positions < rows)
        gathered = cache[jnp.clip(positions, 0, rows - 1)].astype(computed.dtype)
        return jnp.where(inside[..., None], gathered, computed)
