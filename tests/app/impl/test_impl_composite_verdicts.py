"""The libraries' failures inside composite cases, named (posenc/impl/composite.py), run on the real code:
attention-gym's ALiBi score_mod and Falcon's build_alibi_tensor inside causal attention (`slopes`, as their
plain bias cases are named), and transformers' T5 `eager` attention in a half dtype (`compute-dtype`)."""

from __future__ import annotations

import pytest

from posenc.check.registry import all_cases
from posenc.check.run_impl import run_implementations
from posenc.impl.builtin import builtin_status, load_builtin


def verdicts(builtin, names, case_id, dtypes):
    if not builtin_status(builtin)[0]:
        pytest.skip(f"{builtin} is not installed")
    impls = [i for i in load_builtin(builtin) if i.name in names]
    cases = [c for c in all_cases() if c.id == case_id]
    return {(r.backend, r.dtype): (r.status, r.diagnosis)
            for r in run_implementations(cases, impls, dtypes=list(dtypes))}


def test_attn_gym_inside_causal_attention_is_named_slopes():
    got = verdicts("attn-gym", {"attn-gym"}, "alibi/press-alibi/attention-causal", ["float32", "bfloat16"])
    assert set(got.values()) == {("fail", "slopes")}, got


def test_falcon_inside_causal_attention_is_named_slopes():
    got = verdicts("transformers-bias", {"transformers-falcon"}, "alibi/bloom-alibi/attention-causal",
                   ["float32", "bfloat16", "float16"])
    assert set(got.values()) == {("fail", "slopes")}, got


def test_t5_eager_attention_in_half_precision_is_named_compute_dtype():
    got = verdicts("transformers-bias", {"transformers-t5-eager", "transformers-t5-sdpa"}, "t5/t5/attention-unscaled",
                   ["bfloat16", "float16"])
    assert got[("transformers-t5-eager", "bfloat16")] == ("fail", "compute-dtype"), got
    assert got[("transformers-t5-sdpa", "bfloat16")][0] == "pass", got
