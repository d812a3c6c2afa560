"""Regression tests for the bugs the fuzz tests found (docs/reliability.md lists each: bug, where, fix).

Each is the failing example the property test shrank to, written as a plain test so it runs in every
profile and keeps failing if the bug comes back.
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from helpers import assert_close
from posenc_np.testing import compare, tolerance


def test_sinusoidal_module_cache_does_not_truncate_fractional_positions(backend):
    """SinusoidalEncoding(max_len=8) gathered its integer cache rows for float positions (torch, TF: 3.5
    read row 3, error 0.38; JAX: a raw indexing TypeError). Fractional positions are computed."""
    positions = np.array([3.5, 1.0, 13.5])
    out = backend.to_numpy(backend.make_module("SinusoidalEncoding", 4, max_len=8)(backend.from_numpy(positions)))
    assert_close(out, pn.sinusoidal(positions, 4), tolerance("float32", max_angle=13.5))


def test_alibi_bias_takes_integer_q_and_float_k_positions(backend):
    """TF raised InvalidArgumentError (int64 - double) for integer q and float k positions, which ALiBi
    accepts (interpolated positions); now both are subtracted as floats, as in the spec."""
    q, k = np.arange(3), np.array([0.0, 1.5, 2.0])
    out = backend.to_numpy(backend.module.alibi_bias(2, backend.from_numpy(q), backend.from_numpy(k)))
    assert_close(out, pn.alibi_bias(2, q, k), tolerance("float32", scale=1.0))


def test_attention_with_integer_inputs_returns_float(backend):
    """Integer q, k, v: the spec returns float64; every backend rounded its float32 result back to q's integer
    dtype (error 0.93 in the weights). A backend now returns float32."""
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


# --- bugs found with the first fuzz runs, fixed after them (they were fuzz_table.KNOWN entries) ------------

_X_INT = np.arange(8, dtype=np.int32).reshape(2, 4)
_FLOAT_ARGUMENT_CALLS = {  # name -> (argument the message names, args with that argument integer, kwargs)
    "apply_rope": ("x", lambda i: (i, np.arange(2)), {}),
    "rerotate": ("k", lambda i: (i, np.array(1)), {}),
    "apply_xpos": ("x", lambda i: (i, np.arange(2)), {}),
    "nope": ("x", lambda i: (i,), {}),
    "dynamic_position_encoding": ("x", lambda i: (i, np.eye(4, dtype=np.float32), np.zeros(4, np.float32)), {}),
    "apply_mla_rope": ("q", lambda i: (np.zeros((2, 6), i.dtype), np.zeros((2, 4), np.float32), np.arange(2)),
                       {"qk_nope_head_dim": 2, "rotary_dim": 4}),
    "cope": ("query", lambda i: (i, np.zeros((2, 2), np.float32), np.zeros((3, 4), np.float32)), {}),
}


@pytest.mark.parametrize("name", sorted(_FLOAT_ARGUMENT_CALLS))
@pytest.mark.parametrize("dtype", [np.int32, np.bool_])
def test_integer_or_bool_where_a_float_is_expected_is_a_type_error_naming_it(backend, name, dtype):
    """Integer/bool x: the spec raised ValueError "dtype=dtype('int32') is not one of [...]" (no argument
    named), the backends rotated and returned integers (cope: accepted an integer query). Now one
    `_validate.check_float_dtype` TypeError everywhere, naming the argument."""
    argument, make_args, kwargs = _FLOAT_ARGUMENT_CALLS[name]
    args = make_args(_X_INT.astype(dtype))
    match = rf"^{argument} must be a float array"
    with pytest.raises(TypeError, match=match):
        getattr(pn, name)(*args, **kwargs)
    with pytest.raises(TypeError, match=match):
        backend.call(name, args, kwargs)


def test_rotary_embedding_refuses_an_integer_x(backend):
    module = backend.make_module("RotaryEmbedding", 4)
    with pytest.raises(TypeError, match="x must be a float array"):  # Keras wraps it (bold)
        module(backend.from_numpy(_X_INT), backend.from_numpy(np.arange(2)))


def test_document_bias_wider_than_the_packed_row_raises_eagerly_and_is_masked_under_jit(backend, jit_cache,
                                                                                       aot_eager):
    """A [5, 6] bias with cu_seqlens [0, 3, 5]: the spec raised (k_index 5 outside the row), the backends
    returned a result. Eagerly they raise the spec's error; under jit (values cannot raise) the column of
    index 5 belongs to no document and is -inf in every row, as their docstrings state."""
    bias, cu = np.zeros((5, 6), np.float32), np.array([0, 3, 5])
    for call in (lambda: pn.document_bias(bias, cu), lambda: backend.call("document_bias", (bias, cu), {})):
        with pytest.raises(ValueError, match=r"k_index must lie in \[0, cu_seqlens\[-1\]=5\)"):
            call()
    out = backend.call("document_bias", (bias, cu), {}, mode="jit", cache=jit_cache, compile_backend=aot_eager)
    assert np.all(np.isneginf(out[:, 5]))
    np.testing.assert_array_equal(out[:, :5], pn.document_bias(bias[:, :5], cu))


@pytest.mark.parametrize("name", ["positions_from_cu_seqlens", "document_ids", "document_mask"])
def test_two_dimensional_cu_seqlens_is_the_specs_value_error(backend, name):
    """2-D cu_seqlens: ValueError in the spec, TypeError in the backends. Now the same ValueError and
    message (`_validate.check_cu_seqlens_shape`); a shape, so under jit too."""
    cu = np.array([[0, 2], [0, 3]])
    with pytest.raises(ValueError) as spec_error:
        getattr(pn, name)(cu)
    with pytest.raises(ValueError) as backend_error:
        backend.call(name, (cu,), {})
    assert str(backend_error.value) == str(spec_error.value)
    assert str(spec_error.value).startswith("cu_seqlens must be a 1-D array")


def test_llama4_attn_scale_refuses_negative_positions_and_gives_nan_under_jit(backend, jit_cache, aot_eager):
    """Negative positions gave -inf (p = -2) or NaN scales in every package. The spec and eager backends
    raise ValueError naming positions; under jit a negative position gives NaN (documented)."""
    positions = np.array([-3, -1, 0, 8191], np.int32)
    with pytest.raises(ValueError, match="^positions must be >= 0"):
        pn.llama4_attn_scale(positions)
    with pytest.raises(ValueError, match="^positions must be >= 0"):
        backend.call("llama4_attn_scale", (positions,), {})
    out = backend.call("llama4_attn_scale", (positions,), {}, mode="jit", cache=jit_cache, compile_backend=aot_eager)
    assert np.isnan(out[:2]).all()
    assert compare(out[2:], pn.llama4_attn_scale(positions[2:]), tolerance("float32")).passed


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_randomized_positions_refuses_non_finite_noise_and_gives_minus_one_rows_under_jit(backend, bad, jit_cache,
                                                                                         aot_eager):
    """NaN noise was ordered differently per framework (NumPy sorts NaN last, torch.topk/lax.top_k first).
    Now the spec and eager backends raise ValueError naming noise; under jit a row holding NaN/inf
    returns -1 in every position (documented), the other rows the spec's positions."""
    noise = np.array([[0.1, bad, 0.5, 0.7], [0.1, 0.9, 0.3, 0.7]], np.float32)
    with pytest.raises(ValueError, match="^noise must be finite"):
        pn.randomized_positions(noise, 2)
    with pytest.raises(ValueError, match="^noise must be finite"):
        backend.call("randomized_positions", (noise, 2), {})
    out = backend.call("randomized_positions", (noise, 2), {}, mode="jit", cache=jit_cache, compile_backend=aot_eager)
    np.testing.assert_array_equal(out, [[-1, -1], pn.randomized_positions(noise[1], 2)])


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_attention_with_non_finite_q_has_nan_where_the_spec_has(backend, bad):
    """inf in q: TF's softmax kept finite weights (0) beside the NaN where the spec (and torch, JAX) has a
    row of NaN. The rule is in `posenc_np.attention`'s docstring: a row whose logits hold NaN or +inf is
    NaN throughout; the other rows equal the spec."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in ((1, 3, 4), (1, 4, 4), (1, 4, 2)))
    q[0, 1, 2] = bad
    with np.errstate(all="ignore"):
        desired = pn.attention(q, k, v)
    for got, want in zip(backend.call("attention", (q, k, v), {}), desired, strict=True):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert np.isnan(want[0, 1]).all() and not np.isnan(want[0, [0, 2]]).any()
        assert compare(got[0, [0, 2]], want[0, [0, 2]], tolerance("float32", max_angle=20.0, scale=5.0)).passed


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_no_positions_rotate_an_empty_sequence(backend, layout):
    """torch's apply_rope / apply_mla_rope with no positions and layout="interleaved" reshaped an empty
    cos/sin table to (0, -1): a NumPy ValueError. Every backend returns the spec's empty result."""
    x, positions = np.zeros((0, 4), np.float32), np.zeros(0, np.int64)
    assert backend.call("apply_rope", (x, positions), {"layout": layout}).shape == pn.apply_rope(x, positions).shape
    q_rot, k_rot = backend.call("apply_mla_rope", (np.zeros((0, 6), np.float32), x, positions),
                                {"qk_nope_head_dim": 2, "rotary_dim": 4, "layout": layout})
    assert q_rot.shape == (0, 6) and k_rot.shape == (0, 4)
    module = backend.make_module("RotaryEmbedding", 4, layout=layout)
    assert backend.to_numpy(module(backend.from_numpy(x), backend.from_numpy(positions))).shape == (0, 4)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_bloom_alibi_bias_does_not_read_query_positions(backend, bad):
    """Found by the long profile: form="bloom" (`m_h j`, key positions only) formed its [q, k] shape with
    `+ 0 * i`, so a NaN/inf query position made NaN rows in the spec and TF, while torch and JAX returned
    the key-only bias. Now every package adds `zeros_like(i)`: the same bias as for finite positions."""
    q, k = np.array([bad, 1.0]), np.arange(4.0)
    desired = pn.alibi_bias(2, np.array([0.0, 1.0]), k, form="bloom")
    np.testing.assert_array_equal(pn.alibi_bias(2, q, k, form="bloom"), desired)
    got = backend.to_numpy(backend.module.alibi_bias(2, backend.from_numpy(q), backend.from_numpy(k), form="bloom"))
    assert compare(got, desired, tolerance("float32", scale=1.0)).passed


