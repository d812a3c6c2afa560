"""Decoupled RoPE of multi-head latent attention in PyTorch; formulas and sources: `posenc_np.mla`.

The rope slice goes through this backend's `apply_rope` (same precision policy); the softmax scale and
the weight permutation are parameter-only and come from the spec.
"""

from __future__ import annotations

import torch

from posenc_np.backend import check_float_dtype
from posenc_np.mla import check_mla_args, mla_rope_permutation, mla_softmax_scale

from ._common import is_tracing
from .rope import apply_rope

__all__ = ["apply_mla_rope", "mla_softmax_scale", "mla_rope_permutation"]


def apply_mla_rope(q, k_pe, positions, *, qk_nope_head_dim, rotary_dim, base=10000.0, layout="half", scaling=None):
    """Rotate the trailing `rotary_dim` channels of `q` and the single-head `k_pe`; see `posenc_np.apply_mla_rope`."""
    check_float_dtype("q", q.dtype, q.is_floating_point())
    check_float_dtype("k_pe", k_pe.dtype, k_pe.is_floating_point())
    nope, rope = check_mla_args(q.shape, k_pe.shape, qk_nope_head_dim=qk_nope_head_dim, rotary_dim=rotary_dim)
    kwargs = dict(base=base, layout=layout, scaling=scaling)
    if not is_tracing(q) and not (torch.is_grad_enabled() and q.requires_grad):
        # eager: the rope slice rotated straight into the output (out=), no contiguous copy and no cat
        # (1.5x plain apply_rope's time otherwise, docs/performance.md); out= is not differentiable
        q_out = torch.empty_like(q)
        q_out[..., :nope] = q[..., :nope]
        apply_rope(q[..., nope:], positions, out=q_out[..., nope:], **kwargs)
        return q_out, apply_rope(k_pe, positions, **kwargs)
    q_rope = apply_rope(q[..., nope:].contiguous(), positions, **kwargs)  # a strided view breaks torch.cond under compile
    return torch.cat([q[..., :nope], q_rope], dim=-1), apply_rope(k_pe, positions, **kwargs)
