"""KERPLE and Sandwich relative biases in JAX / Flax NNX. Spec: `posenc_np.kerple_bias`, `posenc_np.sandwich_bias`."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from flax import nnx

from posenc_np.backend import KERPLEConfig
from posenc_np.kerple import check_kerple_params, check_sandwich_args, sandwich_head_scale, sandwich_inv_freq

from ._common import position_pair, resolve_dtype, spec_constant

__all__ = ["kerple_bias", "sandwich_bias", "KERPLEBias"]


def _distance32(q, k, absolute):
    """`[..., 1, q, k]` float32 (q - k or |q - k|); integer positions are subtracted as integers."""
    i, j = q[..., None, :, None], k[..., None, None, :]
    if jnp.issubdtype(q.dtype, jnp.integer) and jnp.issubdtype(k.dtype, jnp.integer):
        d = i - j
        return (jnp.abs(d) if absolute else d).astype(jnp.float32)
    d = i.astype(jnp.float32) - j.astype(jnp.float32)
    return jnp.abs(d) if absolute else d


def kerple_bias(r1, r2, q_positions, k_positions, *, kernel="log"):
    """`[..., heads, q, k]` KERPLE bias in float32, returned in r1's dtype; see `posenc_np.kerple_bias`."""
    r1, r2 = jnp.asarray(r1), jnp.asarray(r2)
    check_kerple_params(r1.shape, r2.shape, kernel)
    q, k = position_pair(q_positions, k_positions, integer=False)
    return _kerple(r1, r2, q, k, kernel=kernel)


@partial(jax.jit, static_argnames=("kernel",))  # one compile per shape instead of one per eager op
def _kerple(r1, r2, q, k, *, kernel):
    distance = _distance32(q, k, absolute=True)
    a, b = r1.astype(jnp.float32)[:, None, None], r2.astype(jnp.float32)[:, None, None]
    bias = -a * jnp.log1p(b * distance) if kernel == "log" else -a * distance ** b
    return bias.astype(r1.dtype)


def sandwich_bias(num_heads, q_positions, k_positions, *, dim, base=10000.0, dtype=None):
    """`[..., heads, q, k]` Sandwich bias; see `posenc_np.sandwich_bias`. float32 cosines, cast to `dtype`."""
    num_heads, dim, base = check_sandwich_args(num_heads, dim, base)
    inv_freq = spec_constant(("sandwich", dim, base), lambda: sandwich_inv_freq(dim, base=base))
    head_scale = spec_constant(("sandwich_heads", num_heads), lambda: sandwich_head_scale(num_heads))
    q, k = position_pair(q_positions, k_positions, integer=False)
    return _sandwich(q, k, inv_freq, head_scale, dim=dim, dtype=resolve_dtype(dtype))


@partial(jax.jit, static_argnames=("dim", "dtype"))  # one compile per shape instead of one per eager op
def _sandwich(q, k, inv_freq, head_scale, *, dim, dtype):
    relative = _distance32(q, k, absolute=False)[..., 0, :, :]
    inner = jnp.cos(relative[..., None] * inv_freq).sum(-1) - dim / 2
    return (inner[..., None, :, :] * head_scale[:, None, None]).astype(dtype)


class KERPLEBias(nnx.Module):
    """KERPLE bias with trainable `r1`, `r2` (`nnx.Param [num_heads]`, init U(0, 2), U(0, 1)), clamped to
    >= eps (and r2 <= 2 for the power kernel) in every call, as KERPLE's code does."""

    def __init__(self, num_heads, *, kernel="log", eps=0.01, rngs: nnx.Rngs, dtype=jnp.float32):
        KERPLEConfig(num_heads, kernel=kernel, eps=eps).bind(self)
        self.r1 = nnx.Param(jax.random.uniform(rngs.params(), (self.num_heads,), dtype, 0.0, 2.0))
        self.r2 = nnx.Param(jax.random.uniform(rngs.params(), (self.num_heads,), dtype, 0.0, 1.0))

    def __call__(self, q_positions, k_positions):
        r1 = jnp.maximum(self.r1[...], self.eps)
        r2 = jnp.clip(self.r2[...], self.eps, self.config.r2_max)
        return kerple_bias(r1, r2, q_positions, k_positions, kernel=self.kernel)
