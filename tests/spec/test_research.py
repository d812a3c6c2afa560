"""The research encodings' spec against their reference code where that code is torch that is not installed
(x-transformers, the FIRE reference module, NeMo, KERPLE): its formula restated here loop by loop with its
provenance, plus properties each encoding promises. NumPy only; the comparisons with installed code
(transformers' DeBERTa functions, torch's nn.Linear) are in tests/reference/test_research_reference.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc_np as pe


def test_deberta_rejects_bad_arguments():
    with pytest.raises(ValueError, match="bucket_size=2"):
        pe.make_log_bucket_position(np.arange(3), 2, 64)
    with pytest.raises(ValueError, match="relative_pos"):
        pe.make_log_bucket_position(np.array([0.5]), 8, 64)


def test_dynamic_encoding_checks_the_weight_shape():
    with pytest.raises(ValueError, match="weight must have 8 rows"):
        pe.dynamic_position_encoding(np.zeros((3, 8)), np.zeros((4, 8)), np.zeros(8))
    with pytest.raises(ValueError, match="bias must have shape"):
        pe.dynamic_position_encoding(np.zeros((3, 8)), np.zeros((8, 8)), np.zeros(4))


# --- xPos: x-transformers RotaryEmbedding(use_xpos=True) + apply_rotary_pos_emb, restated ---------------

def _xtransformers_xpos(t, x, *, kind, dim, scale_base=512):
    """lucidrains/x-transformers x_transformers/x_transformers.py (commit 9252ed78): inv_freq = 1 / 10000 **
    (arange(0, dim, 2) / dim); freqs = t * inv_freq repeated per pair '(d r)'; scale = ((arange(0, dim, 2) +
    0.4 dim) / (1.4 dim)) ** ((t - max_pos // 2) / scale_base), repeated per pair; rotate_half on (d r) pairs:
    (x1, x2) -> (-x2, x1); out = x cos * s + rotate_half(x) sin * s, with s**-1 for keys. Loops, no vectors."""
    max_pos = int(t.max()) + 1
    out = np.zeros_like(x)
    for n, p in enumerate(t):
        for i in range(dim // 2):
            theta = p / 10000 ** (2 * i / dim)
            s = ((2 * i + 0.4 * dim) / (1.4 * dim)) ** ((p - max_pos // 2) / scale_base)
            s = s if kind == "query" else 1 / s
            a, b = x[n, 2 * i], x[n, 2 * i + 1]
            out[n, 2 * i] = (a * math.cos(theta) - b * math.sin(theta)) * s
            out[n, 2 * i + 1] = (b * math.cos(theta) + a * math.sin(theta)) * s
    return out


@pytest.mark.parametrize("kind", ["query", "key"])
def test_xpos_equals_x_transformers(kind):
    t = np.arange(0, 3000, 97)
    x = np.random.default_rng(1).normal(size=(len(t), 16))
    ours = pe.apply_xpos(x, t, kind=kind, center=int(t.max() + 1) // 2)
    expected = _xtransformers_xpos(t, x, kind=kind, dim=16)
    # angles reach 2910 rad: the two float64 evaluations of p * inv_freq differ by ~ eps64 * angle
    atol = 4 * np.finfo(np.float64).eps * float(t.max()) * float(np.abs(expected).max())
    np.testing.assert_allclose(ours, expected, rtol=0, atol=atol)


def test_xpos_scores_decay_with_distance_and_ignore_the_center():
    rng = np.random.default_rng(2)
    q, k = rng.normal(size=16), rng.normal(size=16)
    m, n = np.array([900]), np.array([100])
    scores = [pe.apply_xpos(q[None], m, kind="query", center=c)[0] @ pe.apply_xpos(k[None], n, kind="key", center=c)[0]
              for c in (0, 512, 4096)]
    np.testing.assert_allclose(scores, scores[0], rtol=1e-12)
    zeta = np.repeat(pe.xpos.xpos_zeta(16), 2) ** ((900 - 100) / 512)  # the decay a q.k pair gets
    rope = pe.apply_rope(q[None], m, layout="interleaved")[0] * zeta @ pe.apply_rope(k[None], n, layout="interleaved")[0]
    assert scores[0] == pytest.approx(rope, rel=1e-12)


# --- KERPLE and Sandwich: the papers' formulas, NeMo's Sandwich code restated ----------------------------

def test_kerple_kernels_by_definition_and_power_one_is_alibi():
    r1, r2 = np.array([0.5, 1.5]), np.array([0.3, 1.0])
    q, k = np.arange(5), np.arange(7)
    log = pe.kerple_bias(r1, r2, q, k, kernel="log")
    power = pe.kerple_bias(r1, r2, q, k, kernel="power")
    for h in range(2):
        for i in q:
            for j in k:
                assert log[h, i, j] == pytest.approx(-r1[h] * math.log(1 + r2[h] * abs(i - j)), rel=1e-14, abs=0)
                assert power[h, i, j] == pytest.approx(-r1[h] * abs(i - j) ** r2[h], rel=1e-14, abs=0)
    # r2 = 1: the power kernel is ALiBi's symmetric bias with slope r1 (Chi et al. 2022, section 4)
    np.testing.assert_allclose(power[1], -1.5 * np.abs(q[:, None] - k[None, :]), rtol=0, atol=1e-14)


def test_sandwich_equals_nemo():
    """NVIDIA/NeMo sandwich_relative_position_embedding.py (commit 000b931e), bidirectional: inv_freq = 1 / 10000
    ** (2 * arange(1, d/2 + 1) / d); bias = sum cos(rel * inv_freq) repeated per head; (bias - d/2) /
    (arange(1, H + 1) * 8 / H); rel = query position - key position from NeMo's build_relative_position."""
    heads, dim, n = 6, 12, 9
    rel = np.arange(n)[:, None] - np.arange(n)[None, :]
    inv_freq = 1.0 / 10000 ** (2 * np.arange(1, dim / 2 + 1) / dim)
    inner = np.cos(rel[:, :, None] * inv_freq).sum(2)
    expected = (inner[None] - dim / 2) / (np.arange(1, heads + 1)[:, None, None] * 8 / heads)
    np.testing.assert_allclose(pe.sandwich_bias(heads, np.arange(n), np.arange(n), dim=dim), expected, rtol=0,
                               atol=1e-12)


# --- FIRE: the reference module restated ---------------------------------------------------------------

def test_fire_equals_the_reference_module():
    """mcleish7/arithmetic cramming/architectures/embeddings.py FIRE.forward (commit 86022a57), eval mode:
    positions = arange(L); rel = pos[:, None] - pos[None, :]; threshold = |L_multiplier * init_L|;
    normalizer = max(pos, threshold)[:, None]; rel = log(|c rel| + 1); normalizer = log(|c normalizer| + 1);
    mlp(rel / (normalizer + eps)) with Linear(1, w), ReLU, Linear(w, H), permuted to [1, H, L, L]."""
    rng = np.random.default_rng(3)
    width, heads, n = 5, 3, 12
    c, L = 0.1, 0.75 * 8.0
    w1, b1 = rng.normal(size=(width, 1)), rng.normal(size=width)
    w2, b2 = rng.normal(size=(heads, width)), rng.normal(size=heads)
    expected = np.zeros((heads, n, n))
    for i in range(n):
        for j in range(n):
            u = math.log(abs(c * (i - j)) + 1) / (math.log(abs(c * max(i, abs(L))) + 1) + 1e-6)
            hidden = np.maximum(w1[:, 0] * u + b1, 0)
            expected[:, i, j] = w2 @ hidden + b2
    ours = pe.fire_bias(np.array(c), np.array(L), w1, b1, w2, b2, np.arange(n), np.arange(n))
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-12)


# --- CoPE: x-transformers CoPE.forward restated ---------------------------------------------------------

def test_cope_equals_x_transformers():
    """x-transformers CoPE.forward (commit 9252ed78, soft_onehot=False, no talking heads): gates =
    sigmoid(logits); pos = flip(cumsum(flip(gates))).clamp(max=max_pos - 1); logits_int = q @ pos_emb.T;
    interpolate logits_int at ceil(pos) (weight pos - floor(pos)) and floor(pos)."""
    rng = np.random.default_rng(4)
    n, dim, max_pos = 7, 4, 5
    query, pos_emb = rng.normal(size=(n, dim)), rng.normal(size=(max_pos, dim))
    logits = np.where(np.tril(np.ones((n, n), bool)), rng.normal(size=(n, n)), -1e30)
    expected = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            p = min(sum(1 / (1 + math.exp(-logits[i, t])) if logits[i, t] > -1e29 else 0.0 for t in range(j, n)),
                    max_pos - 1)
            lo, hi = math.floor(p), math.ceil(p)
            expected[i, j] = (query[i] @ pos_emb[hi]) * (p - lo) + (query[i] @ pos_emb[lo]) * (1 - (p - lo))
    np.testing.assert_allclose(pe.cope(query, logits, pos_emb), expected, rtol=0, atol=1e-12)


# --- randomized positions: the distribution Ruoss et al. draw --------------------------------------------

def test_randomized_positions_are_sorted_unique_and_uniform():
    draws = pe.sample_randomized_positions(8, 32, seed=0, batch_shape=(4000,))
    assert draws.dtype == np.int32 and draws.shape == (4000, 8)
    assert np.all(np.diff(draws, axis=-1) > 0) and draws.min() >= 0 and draws.max() < 32
    # each position is kept with probability 8/32: 1000 expected per position, binomial sd ~ 27
    counts = np.bincount(draws.ravel(), minlength=32)
    assert np.all(np.abs(counts - 1000) < 6 * math.sqrt(4000 * 0.25 * 0.75)), counts


def test_randomized_positions_reject_seq_len_beyond_max_len():
    with pytest.raises(ValueError, match="seq_len=9 must be <= max_len=8"):
        pe.randomized_positions(np.zeros(8), 9)


def test_nope_is_the_identity():
    x = np.random.default_rng(5).normal(size=(2, 3))
    np.testing.assert_array_equal(pe.nope(x), x)
