"""The spec of the absolute encodings: published formulas, the seeds' design properties, resizing grids.

NumPy and ml_dtypes only. `resize_table` against torch's `interpolate` and the documented differences of
TF's and JAX's resizers: tests/reference/test_absolute_reference.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc_np as pn
from posenc_np import conventions

# --- against the published formulas (docs/conventions.md 1.2, 1.3) -------------------------

def t2t_timing_signal(length, channels, min_timescale=1.0, max_timescale=1.0e4, start_index=0):
    """tensor2tensor get_timing_signal_1d, restated from its formula (log increment, [sin | cos])."""
    position = np.arange(length, dtype=np.float64) + start_index
    num_timescales = channels // 2
    log_inc = math.log(max_timescale / min_timescale) / max(num_timescales - 1, 1)
    inv_timescales = min_timescale * np.exp(np.arange(num_timescales) * -log_inc)
    scaled = position[:, None] * inv_timescales[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1)


def fairseq_table(num_embeddings, dim, padding_idx):
    """fairseq SinusoidalPositionalEmbedding.get_embedding, restated: exp(-i ln(1e4)/(half-1)), zero pad row."""
    half = dim // 2
    freq = np.exp(np.arange(half) * -(math.log(10000) / (half - 1)))
    angles = np.arange(num_embeddings)[:, None] * freq[None, :]
    table = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    table[padding_idx] = 0
    return table


def fairseq_make_positions(tokens, padding_idx):
    mask = tokens != padding_idx
    return np.cumsum(mask, axis=1) * mask + padding_idx


@pytest.mark.parametrize("dim", [8, 64, 512])
def test_tensor2tensor_convention_reproduces_get_timing_signal_1d(dim):
    params = conventions["tensor2tensor"].params
    np.testing.assert_allclose(pn.sinusoidal(np.arange(300), dim, **params), t2t_timing_signal(300, dim),
                               rtol=0, atol=1e-12)


def test_fairseq_convention_reproduces_sinusoidal_positional_embedding_with_padding():
    conv = conventions["fairseq"]
    padding_idx = conv.extra["padding_idx"]
    tokens = np.array([[1, 1, 7, 8, 9], [4, 5, 6, 7, 8]])  # left padded, pad id 1
    positions = fairseq_make_positions(tokens, padding_idx)
    assert positions[1, 0] == conv.position_offset  # the first real token uses row padding_idx + 1 = 2
    reference = fairseq_table(16, 32, padding_idx)[positions]
    ours = pn.sinusoidal(positions, 32, **conv.params)
    ours[positions == padding_idx] = 0  # fairseq's zero row is a table property, recorded in `extra`
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-12)


def test_paper_and_tensor2tensor_differ_as_catalogued():
    """Mismatch rows 4 and 5: denominator alone gives max |dPE| 1.34 at d=512 over 1024 positions; layout alone 2.0."""
    p = np.arange(1024)
    by_denominator = np.abs(pn.sinusoidal(p, 512, layout="concat", denominator="dim")
                            - pn.sinusoidal(p, 512, layout="concat", denominator="half-1")).max()
    by_layout = np.abs(pn.sinusoidal(p, 512, layout="interleaved") - pn.sinusoidal(p, 512, layout="concat")).max()
    assert by_denominator == pytest.approx(1.34, abs=0.01)
    assert by_layout == pytest.approx(2.0, abs=1e-3)


def test_vaswani_interleaves_sin_and_cos():
    pe = pn.sinusoidal(np.array([5.0]), 8)[0]
    w = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    np.testing.assert_allclose(pe[0::2], np.sin(5 * w), atol=1e-15)
    np.testing.assert_allclose(pe[1::2], np.cos(5 * w), atol=1e-15)


# --- the seeds' design principles as properties ------------------------------------------------------

SINUSOID_VARIANTS = [dict(conventions[n].params) for n in ("vaswani", "tensor2tensor")]


@pytest.mark.parametrize("params", SINUSOID_VARIANTS, ids=["vaswani", "tensor2tensor"])
def test_distinct_positions_get_distinct_encodings(params):
    pe = pn.sinusoidal(np.arange(2048), 64, **params)
    gram = pe @ pe.T
    sq = np.diag(gram)
    dist2 = sq[:, None] + sq[None, :] - 2 * gram
    np.fill_diagonal(dist2, np.inf)
    assert dist2.min() > 1e-6  # the closest pair of the 2048 positions is still apart


@pytest.mark.parametrize("params", SINUSOID_VARIANTS, ids=["vaswani", "tensor2tensor"])
def test_values_are_bounded_and_norm_is_constant(params):
    pe = pn.sinusoidal(np.arange(0, 100000, 7), 64, **params)
    assert np.abs(pe).max() <= 1.0
    np.testing.assert_allclose((pe**2).sum(-1), 32.0, atol=1e-9)  # sin^2 + cos^2 per pair


@pytest.mark.parametrize("params", SINUSOID_VARIANTS, ids=["vaswani", "tensor2tensor"])
@pytest.mark.parametrize("k", [1, 17, 1000])
def test_shift_is_a_fixed_linear_map(params, k):
    """PE(p + k) = M_k PE(p) for one M_k and every p (Vaswani et al. 3.5): a rotation of each (sin, cos) pair."""
    dim = 16
    w = pn.sinusoid_inv_freq(dim, base=params["base"], denominator=params["denominator"])
    half = np.arange(dim // 2)
    sin_at, cos_at = (2 * half, 2 * half + 1) if params["layout"] == "interleaved" else (half, half + dim // 2)
    m = np.zeros((dim, dim))  # row vector convention: PE(p + k) = PE(p) @ m
    m[sin_at, sin_at], m[cos_at, sin_at] = np.cos(k * w), np.sin(k * w)  # sin(t+a) = sin t cos a + cos t sin a
    m[sin_at, cos_at], m[cos_at, cos_at] = -np.sin(k * w), np.cos(k * w)  # cos(t+a) = cos t cos a - sin t sin a
    p = np.concatenate([np.arange(200), np.arange(50000, 50100)])
    np.testing.assert_allclose(pn.sinusoidal(p, dim, **params) @ m, pn.sinusoidal(p + k, dim, **params), atol=1e-9)


def _self_attention(x, wq, wk, wv):
    q, k, v = x @ wq, x @ wk, x @ wv
    logits = q @ k.T / np.sqrt(q.shape[-1])
    w = np.exp(logits - logits.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ v


def test_attention_without_positions_is_permutation_equivariant_and_encodings_break_it():
    rng = np.random.default_rng(0)
    n, d = 12, 16
    x = rng.normal(size=(n, d))
    wq, wk, wv = (rng.normal(size=(d, d)) / 4 for _ in range(3))
    perm = rng.permutation(n)
    plain = _self_attention(x, wq, wk, wv)
    np.testing.assert_allclose(_self_attention(x[perm], wq, wk, wv), plain[perm], atol=1e-12)
    encodings = {
        "sinusoidal": pn.sinusoidal(np.arange(n), d),
        "learned": rng.normal(size=(n, d)),
    }
    for name, pe in encodings.items():
        with_pos = _self_attention(x + pe, wq, wk, wv)
        permuted = _self_attention(x[perm] + pe, wq, wk, wv)  # tokens move, positions stay
        assert np.abs(permuted - with_pos[perm]).max() > 1e-3, name


# --- learned tables and resizing -------------------------------------------------------------------

def test_learned_gathers_and_rejects_out_of_range():
    table = np.arange(12.0).reshape(6, 2)
    np.testing.assert_array_equal(pn.learned(table, np.array([[5, 0]])), table[[[5, 0]]])
    for bad in ([6], [-1]):
        with pytest.raises(ValueError, match="positions out of range"):
            pn.learned(table, np.array(bad))
    with pytest.raises(ValueError, match="positions must hold integers"):
        pn.learned(table, np.array([1.5]))
    with pytest.raises(ValueError, match="table must be 2-D"):
        pn.learned(table[0], np.array([0]))


@pytest.mark.parametrize("call, match", [
    (lambda: pn.sinusoidal(np.arange(3), 7), "dim=7 must be even"),
    (lambda: pn.sinusoidal(np.arange(3), 8, layout="halves"), "layout='halves'"),
    (lambda: pn.sinusoidal(np.arange(3), 8, denominator="d"), "denominator='d'"),
    (lambda: pn.sinusoidal(np.arange(3), 8, base=0), "base=0"),
    (lambda: pn.resize_table(np.ones((4, 2)), 0), "new_len=0"),
    (lambda: pn.resize_table(np.ones((4, 2)), 8, method="area"), "method='area'"),
    (lambda: pn.resize_table(np.ones((4, 2)), 8, method="nearest", align_corners=True), "align_corners"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_concat_cos_is_concat_with_its_halves_swapped():
    """diffusers' flip_sin_to_cos: `[cos | sin]`, the same frequencies as `[sin | cos]`."""
    p = np.array([0.0, 3.5, 999.0])
    for denominator in ("dim", "half-1"):
        concat = pn.sinusoidal(p, 16, layout="concat", denominator=denominator)
        flipped = pn.sinusoidal(p, 16, layout="concat-cos", denominator=denominator)
        assert np.array_equal(flipped, np.concatenate([concat[:, 8:], concat[:, :8]], axis=-1))
    with pytest.raises(ValueError, match="layout"):
        pn.sinusoidal(p, 16, layout="cos-concat")
