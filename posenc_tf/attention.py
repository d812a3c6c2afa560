"""Attention with position biases in TensorFlow / Keras 3: the reference and `keras.ops`.

`attention` is the spec's formula (`posenc_np.attention`); `keras_attention` runs it through
`keras.ops.dot_product_attention` with the bias as its `bias` argument.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from posenc_np.attention import causal_mask, check_attention_args

from ._common import spec_constant

__all__ = ["attention", "keras_attention"]


def _compute_dtype(x):
    return tf.float64 if x.dtype == tf.float64 else tf.float32


def _mask(q, k):
    q_len, k_len = q.shape[-2], k.shape[-2]
    return spec_constant(("causal_mask", q_len, k_len), lambda: causal_mask(q_len, k_len), dtype=tf.bool)


def _softmax(logits):
    """`tf.nn.softmax` with the spec's rule for non-finite logits (`posenc_np.attention`): a row holding NaN
    or +inf is NaN throughout. TF's CPU kernel keeps finite weights beside such entries (0 where the spec
    has NaN: fuzzing found it), so those rows are set explicitly; one `where`, no branch on data."""
    poisoned = tf.reduce_any(tf.math.is_nan(logits) | tf.equal(logits, float("inf")), axis=-1, keepdims=True)
    return tf.where(poisoned, tf.constant(float("nan"), logits.dtype), tf.nn.softmax(logits, axis=-1))


def attention(q, k, v, *, bias=None, causal=False, scale=None):
    """`(out, weights)`; see `posenc_np.attention`. float16/bfloat16 are computed in float32."""
    scale = check_attention_args(q.shape, k.shape, v.shape, causal=causal, scale=scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    compute = _compute_dtype(q)
    logits = scale * tf.einsum("...qd,...kd->...qk", tf.cast(q, compute), tf.cast(k, compute))
    if bias is not None:
        logits = logits + tf.cast(bias, compute)
    if causal:
        logits = tf.where(_mask(q, k), logits, tf.constant(float("-inf"), compute))
    weights = _softmax(logits)
    out = tf.einsum("...qk,...kd->...qd", weights, tf.cast(v, compute))
    out_dtype = q.dtype if q.dtype.is_floating else compute  # integer inputs: float32, never rounded to ints
    return tf.cast(out, out_dtype), tf.cast(weights, out_dtype)


def keras_attention(q, k, v, *, bias=None, causal=False, scale=None):
    """`out` of `keras.ops.dot_product_attention` for `[batch, heads, seq, dim]` (or `[heads, seq, dim]`).

    keras.ops wants `[batch, seq, heads, dim]`, so q/k/v are transposed in and out; the bias
    (`[heads, q, k]` or `[batch, heads, q, k]`) gets size-1 leading axes, no batch copy. Its
    `is_causal` aligns the first query with the first key, so the spec's bottom-right mask goes in
    as `mask`. Computed in float32 for float16/bfloat16.
    """
    scale = check_attention_args(q.shape, k.shape, v.shape, causal=causal, scale=scale)
    squeeze = len(q.shape) == 3
    if squeeze:
        q, k, v = q[None], k[None], v[None]
    if len(q.shape) != 4:
        raise ValueError(f"keras_attention takes [batch, heads, seq, dim] or [heads, seq, dim], got {q.shape}")
    compute = _compute_dtype(q)
    to_bthd = lambda x: tf.transpose(tf.cast(x, compute), [0, 2, 1, 3])  # noqa: E731
    if bias is not None:  # 4-D with size-1 leading axes: added by broadcasting, no batch copy
        bias = tf.cast(bias, compute)
        bias = tf.reshape(bias, [1] * (4 - len(bias.shape)) + list(bias.shape))
    mask = _mask(q, k)[None, None] if causal else None
    out = keras.ops.dot_product_attention(to_bthd(q), to_bthd(k), to_bthd(v), bias=bias, mask=mask, scale=scale)
    out = tf.cast(tf.transpose(out, [0, 2, 1, 3]), q.dtype)
    return out[0] if squeeze else out
