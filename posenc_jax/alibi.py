"""ALiBi in JAX / Flax NNX. Spec: `posenc_np.alibi_slopes`, `posenc_np.alibi_bias`."""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from posenc_np.alibi import alibi_slopes as _spec_slopes
from posenc_np.alibi import check_alibi_args
from posenc_np.backend import ALiBiConfig

from ._common import position_pair, resolve_dtype, spec_constant

__all__ = ["alibi_slopes", "alibi_bias", "ALiBi", "position_pair"]


def alibi_slopes(num_heads, *, max_bias=8.0, dtype=None):
    """`[num_heads]` slopes computed by the spec in float64, returned as `dtype` (float32 default)."""
    num_heads = check_alibi_args(num_heads, "symmetric", max_bias)
    return jnp.asarray(_spec_slopes(num_heads, max_bias=max_bias), dtype=resolve_dtype(dtype))


def alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", max_bias=8.0, dtype=None):
    """`[..., num_heads, q, k]` ALiBi bias; see `posenc_np.alibi_bias`.

    Spec slopes as float32 constants; integer positions are subtracted as integers (int32 without
    x64) before the float32 product. Works under jax.jit with positions as data.
    """
    num_heads = check_alibi_args(num_heads, form, max_bias)
    q, k = position_pair(q_positions, k_positions, integer=False)
    slopes = spec_constant(("alibi_slopes", num_heads, float(max_bias)), lambda: _spec_slopes(num_heads, max_bias=max_bias))[:, None, None]
    i = q[..., None, :, None]
    j = k[..., None, None, :]
    as_float = lambda x: x.astype(jnp.promote_types(x.dtype, jnp.float32))  # noqa: E731
    if form == "symmetric":
        bias = -slopes * as_float(jnp.abs(i - j))
    elif form == "causal":
        bias = -slopes * as_float(i - j)
    else:
        shape = (*jnp.broadcast_shapes(i.shape, j.shape)[:-3], num_heads, q.shape[-1], k.shape[-1])
        bias = jnp.broadcast_to(slopes * as_float(j), shape)
    return bias.astype(resolve_dtype(dtype))


class ALiBi(nnx.Module):
    """ALiBi bias as an NNX module (no parameters): `ALiBi(num_heads, form=...)(q_positions, k_positions)`."""

    def __init__(self, num_heads, *, form="symmetric", max_bias=8.0, dtype=None):
        ALiBiConfig(num_heads, form=form, max_bias=max_bias).bind(self)
        self.dtype = resolve_dtype(dtype)

    def __call__(self, q_positions, k_positions):
        return alibi_bias(self.num_heads, q_positions, k_positions, form=self.form, max_bias=self.max_bias, dtype=self.dtype)
