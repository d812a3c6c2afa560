"""The dynamic position-aware encoding and NoPE in MLX. Spec: `posenc_np.dynamic_position_encoding`, `posenc_np.nope`."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from posenc_np.backend import DynamicConfig, check_float_dtype
from posenc_np.dynamic import check_dynamic_args

from ._common import as_tensor, bind_config, is_floating
from .sinusoidal import sinusoidal

__all__ = ["dynamic_position_encoding", "nope", "DynamicPositionEncoding"]


def dynamic_position_encoding(x, weight, bias, *, base=10000.0, layout="interleaved", denominator="dim"):
    """`x + sinusoidal(arange(seq)) @ weight.T + bias`; see `posenc_np.dynamic_position_encoding`.

    `weight` is `[out, in]` like the spec and `mlx.nn.Linear.weight`. float32 compute, one cast to x's
    dtype. Works under mx.compile.
    """
    x, weight, bias = as_tensor(x), as_tensor(weight), as_tensor(bias)
    check_float_dtype("x", x.dtype, is_floating(x))
    check_dynamic_args(tuple(x.shape), tuple(weight.shape), tuple(bias.shape), base, layout, denominator)
    dim = x.shape[-1]
    table = sinusoidal(mx.arange(x.shape[-2]), dim, base=base, layout=layout, denominator=denominator)
    projected = table @ weight.astype(mx.float32).T + bias.astype(mx.float32)
    return (x.astype(mx.float32) + projected).astype(x.dtype)


def nope(x):
    """NoPE: `x` unchanged; see `posenc_np.nope` (a float array: an integer one is a TypeError)."""
    x = as_tensor(x)
    check_float_dtype("x", x.dtype, is_floating(x))
    return x


class DynamicPositionEncoding(nn.Module):
    """`x + proj(sinusoidal(arange(seq), dim))` with a trainable `proj = mlx.nn.Linear(dim, dim)`.

    `proj.weight [dim, dim]` is `[out, in]` (as PyTorch's), `proj.bias [dim]`; `table` reads the weight.
    The output has x's dtype.
    """

    def __init__(self, dim, *, base=10000.0, layout="interleaved", denominator="dim", dtype=mx.float32):
        super().__init__()
        config = DynamicConfig(dim, base=base, layout=layout, denominator=denominator)
        bind_config(config, self)
        self.proj = nn.Linear(self.dim, self.dim)
        if dtype != mx.float32:
            self.proj.set_dtype(dtype)

    @property
    def table(self):
        """The trainable projection weight (the contract's trainable-weight attribute)."""
        return self.proj.weight

    def __call__(self, x):
        return dynamic_position_encoding(x, self.proj.weight, self.proj.bias, base=self.base, layout=self.layout,
                                         denominator=self.denominator)

    def _extra_repr(self):
        return self.config.repr_args()
