"""ALiBi (attention with linear biases): the specification (float64 NumPy)."""

from __future__ import annotations

import math

import numpy as np

from ._dtypes import spec_output_dtype
from ._validate import check_choice, check_position_pair, check_positive_float, check_positive_int, check_real_positions

# check_real_positions and check_position_pair live in _validate; imported here for older callers.
__all__ = ["alibi_slopes", "alibi_bias", "ALIBI_FORMS", "check_alibi_args"]

ALIBI_FORMS = ("symmetric", "causal", "bloom")


def check_alibi_args(num_heads, form, max_bias=8.0) -> int:
    """Validate the parameters of `alibi_bias`; backends call this before building anything."""
    num_heads = check_positive_int("num_heads", num_heads)
    check_choice("form", form, ALIBI_FORMS)
    check_positive_float("max_bias", max_bias)
    return num_heads


def alibi_slopes(num_heads, *, max_bias=8.0) -> np.ndarray:
    """Per-head ALiBi slopes `m_h`, h = 0 .. num_heads - 1, in float64.

    Formula (Press et al.; n = num_heads, B = max_bias, 8 in the paper):
        n a power of two:  m_h = 2 ** (-B (h + 1) / n)          (a geometric sequence from 2**(-B/n))
        otherwise, with c = 2 ** floor(log2 n):
                           `slopes(c)` followed by `slopes(2c)[0::2][: n - c]`,
                           i.e. m_h = 2 ** (-B (2 (h - c) + 1) / (2c)) for h >= c
    so 8 heads give 1/2, 1/4, ..., 1/256 and 12 heads give the 8-head slopes then the odd-indexed
    ones of the 16-head sequence (2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5). BLOOM's `build_alibi_tensor`
    computes these numbers for B = 8; for any B they are MPT/llm-foundry's `gen_slopes(n, alibi_bias_max=B)`
    (`2 ** (-B k / N)`, k = 1 .. N = 2 ** ceil(log2 n), reordered `concat(s[1::2], s[::2])[:n]`) and ggml's
    `ggml_compute_forward_soft_max` with `max_bias = B` (GGUF `max_alibi_bias`): m0 = 2 ** (-B / c),
    m1 = 2 ** (-(B / 2) / c), slope m0 ** (h + 1) for h < c and m1 ** (2 (h - c) + 1) after.

    Args:
        num_heads: number of attention heads, >= 1.
        max_bias: the exponent scale B, finite and > 0 (MPT `alibi_bias_max`, GGUF `max_alibi_bias`).

    Returns:
        `[num_heads]` float64 array, every slope in (0, 1].

    Raises:
        ValueError/TypeError: `num_heads` not an integer >= 1; `max_bias` not finite or not > 0.

    Reference:
        Press, Smith, Lewis, "Train Short, Test Long", 2021, arXiv:2108.12409;
        ofirpress/attention_with_linear_biases fairseq/models/transformer.py `get_slopes`;
        mosaicml/llm-foundry llmfoundry/models/layers/attention.py `gen_slopes`;
        HF models/mpt/modeling_mpt.py `build_mpt_alibi_tensor`; ggml src/ggml-cpu/ops.cpp
        `ggml_compute_forward_soft_max_f32` (m0, m1), llama.cpp `f_max_alibi_bias`.

    Examples:
        >>> alibi_slopes(4).tolist()
        [0.25, 0.0625, 0.015625, 0.00390625]
        >>> alibi_slopes(4, max_bias=4.0).tolist()
        [0.5, 0.25, 0.125, 0.0625]
    """
    num_heads = check_positive_int("num_heads", num_heads)
    max_bias = check_positive_float("max_bias", max_bias)

    def power_of_two(n):
        return 2.0 ** (-max_bias * np.arange(1, n + 1, dtype=np.float64) / n)

    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(closest)
    if closest < num_heads:
        slopes = np.concatenate([slopes, power_of_two(2 * closest)[0::2][: num_heads - closest]])
    return slopes


def alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", max_bias=8.0, dtype=None):
    """ALiBi bias added to attention logits: `[..., q] x [..., k] -> [..., num_heads, q, k]`.

    Formula, for query position i, key position j and head slope m_h (`alibi_slopes`):
        form="symmetric":  bias[h, i, j] = -m_h |i - j|    (x-transformers, MPT `full=True`; no mask needed)
        form="causal":     bias[h, i, j] = -m_h (i - j)    (the paper; positive for future keys, which a
                                                          causal mask hides)
        form="bloom":      bias[h, i, j] = +m_h j          (BLOOM; key position only)
    Under a causal mask (keys j <= i) the three give the same softmax: "causal" and "symmetric" are
    equal there, and "bloom" differs from them by m_h i, a constant along each row, which softmax
    removes. Without a mask their logits differ. The bias is added after the 1/sqrt(dim) scale.

    Named conventions (`posenc_np.conventions`): "press-alibi" = form "causal"; "bloom-alibi" = form
    "bloom" with key positions `(cumsum(attention_mask) - 1) * attention_mask` (left padding).

    Shapes: leading (batch) axes of the two position arrays broadcast against each other, so `[q]`
    and `[k]` give `[num_heads, q, k]` (no batch copy; it broadcasts against `[batch, heads, q, k]`
    logits) and `[batch, q]`, `[batch, k]` positions (left padding, BLOOM's cumsum positions) give
    `[batch, num_heads, q, k]`. A KV cache passes q_positions = past .. past + q - 1.

    Args:
        num_heads: number of heads, >= 1.
        q_positions: `[..., q]` real array (integer or float positions; any value is valid, so under
            jit nothing needs checking).
        k_positions: `[..., k]` real array.
        form: "symmetric", "causal" or "bloom".
        max_bias: the slopes' exponent scale (`alibi_slopes`); 8 is the paper.
        dtype: output dtype (float64 when None); slopes and differences are float64 regardless.

    Returns:
        `[..., num_heads, q, k]` array.

    Raises:
        ValueError/TypeError: `num_heads < 1`, unknown `form`, `max_bias` not finite and > 0, scalar or
            non-real positions, position
            leading axes that do not broadcast.

    Reference:
        Press et al. 2021, arXiv:2108.12409; HF models/bloom/modeling_bloom.py `build_alibi_tensor`;
        HF models/mpt/modeling_mpt.py `build_mpt_alibi_tensor`.

    Examples:
        >>> alibi_bias(2, np.arange(3), np.arange(3), form="causal")[0].tolist()
        [[-0.0, 0.0625, 0.125], [-0.0625, -0.0, 0.0625], [-0.125, -0.0625, -0.0]]
    """
    num_heads = check_alibi_args(num_heads, form, max_bias)
    q = check_real_positions("q_positions", q_positions).astype(np.float64)
    k = check_real_positions("k_positions", k_positions).astype(np.float64)
    check_position_pair(q.shape, k.shape)
    slopes = alibi_slopes(num_heads, max_bias=max_bias)[:, None, None]  # [heads, 1, 1]
    i = q[..., None, :, None]  # [..., 1, q, 1]
    j = k[..., None, None, :]  # [..., 1, 1, k]
    if form == "symmetric":
        bias = -slopes * np.abs(i - j)
    elif form == "causal":
        bias = -slopes * (i - j)
    else:
        # + zeros_like(i): the full [..., q, k] shape, like the other forms, without q's values (0 * NaN or
        # 0 * inf would be NaN: the bias depends on key positions only, as torch and JAX compute it)
        bias = slopes * j + np.zeros_like(i)
    return bias.astype(spec_output_dtype(dtype))
