"""The dynamic position-aware encoding and NoPE in PyTorch. Spec: `posenc_np.dynamic_position_encoding`, `posenc_np.nope`."""

from __future__ import annotations

import torch

from posenc_np.backend import DynamicConfig, check_float_dtype
from posenc_np.dynamic import check_dynamic_args

from ._common import as_tensor
from .sinusoidal import sinusoidal

__all__ = ["dynamic_position_encoding", "nope", "DynamicPositionEncoding"]


def dynamic_position_encoding(x, weight, bias, *, base=10000.0, layout="interleaved", denominator="dim"):
    """`x + sinusoidal(arange(seq)) @ weight.T + bias`; see `posenc_np.dynamic_position_encoding`.

    `weight` is `[out, in]` (`nn.Linear.weight`). The sinusoid, the projection and the sum are float32
    (half-precision inputs and weights are widened) and the result is cast once to x's dtype.
    Differentiable with respect to x, weight and bias; `seq` is a shape, so torch.compile is static.
    """
    weight = as_tensor(weight)
    x, bias = as_tensor(x, device=weight.device), as_tensor(bias, device=weight.device)
    check_float_dtype("x", x.dtype, x.is_floating_point())
    check_dynamic_args(x.shape, weight.shape, bias.shape, base, layout, denominator)
    dim = x.shape[-1]
    positions = torch.arange(x.shape[-2], device=x.device)
    table = sinusoidal(positions, dim, base=base, layout=layout, denominator=denominator)  # float32 [seq, dim]
    projected = torch.nn.functional.linear(table, weight.float(), bias.float())
    return (x.float() + projected).to(x.dtype)


def nope(x):
    """NoPE: `x` unchanged; see `posenc_np.nope` (a float tensor: an integer one is a TypeError)."""
    x = as_tensor(x)
    check_float_dtype("x", x.dtype, x.is_floating_point())
    return x


class DynamicPositionEncoding(torch.nn.Module):
    """`x + proj(sinusoidal(arange(seq), dim))` with a trainable `proj = nn.Linear(dim, dim)`.

    The state dict holds `proj.weight` `[dim, dim]` (`[out, in]`) and `proj.bias` `[dim]`; Keras and
    Flax keep `kernel = weight.T`. The output has x's dtype.
    """

    def __init__(self, dim, *, base=10000.0, layout="interleaved", denominator="dim", dtype=None, device=None):
        super().__init__()
        config = DynamicConfig(dim, base=base, layout=layout, denominator=denominator)
        config.bind(self)
        self.proj = torch.nn.Linear(self.dim, self.dim, dtype=dtype, device=device)

    @property
    def table(self):
        """The trainable projection weight (the contract's trainable-weight attribute)."""
        return self.proj.weight

    def forward(self, x):
        return dynamic_position_encoding(x, self.proj.weight, self.proj.bias, base=self.base, layout=self.layout,
                                         denominator=self.denominator)

    def extra_repr(self):
        return self.config.repr_args()
