"""ALiBi spec: the paper's slope rule, MPT's `gen_slopes` (re-typed), the three forms' formulas and their
softmax equivalence under a causal mask, shapes, validation.

NumPy and ml_dtypes only. HF BLOOM's `build_alibi_tensor`: tests/reference/test_bias_reference.py; the
backends against the spec: the registry's alibi cases (tests/backends/test_conformance.py); modules:
tests/backends/test_bias_modules.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc_np as pn
from helpers import assert_close
from posenc_np.testing import tolerance

FORMS = ["symmetric", "causal", "bloom"]


def _mpt_gen_slopes(n, bias_max=8):
    """llm-foundry / HF MPT `gen_slopes`, an independent formulation of the same slopes."""
    n_pow2 = 2 ** math.ceil(math.log2(n))
    slopes = 1.0 / np.power(2.0, np.arange(1, n_pow2 + 1) * (bias_max / n_pow2))
    if n_pow2 != n:
        slopes = np.concatenate([slopes[1::2], slopes[::2]])[:n]
    return slopes


# --- spec -------------------------------------------------------------------------------------------

def test_slopes_power_of_two_golden():
    assert pn.alibi_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]


def test_slopes_non_power_of_two_golden():
    # 12 heads: the 8-head slopes, then every other slope of the 16-head sequence 2**(-0.5 k).
    expected = [2.0**-k for k in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    np.testing.assert_array_equal(pn.alibi_slopes(12), expected)


@pytest.mark.parametrize("num_heads", [1, 2, 3, 5, 6, 7, 12, 16, 20, 24, 40, 64, 71, 96])
def test_slopes_match_mpt(num_heads):
    assert_close(pn.alibi_slopes(num_heads), _mpt_gen_slopes(num_heads), tolerance("float64"))


def test_forms_formula():
    q, k = np.array([3, 5]), np.array([0, 4, 9])
    slopes = pn.alibi_slopes(2)[:, None, None]
    distance = q[:, None] - k[None, :]
    np.testing.assert_array_equal(pn.alibi_bias(2, q, k, form="symmetric"), -slopes * np.abs(distance))
    np.testing.assert_array_equal(pn.alibi_bias(2, q, k, form="causal"), -slopes * distance)
    np.testing.assert_array_equal(pn.alibi_bias(2, q, k, form="bloom"), np.broadcast_to(slopes * k, (2, 2, 3)))


@pytest.mark.parametrize("q_offset", [0, 5], ids=["square", "kv-offset"])
def test_forms_same_softmax_under_causal_mask(q_offset):
    rng = np.random.default_rng(0)
    n_q, n_k, heads = 4, 4 + q_offset, 6
    q, k, v = rng.normal(size=(3, 2, heads, n_k, 8))
    q = q[..., -n_q:, :]
    positions_q, positions_k = np.arange(q_offset, q_offset + n_q), np.arange(n_k)
    outs = [pn.attention(q, k, v, bias=pn.alibi_bias(heads, positions_q, positions_k, form=f), causal=True)
            for f in FORMS]
    for out, weights in outs[1:]:
        assert_close(weights, outs[0][1], tolerance("float64"))
        assert_close(out, outs[0][0], tolerance("float64", scale=np.abs(v).max()))


def test_forms_differ_without_mask():
    q, k = np.arange(4), np.arange(4)
    biases = {f: pn.alibi_bias(4, q, k, form=f) for f in FORMS}
    assert not np.allclose(biases["symmetric"], biases["causal"])
    assert not np.allclose(biases["bloom"], biases["causal"])
    # bloom - causal is constant along each row (m_h * i), so only the unmasked softmax differs.
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 4, 4, 8))
    weights = {f: pn.attention(x[0], x[1], x[2], bias=b)[1] for f, b in biases.items()}
    assert np.abs(weights["symmetric"] - weights["causal"]).max() > 1e-3
    assert_close(weights["bloom"], weights["causal"], tolerance("float64"))  # row shift cancels, mask or not
    # ... but not with the other forms:
    assert np.abs(weights["bloom"] - weights["symmetric"]).max() > 1e-3


def test_shapes_broadcast_without_batch_copy():
    assert pn.alibi_bias(3, np.arange(5), np.arange(7)).shape == (3, 5, 7)
    batched = pn.alibi_bias(3, np.arange(10).reshape(2, 5), np.arange(7), form="bloom")
    assert batched.shape == (2, 3, 5, 7)
    np.testing.assert_array_equal(batched[1], pn.alibi_bias(3, np.arange(5, 10), np.arange(7), form="bloom"))


def test_float_positions_and_dtype():
    out = pn.alibi_bias(2, np.array([0.5, 1.5]), np.array([0.0, 1.0]), form="causal", dtype="float16")
    assert out.dtype == np.float16
    m = 2.0**-4  # the first of 2 heads
    np.testing.assert_array_equal(out[0].astype(np.float64), [[-0.5 * m, 0.5 * m], [-1.5 * m, -0.5 * m]])


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_heads=0), "num_heads"),
    (dict(num_heads=-2), "num_heads"),
    (dict(form="press"), "form"),
    (dict(q_positions=np.int64(3)), "q_positions"),
    (dict(q_positions=np.zeros((3, 4)), k_positions=np.zeros((2, 4))), "do not broadcast"),
])
def test_bad_input(kwargs, match):
    args = dict(num_heads=4, q_positions=np.arange(3), k_positions=np.arange(3))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        pn.alibi_bias(args.pop("num_heads"), args.pop("q_positions"), args.pop("k_positions"), **args)


def test_bad_types():
    with pytest.raises(TypeError, match="num_heads"):
        pn.alibi_slopes(2.5)
    with pytest.raises(TypeError, match="k_positions"):
        pn.alibi_bias(2, np.arange(3), np.array([True, False]))
