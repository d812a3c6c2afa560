"""KERPLE and Sandwich relative biases in MLX. Spec: `posenc_np.kerple_bias`, `posenc_np.sandwich_bias`."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from posenc_np.backend import KERPLEConfig
from posenc_np.kerple import check_kerple_params, check_sandwich_args, sandwich_head_scale, sandwich_inv_freq

from ._common import as_tensor, bind_config, is_integer, position_pair, resolve_dtype, spec_constant

__all__ = ["kerple_bias", "sandwich_bias", "KERPLEBias"]


def _distance32(q, k, absolute):
    """`[..., 1, q, k]` float32 (q - k or |q - k|); integer positions are subtracted as integers."""
    i, j = q[..., None, :, None], k[..., None, None, :]
    if is_integer(q) and is_integer(k):
        d = i - j
        return (mx.abs(d) if absolute else d).astype(mx.float32)
    d = i.astype(mx.float32) - j.astype(mx.float32)
    return mx.abs(d) if absolute else d


def kerple_bias(r1, r2, q_positions, k_positions, *, kernel="log"):
    """`[..., heads, q, k]` KERPLE bias in float32, returned in r1's dtype; see `posenc_np.kerple_bias`."""
    r1, r2 = as_tensor(r1), as_tensor(r2)
    check_kerple_params(tuple(r1.shape), tuple(r2.shape), kernel)
    q, k = position_pair(q_positions, k_positions, integer=False)
    distance = _distance32(q, k, absolute=True)
    a, b = r1.astype(mx.float32)[:, None, None], r2.astype(mx.float32)[:, None, None]
    bias = -a * mx.log1p(b * distance) if kernel == "log" else -a * mx.power(distance, b)
    return bias.astype(r1.dtype)


def sandwich_bias(num_heads, q_positions, k_positions, *, dim, base=10000.0, dtype=None):
    """`[..., heads, q, k]` Sandwich bias; see `posenc_np.sandwich_bias`. float32 cosines, cast to `dtype`."""
    num_heads, dim, base = check_sandwich_args(num_heads, dim, base)
    inv_freq = spec_constant(("sandwich", dim, base), lambda: sandwich_inv_freq(dim, base=base))
    head_scale = spec_constant(("sandwich_heads", num_heads), lambda: sandwich_head_scale(num_heads))
    q, k = position_pair(q_positions, k_positions, integer=False)
    relative = _distance32(q, k, absolute=False)[..., 0, :, :]
    inner = mx.cos(relative[..., None] * inv_freq).sum(-1) - dim / 2
    return (inner[..., None, :, :] * head_scale[:, None, None]).astype(resolve_dtype(dtype))


class KERPLEBias(nn.Module):
    """KERPLE bias with trainable `r1`, `r2` (parameters `[num_heads]`, init U(0, 2), U(0, 1)), clamped to
    >= eps (and r2 <= 2 for the power kernel) in every call, as KERPLE's code does."""

    def __init__(self, num_heads, *, kernel="log", eps=0.01, dtype=mx.float32, key=None):
        super().__init__()
        bind_config(KERPLEConfig(num_heads, kernel=kernel, eps=eps), self)
        keys = (None, None) if key is None else mx.random.split(key)
        self.r1 = mx.random.uniform(0.0, 2.0, (self.num_heads,), key=keys[0]).astype(dtype)
        self.r2 = mx.random.uniform(0.0, 1.0, (self.num_heads,), key=keys[1]).astype(dtype)

    def __call__(self, q_positions, k_positions):
        r1 = mx.maximum(self.r1, self.eps)
        r2 = mx.clip(self.r2, self.eps, self.config.r2_max)
        return kerple_bias(r1, r2, q_positions, k_positions, kernel=self.kernel)

    def _extra_repr(self):
        return self.config.repr_args()
