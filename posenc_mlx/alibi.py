"""ALiBi in MLX. Spec: `posenc_np.alibi_slopes`, `posenc_np.alibi_bias`."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from posenc_np.alibi import alibi_slopes as _spec_slopes
from posenc_np.alibi import check_alibi_args
from posenc_np.backend import ALiBiConfig

from ._common import bind_config, position_pair, resolve_dtype, spec_constant

__all__ = ["alibi_slopes", "alibi_bias", "ALiBi", "position_pair"]


def alibi_slopes(num_heads, *, max_bias=8.0, dtype=None):
    """`[num_heads]` slopes computed by the spec in float64, returned as `dtype` (float32 default)."""
    num_heads = check_alibi_args(num_heads, "symmetric", max_bias)
    return spec_constant(("alibi_slopes", num_heads, float(max_bias)), lambda: _spec_slopes(num_heads, max_bias=max_bias), dtype=resolve_dtype(dtype))


def _as_float(x):
    """float32 distances (the bias's compute dtype; float64 positions too, as the other backends' float32)."""
    return x.astype(mx.float32)


def alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", max_bias=8.0, dtype=None):
    """`[..., num_heads, q, k]` ALiBi bias; see `posenc_np.alibi_bias`.

    Spec slopes as float32 constants; integer positions are subtracted as integers before the float32
    product. Works under mx.compile with positions as data.
    """
    num_heads = check_alibi_args(num_heads, form, max_bias)
    q, k = position_pair(q_positions, k_positions, integer=False)
    slopes = spec_constant(("alibi_slopes", num_heads, float(max_bias)), lambda: _spec_slopes(num_heads, max_bias=max_bias))[:, None, None]
    i = q[..., None, :, None]
    j = k[..., None, None, :]
    if form == "symmetric":
        bias = -slopes * _as_float(mx.abs(i - j))
    elif form == "causal":
        bias = -slopes * _as_float(i - j)
    else:
        shape = (*mx.broadcast_shapes(i.shape, j.shape)[:-3], num_heads, q.shape[-1], k.shape[-1])
        bias = mx.broadcast_to(slopes * _as_float(j), shape)
    return bias.astype(resolve_dtype(dtype))


class ALiBi(nn.Module):
    """ALiBi bias as an `mlx.nn.Module` (no parameters): `ALiBi(num_heads, form=...)(q_positions, k_positions)`."""

    def __init__(self, num_heads, *, form="symmetric", max_bias=8.0, dtype=None):
        super().__init__()
        bind_config(ALiBiConfig(num_heads, form=form, max_bias=max_bias), self)
        object.__setattr__(self, "dtype", resolve_dtype(dtype))

    def __call__(self, q_positions, k_positions):
        return alibi_bias(self.num_heads, q_positions, k_positions, form=self.form, max_bias=self.max_bias, dtype=self.dtype)

    def _extra_repr(self):
        return self.config.repr_args()
