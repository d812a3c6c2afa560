"""Every built-in's expected verdicts, as data beside its adapter (`EXPECTED` in posenc/impl/builtin/NAME.py):
the built-in runs the RoPE registry in float32 (edge set and training cases included) and the cases of every
other contract function it provides and its failing and erroring comparisons
must be exactly the expected ones, with the same diagnosis. A new failure means the library or the adapter
changed what it computes; an expected entry that no longer fails is stale (the upstream bug was fixed, or
the case renamed) and fails too, as array-api-tests warns on an xfail that matches nothing."""

from __future__ import annotations

import pytest

from posenc.check.registry import all_cases
from posenc.check.run_impl import run_implementations
from posenc.impl.builtin import BUILTINS, builtin_module, builtin_status, load_builtin


def observed(name) -> dict:
    impls = load_builtin(name)
    provided = {f for impl in impls for f in impl.functions}
    cases = [c for c in all_cases() if c.family == "rope" or (c.fn is None and c.encoding in provided)]
    records = run_implementations(cases, impls, dtypes=["float32"])
    return {f"{r.backend} {r.convention}/{r.case}": r.diagnosis or r.status for r in records
            if r.status in ("fail", "error")}


@pytest.mark.parametrize("name", list(BUILTINS))
def test_builtin_verdicts_are_the_expected_ones(name):
    module = builtin_module(name)
    if module.EXPECTED is None:
        pytest.skip(f"{name} lives in an environment of its own ({module.INSTALL[:60]}...)")
    if not builtin_status(name)[0]:
        pytest.skip(f"{name} is not installed")
    got = observed(name)
    new = {k: v for k, v in got.items() if module.EXPECTED.get(k) != v}
    stale = {k: v for k, v in module.EXPECTED.items() if k not in got}
    assert not new and not stale, f"{name}: new or changed verdicts {new}; stale expected entries {stale}"


@pytest.mark.parametrize("name", list(BUILTINS))
def test_builtin_declares_the_names_it_loads(name):
    """`NAMES` names a SPEC's records without importing the library: it must be what `load()` returns."""
    if not builtin_status(name)[0]:
        pytest.skip(f"{name} is not installed")
    names = builtin_module(name).NAMES
    names = names() if callable(names) else names
    assert tuple(i.name for i in load_builtin(name)) == tuple(names)
