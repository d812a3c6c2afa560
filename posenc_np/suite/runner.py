"""Run the registered cases through the backends and collect one record per comparison."""

from __future__ import annotations

import sys
import time
import zlib
from dataclasses import asdict, dataclass, field

import numpy as np

from .._dtypes import numpy_dtype
from ..testing import compare
from .backends import BackendUnavailable, adapter
from .registry import Case

__all__ = ["Record", "run", "terminal_progress"]


@dataclass
class Record:
    encoding: str
    family: str
    convention: str
    case: str
    backend: str
    dtype: str
    mode: str
    status: str  # "pass", "fail", "error", "skip"
    max_abs_err: float | None = None
    err_in_tol: float | None = None
    worst_index: list = field(default_factory=list)
    tol: float | None = None
    tol_why: str = ""
    message: str = ""
    seconds: float = 0.0
    description: str = ""

    def as_dict(self):
        return asdict(self)


def _is_float(a):
    return isinstance(a, np.ndarray) and (a.dtype.kind == "f" or a.dtype == numpy_dtype("bfloat16"))


def _spec_args(args, kwargs):
    args64 = tuple(a.astype(np.float64) if _is_float(a) else a for a in args)
    kwargs64 = {k: (None if k == "dtype" else v) for k, v in kwargs.items()}
    return args64, kwargs64


def _seed(seed: int, case: Case, dtype: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(f"{case.id}|{dtype}".encode())])


def _spec_call(case: Case, args, kwargs):
    import posenc_np

    args64, kwargs64 = _spec_args(args, kwargs)
    if case.fn is not None:
        return case.fn(posenc_np, *args64, **kwargs64)
    return getattr(posenc_np, case.encoding)(*args64, **kwargs64)


def _as_float64(out):
    if isinstance(out, (tuple, list)):
        return np.concatenate([np.asarray(o, np.float64).ravel() for o in out])
    return np.asarray(out, np.float64)


def run(cases, *, backends, dtypes, modes, seed=0, require=(), progress=None, jit_cache=None):
    """Compare every case x backend x dtype x mode; returns a list of `Record`s.

    A backend whose framework is not installed is skipped, unless it is in `require` (then every
    comparison it would have run is an error). A backend that is installed but fails to import is
    always an error: a broken install must not pass as a skip.
    """
    records: list[Record] = []
    jit_cache = {} if jit_cache is None else jit_cache
    plan = [(case, dtype, backend, mode) for case in cases for dtype in dtypes if dtype in case.dtypes
            for backend in backends for mode in modes if mode in case.modes]
    broken: dict[str, str] = {}
    for backend in backends:
        a = adapter(backend)
        if not a.available():
            broken[backend] = ("required backend is not installed" if backend in require
                               else "not installed")
            continue
        try:
            a.module
        except BackendUnavailable as error:
            broken[backend] = str(error)
    specs: dict = {}
    for n, (case, dtype, backend, mode) in enumerate(plan, 1):
        if progress:
            progress(n, len(plan), f"{case.id} {backend} {dtype} {mode}")
        base = dict(encoding=case.encoding, family=case.family, convention=case.convention, case=case.case,
                    backend=backend, dtype=dtype, mode=mode, description=case.description)
        if backend in broken:
            skipped = broken[backend] == "not installed"
            records.append(Record(**base, status="skip" if skipped else "error", message=broken[backend]))
            continue
        if (case.id, dtype) not in specs:
            args, kwargs = case.make(_seed(seed, case, dtype), dtype)
            desired = _as_float64(_spec_call(case, args, kwargs))
            specs[(case.id, dtype)] = (args, kwargs, desired, case.tol(desired, dtype))
        args, kwargs, desired, tol = specs[(case.id, dtype)]
        started = time.perf_counter()
        try:
            out = adapter(backend).call(case.fn or case.encoding, args, kwargs, mode=mode, cache=jit_cache,
                                        key=(case.id, dtype))
            result = compare(_as_float64(out), desired, tol)
        except Exception as error:  # one failing backend must not hide the rest of the matrix
            records.append(Record(**base, status="error", tol=tol.atol, tol_why=tol.why,
                                  message=f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}",
                                  seconds=time.perf_counter() - started))
            continue
        records.append(Record(**base, status="pass" if result.passed else "fail", max_abs_err=result.max_abs_err,
                              err_in_tol=result.err_in_tol, worst_index=list(result.worst_index), tol=result.atol,
                              tol_why=result.tol_why, message=result.message,
                              seconds=time.perf_counter() - started))
    return records


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
