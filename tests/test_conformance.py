"""Every registered suite case, on every backend x dtype x mode, against the float64 spec.

The same registry drives `posenc check`; here each comparison is its own test id
(`test_case[rope/hf-llama/short-torch-bfloat16-jit]`), so one failure hides nothing.
torch.compile runs with the aot_eager backend here (the same fullgraph capture without Inductor's C++
code generation, ~20 s per graph on CI's CPUs); tests/test_compile.py runs Inductor on one case per
family.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from posenc_np.suite.registry import all_cases
from posenc_np.suite.runner import run

CASES = all_cases()


@pytest.fixture(autouse=True, scope="module")
def _aot_eager():
    old = os.environ.get("POSENC_TORCH_COMPILE_BACKEND")
    os.environ["POSENC_TORCH_COMPILE_BACKEND"] = "aot_eager"
    yield
    if old is None:
        os.environ.pop("POSENC_TORCH_COMPILE_BACKEND")
    else:
        os.environ["POSENC_TORCH_COMPILE_BACKEND"] = old


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case, backend, dtype, mode, jit_cache):
    if dtype not in case.dtypes or mode not in case.modes:
        pytest.skip(f"{case.id} is not defined for {dtype}/{mode}")
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
