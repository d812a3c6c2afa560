"""FIRE in MLX. Spec: `posenc_np.fire_bias`."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from posenc_np.backend import FIREConfig
from posenc_np.fire import check_fire_eps, check_fire_params

from ._common import as_tensor, bind_config, position_pair

__all__ = ["fire_bias", "FIREBias"]


def fire_bias(c, L, w1, b1, w2, b2, q_positions, k_positions, *, eps=1e-6):
    """`[..., heads, q, k]` FIRE bias in float32, returned in w2's dtype; see `posenc_np.fire_bias`.

    Weights in `nn.Linear` orientation (`w1 [width, 1]`, `w2 [heads, width]`), like the spec and MLX.
    """
    c, L, w1, b1, w2, b2 = (as_tensor(a) for a in (c, L, w1, b1, w2, b2))
    check_fire_params(*(tuple(a.shape) for a in (c, L, w1, b1, w2, b2)))
    check_fire_eps(eps)
    q, k = position_pair(q_positions, k_positions, integer=False)
    q32, k32 = q.astype(mx.float32), k.astype(mx.float32)
    c32, L32, w1_32, b1_32, w2_32, b2_32 = (a.astype(mx.float32) for a in (c, L, w1, b1, w2, b2))
    c32, L32 = c32.reshape(()), L32.reshape(())

    def psi(x):
        return mx.log1p(mx.abs(c32 * x))

    relative = q32[..., :, None] - k32[..., None, :]
    normalizer = mx.maximum(q32, mx.abs(L32))[..., :, None]
    u = psi(relative) / (psi(normalizer) + eps)
    hidden = mx.maximum(u[..., None] * w1_32[:, 0] + b1_32, 0.0)
    out = hidden @ w2_32.T + b2_32
    return mx.moveaxis(out, -1, -3).astype(w2.dtype)


class FIREBias(nn.Module):
    """FIRE with the reference's parameters: `mlp_in = nn.Linear(1, width)`, `mlp_out = nn.Linear(width,
    heads)` (weights `[out, in]` as the torch ones), `c` (init 0.1) and `L_multiplier` (init 1) times the
    fixed `init_L`."""

    def __init__(self, num_heads, *, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, dtype=mx.float32):
        super().__init__()
        bind_config(FIREConfig(num_heads, mlp_width=mlp_width, init_c=init_c, init_L=init_L, eps=eps), self)
        self.mlp_in = nn.Linear(1, self.mlp_width)
        self.mlp_out = nn.Linear(self.mlp_width, self.num_heads)
        self.c = mx.array(self.init_c, mx.float32)
        self.L_multiplier = mx.array(1.0, mx.float32)
        if dtype != mx.float32:
            self.set_dtype(dtype)

    def __call__(self, q_positions, k_positions):
        return fire_bias(self.c, self.L_multiplier * self.init_L, self.mlp_in.weight, self.mlp_in.bias,
                         self.mlp_out.weight, self.mlp_out.bias, q_positions, k_positions, eps=self.eps)

    def _extra_repr(self):
        return self.config.repr_args()
