"""`Implementation.from_score_mod` and the attn-gym built-in: a FlexAttention score_mod judged as the bias it adds
(on the registry's ALiBi and T5 position grids) and through eager `flex_attention` as `attention(bias=...)`.

A score_mod with Press et al.'s slopes (and, for T5, HF's bucket function over the case's table) must pass
every case it can express, bias and attention alike; one setting changed (geometric slopes, negated relative
positions) must fail with that setting's diagnosis; attention-gym's `generate_alibi_bias` must fail for the
registry's 12 heads with `slopes` and equal the spec for a power of two.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.nn.attention.flex_attention")

import posenc_np  # noqa: E402
from posenc.check.registry import all_cases  # noqa: E402
from posenc.check.run_impl import run_implementations  # noqa: E402
from posenc.impl import Implementation  # noqa: E402
from posenc.impl.builtin import builtin_status, load_builtin  # noqa: E402


def press_factory(num_heads):
    """The paper's causal form with Press et al.'s slopes, as a FlexAttention score_mod (slopes indexed by h)."""
    slopes = torch.tensor(posenc_np.alibi_slopes(num_heads), dtype=torch.float32)

    def alibi(score, b, h, q_idx, kv_idx):
        return score + (kv_idx - q_idx) * slopes[h]

    return alibi


def geometric_factory(num_heads):
    """attention-gym's slopes 2^(-8(h+1)/H), written independently of attn_gym."""
    def alibi(score, b, h, q_idx, kv_idx):
        return score + (kv_idx - q_idx) * torch.exp2(-(h + 1) * 8.0 / num_heads)

    return alibi


def t5_factory(sign=1):
    """T5's bias `table[bucket(k - q), h]` (HF's bucket function); `sign=-1` plants query - key."""
    transformers_t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    bucket = transformers_t5.T5Attention._relative_position_bucket

    def factory(table, *, bidirectional, num_buckets, max_distance):
        def t5(score, b, h, q_idx, kv_idx):
            index = bucket(sign * (kv_idx - q_idx), bidirectional=bidirectional, num_buckets=num_buckets,
                           max_distance=max_distance)
            return score + table[index, h].to(score.dtype)

        return t5

    return factory


def verdicts(impl, selector, dtypes=("float32",)):
    """`{case id: (status, diagnosis)}` of `impl` over the registry cases `selector` picks."""
    cases = [c for c in all_cases() if selector(c)]
    assert cases, "no registry case selected"
    return {f"{r.encoding}/{r.convention}/{r.case}/{r.dtype}": (r.status, r.diagnosis)
            for r in run_implementations(cases, [impl], dtypes=list(dtypes))}


def press_alibi(case):
    return case.encoding == "alibi_bias" and case.convention == "press-alibi" and case.case_set != "grad"


def t5_cases(case):
    return case.encoding == "t5_bias" and case.convention in ("t5", "t5-decoder") and case.case_set != "grad"


def test_a_press_score_mod_passes_every_press_alibi_case_bias_and_attention():
    impl = Implementation.from_score_mod(press_factory, "press-mod", family="alibi", factory=True)
    got = verdicts(impl, press_alibi, dtypes=("float32", "bfloat16"))
    assert {s for s, _ in got.values()} == {"pass"}, got
    # the bias grid (short, long, kv-offset, left-pad [2, 8], kv-offset-long, past-256) and flex_attention
    assert "alibi_bias/press-alibi/attention-causal/float32" in got
    assert "alibi_bias/press-alibi/left-pad/float32" in got
    assert len(got) >= 14


def test_geometric_slopes_in_a_score_mod_are_named_slopes():
    impl = Implementation.from_score_mod(geometric_factory, "geometric-mod", family="alibi", factory=True)
    got = verdicts(impl, lambda c: press_alibi(c) and c.fn is None)
    assert set(got.values()) == {("fail", "slopes")}, got


def test_a_fixed_score_mod_and_other_forms_are_skips_with_reasons():
    """A score_mod declared "causal" runs no symmetric or bloom case; a fixed one (not a factory) runs the
    registry's 12 heads as given."""
    impl = Implementation.from_score_mod(press_factory(12), "fixed", family="alibi")
    records = run_implementations([c for c in all_cases() if c.encoding == "alibi_bias" and c.fn is None],
                                  [impl], dtypes=["float32"])
    by_form = {}
    for r in records:
        by_form.setdefault(r.convention, set()).add(r.status)
    assert by_form["press-alibi"] == {"pass"}
    assert by_form["bloom-alibi"] == {"skip"} and by_form["alibi-symmetric"] == {"skip"}
    assert all("'causal' ALiBi form" in r.message for r in records if r.convention == "bloom-alibi")


