"""FIRE in PyTorch. Spec: `posenc_np.fire_bias`."""

from __future__ import annotations

import torch

from posenc_np.backend import FIREConfig
from posenc_np.fire import check_fire_eps, check_fire_params

from ._common import position_pair

__all__ = ["fire_bias", "FIREBias"]


def fire_bias(c, L, w1, b1, w2, b2, q_positions, k_positions, *, eps=1e-6):
    """`[..., heads, q, k]` FIRE bias in float32, returned in w2's dtype; see `posenc_np.fire_bias`.

    Weights in `nn.Linear` orientation (`w1 [width, 1]`, `w2 [heads, width]`); differentiable with
    respect to every parameter. Works under torch.compile(fullgraph=True).
    """
    check_fire_params(c.shape, L.shape, w1.shape, b1.shape, w2.shape, b2.shape)
    check_fire_eps(eps)
    q, k = position_pair(q_positions, k_positions, integer=False)
    q32, k32 = q.float(), k.float()
    c32 = c.float().reshape(())

    def psi(x):
        return torch.log1p(torch.abs(c32 * x))

    relative = q32[..., :, None] - k32[..., None, :]
    normalizer = torch.maximum(q32, torch.abs(L.float().reshape(())))[..., :, None]
    u = psi(relative) / (psi(normalizer) + eps)
    hidden = torch.relu(u[..., None] * w1.float()[:, 0] + b1.float())
    out = torch.nn.functional.linear(hidden, w2.float(), b2.float())  # [..., q, k, heads]
    return out.movedim(-1, -3).to(w2.dtype)


class FIREBias(torch.nn.Module):
    """FIRE with the reference's parameters: `mlp` (`nn.Linear(1, width)`, ReLU, `nn.Linear(width, heads)`),
    `c` (init 0.1), `L_multiplier` (init 1, multiplying the fixed `init_L`, 512).

    Called with `(q_positions, k_positions)`; returns `[..., heads, q, k]`.
    """

    def __init__(self, num_heads, *, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, dtype=None, device=None):
        super().__init__()
        FIREConfig(num_heads, mlp_width=mlp_width, init_c=init_c, init_L=init_L, eps=eps).bind(self)
        kw = dict(dtype=dtype, device=device)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(1, self.mlp_width, **kw), torch.nn.ReLU(),
                                       torch.nn.Linear(self.mlp_width, self.num_heads, **kw))
        self.c = torch.nn.Parameter(torch.tensor(self.init_c, **kw))
        self.L_multiplier = torch.nn.Parameter(torch.tensor(1.0, **kw))

    def forward(self, q_positions, k_positions):
        return fire_bias(self.c, self.L_multiplier * self.init_L, self.mlp[0].weight, self.mlp[0].bias,
                         self.mlp[2].weight, self.mlp[2].bias, q_positions, k_positions, eps=self.eps)

    def extra_repr(self):
        return self.config.repr_args()
