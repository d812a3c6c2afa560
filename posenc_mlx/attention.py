"""Attention with position biases in MLX: the reference and `mx.fast.scaled_dot_product_attention`.

`attention` is the spec's formula (`posenc_np.attention`); `dot_product_attention` runs the same
computation through MLX's fused kernel with the bias as its additive `mask`.
"""

from __future__ import annotations

import contextlib
import math

import mlx.core as mx

from posenc_np.attention import causal_mask, check_attention_args

from ._common import F64, as_tensor, is_floating, spec_constant

__all__ = ["attention", "dot_product_attention"]


def _compute_dtype(x):
    return mx.float64 if x.dtype == mx.float64 else mx.float32


def _mask(q, k):
    q_len, k_len = q.shape[-2], k.shape[-2]
    return spec_constant(("causal_mask", q_len, k_len), lambda: causal_mask(q_len, k_len), dtype=mx.bool_)


def attention(q, k, v, *, bias=None, causal=False, scale=None):
    """`(out, weights)`; see `posenc_np.attention`. float16/bfloat16 are computed in float32."""
    q, k, v = as_tensor(q), as_tensor(k), as_tensor(v)
    scale = check_attention_args(q.shape, k.shape, v.shape, causal=causal, scale=scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    compute = _compute_dtype(q)
    with mx.stream(F64) if compute == mx.float64 else contextlib.nullcontext():
        logits = scale * (q.astype(compute) @ mx.swapaxes(k.astype(compute), -1, -2))
        if bias is not None:
            logits = logits + as_tensor(bias).astype(compute)
        if causal:
            logits = mx.where(_mask(q, k), logits, -math.inf)
        weights = mx.softmax(logits, axis=-1, precise=True)
        out = weights @ v.astype(compute)
        out_dtype = q.dtype if is_floating(q) else compute  # integer inputs: float32
        return out.astype(out_dtype), weights.astype(out_dtype)


def dot_product_attention(q, k, v, *, bias=None, causal=False, scale=None):
    """`out` of `mx.fast.scaled_dot_product_attention` for `[batch, heads, seq, dim]` (or `[heads, seq, dim]`).

    MLX's kernel takes the `[batch, heads, seq, dim]` layout; the bias (`[heads, q, k]` or
    `[batch, heads, q, k]`) is its additive `mask`, combined with the spec's bottom-right causal mask
    as -inf. Computed in float32 for float16/bfloat16 inputs.
    """
    q, k, v = as_tensor(q), as_tensor(k), as_tensor(v)
    scale = check_attention_args(q.shape, k.shape, v.shape, causal=causal, scale=scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    squeeze = q.ndim == 3
    if squeeze:
        q, k, v = q[None], k[None], v[None]
    if q.ndim != 4:
        raise ValueError(f"dot_product_attention takes [batch, heads, seq, dim] or [heads, seq, dim], got {q.shape}")
    out_dtype, compute = q.dtype, mx.float32
    mask = None if bias is None else as_tensor(bias).astype(compute)
    if causal:
        blocked = mx.where(_mask(q, k), 0.0, -math.inf)
        mask = blocked if mask is None else mask + blocked
    out = mx.fast.scaled_dot_product_attention(q.astype(compute), k.astype(compute), v.astype(compute),
                                               scale=scale, mask=mask)
    out = out.astype(out_dtype)
    return out[0] if squeeze else out
