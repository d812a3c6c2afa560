"""Attention with position biases in JAX: the reference and `jax.nn.dot_product_attention`.

`attention` is the spec's formula (`posenc_np.attention`); `dot_product_attention` runs the same
computation through `jax.nn.dot_product_attention` with the bias as its `bias` argument.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from posenc_np.attention import causal_mask, check_attention_args

from ._common import spec_constant

__all__ = ["attention", "dot_product_attention"]


def _compute_dtype(x):
    return jnp.promote_types(x.dtype, jnp.float32)


def _mask(q, k):
    q_len, k_len = q.shape[-2], k.shape[-2]
    return spec_constant(("causal_mask", q_len, k_len), lambda: causal_mask(q_len, k_len), dtype=jnp.bool_)


def attention(q, k, v, *, bias=None, causal=False, scale=None):
    """`(out, weights)`; see `posenc_np.attention`. float16/bfloat16 are computed in float32."""
    scale = check_attention_args(q.shape, k.shape, v.shape, causal=causal, scale=scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    compute = _compute_dtype(q)
    logits = scale * jnp.einsum("...qd,...kd->...qk", q.astype(compute), k.astype(compute))
    if bias is not None:
        logits = logits + jnp.asarray(bias).astype(compute)
    if causal:
        logits = jnp.where(_mask(q, k), logits, -jnp.inf)
    weights = jax.nn.softmax(logits, axis=-1)
    out = jnp.einsum("...qk,...kd->...qd", weights, v.astype(compute))
    out_dtype = q.dtype if jnp.issubdtype(q.dtype, jnp.floating) else compute  # integer inputs: float32
    return out.astype(out_dtype), weights.astype(out_dtype)


def dot_product_attention(q, k, v, *, bias=None, causal=False, scale=None):
    """`out` of `jax.nn.dot_product_attention` for `[batch, heads, seq, dim]` (or `[heads, seq, dim]`).

    jax.nn wants `[batch, seq, heads, dim]`, so q/k/v are transposed in and out; the bias
    (`[heads, q, k]` or `[batch, heads, q, k]`) is passed with size-1 leading axes, not copied per
    batch. Its `is_causal` aligns the first query with the first key, so the spec's bottom-right mask
    goes in as `mask` instead. Computed in
    float32 for float16/bfloat16 inputs.
    """
    scale = check_attention_args(q.shape, k.shape, v.shape, causal=causal, scale=scale)
    squeeze = q.ndim == 3
    if squeeze:
        q, k, v = q[None], k[None], v[None]
    if q.ndim != 4:
        raise ValueError(f"dot_product_attention takes [batch, heads, seq, dim] or [heads, seq, dim], got {q.shape}")
    compute = _compute_dtype(q)
    to_bthd = lambda x: jnp.swapaxes(x.astype(compute), 1, 2)  # noqa: E731
    if bias is not None:  # 4-D with size-1 leading axes: broadcast by jax.nn, no batch copy
        bias = jnp.asarray(bias).astype(compute)
        bias = bias.reshape((1,) * (4 - bias.ndim) + bias.shape)
    mask = _mask(q, k)[None, None] if causal else None
    out = jax.nn.dot_product_attention(to_bthd(q), to_bthd(k), to_bthd(v), bias=bias, mask=mask, scale=scale)
    out = jnp.swapaxes(out, 1, 2).astype(q.dtype)
    return out[0] if squeeze else out
