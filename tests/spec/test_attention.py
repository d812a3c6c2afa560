"""Reference attention, spec: the bottom-right causal mask and its exact zeros, bias broadcasting, dtype,
validation.

NumPy and ml_dtypes only. PyTorch's float64 SDPA and HF's T5 attention: tests/reference/test_attention_reference.py;
the backends' `attention` with each bias: the registry's attention cases (tests/backends/test_conformance.py);
each framework's fast path: tests/backends/test_attention_paths.py."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from posenc_np._dtypes import numpy_dtype

HEADS, DIM = 4, 8


def _qkv(q_len, k_len, dtype="float64", batch=2, seed=0):
    rng = np.random.default_rng(seed)
    cast = numpy_dtype(dtype)
    return tuple(rng.normal(size=(batch, HEADS, n, DIM)).astype(cast) for n in (q_len, k_len, k_len))


# --- spec -------------------------------------------------------------------------------------------

def test_causal_mask_bottom_right_and_exact_zeros():
    q, k, v = _qkv(3, 7)
    _, weights = pn.attention(q, k, v, causal=True)
    allowed = np.arange(7)[None, :] <= np.arange(3)[:, None] + 4
    assert np.all(weights[..., ~allowed] == 0.0)
    assert np.all(weights[..., allowed] > 0.0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=0, atol=1e-15)
    # the last query sees every key: a one-token decoding step needs no offset
    _, step = pn.attention(q[..., -1:, :], k, v, causal=True)
    assert np.all(step > 0)


def test_bias_broadcasts_without_batch_copy():
    q, k, v = _qkv(5, 5, batch=3)
    bias = pn.alibi_bias(HEADS, np.arange(5), np.arange(5))  # [heads, q, k]
    out, weights = pn.attention(q, k, v, bias=bias)
    for b in range(3):
        one, _ = pn.attention(q[b], k[b], v[b], bias=bias)
        np.testing.assert_array_equal(out[b], one)
    assert weights.shape == (3, HEADS, 5, 5)


def test_dtype_follows_q():
    q, k, v = _qkv(4, 4, "bfloat16")
    out, weights = pn.attention(q, k, v)
    assert out.dtype == numpy_dtype("bfloat16") and weights.dtype == numpy_dtype("bfloat16")


@pytest.mark.parametrize("call, error, match", [
    (lambda q, k, v: pn.attention(q, k, v[..., :3, :]), ValueError, "same sequence length"),
    (lambda q, k, v: pn.attention(q, k[..., :4], v), ValueError, "same last dim"),
    (lambda q, k, v: pn.attention(q, k[..., :2, :], v[..., :2, :], causal=True), ValueError, "causal=True"),
    (lambda q, k, v: pn.attention(q, k, v, bias=np.zeros((3, 5, 5))), ValueError, "bias"),
    (lambda q, k, v: pn.attention(q, k, v, scale=float("nan")), ValueError, "scale"),
    (lambda q, k, v: pn.attention(q, k, v, causal=1), TypeError, "causal"),
])
def test_bad_input(call, error, match):
    q, k, v = _qkv(5, 5)
    with pytest.raises(error, match=match):
        call(q, k, v)
