"""Refusals are declared, not assumed: in the edge set (positions past a table, negative positions, a
non-contiguous view) a posenc backend has no table and must equal the spec, so any exception from it is an
error; an implementation may refuse only when it declares a table, and only with the exception types the
case lists (`Case.refusals`); every input reaches the function in the form the case names."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np
from posenc.check.registry import all_cases
from posenc.check.run import run
from posenc.check.run_impl import run_implementations
from posenc.cli import main
from posenc.impl import Implementation
from posenc.impl.implementation import TABLE_ROWS

EDGE = [c for c in all_cases() if c.convention == "edge"]


def _raising_past_table(error_type):
    """A NumPy apply_rope equal to the spec, raising `error_type` for positions past `TABLE_ROWS` (as a
    backend that quietly grew a table would)."""
    def apply_rope(x, positions, **kwargs):
        if np.max(positions) >= TABLE_ROWS:
            raise error_type(f"position {int(np.max(positions))} past a {TABLE_ROWS}-row table")
        return posenc_np.apply_rope(x, positions, **kwargs)
    return apply_rope


def test_a_posenc_backend_that_raises_on_the_edge_set_fails_it(monkeypatch):
    torch_backend = pytest.importorskip("posenc_torch")
    spec_apply = torch_backend.apply_rope

    def apply_rope(x, positions, **kwargs):
        if int(positions.max()) >= TABLE_ROWS:
            raise TypeError("planted: no table past 4095")
        return spec_apply(x, positions, **kwargs)

    monkeypatch.setattr(torch_backend, "apply_rope", apply_rope)
    records = run(EDGE, backends=["torch"], dtypes=["float32"], modes=["eager"])
    failed = {r.case for r in records if r.status == "error"}
    assert failed == {"past-table", "past-table-interleaved", "offset-past-table", "offset-past-table-interleaved",
                      "decode-past-table", "decode-past-table-interleaved"}, failed
    assert all("TypeError: planted" in r.message for r in records if r.status == "error")
    assert main(["check", "--encoding", "edge", "--backend", "torch", "--dtype", "float32", "--jobs", "1",
                 "--quiet", "--compile-cache", "none"]) == 1


@pytest.mark.parametrize("error_type, table, status", [
    (IndexError, TABLE_ROWS, "pass"),    # a declared table, a declared refusal
    (ValueError, TABLE_ROWS, "pass"),
    (RuntimeError, TABLE_ROWS, "error"),  # a crash is not a refusal, table or not
    (IndexError, None, "error"),          # no table declared: nothing to refuse
])
def test_only_a_declared_table_may_refuse_and_only_with_a_declared_exception(error_type, table, status):
    impl = Implementation("planted", "numpy", {"apply_rope": _raising_past_table(error_type)}, max_positions=table)
    past = [c for c in EDGE if c.case_set == "past-table"]
    (record,) = run_implementations(past, [impl], dtypes=["float32"])
    assert record.status == status, record.message
    assert error_type.__name__ in record.message


def test_the_non_contiguous_case_reaches_torch_as_a_view(monkeypatch):
    torch_backend = pytest.importorskip("posenc_torch")
    import torch

    seen = []
    spec_apply = torch_backend.apply_rope

    def apply_rope(x, positions, **kwargs):
        seen.append(x.is_contiguous())
        return spec_apply(x, positions, **kwargs)

    monkeypatch.setattr(torch_backend, "apply_rope", apply_rope)
    view = [c for c in EDGE if c.case_set == "non-contiguous"]
    (record,) = run(view, backends=["torch"], dtypes=["float32"], modes=["eager"])
    assert record.status == "pass" and seen == [False]

    def kernel(x, positions, **kwargs):
        seen.append((x.is_contiguous(), x.stride()))
        return torch.from_numpy(posenc_np.apply_rope(x.numpy().astype(np.float64), positions.numpy(), **kwargs))

    impl = Implementation("view-probe", "torch", {"apply_rope": kernel})
    (record,) = run_implementations(view, [impl], dtypes=["float32"])
    assert record.status == "pass"
    assert seen[-1][0] is False and seen[-1][1][-2] == 3 * 16  # rows of the 3x wider base


def test_an_in_place_kernel_does_not_change_the_next_implementations_inputs():
    """Each call gets its own copy of the case's inputs: a kernel that rotates `x` in place cannot move the
    inputs the spec's answer and the next implementation see."""
    def in_place(x, positions, **kwargs):
        x[...] = posenc_np.apply_rope(x.astype(np.float64), positions, **kwargs)
        return x

    cases = [c for c in all_cases() if c.id == "rope/hf-llama/short"]
    honest = Implementation("honest", "numpy", {"apply_rope": posenc_np.apply_rope})
    records = run_implementations(cases, [Implementation("in-place", "numpy", {"apply_rope": in_place}), honest],
                                  dtypes=["float32"])
    assert [r.status for r in records] == ["pass", "pass"]
