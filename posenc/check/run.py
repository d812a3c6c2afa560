"""Run the registered cases through posenc's own backends: one record per comparison."""

from __future__ import annotations

import sys
import time

from posenc_np.testing import compare

from ..adapters import DEFAULT_TORCH_COMPILE_BACKEND, BackendUnavailable, NotSupported, adapter
from ..impl.judge import as_float64
from .inputs import expected_for
from .profile import error_by_position
from .record import Record, backend_plan, one_line

__all__ = ["run", "terminal_progress"]


def _unusable_backends(backends, require) -> dict:
    """backend -> why it cannot run: not installed (a skip, unless required) or failing to import (an error)."""
    broken: dict[str, str] = {}
    for backend in backends:
        a = adapter(backend)
        if not a.available():
            broken[backend] = "required backend is not installed" if backend in require else "not installed"
            continue
        try:
            _ = a.module  # importing a broken framework raises here, once per run
        except BackendUnavailable as error:
            broken[backend] = str(error)
    return broken


def run(cases, *, backends, dtypes, modes, seed=0, require=(), progress=None, jit_cache=None,
        compile_backend=DEFAULT_TORCH_COMPILE_BACKEND):
    """Compare every case x backend x dtype x mode; returns a list of `Record`s.

    `compile_backend` is torch.compile's backend in torch's jit mode (`posenc.adapters.TORCH_COMPILE_BACKENDS`).

    A backend whose framework is not installed is skipped, unless it is in `require` (then every
    comparison it would have run is an error). A backend that is installed but fails to import is
    always an error: a broken install must not pass as a skip. A backend that raises is an error, except
    where the case declares the exception a correct refusal and the backend reads a table
    (`Case.refusals`, `Adapter.may_refuse`); `NotSupported` (a case it cannot express) is a skip.
    """
    records: list[Record] = []
    jit_cache = {} if jit_cache is None else jit_cache
    plan = backend_plan(cases, dtypes=dtypes, backends=backends, modes=modes)
    broken = _unusable_backends(backends, require)
    expected: dict = {}
    for n, (case, dtype, backend, mode) in enumerate(plan, 1):
        if progress:
            progress(n, len(plan), f"{case.id} {backend} {dtype} {mode}")
        if backend in broken:
            status = "skip" if broken[backend] == "not installed" else "error"
            records.append(Record.for_case(case, backend, dtype, mode, status=status, message=broken[backend]))
            continue
        if (case.id, dtype) not in expected:
            expected[(case.id, dtype)] = expected_for(case, seed, dtype)
        want = expected[(case.id, dtype)]
        records.append(_compare(case, want, backend, dtype, mode, jit_cache, compile_backend))
    return records


def _compare(case, want, backend, dtype, mode, jit_cache, compile_backend) -> Record:
    ad = adapter(backend)
    started = time.perf_counter()
    try:
        out = ad.call(case.fn or case.encoding, want.args, want.kwargs, mode=mode, cache=jit_cache,
                      key=(case.id, dtype), compile_backend=compile_backend)
    except NotSupported as error:  # a case this backend cannot express (ONNX: no graph for it)
        return Record.for_case(case, backend, dtype, mode, status="skip", message=f"not supported: {error}")
    except Exception as error:  # noqa: BLE001 - one failing backend must not hide the rest of the matrix
        refused = case.refused(error, may_refuse=ad.may_refuse)
        return Record.for_case(case, backend, dtype, mode, status="pass" if refused else "error",
                               tol=want.tol.atol, tol_why=want.tol.why, seconds=time.perf_counter() - started,
                               message=f"refused (a declared refusal): {one_line(error)}" if refused
                               else one_line(error))
    desired = want.desired64
    try:
        out = as_float64(out)
        result = compare(out, desired, want.tol)
    except (TypeError, ValueError) as error:  # an output that is not an array of numbers shaped like the spec's
        return Record.for_case(case, backend, dtype, mode, status="error", seconds=time.perf_counter() - started,
                               message=f"the output cannot be compared with the spec's {desired.shape} array: "
                                       f"{one_line(error)}")
    return Record.for_case(case, backend, dtype, mode, status="pass" if result.passed else "fail",
                           max_abs_err=result.max_abs_err, err_in_tol=result.err_in_tol,
                           worst_index=list(result.worst_index), tol=result.atol, tol_why=result.tol_why,
                           message=result.message, seconds=time.perf_counter() - started,
                           error_by_position=error_by_position(case, want.args, out, desired))


def terminal_progress(stream=sys.stderr):
    """A one-line progress display for a terminal; None (silent) when `stream` is not a tty."""
    if not stream.isatty():
        return None
    started = time.perf_counter()

    def show(n, total, what):
        elapsed = time.perf_counter() - started
        stream.write(f"\r\033[K[{n}/{total} {elapsed:5.1f}s] {what}"[:150])
        if n == total:
            stream.write("\r\033[K")
        stream.flush()

    return show
