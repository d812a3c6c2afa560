"""Decoupled RoPE of multi-head latent attention in MLX; formulas and sources: `posenc_np.mla`.

The rope slice goes through this backend's `apply_rope` (same precision policy); the softmax scale and
the weight permutation are parameter-only and come from the spec.
"""

from __future__ import annotations

import mlx.core as mx

from posenc_np.backend import check_float_dtype
from posenc_np.mla import check_mla_args, mla_rope_permutation, mla_softmax_scale

from ._common import as_tensor, is_floating
from .rope import apply_rope

__all__ = ["apply_mla_rope", "mla_softmax_scale", "mla_rope_permutation"]


def apply_mla_rope(q, k_pe, positions, *, qk_nope_head_dim, rotary_dim, base=10000.0, layout="half", scaling=None):
    """Rotate the trailing `rotary_dim` channels of `q` and the single-head `k_pe`; see `posenc_np.apply_mla_rope`."""
    q, k_pe = as_tensor(q), as_tensor(k_pe)
    check_float_dtype("q", q.dtype, is_floating(q))
    check_float_dtype("k_pe", k_pe.dtype, is_floating(k_pe))
    nope, rope = check_mla_args(q.shape, k_pe.shape, qk_nope_head_dim=qk_nope_head_dim, rotary_dim=rotary_dim)
    kwargs = dict(base=base, layout=layout, scaling=scaling)
    q_rope = apply_rope(q[..., nope:], positions, **kwargs)
    return mx.concatenate([q[..., :nope], q_rope], axis=-1), apply_rope(k_pe, positions, **kwargs)
