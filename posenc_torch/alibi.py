"""ALiBi in PyTorch. Spec: `posenc_np.alibi_slopes`, `posenc_np.alibi_bias`."""

from __future__ import annotations

import torch

from posenc_np.alibi import alibi_slopes as _spec_slopes
from posenc_np.alibi import check_alibi_args
from posenc_np.backend import ALiBiConfig

from ._common import position_pair, resolve_dtype, spec_constant

__all__ = ["alibi_slopes", "alibi_bias", "ALiBi", "position_pair"]


def alibi_slopes(num_heads, *, max_bias=8.0, dtype=None, device=None):
    """`[num_heads]` slopes computed by the spec in float64, returned as `dtype` (float32 default)."""
    num_heads = check_alibi_args(num_heads, "symmetric", max_bias)
    return torch.as_tensor(_spec_slopes(num_heads, max_bias=max_bias), dtype=resolve_dtype(dtype), device=device)


def alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", max_bias=8.0, dtype=None):
    """`[..., num_heads, q, k]` ALiBi bias; see `posenc_np.alibi_bias`.

    Slopes come from the spec (float64, converted once to float32). Integer positions are subtracted
    as integers and converted after (exact up to 2**24); the product is formed in float32 and the
    result cast to `dtype`. `[q]`, `[k]` positions give `[num_heads, q, k]`, broadcasting over the
    batch axis of the logits. Works under torch.compile(fullgraph=True); positions are data.
    """
    num_heads = check_alibi_args(num_heads, form, max_bias)
    q, k = position_pair(q_positions, k_positions, integer=False)
    slopes = spec_constant(("alibi_slopes", num_heads, float(max_bias)), lambda: _spec_slopes(num_heads, max_bias=max_bias), device=q.device)
    i = q[..., None, :, None]
    j = k[..., None, None, :]

    def as_float(x):
        return x.to(torch.promote_types(x.dtype, torch.float32)) if x.is_floating_point() else x.float()

    slopes = slopes[:, None, None]
    if form == "symmetric":
        bias = -slopes * as_float((i - j).abs())
    elif form == "causal":
        bias = -slopes * as_float(i - j)
    else:
        bias = (slopes * as_float(j)).expand(*torch.broadcast_shapes(i.shape, j.shape)[:-3], num_heads,
                                             q.shape[-1], k.shape[-1])
    return bias.to(resolve_dtype(dtype))


class ALiBi(torch.nn.Module):
    """ALiBi bias as a module: `ALiBi(num_heads, form=...)(q_positions, k_positions)`.

    No weights and no buffers: slopes are spec constants kept outside the module, so `.to(bfloat16)`
    cannot round them; the output dtype is the constructor's `dtype` (float32 by default).
    """

    def __init__(self, num_heads, *, form="symmetric", max_bias=8.0, dtype=None):
        super().__init__()
        ALiBiConfig(num_heads, form=form, max_bias=max_bias).bind(self)
        self.dtype = resolve_dtype(dtype)

    def forward(self, q_positions, k_positions):
        return alibi_bias(self.num_heads, q_positions, k_positions, form=self.form, max_bias=self.max_bias, dtype=self.dtype)

    def extra_repr(self):
        return self.config.repr_args()
