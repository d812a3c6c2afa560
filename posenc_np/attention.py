"""Reference scaled dot-product attention with an additive bias: the specification (float64 NumPy)."""

from __future__ import annotations

import math

import numpy as np

from ._dtypes import is_float
from .testing import attention_tolerance  # noqa: F401  (lives in testing.py; importable here for older callers)

__all__ = ["attention", "causal_mask", "check_attention_args"]


def check_attention_args(q_shape, k_shape, v_shape, *, causal, scale) -> float | None:
    """Validate shapes and options of `attention`; returns `scale` as a float (None stays None)."""
    q_shape, k_shape, v_shape = tuple(q_shape), tuple(k_shape), tuple(v_shape)
    if len(q_shape) < 2 or len(k_shape) < 2 or len(v_shape) < 2:
        raise ValueError(f"q, k, v must be [..., seq, dim], got shapes {q_shape}, {k_shape}, {v_shape}")
    if q_shape[-1] != k_shape[-1]:
        raise ValueError(f"q and k must have the same last dim, got shapes {q_shape} and {k_shape}")
    if k_shape[-2] != v_shape[-2]:
        raise ValueError(f"k and v must have the same sequence length, got shapes {k_shape} and {v_shape}")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal={causal!r} must be a bool")
    if causal and q_shape[-2] > k_shape[-2]:
        raise ValueError(f"causal=True needs at least as many keys as queries (the last query sees the last key), "
                         f"got q length {q_shape[-2]} > k length {k_shape[-2]}")
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or not math.isfinite(scale):
        raise ValueError(f"scale={scale!r} must be a finite real number or None")
    return float(scale)


def causal_mask(q_len: int, k_len: int) -> np.ndarray:
    """`[q_len, k_len]` bool, True where query i may attend to key j: `j <= i + (k_len - q_len)`.

    The last query is aligned with the last key (bottom-right), so a decoding step with a KV cache
    (one query, k_len keys) sees every key, and q_len == k_len is the usual lower triangle. This is
    PyTorch's `causal_lower_right`, not the top-left alignment of `scaled_dot_product_attention(is_causal=True)`
    or `jax.nn.dot_product_attention(is_causal=True)` when q_len != k_len.
    """
    return np.arange(k_len)[None, :] <= np.arange(q_len)[:, None] + (k_len - q_len)


def attention(q, k, v, *, bias=None, causal=False, scale=None):
    """Softmax attention with an additive bias: `(out [..., q, dv], weights [..., q, k])`.

    Formula:
        logits[..., i, j] = scale * q[..., i, :] . k[..., j, :] + bias[..., i, j]
        logits[..., i, j] = -inf                       where causal and j > i + (k_len - q_len)
        weights = softmax(logits, axis=-1),   out = weights @ v
    `scale` defaults to 1/sqrt(dim). T5 uses unscaled logits: pass `scale=1.0` with a `t5_bias`.
    ALiBi and Shaw biases are added after the scale (BLOOM, MPT, the paper). Masked weights are exactly
    0 (exp(-inf)). The causal mask aligns the last query with the last key (`causal_mask`), so a KV
    cache step needs no offset; with causal=True there must be at least as many keys as queries. A row
    whose every logit is -inf (a bias that masks all keys) gives NaN, as softmax does. Non-finite
    inputs: a row whose logits hold NaN or +inf (NaN or inf in q, k or the bias) has NaN weights and
    output throughout (the max-subtracted softmax: `inf - inf` is NaN, and it enters the row's sum);
    -inf logits alone are masked keys. Every backend follows this rule (TF's fused softmax alone
    would keep finite weights beside the NaN, so it enforces the rule explicitly).

    Shapes: `q [..., q, dim]`, `k [..., k, dim]`, `v [..., k, dv]`, leading axes broadcast (heads,
    batch). `bias` broadcasts against `[..., q, k]`: a `[heads, q, k]` ALiBi or T5 bias serves
    `[batch, heads, q, dim]` queries without a batch copy.

    Args:
        q, k, v: float arrays (float16/bfloat16 are computed in float64 and returned in q's dtype).
        bias: None or an array broadcasting against the logits; may hold -inf.
        causal: apply the bottom-right causal mask.
        scale: logit scale, 1/sqrt(dim) when None.

    Returns:
        `(out, weights)` in q's dtype (float64 for integer inputs).

    Raises:
        ValueError/TypeError: mismatched dims or lengths, causal with more queries than keys, a
            non-finite scale, a bias that does not broadcast.

    Reference:
        Vaswani et al. 2017, arXiv:1706.03762, eq. 1; Press et al. 2021 (bias after scale);
        HF models/t5/modeling_t5.py `T5Attention.forward` (no scale).
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    scale = check_attention_args(q.shape, k.shape, v.shape, causal=causal, scale=scale)
    out_dtype = q.dtype if is_float(q) else np.dtype(np.float64)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    logits = scale * np.einsum("...qd,...kd->...qk", q.astype(np.float64), k.astype(np.float64))
    if bias is not None:
        bias = np.asarray(bias).astype(np.float64)
        try:
            logits = logits + bias
        except ValueError:
            raise ValueError(f"bias of shape {bias.shape} does not broadcast against logits {logits.shape}") from None
    if causal:
        logits = np.where(causal_mask(q.shape[-2], k.shape[-2]), logits, -np.inf)
    shifted = logits - np.max(logits, axis=-1, keepdims=True)
    exp = np.exp(shifted)
    weights = exp / np.sum(exp, axis=-1, keepdims=True)
    out = np.einsum("...qk,...kd->...qd", weights, v.astype(np.float64))
    return out.astype(out_dtype), weights.astype(out_dtype)
