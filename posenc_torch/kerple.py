"""KERPLE and Sandwich relative biases in PyTorch. Spec: `posenc_np.kerple_bias`, `posenc_np.sandwich_bias`."""

from __future__ import annotations

import torch

from posenc_np.backend import KERPLEConfig
from posenc_np.kerple import check_kerple_params, check_sandwich_args, sandwich_head_scale, sandwich_inv_freq

from ._common import position_pair, resolve_dtype, spec_constant

__all__ = ["kerple_bias", "sandwich_bias", "KERPLEBias"]


def _distance32(q, k, absolute):
    """`[..., 1, q, k]` float32 (q - k or |q - k|); integer positions are subtracted as integers (exact)."""
    i, j = q[..., None, :, None], k[..., None, None, :]
    if not (q.is_floating_point() or k.is_floating_point()):
        d = i - j
        return (d.abs() if absolute else d).float()
    d = i.float() - j.float()
    return d.abs() if absolute else d


def kerple_bias(r1, r2, q_positions, k_positions, *, kernel="log"):
    """`[..., heads, q, k]` KERPLE bias in float32, returned in r1's dtype; see `posenc_np.kerple_bias`.

    Differentiable with respect to r1 and r2 (the trainable per-head parameters).
    """
    check_kerple_params(r1.shape, r2.shape, kernel)
    q, k = position_pair(q_positions, k_positions, integer=False)
    distance = _distance32(q, k, absolute=True)
    a, b = r1.float()[:, None, None], r2.float()[:, None, None]
    bias = -a * torch.log1p(b * distance) if kernel == "log" else -a * distance.pow(b)
    return bias.to(r1.dtype)


def sandwich_bias(num_heads, q_positions, k_positions, *, dim, base=10000.0, dtype=None):
    """`[..., heads, q, k]` Sandwich bias; see `posenc_np.sandwich_bias`. float32 cosines, cast to `dtype`."""
    num_heads, dim, base = check_sandwich_args(num_heads, dim, base)
    q, k = position_pair(q_positions, k_positions, integer=False)
    inv_freq = spec_constant(("sandwich", dim, base), lambda: sandwich_inv_freq(dim, base=base), device=q.device)
    relative = _distance32(q, k, absolute=False)[..., 0, :, :]  # [..., q, k]
    inner = torch.cos(relative[..., None] * inv_freq).sum(-1) - dim / 2
    head_scale = spec_constant(("sandwich_heads", num_heads), lambda: sandwich_head_scale(num_heads),
                               device=relative.device)
    return (inner[..., None, :, :] * head_scale[:, None, None]).to(resolve_dtype(dtype))


class KERPLEBias(torch.nn.Module):
    """KERPLE bias with trainable per-head `r1`, `r2` (`[num_heads]` each).

    As KERPLE's code: init r1 ~ U(0, 2), r2 ~ U(0, 1), and in every forward the parameters are
    clamped to >= 0.01 (and r2 <= 2 for the power kernel) before `kerple_bias`, which keeps the
    kernel conditionally positive definite while training moves them.
    """

    def __init__(self, num_heads, *, kernel="log", eps=0.01, dtype=None, device=None):
        super().__init__()
        KERPLEConfig(num_heads, kernel=kernel, eps=eps).bind(self)
        self.r1 = torch.nn.Parameter(torch.rand(self.num_heads, dtype=dtype, device=device) * 2)
        self.r2 = torch.nn.Parameter(torch.rand(self.num_heads, dtype=dtype, device=device))

    def forward(self, q_positions, k_positions):
        r1 = self.r1.clamp(min=self.eps)
        r2 = self.r2.clamp(min=self.eps, max=self.config.r2_max)
        return kerple_bias(r1, r2, q_positions, k_positions, kernel=self.kernel)

    def extra_repr(self):
        return self.config.repr_args()
