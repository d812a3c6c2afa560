"""Regression tests for the bugs the fuzz tests found (docs/reliability.md lists each: bug, where, fix).

Each is the failing example the property test shrank to, written as a plain test so it runs in every
profile and keeps failing if the bug comes back.
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from harness import make_module as _make
from helpers import assert_close
from posenc_np.testing import tolerance


def _framework(backend):
    if backend.name not in ("torch", "tf", "jax"):
        pytest.skip(f"{backend.name} has no package of contract functions")
    return backend


def test_sinusoidal_module_cache_does_not_truncate_fractional_positions(backend):
    """SinusoidalEncoding(max_len=8) gathered its integer cache rows for float positions (torch, TF: 3.5
    read row 3, error 0.38; JAX: a raw indexing TypeError). Fractional positions are computed."""
    backend = _framework(backend)
    positions = np.array([3.5, 1.0, 13.5])
    out = backend.to_numpy(_make(backend, backend.module.SinusoidalEncoding, (4,), {"max_len": 8})(backend.from_numpy(positions)))
    assert_close(out, pn.sinusoidal(positions, 4), tolerance("float32", max_angle=13.5))


def test_alibi_bias_takes_integer_q_and_float_k_positions(backend):
    """TF raised InvalidArgumentError (int64 - double) for integer q and float k positions, which ALiBi
    accepts (interpolated positions); now both are subtracted as floats, as in the spec."""
    backend = _framework(backend)
    q, k = np.arange(3), np.array([0.0, 1.5, 2.0])
    out = backend.to_numpy(backend.module.alibi_bias(2, backend.from_numpy(q), backend.from_numpy(k)))
    assert_close(out, pn.alibi_bias(2, q, k), tolerance("float32", scale=1.0))


def test_attention_with_integer_inputs_returns_float(backend):
    """Integer q, k, v: the spec returns float64; every backend rounded its float32 result back to q's integer
    dtype (error 0.93 in the weights). A backend now returns float32."""
    backend = _framework(backend)
    q = np.arange(8, dtype=np.int32).reshape(1, 2, 4)
    out, weights = (backend.to_numpy(t) for t in backend.module.attention(*(backend.from_numpy(q),) * 3))
    desired_out, desired_weights = pn.attention(q, q, q)
    assert out.dtype == weights.dtype == np.float32
    assert_close(weights, desired_weights, tolerance("float32", max_angle=2 * 140 / 2))
    assert_close(out, desired_out, tolerance("float32", max_angle=2 * 140 / 2, scale=7.0))


def test_jax_adapter_refuses_integers_beyond_int32():
    """posenc.adapters' JAX conversion cast int64 to int32 with astype: position 2**31 + 7 became
    -2147483641 and llama4_attn_scale returned NaN (the spec: 2.25). It now raises, naming the range."""
    from posenc.adapters import adapter

    with pytest.raises(ValueError, match="does not fit int32"):
        adapter("jax").from_numpy(np.array([2**31 + 7, 3]))
    assert adapter("jax").from_numpy(np.array([2**31 - 1])).dtype.name == "int32"


# --- open bugs (fuzz_table.KNOWN): strict xfails, so a fix shows up as XPASS and the entry is removed -----

OPEN = pytest.mark.xfail(strict=True, reason="open bug found by the fuzz tests, docs/reliability.md")


@OPEN
def test_spec_integer_x_is_a_type_error_naming_x():
    with pytest.raises(TypeError, match=r"\bx\b"):
        pn.apply_rope(np.arange(8, dtype=np.int32).reshape(2, 4), np.arange(2))


@OPEN
def test_backend_integer_x_is_refused(backend):
    backend = _framework(backend)
    with pytest.raises((TypeError, ValueError)):
        backend.module.apply_rope(backend.from_numpy(np.arange(8, dtype=np.int32).reshape(2, 4)),
                                  backend.from_numpy(np.arange(2)))


@OPEN
def test_backend_document_bias_with_a_mismatched_key_axis_raises(backend):
    backend = _framework(backend)
    with pytest.raises(ValueError):
        backend.module.document_bias(backend.from_numpy(np.zeros((5, 6))), backend.from_numpy(np.array([0, 3, 5])))


@OPEN
def test_backend_two_dimensional_cu_seqlens_is_a_value_error_as_in_the_spec(backend):
    backend = _framework(backend)
    with pytest.raises(ValueError):
        backend.module.positions_from_cu_seqlens(backend.from_numpy(np.array([[0, 2], [0, 3]])))


@OPEN
def test_spec_llama4_attn_scale_refuses_negative_positions():
    with pytest.raises(ValueError, match="positions"):
        pn.llama4_attn_scale(np.array([-3, 0]))


@OPEN
def test_spec_randomized_positions_refuses_nan_noise():
    with pytest.raises(ValueError, match="noise"):
        pn.randomized_positions(np.array([[0.1, np.nan, 0.5, 0.7]]), 2)
