"""Attention with position biases in PyTorch: the reference and three ways to run it.

`attention` is the spec's formula (`posenc_np.attention`) in torch. `sdpa_attention` feeds the bias to
`torch.nn.functional.scaled_dot_product_attention` as a float mask. `flex_attention` with
`alibi_score_mod` / `t5_score_mod` adds the bias inside FlexAttention's score function, so no
`[heads, q, k]` bias tensor exists (compile it, `torch.compile(flex_attention)`, for the fused kernel;
eager FlexAttention runs on CPU but materialises the scores).
"""

from __future__ import annotations

import math

import torch

from posenc_np.alibi import alibi_slopes as _spec_slopes
from posenc_np.alibi import check_alibi_args
from posenc_np.attention import causal_mask, check_attention_args
from posenc_np.t5 import check_t5_args, t5_bucket_thresholds

from ._common import spec_constant

__all__ = ["attention", "sdpa_attention", "flex_attention", "alibi_score_mod", "t5_score_mod"]


def _compute_dtype(x):
    return torch.promote_types(x.dtype, torch.float32)


def _mask(q, k):
    q_len, k_len = q.shape[-2], k.shape[-2]
    return spec_constant(("causal_mask", q_len, k_len), lambda: causal_mask(q_len, k_len), dtype=torch.bool,
                         device=q.device)


def attention(q, k, v, *, bias=None, causal=False, scale=None):
    """`(out, weights)`; see `posenc_np.attention` (scale 1/sqrt(dim) by default, bottom-right causal mask).

    float16/bfloat16 inputs are computed in float32 and returned in q's dtype; masked weights are
    exactly 0.
    """
    scale = check_attention_args(q.shape, k.shape, v.shape, causal=causal, scale=scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    compute = _compute_dtype(q)
    logits = scale * torch.einsum("...qd,...kd->...qk", q.to(compute), k.to(compute))
    if bias is not None:
        logits = logits + bias.to(compute)
    if causal:
        logits = logits.masked_fill(~_mask(q, k), float("-inf"))
    weights = torch.softmax(logits, dim=-1)
    out = torch.einsum("...qk,...kd->...qd", weights, v.to(compute))
    out_dtype = q.dtype if q.is_floating_point() else compute  # integer inputs: float32, never rounded to ints
    return out.to(out_dtype), weights.to(out_dtype)


def sdpa_attention(q, k, v, *, bias=None, causal=False, scale=None):
    """`out` of `F.scaled_dot_product_attention` with `bias` as its float `attn_mask`.

    SDPA's `is_causal` aligns the first query with the first key and cannot be combined with a mask,
    so the spec's bottom-right causal mask is folded into the float mask as -inf. Computed in float32
    for float16/bfloat16 inputs (returned in q's dtype). Returns only `out` (SDPA has no weights).
    """
    scale = check_attention_args(q.shape, k.shape, v.shape, causal=causal, scale=scale)
    compute = _compute_dtype(q)
    mask = None if bias is None else bias.to(compute)
    if causal:
        blocked = torch.zeros((), dtype=compute, device=q.device) if mask is None else mask
        mask = torch.where(_mask(q, k), blocked, torch.tensor(float("-inf"), dtype=compute, device=q.device))
    out = torch.nn.functional.scaled_dot_product_attention(q.to(compute), k.to(compute), v.to(compute),
                                                           attn_mask=mask, scale=scale)
    return out.to(q.dtype)


def alibi_score_mod(num_heads, *, form="symmetric", q_offset=0):
    """A FlexAttention `score_mod` adding ALiBi: `score + bias[h, q_idx + q_offset, kv_idx]`.

    Positions are the FlexAttention indices; `q_offset` (an int, or a 0-d integer tensor so that a
    new offset does not recompile) places the queries at q_offset .. q_offset + q - 1, e.g. k - q for
    a KV cache step. Slopes are the spec's, as float32.
    """
    num_heads = check_alibi_args(num_heads, form)
    slopes = spec_constant(("alibi_slopes", num_heads), lambda: _spec_slopes(num_heads))

    def score_mod(score, b, h, q_idx, kv_idx):
        i = q_idx + q_offset
        if form == "symmetric":
            bias = -slopes[h] * (i - kv_idx).abs().float()
        elif form == "causal":
            bias = -slopes[h] * (i - kv_idx).float()
        else:
            bias = slopes[h] * kv_idx.float()
        return score + bias.to(score.dtype)

    return score_mod


def t5_score_mod(table, *, bidirectional=True, num_buckets=32, max_distance=128, q_offset=0):
    """A FlexAttention `score_mod` adding `table[t5_bucket(kv_idx - q_idx - q_offset), h]`.

    Buckets are counted against the spec's thresholds as in `posenc_torch.t5_bucket`; `table`
    `[num_buckets, heads]` is read inside the score function (gradients flow to it in eager
    FlexAttention; with torch 2.13 on CPU, compiling the backward through a trainable table fails in
    Inductor, the compiled forward works). Use `flex_attention(..., scale=1.0)` for T5's unscaled logits.
    """
    per_direction, max_exact = check_t5_args(bidirectional, num_buckets, max_distance)
    if table.ndim != 2 or table.shape[0] != num_buckets:
        raise ValueError(f"table must be [num_buckets={num_buckets}, heads], got shape {tuple(table.shape)}")
    # Python ints: the count below is pointwise, which the compiled (Inductor) flex kernel needs; a
    # reduction over a thresholds tensor cannot be lowered inside score_mod.
    thresholds = [int(t) for t in t5_bucket_thresholds(bidirectional=bidirectional, num_buckets=num_buckets,
                                                       max_distance=max_distance)]
    def score_mod(score, b, h, q_idx, kv_idx):
        relative = kv_idx - (q_idx + q_offset)
        if bidirectional:
            offset = (relative > 0).long() * per_direction
            distance = relative.abs()
        else:
            offset = 0
            distance = (-relative).clamp(min=0)
        bucket = offset + distance.clamp(max=max_exact)
        for threshold in thresholds:
            bucket = bucket + (distance >= threshold).long()
        return score + table[bucket, h].to(score.dtype)

    return score_mod


def flex_attention(q, k, v, *, score_mod=None, causal=False, scale=None):
    """`out` of `torch.nn.attention.flex_attention` for `[batch, heads, seq, dim]` (or `[heads, seq, dim]`).

    `causal=True` builds a block mask with the spec's bottom-right alignment. float16/bfloat16
    inputs are computed in float32. Eager on CPU it works but materialises the scores; wrap this
    function in `torch.compile` for the fused kernel (the flex call is compiled with the graph).
    """
    from torch.nn.attention.flex_attention import create_block_mask
    from torch.nn.attention.flex_attention import flex_attention as _flex

    scale = check_attention_args(q.shape, k.shape, v.shape, causal=causal, scale=scale)
    squeeze = q.ndim == 3
    if squeeze:
        q, k, v = q[None], k[None], v[None]
    if q.ndim != 4:
        raise ValueError(f"flex_attention takes [batch, heads, seq, dim] or [heads, seq, dim], got {tuple(q.shape)}")
    block_mask = None
    if causal:
        offset = k.shape[-2] - q.shape[-2]
        block_mask = create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx <= q_idx + offset, None, None,
                                       q.shape[-2], k.shape[-2], device=q.device)
    compute = _compute_dtype(q)
    out = _flex(q.to(compute), k.to(compute), v.to(compute), score_mod=score_mod, block_mask=block_mask,
                scale=scale)
    out = out.to(q.dtype)
    return out[0] if squeeze else out
