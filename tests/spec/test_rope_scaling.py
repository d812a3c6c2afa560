"""RoPE spec: scaling rules (NTK, dynamic, keras-hub variants), argument validation, and the properties
of the rotation (pair norms, offset-only logits, layouts as a channel permutation, weight permutation).

NumPy and ml_dtypes only. The comparisons with transformers' RoPE code are in
tests/reference/test_rope_reference.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from posenc_np.testing import compare, tolerance

HEAD_DIM = 32
ORIGINAL = 64



def test_ntk_base_formula():
    """docs/api.md: {"rope_type": "ntk", "factor": a} gives base * a ** (d / (d - 2))."""
    inv, _ = pn.rope_frequencies(16, base=500.0, scaling={"rope_type": "ntk", "factor": 3.0})
    desired, _ = pn.rope_frequencies(16, base=500.0 * 3.0 ** (16 / 14))
    assert compare(inv, desired, tolerance("float64")).passed


def test_dynamic_is_unscaled_within_the_original_length():
    scaling = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": ORIGINAL}
    for seq_len in (None, 1, ORIGINAL):
        inv, _ = pn.rope_frequencies(HEAD_DIM, scaling=scaling, seq_len=seq_len)
        assert compare(inv, pn.rope_frequencies(HEAD_DIM)[0], tolerance("float64")).passed
    longer, _ = pn.rope_frequencies(HEAD_DIM, scaling=scaling, seq_len=ORIGINAL + 1)
    assert np.all(longer[1:] < pn.rope_frequencies(HEAD_DIM)[0][1:])


def test_keras_hub_dynamic_is_a_distinct_uniform_rule():
    """keras-hub's "dynamic" divides every frequency by factor**(d/(d-2)) at all lengths; HF's does not."""
    kh, _ = pn.rope_frequencies(16, scaling={"rope_type": "keras-hub-dynamic", "factor": 2.0})
    base_inv, _ = pn.rope_frequencies(16)
    assert compare(kh * 2.0 ** (16 / 14), base_inv, tolerance("float64")).passed
    hf, _ = pn.rope_frequencies(16, scaling={"rope_type": "dynamic", "factor": 2.0,
                                             "original_max_position_embeddings": 8}, seq_len=4)
    assert not np.allclose(kh, hf)


@pytest.mark.parametrize("kwargs, match", [
    (dict(rotary_dim=7), "rotary_dim=7 must be even"),
    (dict(rotary_dim=8, scaling={"rope_type": "linear"}), r"missing required keys \['factor'\]"),
    (dict(rotary_dim=8, scaling={"rope_type": "yarn", "factor": 2.0}),
     r"missing required keys \['original_max_position_embeddings'\].*scaling_from_hf_config"),
    (dict(rotary_dim=8, scaling={"rope_type": "linear", "factor": 2.0, "fcator": 1, "beta": 2}),
     r"unknown keys \['beta', 'fcator'\]"),
    (dict(rotary_dim=8, scaling={"rope_type": "nope"}), "rope_type='nope' is not one of"),
    (dict(rotary_dim=8, scaling={"rope_type": "linear", "factor": 0.0}), r"scaling\['factor'\]=0.0 must be > 0"),
    (dict(rotary_dim=8, scaling={"rope_type": "linear", "factor": -2}), r"scaling\['factor'\]=-2 must be > 0"),
    (dict(rotary_dim=8, scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 5.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
     "low_freq_factor.*must be <= "),
    (dict(rotary_dim=8, scaling={"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [1.0] * 3,
                                 "factor": 2.0, "original_max_position_embeddings": 64}),
     r"scaling\['long_factor'\] has 3 entries; rotary_dim=8 needs rotary_dim/2 = 4"),
    (dict(rotary_dim=8, scaling={"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [1.0] * 4,
                                 "original_max_position_embeddings": 64}), "needs scaling\\['factor'\\]"),
    (dict(rotary_dim=8, scaling={"rope_type": "linear", "type": "dynamic", "factor": 2.0}), "both 'rope_type' and"),
    (dict(rotary_dim=8, scaling={"rope_type": "linear", "factor": 2.0, "rope_theta": 5.0}), "disagrees with base"),
    (dict(rotary_dim=8, scaling={"rope_type": "keras-hub-yarn", "factor": 2.0,
                                 "original_max_position_embeddings": 64, "truncate": True}), "clips positions"),
    (dict(rotary_dim=8, base=0.0), "base=0.0 must be > 0"),
])
def test_bad_scaling_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pn.rope_frequencies(**kwargs)


def test_hf_dict_accepted_verbatim():
    """A pasted rope_scaling dict (old `type` key) and a v5 rope_parameters dict (with rope_theta) both work."""
    old = {"type": "linear", "factor": 2.0}
    new = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    a = pn.rope_frequencies(8, scaling=old)[0]
    b = pn.rope_frequencies(8, scaling=new)[0]
    assert np.array_equal(a, b) and old == {"type": "linear", "factor": 2.0}  # not mutated


@pytest.mark.parametrize("call, match", [
    (lambda x, p: pn.apply_rope(x, p, rotary_dim=10), "rotary_dim=10 is larger than the head dim 8"),
    (lambda x, p: pn.apply_rope(x, p, rotary_dim=3), "rotary_dim=3 must be even"),
    (lambda x, p: pn.apply_rope(x, p + 0.5), "positions must hold integers"),
    (lambda x, p: pn.apply_rope(x, p, rotary_dim=4, rotary_pct=0.5), "mutually exclusive"),
    (lambda x, p: pn.apply_rope(x, p, rotary_pct=0.4), r"rotary_pct=0.4 gives rotary_dim = int\(8 \* 0.4\) = 3"),
    (lambda x, p: pn.apply_rope(x, p, layout="complex"), "layout='complex' is not one of"),
    (lambda x, p: pn.apply_rope(x, np.arange(4)), "do not broadcast"),
    (lambda x, p: pn.rope_cos_sin(p.astype(float) + 0.25, 8), "positions must hold integers"),
])
def test_bad_rope_arguments_raise(call, match):
    x = np.ones((2, 3, 8))
    positions = np.arange(3)
    with pytest.raises(ValueError, match=match):
        call(x, positions)


def test_gpt_neox_rotary_pct_equals_rotary_dim():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 16))
    positions = np.arange(5)
    convention = pn.conventions["gpt-neox"]
    out = pn.apply_rope(x, positions, **convention.params)
    assert np.array_equal(out, pn.apply_rope(x, positions, layout="half", rotary_dim=4))
    assert np.array_equal(out[..., 4:], x[..., 4:])


# --- properties of the spec ----------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotation_preserves_pair_norms_and_logits_depend_on_offset_only(layout):
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((2, 16))
    pos = np.array([3, 1000, 70000])
    rq = pn.apply_rope(np.broadcast_to(q, (3, 16)), pos, layout=layout)
    rk = pn.apply_rope(np.broadcast_to(k, (3, 16)), pos - 3, layout=layout)
    logits = np.einsum("pd,pd->p", rq, rk)
    tol = tolerance("float64", scale=1e4)  # float64 angles up to 7e4: ulp(angle) grows with position
    assert compare(logits, np.full(3, logits[0]), tol).passed
    assert compare(np.linalg.norm(rq, axis=-1), np.full(3, np.linalg.norm(q)), tolerance("float64")).passed


def test_layouts_are_a_fixed_channel_permutation():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 12))
    perm = pn.rope_permutation(12, source="interleaved", target="half")
    pos = np.arange(4) * 37
    assert compare(pn.apply_rope(x, pos, layout="interleaved")[:, perm],
                   pn.apply_rope(x[:, perm], pos, layout="half"), tolerance("float64")).passed


def test_cos_sin_fold_attention_scale_and_layouts():
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
    inv, scale = pn.rope_frequencies(8, scaling=scaling)
    pos = np.array([[0, 5], [7, 9]])
    cos, sin = pn.rope_cos_sin(pos, 8, scaling=scaling, layout="half")
    assert cos.shape == (2, 2, 8)
    t = pos[..., None] * inv
    assert compare(cos, scale * np.cos(np.concatenate([t, t], -1)), tolerance("float64")).passed
    cos_i, sin_i = pn.rope_cos_sin(pos, 8, scaling=scaling, layout="interleaved")
    assert compare(sin_i, scale * np.sin(np.repeat(t, 2, -1)), tolerance("float64")).passed
    neox = pn.rope_cos_sin(pos, rotary_pct=0.5, head_dim=16)
    assert neox[0].shape == (2, 2, 8)


def test_half_precision_inputs_return_their_dtype():
    import ml_dtypes

    x = np.ones((3, 8), dtype=ml_dtypes.bfloat16)
    assert pn.apply_rope(x, np.arange(3)).dtype == x.dtype
    assert pn.apply_rope(x.astype(np.float16), np.arange(3)).dtype == np.float16


@pytest.mark.parametrize("rotary_dim", [None, 8], ids=["full", "partial"])
@pytest.mark.parametrize("source, target", [("interleaved", "half"), ("half", "interleaved"), ("half", "half")])
def test_permuted_weights_keep_attention_logits(source, target, rotary_dim):
    """Grouped-query attention: 4 query heads, 2 key heads; logits q.k after RoPE are unchanged."""
    rng = np.random.default_rng(4)
    q_heads, kv_heads, head_dim, hidden, seq = 4, 2, 16, 24, 5
    wq = rng.standard_normal((q_heads * head_dim, hidden))
    wk = rng.standard_normal((kv_heads * head_dim, hidden))
    h = rng.standard_normal((seq, hidden))
    pos = np.arange(seq) + 11

    def logits(wq, wk, layout):
        q = (h @ wq.T).reshape(seq, q_heads, head_dim).transpose(1, 0, 2)
        k = (h @ wk.T).reshape(seq, kv_heads, head_dim).transpose(1, 0, 2)
        q = pn.apply_rope(q, pos, layout=layout, rotary_dim=rotary_dim)
        k = np.repeat(pn.apply_rope(k, pos, layout=layout, rotary_dim=rotary_dim), q_heads // kv_heads, axis=0)
        return q @ k.transpose(0, 2, 1)

    before = logits(wq, wk, source)
    kw = dict(source=source, target=target, rotary_dim=rotary_dim)
    after = logits(pn.permute_qk_rows(wq, q_heads, **kw), pn.permute_qk_rows(wk, kv_heads, **kw), target)
    assert compare(after, before, tolerance("float64", scale=np.abs(before).max())).passed
    if source != target:  # the permutation is needed: the unpermuted weights give other logits
        assert not np.allclose(logits(wq, wk, target), before)
