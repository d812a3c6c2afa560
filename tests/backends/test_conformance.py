"""Every registered suite case, on every backend x dtype x mode, against the float64 spec.

The same registry drives `posenc check`; here each comparison is its own test id
(`test_case[rope/hf-llama/short-torch-bfloat16-jit]`), so one failure hides nothing.
torch.compile runs with the aot_eager backend here (the same fullgraph capture without Inductor's C++
code generation, ~20 s per graph on CI's CPUs); tests/test_compile.py runs Inductor on one case per
family.
"""

from __future__ import annotations

import numpy as np
import pytest

from posenc.check.registry import all_cases
from posenc.check.runner import run

CASES = all_cases()


COMBOS = [pytest.param(case, dtype, mode, id=f"{case.id}-{dtype}-{mode}")
          for case in CASES for dtype in ("float32", "bfloat16", "float16") if dtype in case.dtypes
          for mode in ("eager", "jit") if mode in case.modes]


@pytest.fixture(autouse=True, scope="module")
def _aot_eager(aot_eager):
    yield


@pytest.mark.parametrize("case, dtype, mode", COMBOS)
def test_case(case, backend, dtype, mode, jit_cache):
    (record,) = run([case], backends=[backend.name], dtypes=[dtype], modes=[mode], seed=0, require=[backend.name],
                    jit_cache=jit_cache)
    assert record.status == "pass", (
        f"{case.id} {backend.name} {dtype} {mode}: {record.status}: max_abs_err={record.max_abs_err} "
        f"tol={record.tol} ({record.tol_why}) worst={record.worst_index} {record.message}")


def test_cases_have_unique_ids_and_finite_tolerances():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    rng = np.random.default_rng(0)
    for case in CASES:
        args, kwargs = case.make(rng, "float32")
        assert args, case.id
