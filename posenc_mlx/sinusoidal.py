"""Sinusoidal absolute encodings in MLX. The math and its conventions: `posenc_np.sinusoidal`."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from posenc_np.backend import SinusoidalConfig
from posenc_np.sinusoidal import check_sinusoidal_2d_args, check_sinusoidal_args, sinusoid_2d_axes, sinusoid_inv_freq

from ._common import as_tensor, bind_config, is_integer, is_tracing, resolve_dtype, spec_constant

__all__ = ["sinusoidal", "sinusoidal_2d", "SinusoidalEncoding"]


def sinusoidal(positions, dim, *, base=10000.0, layout="interleaved", denominator="dim", dtype=None):
    """`[*positions.shape] -> [*positions.shape, dim]`; see `posenc_np.sinusoidal`.

    Angles are float32 whatever `dtype` is, as in the other backends; the result is cast to `dtype`
    (float32 when None) at the end.
    """
    dim = check_sinusoidal_args(dim, base, layout, denominator)
    inv_freq = spec_constant(("sinusoid", dim, float(base), denominator),
                             lambda: sinusoid_inv_freq(dim, base=base, denominator=denominator))
    angles = as_tensor(positions).astype(mx.float32)[..., None] * inv_freq  # [..., dim/2]
    sin, cos = mx.sin(angles), mx.cos(angles)
    if layout == "interleaved":
        table = mx.stack([sin, cos], axis=-1).reshape(*angles.shape[:-1], dim)
    elif layout == "concat":
        table = mx.concatenate([sin, cos], axis=-1)
    else:  # concat-cos
        table = mx.concatenate([cos, sin], axis=-1)
    return table.astype(resolve_dtype(dtype))


def sinusoidal_2d(positions, dim, *, base=10000.0, axis_order="xy", blocks="per-axis", layout="concat",
                  denominator="dim", dtype=None):
    """`[..., 2] -> [..., dim]` 2-D sin-cos table; see `posenc_np.sinusoidal_2d`.

    Each axis is this backend's `sinusoidal` of width dim/2 (float32 angles); the blocks are joined
    and cast to `dtype` (float32 when None) at the end.
    """
    positions = as_tensor(positions)
    dim = check_sinusoidal_2d_args(positions.shape, dim, base, axis_order, blocks, layout, denominator)
    first, second = (sinusoidal(positions[..., axis], dim // 2, base=base, layout=layout, denominator=denominator)
                     for axis in sinusoid_2d_axes(axis_order))
    if blocks == "per-axis":
        table = mx.concatenate([first, second], axis=-1)
    else:  # sin-cos: [S(a) | S(b) | C(a) | C(b)]
        q = dim // 4
        table = mx.concatenate([first[..., :q], second[..., :q], first[..., q:], second[..., q:]], axis=-1)
    return table.astype(resolve_dtype(dtype))


class SinusoidalEncoding(nn.Module):
    """`sinusoidal` with its parameters bound (`mlx.nn.Module`); called with `positions`.

    With `max_len`, rows 0..max_len-1 come from the float64 spec as a float32 cache (the attribute
    `_cache`, read as `cache`: not a parameter) and are gathered; positions beyond are computed (under
    mx.compile by a `where`, since nothing can branch on traced values). `dtype` is the output dtype;
    angles stay float32. No trainable weights.
    """

    def __init__(self, dim, *, base=10000.0, layout="interleaved", denominator="dim", max_len=None, dtype=None):
        super().__init__()
        config = SinusoidalConfig(dim, base=base, layout=layout, denominator=denominator, max_len=max_len)
        bind_config(config, self)
        object.__setattr__(self, "dtype", dtype)
        self._cache = mx.array(config.cache_table().astype(np.float32))

    @property
    def cache(self):
        return self._cache

    def __call__(self, positions):
        positions = as_tensor(positions)
        computed = sinusoidal(positions, self.dim, base=self.base, layout=self.layout,
                              denominator=self.denominator, dtype=self.dtype)
        rows = self._cache.shape[0]
        if rows == 0 or not is_integer(positions):  # the cache holds integer rows
            return computed
        if not is_tracing(positions) and positions.size and int(mx.max(positions)) >= rows:
            return computed
        inside = (positions >= 0) & (positions < rows)
        gathered = mx.take(self._cache, mx.clip(positions, 0, rows - 1), axis=0).astype(computed.dtype)
        return mx.where(inside[..., None], gathered, computed)

    def _extra_repr(self):
        return self.config.repr_args()