def test_a_t5_score_mod_factory_passes_the_t5_cases_and_attention():
    impl = Implementation.from_score_mod(t5_factory(), "t5-mod", family="t5", factory=True)
    got = verdicts(impl, t5_cases)
    assert "t5_bias/t5/attention-unscaled/float32" in got
    assert {s for s, _ in got.values()} == {"pass"}, got


def test_a_t5_score_mod_with_query_minus_key_is_named_t5_direction():
    impl = Implementation.from_score_mod(t5_factory(sign=-1), "t5-backwards", family="t5", factory=True)
    got = verdicts(impl, lambda c: t5_cases(c) and c.fn is None and c.case_set in ("short", "kv-offset"))
    assert set(got.values()) == {("fail", "t5-direction")}, got


def test_flex_attention_runs_a_plain_bias_and_no_bias():
    """`attention` without a score_mod's bias: flex with a gathered tensor bias, and with none."""
    impl = Implementation.from_score_mod(press_factory, "press-mod", family="alibi", factory=True)
    got = verdicts(impl, lambda c: c.encoding == "attention" or c.id.endswith("shaw/attention-bias"))
    assert got and {s for s, _ in got.values()} == {"pass"}, got


def test_the_evaluated_bias_is_the_score_mod_on_score_zero():
    impl = Implementation.from_score_mod(press_factory, "press-mod", family="alibi", factory=True)
    q, k = np.arange(28, 32), np.arange(32)
    bias = impl.functions["alibi_bias"](12, torch.from_numpy(q), torch.from_numpy(k), form="causal")
    np.testing.assert_allclose(bias.numpy(), posenc_np.alibi_bias(12, q, k, form="causal"), rtol=0, atol=2e-6)


@pytest.mark.parametrize("bad", [dict(family="relative"), dict(form="paper")])
def test_from_score_mod_names_a_bad_argument(bad):
    (name, value), = bad.items()
    with pytest.raises(ValueError, match=f"{name}='{value}'"):
        Implementation.from_score_mod(press_factory, "bad", factory=True, **bad)


def test_from_score_mod_refuses_what_is_not_callable():
    with pytest.raises(TypeError, match="score_mod_or_factory"):
        Implementation.from_score_mod(3, "bad")


def test_max_bias_reaches_a_factory_that_takes_it_and_is_a_skip_otherwise():
    def with_max_bias(num_heads, max_bias=8.0):
        slopes = torch.tensor(posenc_np.alibi_slopes(num_heads, max_bias=max_bias), dtype=torch.float32)
        return lambda score, b, h, q_idx, kv_idx: score + (kv_idx - q_idx) * slopes[h]

    q, k = torch.arange(8), torch.arange(8)
    taking = Implementation.from_score_mod(with_max_bias, "m", factory=True).functions["alibi_bias"]
    np.testing.assert_allclose(taking(12, q, k, form="causal", max_bias=4.0).numpy(),
                               posenc_np.alibi_bias(12, q.numpy(), k.numpy(), form="causal", max_bias=4.0), atol=1e-6)
    plain = Implementation.from_score_mod(press_factory, "p", factory=True).functions["alibi_bias"]
    from posenc.adapters import NotSupported

    with pytest.raises(NotSupported, match="max_bias"):
        plain(12, q, k, form="causal", max_bias=4.0)


# --- attn-gym ------------------------------------------------------------------------------------------

needs_attn_gym = pytest.mark.skipif(not builtin_status("attn-gym")[0], reason="attn-gym is not installed "
                                    "(pip install --no-deps attn-gym)")


@needs_attn_gym
def test_attn_gym_runs_to_a_verdict_slopes_for_12_heads():
    (impl,) = load_builtin("attn-gym")
    got = verdicts(impl, lambda c: press_alibi(c) and c.fn is None)
    assert set(got.values()) == {("fail", "slopes")}, got
    assert len(got) >= 6


@needs_attn_gym
@pytest.mark.parametrize("heads", [8, 16])
def test_attn_gym_equals_the_spec_for_a_power_of_two(heads):
    """Geometric and Press slopes coincide for powers of two: the adapter itself adds nothing."""
    (impl,) = load_builtin("attn-gym")
    q, k = np.arange(28, 32), np.arange(32)
    bias = impl.functions["alibi_bias"](heads, torch.from_numpy(q), torch.from_numpy(k), form="causal")
    np.testing.assert_allclose(bias.numpy(), posenc_np.alibi_bias(heads, q, k, form="causal"), rtol=0, atol=2e-6)
