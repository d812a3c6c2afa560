"""ALiBi `max_bias` (MPT `alibi_bias_max`, GGUF `max_alibi_bias`): `alibi_slopes(n, max_bias=B)` against the
closed form for powers of two, ggml's m0/m1 rule and MPT's `gen_slopes`, each re-typed here in float64;
`alibi_bias` passes it through; validation.

NumPy only. HF MPT's own `build_mpt_alibi_tensor`: tests/reference/test_alibi_max_bias_reference.py; the backends:
the registry's mpt-alibi / ggml-alibi cases (tests/backends/test_conformance.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc_np as pn

#: float64 against float64 written another way (powers of powers vs one power): ulp-level
TOL = 1e-14
BIASES = [0.5, 4.0, 8.0, 12.5, 16.0]
HEADS = [1, 2, 3, 5, 7, 12, 16, 24, 40, 56, 64, 71, 96, 112]


def _ggml(n, max_bias):
    """ggml ops.cpp soft_max: n_head_log2 = 2**floor(log2 n), m0 = 2**(-max_bias / n_head_log2),
    m1 = 2**(-(max_bias / 2) / n_head_log2); head h: m0**(h + 1) if h < n_head_log2 else m1**(2 (h - n_head_log2) + 1)."""
    n_log2 = 1 << int(math.floor(math.log2(n)))
    m0, m1 = 2.0 ** (-max_bias / n_log2), 2.0 ** (-(max_bias / 2.0) / n_log2)
    return np.array([m0 ** (h + 1) if h < n_log2 else m1 ** (2 * (h - n_log2) + 1) for h in range(n)])


def _mpt(n, alibi_bias_max):
    """llm-foundry / HF MPT gen_slopes: N = 2**ceil(log2 n) slopes 2**(-k max / N), odd-indexed ones first."""
    n_pow2 = 2 ** math.ceil(math.log2(n))
    slopes = 1.0 / np.power(2.0, np.arange(1, n_pow2 + 1) * (alibi_bias_max / n_pow2))
    if n_pow2 != n:
        slopes = np.concatenate([slopes[1::2], slopes[::2]])[:n]
    return slopes


@pytest.mark.parametrize("max_bias", BIASES)
@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32, 64])
def test_power_of_two_closed_form(n, max_bias):
    want = 2.0 ** (-max_bias * np.arange(1, n + 1) / n)
    np.testing.assert_allclose(pn.alibi_slopes(n, max_bias=max_bias), want, rtol=TOL, atol=0)


@pytest.mark.parametrize("max_bias", BIASES)
@pytest.mark.parametrize("n", HEADS)
def test_equals_ggml_and_mpt(n, max_bias):
    ours = pn.alibi_slopes(n, max_bias=max_bias)
    np.testing.assert_allclose(ours, _ggml(n, max_bias), rtol=TOL, atol=0)
    np.testing.assert_allclose(ours, _mpt(n, max_bias), rtol=TOL, atol=0)


def test_default_is_the_paper():
    for n in HEADS:
        np.testing.assert_array_equal(pn.alibi_slopes(n), pn.alibi_slopes(n, max_bias=8.0))


def test_max_bias_changes_the_slopes():
    # 12 heads, max_bias 4: the 8-head slopes 2**(-k/2), then 2**(-(2j+1)/4): not the paper's 2**-k
    want = [2.0 ** (-k / 2) for k in range(1, 9)] + [2.0 ** (-(2 * j + 1) / 4) for j in range(4)]
    np.testing.assert_allclose(pn.alibi_slopes(12, max_bias=4.0), want, rtol=TOL, atol=0)
    assert np.abs(pn.alibi_slopes(12, max_bias=4.0) - pn.alibi_slopes(12)).max() > 0.2


@pytest.mark.parametrize("form", ["symmetric", "causal", "bloom"])
def test_alibi_bias_uses_max_bias(form):
    q, k = np.array([3, 5, 9]), np.array([0, 4, 9, 11])
    m = _ggml(6, 16.0)[:, None, None]
    i, j = q[None, :, None].astype(np.float64), k[None, None, :].astype(np.float64)
    want = {"symmetric": -m * np.abs(i - j), "causal": -m * (i - j), "bloom": m * j + 0 * i}[form]
    np.testing.assert_allclose(pn.alibi_bias(6, q, k, form=form, max_bias=16.0), want, rtol=TOL, atol=0)


@pytest.mark.parametrize("max_bias", [0, 0.0, -1.0, float("nan"), float("inf"), True, "8", None])
def test_bad_max_bias(max_bias):
    with pytest.raises(ValueError, match="max_bias"):
        pn.alibi_slopes(4, max_bias=max_bias)
    with pytest.raises(ValueError, match="max_bias"):
        pn.alibi_bias(4, np.arange(3), np.arange(3), max_bias=max_bias)
