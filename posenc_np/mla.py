"""Decoupled RoPE of multi-head latent attention (MLA: DeepSeek-V2/V3, Kimi K2, GLM-4.7-Flash, Mistral 4).

Each query head is `[q_nope | q_rope]` (`qk_nope_head_dim + qk_rope_head_dim` channels): only the
trailing `qk_rope_head_dim` slice rotates. The keys' rope part is ONE head (`k_pe`, the trailing
`qk_rope_head_dim` outputs of `kv_a_proj_with_mqa`) shared by every query head; the key of head h is
`[k_nope_h | rope(k_pe)]`. DeepSeek's checkpoints store the rope slice as interleaved pairs
(`rope_interleave=True`): transformers de-interleaves it at run time (`apply_rotary_pos_emb_interleave`,
output in half order) and Megatron does the same (`t[0::2], t[1::2]`); rotating interleaved pairs in place
(`layout="interleaved"`) gives the same logits, and `mla_rope_permutation` converts the weights once so
that a half-layout runtime can be used (porting).

YaRN in MLA splits its magnitude correction: cos and sin carry `m(s, mscale) / m(s, mscale_all_dim)`
(the scaling dict's attention factor, `posenc_np.scaling` yarn), and the softmax scale becomes
`qk_head_dim ** -0.5 * m(s, mscale_all_dim) ** 2` with `m(s, a) = 0.1 a ln s + 1` (1 for s <= 1)
(`mla_softmax_scale`). With `mscale == mscale_all_dim` (DeepSeek-V3: 1.0, 1.0) cos/sin are unscaled and all
of the correction sits in the softmax.

Reference: DeepSeek-AI, "DeepSeek-V2", 2024, arXiv:2405.04434 §2.1.3; transformers 5.24
`models/deepseek_v3/modeling_deepseek_v3.py` (`DeepseekV3Attention`, `apply_rotary_pos_emb_interleave`,
`yarn_get_mscale`, `yarn_apply_mscale`).
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ._validate import check_float_dtype, check_positive_int
from .rope import apply_rope, rope_permutation

__all__ = ["apply_mla_rope", "mla_softmax_scale", "mla_rope_permutation", "check_mla_args"]


def check_mla_args(q_shape, k_pe_shape, *, qk_nope_head_dim, rotary_dim) -> tuple[int, int]:
    """The slice sizes of `apply_mla_rope` against the shapes of `q` and `k_pe`; returns `(nope, rope)`.

    `qk_nope_head_dim >= 0`, `rotary_dim >= 2` integers; `q`'s last axis is `nope + rope` and `k_pe`'s is
    `rope`. It reads shapes only (any library's), so every backend checks them before it builds a graph,
    with these messages.
    """
    nope = check_positive_int("qk_nope_head_dim", qk_nope_head_dim, minimum=0)
    rope = check_positive_int("rotary_dim", rotary_dim, minimum=2)
    q_last, k_last = tuple(q_shape)[-1], tuple(k_pe_shape)[-1]
    if q_last != nope + rope:
        raise ValueError(f"q has last axis {q_last}; qk_nope_head_dim + qk_rope_head_dim = "
                         f"{nope} + {rope} = {nope + rope}")
    if k_last != rope:
        raise ValueError(f"k_pe has last axis {k_last}, expected qk_rope_head_dim = rotary_dim = {rope}")
    return nope, rope


def apply_mla_rope(q, k_pe, positions, *, qk_nope_head_dim, rotary_dim, base=10000.0, layout="half",
                   scaling=None):
    """Rotate the trailing rope slice of MLA queries and the shared single-head rope key.

    Formula: `q = [q_nope | q_rope] -> [q_nope | R(p) q_rope]`, `k_pe -> R(p) k_pe`, where R is `apply_rope`
    with `rotary_dim = qk_rope_head_dim` (the whole slice) and the given layout/scaling (YaRN's
    `m(s, mscale) / m(s, mscale_all_dim)` folded into cos and sin).

    Args:
        q: `[..., heads, seq, qk_nope_head_dim + qk_rope_head_dim]` float array.
        k_pe: `[..., 1, seq, qk_rope_head_dim]` (one head, broadcast to all query heads by the caller).
        positions: integers broadcasting against `[..., seq]` of both (`[seq]` serves both).
        qk_nope_head_dim: leading channels of each query head that do not rotate.
        rotary_dim: `qk_rope_head_dim`; `k_pe.shape[-1]` must equal it.
        base, layout, scaling: as `apply_rope` (`layout="interleaved"` for `rope_interleave=True` storage).
            A schedule entry of `rope_schedule_from_hf_config` for an MLA config is exactly these.

    Returns:
        `(q_rotated, k_pe_rotated)`, shapes and dtypes as given; the rope slice stays in `layout` order.

    Raises:
        ValueError: slice sizes that do not add up, and everything `apply_rope` raises.

    Examples:
        >>> q = np.zeros((1, 1, 4)); q[..., 2] = 1.0
        >>> qr, kr = apply_mla_rope(q, np.array([[[1.0, 0.0]]]), [1], qk_nope_head_dim=2, rotary_dim=2)
        >>> qr.round(4).tolist(), kr.round(4).tolist()
        ([[[0.0, 0.0, 0.5403, 0.8415]]], [[[0.5403, 0.8415]]])
    """
    q, k_pe = np.asarray(q), np.asarray(k_pe)
    check_float_dtype("q", q.dtype)
    check_float_dtype("k_pe", k_pe.dtype)
    nope, rope = check_mla_args(q.shape, k_pe.shape, qk_nope_head_dim=qk_nope_head_dim, rotary_dim=rotary_dim)
    kwargs = dict(base=base, layout=layout, scaling=scaling)
    q_rope = apply_rope(q[..., nope:], positions, **kwargs)
    return np.concatenate([q[..., :nope], q_rope], axis=-1), apply_rope(k_pe, positions, **kwargs)


def _mscale(factor, mscale):
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def mla_softmax_scale(qk_head_dim, scaling=None) -> float:
    """The softmax scale of MLA: `qk_head_dim ** -0.5`, times `m(factor, mscale_all_dim) ** 2` under scaling.

    Follows transformers' `yarn_apply_mscale`: any non-default `rope_type` whose dict has a non-zero
    `mscale_all_dim` multiplies the scale by `(0.1 * mscale_all_dim * ln(factor) + 1) ** 2` (1 when
    factor <= 1). `qk_head_dim = qk_nope_head_dim + qk_rope_head_dim`.

    Examples:
        >>> round(mla_softmax_scale(192, {"rope_type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
        ...                               "original_max_position_embeddings": 4096}), 6)
        0.135234
    """
    qk_head_dim = check_positive_int("qk_head_dim", qk_head_dim)
    scale = qk_head_dim ** -0.5
    if scaling is None:
        return scale
    if not isinstance(scaling, Mapping):
        raise TypeError(f"scaling must be None or a dict, got {type(scaling).__name__}")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    all_dim = scaling.get("mscale_all_dim") or 0
    if kind != "default" and all_dim:
        if scaling.get("factor") is None:
            raise ValueError("scaling has mscale_all_dim but no 'factor'")
        m = _mscale(float(scaling["factor"]), float(all_dim))
        scale *= m * m
    return float(scale)


def mla_rope_permutation(head_dim, rotary_dim, *, source="interleaved", target="half") -> np.ndarray:
    """Row permutation of one MLA head whose rope slice is the TRAILING `rotary_dim` channels.

    `W_target = W_source[perm]` for the rows of one query head of `q_b_proj` / `q_proj`
    (`head_dim = qk_nope_head_dim + qk_rope_head_dim`) or of `kv_a_proj_with_mqa`
    (`head_dim = kv_lora_rank + qk_rope_head_dim`): the leading channels keep their place, the trailing slice
    is converted like `rope_permutation` (interleaved -> half is Megatron's `t[0::2], t[1::2]`, what
    transformers does at run time for `rope_interleave=True`).

    Examples:
        >>> mla_rope_permutation(6, 4).tolist()
        [0, 1, 2, 4, 3, 5]
    """
    head_dim = check_positive_int("head_dim", head_dim)
    rotary_dim = check_positive_int("rotary_dim", rotary_dim, minimum=2)
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim={rotary_dim} is larger than head_dim={head_dim}")
    lead = head_dim - rotary_dim
    perm = np.arange(head_dim, dtype=np.int64)
    perm[lead:] = lead + rope_permutation(rotary_dim, source=source, target=target)
    return perm
