"""Sinusoidal absolute encodings in PyTorch. The math and its conventions: `posenc_np.sinusoidal`."""

from __future__ import annotations

import torch

from posenc_np.backend import SinusoidalConfig
from posenc_np.sinusoidal import check_sinusoidal_2d_args, check_sinusoidal_args, sinusoid_2d_axes, sinusoid_inv_freq

from ._common import as_tensor, is_tracing, resolve_dtype, spec_constant

__all__ = ["sinusoidal", "sinusoidal_2d", "SinusoidalEncoding"]


def sinusoidal(positions, dim, *, base=10000.0, layout="interleaved", denominator="dim", dtype=None):
    """`[*positions.shape] -> [*positions.shape, dim]`; see `posenc_np.sinusoidal`.

    Angles are float32 (`positions` cast to float32, so integer positions are exact up to 2**24) and
    the result is cast to `dtype` (float32 when None) at the end, never earlier.
    """
    dim = check_sinusoidal_args(dim, base, layout, denominator)
    positions = as_tensor(positions)
    inv_freq = spec_constant(("sinusoid", dim, float(base), denominator),
                             lambda: sinusoid_inv_freq(dim, base=base, denominator=denominator),
                             device=positions.device)
    angles = positions.to(torch.float32)[..., None] * inv_freq  # [..., dim/2]
    sin, cos = torch.sin(angles), torch.cos(angles)
    if layout == "interleaved":
        table = torch.stack([sin, cos], dim=-1).flatten(-2)
    elif layout == "concat":
        table = torch.cat([sin, cos], dim=-1)
    else:  # concat-cos
        table = torch.cat([cos, sin], dim=-1)
    return table.to(resolve_dtype(dtype))


def sinusoidal_2d(positions, dim, *, base=10000.0, axis_order="xy", blocks="per-axis", layout="concat",
                  denominator="dim", dtype=None):
    """`[..., 2] -> [..., dim]` 2-D sin-cos table; see `posenc_np.sinusoidal_2d`.

    Each axis is this backend's `sinusoidal` of width dim/2 (float32 angles); the blocks are joined
    and cast to `dtype` (float32 when None) at the end.
    """
    positions = as_tensor(positions)
    dim = check_sinusoidal_2d_args(tuple(positions.shape), dim, base, axis_order, blocks, layout, denominator)
    first, second = (sinusoidal(positions[..., axis], dim // 2, base=base, layout=layout, denominator=denominator)
                     for axis in sinusoid_2d_axes(axis_order))
    if blocks == "per-axis":
        table = torch.cat([first, second], dim=-1)
    else:  # sin-cos: [S(a) | S(b) | C(a) | C(b)]
        q = dim // 4
        table = torch.cat([first[..., :q], second[..., :q], first[..., q:], second[..., q:]], dim=-1)
    return table.to(resolve_dtype(dtype))


class SinusoidalEncoding(torch.nn.Module):
    """`sinusoidal` with its parameters bound; called with `positions`, returns `[*positions.shape, dim]`.

    Cache policy (the same in every backend): with `max_len`, rows 0..max_len-1 are precomputed by the
    float64 spec (a non-persistent buffer, so the state dict stays empty) and gathered; positions
    beyond them are computed in-graph. The cache never grows: a call does not change module state.
    The output dtype is the cache's, so `.to(torch.bfloat16)` gives bf16 outputs from float32 angles.
    """

    def __init__(self, dim, *, base=10000.0, layout="interleaved", denominator="dim", max_len=None):
        super().__init__()
        config = SinusoidalConfig(dim, base=base, layout=layout, denominator=denominator, max_len=max_len)
        config.bind(self)
        self.register_buffer("cache", torch.as_tensor(config.cache_table(), dtype=torch.float32), persistent=False)

    def forward(self, positions):
        positions = as_tensor(positions, device=self.cache.device)
        out_dtype = self.cache.dtype
        rows = self.cache.shape[0]
        if rows == 0 or positions.is_floating_point():  # the cache holds integer rows; fractional positions
            return sinusoidal(positions, self.dim, base=self.base, layout=self.layout,
                              denominator=self.denominator, dtype=out_dtype)
        if not is_tracing(positions) and positions.numel():
            low, high = (int(v) for v in torch.aminmax(positions))  # one host read
            if low >= 0 and high < rows:
                return self.cache[positions.long()]
        inside = (positions >= 0) & (positions < rows)
        gathered = self.cache[positions.long().clamp(0, rows - 1)]
        computed = sinusoidal(positions, self.dim, base=self.base, layout=self.layout,
                              denominator=self.denominator, dtype=out_dtype)
        return torch.where(inside[..., None], gathered, computed)

    def extra_repr(self):
        return self.config.repr_args()
