"""Decoupled RoPE of multi-head latent attention in TensorFlow; formulas and sources: `posenc_np.mla`.

The rope slice goes through this backend's `apply_rope` (same precision policy); the softmax scale and
the weight permutation are parameter-only and come from the spec.
"""

from __future__ import annotations

import tensorflow as tf

from posenc_np._validate import check_float_dtype, check_positive_int
from posenc_np.mla import mla_rope_permutation, mla_softmax_scale

from .rope import apply_rope

__all__ = ["apply_mla_rope", "mla_softmax_scale", "mla_rope_permutation"]


def apply_mla_rope(q, k_pe, positions, *, qk_nope_head_dim, rotary_dim, base=10000.0, layout="half", scaling=None):
    """Rotate the trailing `rotary_dim` channels of `q` and the single-head `k_pe`; see `posenc_np.apply_mla_rope`."""
    nope = check_positive_int("qk_nope_head_dim", qk_nope_head_dim, minimum=0)
    rope = check_positive_int("rotary_dim", rotary_dim, minimum=2)
    check_float_dtype("q", tf.as_dtype(q.dtype).name, tf.as_dtype(q.dtype).is_floating)
    check_float_dtype("k_pe", tf.as_dtype(k_pe.dtype).name, tf.as_dtype(k_pe.dtype).is_floating)
    if q.shape[-1] != nope + rope:
        raise ValueError(f"q has last axis {q.shape[-1]}; qk_nope_head_dim + qk_rope_head_dim = "
                         f"{nope} + {rope} = {nope + rope}")
    if k_pe.shape[-1] != rope:
        raise ValueError(f"k_pe has last axis {k_pe.shape[-1]}, expected qk_rope_head_dim = rotary_dim = {rope}")
    kwargs = dict(base=base, layout=layout, scaling=scaling)
    q_rope = apply_rope(q[..., nope:], positions, **kwargs)
    return tf.concat([q[..., :nope], q_rope], axis=-1), apply_rope(k_pe, positions, **kwargs)
