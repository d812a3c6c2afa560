"""FIRE in JAX / Flax NNX. Spec: `posenc_np.fire_bias`."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from flax import nnx

from posenc_np.backend import FIREConfig
from posenc_np.fire import check_fire_eps, check_fire_params

from ._common import position_pair

__all__ = ["fire_bias", "FIREBias"]


def fire_bias(c, L, w1, b1, w2, b2, q_positions, k_positions, *, eps=1e-6):
    """`[..., heads, q, k]` FIRE bias in float32, returned in w2's dtype; see `posenc_np.fire_bias`.

    Weights in `nn.Linear` orientation (`w1 [width, 1]`, `w2 [heads, width]`), like the spec.
    """
    c, L, w1, b1, w2, b2 = (jnp.asarray(a) for a in (c, L, w1, b1, w2, b2))
    check_fire_params(c.shape, L.shape, w1.shape, b1.shape, w2.shape, b2.shape)
    check_fire_eps(eps)
    q, k = position_pair(q_positions, k_positions, integer=False)
    return _fire(c, L, w1, b1, w2, b2, q, k, eps=eps)


@partial(jax.jit, static_argnames=("eps",))  # one compile per shape instead of one per eager op
def _fire(c, L, w1, b1, w2, b2, q, k, *, eps):
    q32, k32 = q.astype(jnp.float32), k.astype(jnp.float32)
    c32, L32, w1_32, b1_32, w2_32, b2_32 = (a.astype(jnp.float32) for a in (c, L, w1, b1, w2, b2))
    c32, L32 = c32.reshape(()), L32.reshape(())

    def psi(x):
        return jnp.log1p(jnp.abs(c32 * x))

    relative = q32[..., :, None] - k32[..., None, :]
    normalizer = jnp.maximum(q32, jnp.abs(L32))[..., :, None]
    u = psi(relative) / (psi(normalizer) + eps)
    hidden = jnp.maximum(u[..., None] * w1_32[:, 0] + b1_32, 0.0)
    out = hidden @ w2_32.T + b2_32
    return jnp.moveaxis(out, -1, -3).astype(w2.dtype)


class FIREBias(nnx.Module):
    """FIRE with the reference's parameters: `mlp_in = nnx.Linear(1, width)`, `mlp_out = nnx.Linear(width,
    heads)` (kernels are the torch weights transposed), `c` (init 0.1) and `L_multiplier` (init 1) times
    the fixed `init_L`."""

    def __init__(self, num_heads, *, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, rngs: nnx.Rngs,
                 param_dtype=jnp.float32):
        FIREConfig(num_heads, mlp_width=mlp_width, init_c=init_c, init_L=init_L, eps=eps).bind(self)
        self.mlp_in = nnx.Linear(1, self.mlp_width, rngs=rngs, param_dtype=param_dtype)
        self.mlp_out = nnx.Linear(self.mlp_width, self.num_heads, rngs=rngs, param_dtype=param_dtype)
        self.c = nnx.Param(jnp.asarray(self.init_c, param_dtype))
        self.L_multiplier = nnx.Param(jnp.asarray(1.0, param_dtype))

    def __call__(self, q_positions, k_positions):
        return fire_bias(self.c[...], self.L_multiplier[...] * self.init_L, self.mlp_in.kernel[...].T,
                         self.mlp_in.bias[...], self.mlp_out.kernel[...].T, self.mlp_out.bias[...],
                         q_positions, k_positions, eps=self.eps)