def test_apply_rope_checks_x_dtype_before_the_shapes(backend):
    """Found by the long profile: JAX checked the shapes before x's dtype, so an integer x with positions that
    do not broadcast was a ValueError there and the spec's TypeError elsewhere. One order in every package:
    parameters, x's dtype, shapes (as a RotaryEmbedding built from the parameters)."""
    x, positions = np.zeros((2, 3, 5, 4), np.int32), np.zeros((2, 5), np.int64)  # (2, 5) vs x's (2, 3, 5)
    with pytest.raises(TypeError, match="^x must be a float array"):
        pn.apply_rope(x, positions)
    with pytest.raises(TypeError, match="^x must be a float array"):
        backend.call("apply_rope", (x, positions), {})


@pytest.mark.parametrize("name", ["apply_rope", "rope_cos_sin"])
def test_bool_positions_are_the_specs_type_error(backend, name):
    """Found by the long profile (a bfloat16 x slipped past the harness's integer-dtype allowance): bool
    positions were the spec's TypeError and every backend's ValueError (`_validate.check_integer_dtype`).
    Now a float dtype stays a ValueError (the spec's class for non-integer float positions), bool a TypeError."""
    positions = np.array([True, False])
    args = (np.zeros((2, 4), np.float32), positions) if name == "apply_rope" else (positions, 4)
    for call in (lambda: getattr(pn, name)(*args), lambda: backend.call(name, args, {})):
        with pytest.raises(TypeError, match="positions must be an integer array"):
            call()


def test_no_positions_with_sequence_length_scaling(backend):
    """Found by the long profile: `dynamic` scaling reads the sequence length as max(positions) + 1; with no
    positions torch's max() raised RuntimeError and JAX's a ValueError naming no argument. The spec (and TF,
    whose reduce_max has an identity) returns the empty result."""
    x, positions = np.zeros((0, 4), np.float32), np.zeros(0, np.int64)
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8}
    assert pn.apply_rope(x, positions, scaling=scaling).shape == (0, 4)
    assert backend.call("apply_rope", (x, positions), {"scaling": scaling}).shape == (0, 4)
