"""The dynamic position-aware encoding and NoPE in JAX / Flax NNX. Spec: `posenc_np.dynamic_position_encoding`, `posenc_np.nope`."""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from posenc_np.backend import DynamicConfig, check_float_dtype
from posenc_np.dynamic import check_dynamic_args

from .sinusoidal import sinusoidal

__all__ = ["dynamic_position_encoding", "nope", "DynamicPositionEncoding"]


def dynamic_position_encoding(x, weight, bias, *, base=10000.0, layout="interleaved", denominator="dim"):
    """`x + sinusoidal(arange(seq)) @ weight.T + bias`; see `posenc_np.dynamic_position_encoding`.

    `weight` is `[out, in]` like the spec (an `nnx.Linear` kernel is `weight.T`; the module below
    passes `kernel.T`). float32 compute, one cast to x's dtype. Works under jax.jit.
    """
    x = jnp.asarray(x)
    check_float_dtype("x", x.dtype, jnp.issubdtype(x.dtype, jnp.floating))
    check_dynamic_args(x.shape, weight.shape, bias.shape, base, layout, denominator)
    dim = x.shape[-1]
    table = sinusoidal(jnp.arange(x.shape[-2]), dim, base=base, layout=layout, denominator=denominator)
    projected = table @ jnp.asarray(weight, jnp.float32).T + jnp.asarray(bias, jnp.float32)
    return (x.astype(jnp.float32) + projected).astype(x.dtype)


def nope(x):
    """NoPE: `x` unchanged; see `posenc_np.nope` (a float array: an integer one is a TypeError)."""
    x = jnp.asarray(x)
    check_float_dtype("x", x.dtype, jnp.issubdtype(x.dtype, jnp.floating))
    return x


class DynamicPositionEncoding(nnx.Module):
    """`x + proj(sinusoidal(arange(seq), dim))` with a trainable `proj = nnx.Linear(dim, dim)`.

    `proj.kernel [dim, dim]` is `[in, out]` (the PyTorch `proj.weight` transposed), `proj.bias [dim]`.
    The output has x's dtype.
    """

    def __init__(self, dim, *, base=10000.0, layout="interleaved", denominator="dim", rngs: nnx.Rngs,
                 param_dtype=jnp.float32):
        config = DynamicConfig(dim, base=base, layout=layout, denominator=denominator)
        config.bind(self)
        self.proj = nnx.Linear(self.dim, self.dim, rngs=rngs, param_dtype=param_dtype)

    @property
    def table(self):
        """The trainable projection kernel (the contract's trainable-weight attribute)."""
        return self.proj.kernel

    def __call__(self, x):
        return dynamic_position_encoding(x, self.proj.kernel[...].T, self.proj.bias[...], base=self.base,
                                         layout=self.layout, denominator=self.denominator)
