"""Every registered check case, on every backend x dtype x mode it lists, against the float64 spec.

This is the project's one conformance matrix: the same registry (posenc/check/cases_*.py) drives
`posenc check`; here each comparison is its own test id (`test_case[rope/hf-llama/short-torch-bfloat16-jit]`),
so one failure hides nothing. A case lists only the dtypes and modes it runs in, so nothing here is
generated only to be skipped. torch.compile runs with the aot_eager backend here (the same fullgraph
capture without Inductor's C++ code generation, ~20 s per graph on CI's CPUs); tests/backends/test_compile.py
runs Inductor on one case per family.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from posenc.check.registry import DTYPES, MODES, all_cases, register
from posenc.check.run import run

CASES = all_cases()

# the aliasing and table-gradient cases are probes of an implementation's kernel (posenc.check.run_training);
# posenc's backends run the backward ones
COMBOS = [pytest.param(case, dtype, mode, id=f"{case.id}-{dtype}-{mode}")
          for case in CASES if case.training in (None, "backward") for dtype in DTYPES if dtype in case.dtypes
          for mode in MODES if case.runs(dtype, mode)]


@pytest.fixture(autouse=True, scope="module")
def _aot_eager(aot_eager):
    yield


@pytest.mark.parametrize("case, dtype, mode", COMBOS)
def test_case(case, backend, dtype, mode, jit_cache):
    (record,) = run([case], backends=[backend.name], dtypes=[dtype], modes=[mode], seed=0, require=[backend.name],
                    jit_cache=jit_cache)
    if case.case_set == "autocast" and record.status == "skip":  # torch.autocast: the other frameworks have none
        pytest.skip(record.message)
    assert record.status == "pass", (
        f"{case.id} {backend.name} {dtype} {mode}: {record.status}: max_abs_err={record.max_abs_err} "
        f"tol={record.tol} ({record.tol_why}) worst={record.worst_index} {record.message}")


def _arrays(out):
    return [a for o in out for a in _arrays(o)] if isinstance(out, (tuple, list)) else [out]


@pytest.mark.parametrize("case, dtype", [pytest.param(case, dtype, id=f"{case.id}-{dtype}") for case in CASES
                                         if case.out_dtype is not None for dtype in DTYPES if dtype in case.dtypes])
def test_output_dtype(case, backend, dtype):
    """The backend's outputs have the dtype the case pins (bias in the model's dtype, int32 buckets)."""
    args, kwargs = case.make(np.random.default_rng(0), dtype)
    out = backend.call(case.fn or case.encoding, args, kwargs, mode="eager")
    assert [np.asarray(a).dtype.name for a in _arrays(out)] == [case.out_dtype(dtype)] * len(_arrays(out))


def test_a_case_id_is_registered_once():
    """Ids are unique by construction: `register` refuses an id it already holds (the check ids and the
    test ids above rely on it) and leaves the registry as it was."""
    with pytest.raises(ValueError, match="registered twice"):
        register(dataclasses.replace(CASES[0]))
    assert all_cases() == CASES


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_case_runs_on_the_numpy_backend_with_a_finite_tolerance(dtype):
    """The spec package itself as a backend (inputs in `dtype`, results cast once): every case builds its
    inputs, derives a finite, non-negative tolerance from them (0 only when exact) and passes."""
    cases = [c for c in CASES if dtype in c.dtypes]
    assert cases, f"no case runs in {dtype}"
    records = run(cases, backends=["numpy"], dtypes=[dtype], modes=["eager"], seed=0, require=["numpy"])
    assert len(records) == len(cases)
    for record in records:
        assert record.tol is not None and math.isfinite(record.tol) and record.tol >= 0, record
        assert record.tol_why, record
        assert record.status == "pass", (f"{record.family}/{record.convention}/{record.case}: {record.status} "
                                         f"{record.max_abs_err} > {record.tol} {record.message}")
