"""Planted mismatches inside cases built of several calls (an attention with its ALiBi or T5 bias inside, the
slopes a bias is built from), and the precision of a whole computation in a half dtype: each caught by
`posenc check --impl` and named as the single call's mismatch would be (posenc/impl/composite.py)."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np
from posenc.check.registry import all_cases
from posenc.check.run_impl import run_implementations
from posenc.impl import Implementation
from posenc.impl.diagnosis import DIAGNOSES


def verdicts(functions, case_ids, dtypes=("float32",)):
    cases = [c for c in all_cases() if c.id in case_ids]
    assert len(cases) == len(case_ids), sorted(set(case_ids) - {c.id for c in cases})
    impl = Implementation("planted", "numpy", functions)
    return {(f"{r.family}/{r.convention}/{r.case}", r.dtype): (r.status, r.diagnosis, r.diagnosis_detail)
            for r in run_implementations(cases, [impl], dtypes=list(dtypes))}


def geometric_alibi(num_heads, q_positions, k_positions, *, form="symmetric", dtype=None):
    """attention-gym's slopes 2^(-8(h+1)/H): Press et al.'s rule only for a power of two."""
    geometric = 2.0 ** (-8.0 * np.arange(1, num_heads + 1) / num_heads)
    press = posenc_np.alibi_slopes(num_heads)
    return posenc_np.alibi_bias(num_heads, q_positions, k_positions, form=form) / press[:, None, None] * \
        geometric[:, None, None]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_geometric_slopes_inside_the_attention_are_named_slopes(dtype):
    got = verdicts({"alibi_bias": geometric_alibi}, ["alibi/press-alibi/attention-causal"], dtypes=[dtype])
    ((status, name, detail),) = got.values()
    assert (status, name) == ("fail", "slopes")
    assert "alibi_bias call" in detail


def test_a_transposed_t5_table_inside_the_attention_is_named_transposed():
    def t5_bias_transposed(table, q_positions, k_positions, **kw):
        misread = np.asarray(table).reshape(np.shape(table)[1], np.shape(table)[0]).T
        return posenc_np.t5_bias(misread, q_positions, k_positions, **kw)

    got = verdicts({"t5_bias": t5_bias_transposed}, ["t5/t5/attention-unscaled"])
    ((status, name, _),) = got.values()
    assert (status, name) == ("fail", "transposed")


def test_bfloat16_slopes_of_alibi_slopes_are_named_slopes():
    """The slopes case calls alibi_slopes alone (no alibi_bias): its variants are alibi_slopes' own."""
    from posenc_np.backend import numpy_dtype

    def bf16_slopes(num_heads, *, max_bias=8.0, dtype=None):
        return posenc_np.alibi_slopes(num_heads, max_bias=max_bias).astype(numpy_dtype("bfloat16")).astype(np.float64)

    got = verdicts({"alibi_slopes": bf16_slopes}, ["alibi/mpt-alibi/slopes-40-heads-max-bias-8"])
    ((status, name, _),) = got.values()
    assert (status, name) == ("fail", "slopes")


def test_an_eager_attention_in_bfloat16_is_named_compute_dtype():
    """transformers' T5 `eager` path in a bf16 model: bf16 matmuls (float32 accumulation, one rounding), the bias
    added in bf16, a float32 softmax cast back (modeling_t5.py T5Attention.forward), planted with torch's own
    bf16 kernels, not with the diagnosis' emulation."""
    torch = pytest.importorskip("torch")

    def as_bf16(a):
        return torch.from_numpy(np.asarray(a, np.float32)).to(torch.bfloat16)

    def eager_bf16(q, k, v, *, bias=None, causal=False, scale=None):
        assert not causal
        scale = 1.0 / np.sqrt(np.shape(q)[-1]) if scale is None else scale
        scores = as_bf16(q) @ as_bf16(k).transpose(-1, -2)
        scores = scores * scale if scale != 1.0 else scores
        if bias is not None:
            scores = scores + as_bf16(bias)
        weights = torch.softmax(scores.float(), dim=-1).to(torch.bfloat16)
        out = weights @ as_bf16(v)
        return out.float().numpy(), weights.float().numpy()

    got = verdicts({"t5_bias": posenc_np.t5_bias, "attention": eager_bf16}, ["t5/t5/attention-unscaled"],
                   dtypes=["bfloat16"])
    ((status, name, _),) = got.values()
    assert (status, name) == ("fail", "compute-dtype")


def test_a_sinusoid_computed_in_bfloat16_throughout_is_named_compute_dtype():
    """keras-hub's SinePositionEncoding under mixed precision, planted with ml_dtypes' own bf16 arithmetic
    (each NumPy operation on bfloat16 arrays rounds its result), not with the diagnosis' emulation."""
    from posenc_np.backend import numpy_dtype

    bf16 = numpy_dtype("bfloat16")

    def sine_in_bf16(positions, dim, *, base=10000.0, layout="interleaved", denominator="dim", dtype=None):
        assert layout == "interleaved" and denominator == "dim"
        p = np.asarray(positions, np.float64).astype(bf16)
        exponent = np.asarray(2 * (np.arange(dim) // 2), bf16) / np.asarray(dim, bf16)
        timescales = np.power(np.asarray(1.0 / base, bf16), exponent)
        angles = p[..., None] * timescales
        channel = np.arange(dim) % 2
        return np.where(channel == 0, np.sin(angles), np.cos(angles)).astype(np.float64)

    got = verdicts({"sinusoidal": sine_in_bf16}, ["sinusoidal/vaswani/short", "sinusoidal/vaswani/past-2048"],
                   dtypes=["bfloat16"])
    assert {v[:2] for v in got.values()} == {("fail", "compute-dtype")}


def test_float32_frequencies_at_two_to_the_twenty_are_named_angle_precision():
    """mlx's exp-of-linspace frequencies: a few float32 ulps each, which at positions near 2^20 is just past the
    float32 angle bound; named within twice that bound (0.25 rad), not looser. Planted as every frequency
    5 float32 half-ulps high (positions scaled by 1 + 5 * 2^-24: the same angles)."""
    def frequencies_off(positions, dim, **kw):
        return posenc_np.sinusoidal(np.asarray(positions, np.float64) * (1 + 5 * 2.0**-24), dim, **kw)

    got = verdicts({"sinusoidal": frequencies_off}, ["sinusoidal/fairseq/long"])
    ((status, name, detail),) = got.values()
    assert (status, name) == ("fail", "angle-precision") and "2 times" in detail


def test_a_wrong_frequency_at_two_to_the_twenty_is_not_angle_precision():
    """Frequencies 1e-5 off (a wrong constant, not rounding): 10 rad at 2^20, no bound under 1 rad holds it."""
    def frequencies_wrong(positions, dim, **kw):
        return posenc_np.sinusoidal(np.asarray(positions, np.float64) * (1 + 1e-5), dim, **kw)

    got = verdicts({"sinusoidal": frequencies_wrong}, ["sinusoidal/fairseq/long"])
    ((status, name, _),) = got.values()
    assert status == "fail" and name != "angle-precision"


def test_compute_dtype_is_a_declared_diagnosis():
    assert "compute-dtype" in DIAGNOSES
