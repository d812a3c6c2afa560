"""Run the registered cases through the backends and collect one record per comparison."""

from __future__ import annotations

import sys
import time
import zlib
from dataclasses import asdict, dataclass, field

import numpy as np

from posenc_np._dtypes import is_float
from posenc_np.testing import compare

from ..adapters import DEFAULT_TORCH_COMPILE_BACKEND, BackendUnavailable, NotSupported, adapter
from .profile import error_by_position
from .registry import Case

__all__ = ["Record", "run", "run_parallel", "run_implementations", "run_implementations_isolated",
           "terminal_progress"]


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
    #: `--impl` records: the implementation's version, and for a failure the known mismatch it matches
    #: (`posenc.impl.diagnosis.DIAGNOSES`) with its sentence
    impl: str | None = None
    diagnosis: str | None = None
    diagnosis_detail: str = ""
    #: RoPE records of `--impl`: the worst angle error (radians) against the float64 spec, the position
    #: that pair turned by, and the element (its index, the pair's first channel last)
    worst_angle_err: float | None = None
    worst_angle_position: int | None = None
    worst_angle_index: list = field(default_factory=list)
    error_by_position: list | None = None

    def as_dict(self):
        return asdict(self)


def _spec_args(args, kwargs):
    args64 = tuple(a.astype(np.float64) if isinstance(a, np.ndarray) and is_float(a) else a for a in args)
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


def run(cases, *, backends, dtypes, modes, seed=0, require=(), progress=None, jit_cache=None,
        compile_backend=DEFAULT_TORCH_COMPILE_BACKEND):
    """Compare every case x backend x dtype x mode; returns a list of `Record`s.

    `compile_backend` is torch.compile's backend in torch's jit mode (`posenc.adapters.TORCH_COMPILE_BACKENDS`).

    A backend whose framework is not installed is skipped, unless it is in `require` (then every
    comparison it would have run is an error). A backend that is installed but fails to import is
    always an error: a broken install must not pass as a skip.
    """
    from .cases_edge import is_edge_case

    records: list[Record] = []
    jit_cache = {} if jit_cache is None else jit_cache
    plan = [(case, dtype, backend, mode) for case in cases for dtype in dtypes if dtype in case.dtypes
            for backend in backends for mode in modes if case.runs(dtype, mode)]
    broken: dict[str, str] = {}
    for backend in backends:
        a = adapter(backend)
        if not a.available():
            broken[backend] = ("required backend is not installed" if backend in require
                               else "not installed")
            continue
        try:
            _ = a.module  # importing a broken framework raises here, once per run
        except BackendUnavailable as error:
            broken[backend] = str(error)
    specs: dict = {}
    for n, (case, dtype, backend, mode) in enumerate(plan, 1):
        if progress:
            progress(n, len(plan), f"{case.id} {backend} {dtype} {mode}")
        base = dict(encoding=case.encoding, family=case.family, convention=case.convention, case=case.case_set,
                    backend=backend, dtype=dtype, mode=mode, description=case.description)
        if backend in broken:
            skipped = broken[backend] == "not installed"
            records.append(Record(**base, status="skip" if skipped else "error", message=broken[backend]))
            continue
        if (case.id, dtype) not in specs:
            args, kwargs = case.make(_seed(seed, case, dtype), dtype)
            desired = _as_float64(_spec_call(case, args, kwargs))
            tol = case.tol(desired, dtype, args)
            specs[(case.id, dtype)] = (args, kwargs, desired, tol)
        args, kwargs, desired, tol = specs[(case.id, dtype)]
        started = time.perf_counter()
        try:
            out = adapter(backend).call(case.fn or case.encoding, args, kwargs, mode=mode, cache=jit_cache,
                                        key=(case.id, dtype), compile_backend=compile_backend)
            out = _as_float64(out)
            result = compare(out, desired, tol)
        except NotSupported as error:  # a case this backend cannot express (ONNX: no graph for it)
            records.append(Record(**base, status="skip", message=f"not supported: {error}"))
            continue
        except Exception as error:  # one failing backend must not hide the rest of the matrix
            text = _one_line(error)
            refused = is_edge_case(case)  # in the edge set refusing is correct (an ONNX graph's cache, a kernel)
            records.append(Record(**base, status="pass" if refused else "error", tol=tol.atol, tol_why=tol.why,
                                  message=f"refused (raising is correct here): {text}" if refused else text,
                                  seconds=time.perf_counter() - started))
            continue
        records.append(Record(**base, status="pass" if result.passed else "fail", max_abs_err=result.max_abs_err,
                              err_in_tol=result.err_in_tol, worst_index=list(result.worst_index), tol=result.atol,
                              tol_why=result.tol_why, message=result.message,
                              seconds=time.perf_counter() - started,
                              error_by_position=error_by_position(case, args, out, desired)))
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


def _run_group(case_ids, backends, dtypes, modes, seed, require, environ, compile_backend):
    """Worker: one process per backend group, so frameworks never share an interpreter or a core.

    `environ` (the parent's framework settings, quiet logging included) is applied before any framework
    is imported; the worker's stderr is the parent's, so the parent's log filter sees its output too.
    """
    import os

    os.environ.update(environ)
    _test_fault(backends)
    from .registry import all_cases

    wanted = set(case_ids)
    cases = [c for c in all_cases() if c.id in wanted]
    return run(cases, backends=backends, dtypes=dtypes, modes=modes, seed=seed, require=require,
               compile_backend=compile_backend)


#: Test hook (tests/app/check/test_faults.py): `POSENC_TEST_WORKER_FAULT=<backend>:<exit|kill|hang|raise>[,...]` makes the
#: worker process running that backend die (os._exit, SIGKILL), hang or raise before it runs a case, as a
#: framework segfault or the out-of-memory killer would.
WORKER_FAULT_ENV = "POSENC_TEST_WORKER_FAULT"


def _test_fault(backends):
    import os
    import signal

    faults = dict(item.partition(":")[::2] for item in os.environ.get(WORKER_FAULT_ENV, "").split(",") if item)
    kind = next((faults[b] for b in backends if b in faults), None)
    if kind == "exit":
        os._exit(70)
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "hang":
        time.sleep(10**6)
    if kind == "raise":
        raise RuntimeError(f"{WORKER_FAULT_ENV} asked this worker to fail")


def _one_line(error) -> str:
    """`Type: first line of the message` (at most 300 characters) for a record or a worker's reply."""
    text = str(error)
    return f"{type(error).__name__}: {text.splitlines()[0][:300] if text else ''}"


def _reply(conn, compute) -> None:
    """Send `("ok", compute())` or `("error", message)` on a worker's `conn`: a failure is reported as that
    worker's comparisons failing, never lost."""
    try:
        reply = ("ok", compute())
    except BaseException as error:
        reply = ("error", _one_line(error))
    try:
        conn.send(reply)
    finally:
        conn.close()


def _group_main(conn, args):
    """Entry point of a worker process: sends `("ok", records)` or `("error", message)` back on `conn`."""
    _reply(conn, lambda: _run_group(*args))


def _exit_reason(process) -> str:
    import signal

    code = process.exitcode
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _group_failed(cases, group, dtypes, modes, message):
    """One error record per comparison a failed worker was to run."""
    return [Record(encoding=case.encoding, family=case.family, convention=case.convention, case=case.case_set,
                   backend=backend, dtype=dtype, mode=mode, description=case.description, status="error",
                   message=message)
            for case in cases for dtype in dtypes if dtype in case.dtypes
            for backend in group for mode in modes if case.runs(dtype, mode)]


def _balanced_groups(backends, jobs):
    """Backends spread over `jobs` groups by their `Adapter.cost`, heaviest first onto the lightest group."""
    groups = [[] for _ in range(min(jobs, len(backends)))]
    load = [0.0] * len(groups)
    for backend in sorted(backends, key=lambda b: -adapter(b).cost):
        i = load.index(min(load))
        groups[i].append(backend)
        load[i] += adapter(backend).cost
    return [g for g in groups if g]


def run_parallel(cases, *, backends, dtypes, modes, seed=0, require=(), jobs=2, progress=None,
                 compile_backend=DEFAULT_TORCH_COMPILE_BACKEND, timeout=None):
    """`run` with the backends split over `jobs` processes (spawned, one framework set each).

    Compilation dominates a suite run and is CPU-bound, so on a 2-core machine two processes halve
    the wall time. Records come back in the sequential order.

    A worker that dies (a framework's segfault, the out-of-memory killer), raises, or is still running
    `timeout` seconds after the start (None: no limit) is stopped and reported as an error record for each
    comparison of its backends ("worker process ... was killed by SIGKILL", "timed out after N s"); the
    other workers' records are kept. With one group and a `timeout`, that group runs in a worker process too.
    """
    import multiprocessing

    groups = _balanced_groups(backends, jobs)
    if len(groups) < 2 and timeout is None:
        return run(cases, backends=backends, dtypes=dtypes, modes=modes, seed=seed, require=require,
                   progress=progress, compile_backend=compile_backend)
    environ = _worker_environ()
    ids = [c.id for c in cases]
    context = multiprocessing.get_context("spawn")
    workers = {}  # receiving end -> (process, group)
    for group in groups:
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=_group_main, daemon=True, name=f"posenc-check-{'-'.join(group)}",
                                  args=(send, (ids, group, dtypes, modes, seed, list(require), environ,
                                               compile_backend)))
        process.start()
        send.close()  # the parent keeps only the receiving end: a dead worker reads as EOF
        workers[receive] = (process, group)
    records = _gather(workers, timeout=timeout, progress=progress,
                      label=lambda group: f"backends {','.join(group)}",
                      failed=lambda group, why: _group_failed(cases, group, dtypes, modes, why))
    order = {(c.family, c.convention, c.case_set, d, b, m): n for n, (c, d, b, m) in enumerate(
        (c, d, b, m) for c in cases for d in dtypes for b in backends for m in modes)}
    return sorted(records, key=lambda r: order.get((r.family, r.convention, r.case, r.dtype, r.backend, r.mode), 0))


# --- other implementations (posenc check --impl) -------------------------------------------------------

#: `Record.impl` of an implementation that declares no version.
UNVERSIONED = "unversioned"

def run_implementations(cases, impls, *, dtypes, seed=0, progress=None):
    """Compare every case x implementation x dtype (eagerly) with the spec; returns a list of `Record`s.

    Each record's tolerance is the case's, with RoPE's angle term replaced by the implementation's
    precision class (`posenc.impl.precision.class_tolerance`); RoPE records carry the worst angle error
    and failing ones a diagnosis. A case the implementation cannot express (a function it lacks, a
    keyword its callable does not take, a layout or dtype it does not declare, positions past its declared
    table, or its own `NotSupported`) is a skip with the reason; an exception from a declared capability
    is an error, except in the edge set (`posenc.check.cases_edge`), where refusing is correct.
    """
    from .cases_edge import is_edge_case

    records: list[Record] = []
    plan = [(case, dtype, impl) for case in cases for dtype in dtypes if dtype in case.dtypes and "eager" in case.modes
            for impl in impls]
    specs: dict = {}
    for n, (case, dtype, impl) in enumerate(plan, 1):
        if progress:
            progress(n, len(plan), f"{case.id} {impl.name} {dtype}")
        base = dict(encoding=case.encoding, family=case.family, convention=case.convention, case=case.case_set,
                    backend=impl.name, dtype=dtype, mode="eager", description=case.description,
                    impl=impl.version or UNVERSIONED)
        if (case.id, dtype) not in specs:
            args, kwargs = case.make(_seed(seed, case, dtype), dtype)
            desired = _spec_call(case, args, kwargs)
            specs[(case.id, dtype)] = (args, kwargs, desired, case.tol(_as_float64(desired), dtype, args))
        args, kwargs, desired, case_tol = specs[(case.id, dtype)]
        edge = is_edge_case(case)
        reason = _impl_skip_reason(impl, case, args, kwargs, dtype, edge=edge)
        if reason:
            records.append(Record(**base, status="skip", message=reason))
            continue
        started = time.perf_counter()
        try:
            out = _impl_call(impl, case, args, kwargs)
        except NotSupported as error:
            records.append(Record(**base, status="skip", message=f"not supported: {error}"))
            continue
        except Exception as error:  # noqa: BLE001 - one failing implementation must not hide the matrix
            text = _one_line(error)
            status, message = ("pass", f"refused (raising is correct here): {text}") if edge else ("error", text)
            records.append(Record(**base, status=status, message=message, seconds=time.perf_counter() - started))
            continue
        try:
            records.append(_judge(base, impl, case, args, kwargs, dtype, desired, case_tol, out,
                                  seconds=time.perf_counter() - started))
        except Exception as error:  # noqa: BLE001 - an output that is not an array of numbers
            records.append(Record(**base, status="error", seconds=time.perf_counter() - started,
                                  message=f"the output cannot be compared with the spec's "
                                          f"{np.shape(desired)} array: {type(error).__name__}: {error}"[:400]))
    return records


def _is_rope(case) -> bool:
    return case.encoding == "apply_rope" and case.fn is None


def _impl_skip_reason(impl, case, args, kwargs, dtype, *, edge) -> str | None:
    if case.case_set == "grad":
        return "gradient cases differentiate through posenc's own adapters (vjp), not an implementation"
    if case.fn is None:
        reason = impl.why_not(case.encoding, kwargs, dtype)
    elif impl.dtypes is not None and dtype not in impl.dtypes:
        reason = f"{impl.name} declares dtypes {', '.join(impl.dtypes)}, not {dtype}"
    else:
        reason = None
    if reason or edge or impl.max_positions is None:
        return reason
    for a in args:
        if isinstance(a, np.ndarray) and a.dtype.kind in "iu" and a.size:
            if a.max() >= impl.max_positions or a.min() < 0:
                return (f"positions {int(a.min())}..{int(a.max())} are outside {impl.name}'s declared table of "
                        f"{impl.max_positions} rows (the edge set checks what it does there)")
    return None


#: Contract functions a case may use around the one it checks (an attention over a bias); an implementation
#: that lacks them gets posenc's own backend of its framework.
REFERENCE_HELPERS = frozenset({"attention"})


class _Absent(AttributeError):
    pass


class _Namespace:
    """An implementation's functions as a package module, for cases that call several contract functions
    (`Case.fn`): a function it lacks, or a keyword one does not take, makes the case a skip."""

    def __init__(self, impl):
        self._impl = impl

    def __getattr__(self, name):
        fn = self._impl.functions.get(name)
        if fn is None and name in REFERENCE_HELPERS:  # not what is checked: posenc's own, in the same framework
            return getattr(adapter(self._impl.framework).module, name)
        if fn is None:
            raise _Absent(name)
        return _guarded(self._impl, name, fn)


def _guarded(impl, name, fn):
    from ..impl.implementation import accepts_keyword, passed_keywords

    def call(*args, **kwargs):
        kwargs = passed_keywords(name, kwargs)
        refused = [k for k in kwargs if not accepts_keyword(fn, k)]
        if refused:
            raise NotSupported(f"{name} of {impl.name} does not accept keyword {', '.join(map(repr, refused))}")
        return fn(*args, **kwargs)

    return call


def _to_framework(ad, a):
    """A NumPy input as the framework's array; a view `base[..., :n]` of a wider array stays a view there
    (the edge set's non-contiguous inputs reach the implementation non-contiguous)."""
    if not isinstance(a, np.ndarray):
        return a
    base = a.base
    if (not a.flags.c_contiguous and isinstance(base, np.ndarray) and base.ndim == a.ndim and base.flags.c_contiguous
            and base.shape[:-1] == a.shape[:-1] and a.strides == base.strides
            and a.__array_interface__["data"][0] == base.__array_interface__["data"][0]):
        return ad.from_numpy(base)[..., : a.shape[-1]]
    return ad.from_numpy(a)


def _impl_call(impl, case, args, kwargs):
    ad = adapter(impl.framework)
    inputs = [_to_framework(ad, a) for a in args]
    if case.fn is None:
        out = _guarded(impl, case.encoding, impl.functions[case.encoding])(*inputs, **kwargs)
    else:
        try:
            out = case.fn(_Namespace(impl), *inputs, **kwargs)
        except _Absent as missing:
            raise NotSupported(f"the case also calls {missing}, which {impl.name} does not provide") from None
    return _to_numpy(ad, out)


def _to_numpy(ad, out):
    if isinstance(out, (tuple, list)):
        return type(out)(_to_numpy(ad, o) for o in out)
    return np.asarray(ad.to_numpy(out))


def _outputs_for(out, desired):
    """The implementation's outputs, each to be compared with the spec's: a tuple of arrays shaped like a
    single-array spec result (a rotary kernel's q and k) is compared array by array."""
    if isinstance(out, (tuple, list)) and not isinstance(desired, (tuple, list)):
        return [np.asarray(o, np.float64) for o in out]
    return [_as_float64(out)]


def _judge(base, impl, case, args, kwargs, dtype, desired, case_tol, out, *, seconds):
    from ..impl.precision import angle_error, class_tolerance

    desired64 = _as_float64(desired)
    rope = _is_rope(case)
    tol = class_tolerance(impl.angles, desired64, dtype, args[0], args[1], kwargs) if rope else case_tol
    outputs = _outputs_for(out, desired)
    results = [compare(o, desired64, tol) for o in outputs]
    result = max(results, key=lambda r: (not r.passed, r.err_in_tol))
    fields = dict(max_abs_err=result.max_abs_err, err_in_tol=result.err_in_tol, worst_index=list(result.worst_index),
                  tol=result.atol, tol_why=result.tol_why, message=result.message, seconds=seconds,
                  error_by_position=error_by_position(case, args, outputs, desired64))
    if rope:
        angles = [e for e in (angle_error(o, desired64, np.shape(args[0]), args[1], kwargs)
                              for o in outputs if o.shape == desired64.shape) if e is not None]
        if angles:
            worst = max(angles, key=lambda e: e.radians)
            fields.update(worst_angle_err=worst.radians, worst_angle_position=worst.position,
                          worst_angle_index=list(worst.index))
    status = "pass" if all(r.passed for r in results) else "fail"
    if status == "fail":
        fields.update(_diagnosis(case, args, kwargs, dtype, outputs, desired64, tol, impl.max_positions))
    return Record(**base, status=status, **fields)


def _diagnosis(case, args, kwargs, dtype, outputs, desired64, tol, table_rows=None) -> dict:
    """`diagnosis` and `diagnosis_detail` of a failing record (`posenc.impl.diagnosis.diagnose`)."""
    import posenc_np

    from ..impl.diagnosis import diagnose

    if _is_rope(case):
        found = diagnose(outputs, desired64, tol, encoding="apply_rope", args=args, kwargs=kwargs, dtype=dtype,
                         table_rows=table_rows)
    else:
        spec = getattr(posenc_np, case.encoding, None) if case.fn is None else None
        args64, kwargs64 = _spec_args(args, kwargs)
        found = diagnose(outputs, desired64, tol, encoding=case.encoding, args=args64, kwargs=kwargs64, dtype=dtype,
                         spec_fn=None if spec is None else (lambda *a, **k: _as_float64(spec(*a, **k))))
    return dict(diagnosis=found.name, diagnosis_detail=found.sentence)


def _gather(workers, *, timeout, progress, label, failed):
    """Wait for the worker processes `workers` (receiving end -> (process, key)); their records, and
    `failed(key, why)` for each one that raised, died or outlived `timeout` seconds (then it is stopped).

    `label(key)` names a worker in the reasons ("worker process for backends torch,tf ...")."""
    import multiprocessing.connection

    deadline = None if timeout is None else time.monotonic() + timeout
    records, done, total = [], 0, len(workers)
    while workers:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = multiprocessing.connection.wait(list(workers), timeout=left)
        if not ready:  # timed out: stop every worker still running
            for receive, (process, key) in workers.items():
                process.kill()
                process.join()
                receive.close()
                records += failed(key, f"worker process for {label(key)} timed out after {timeout:g} s "
                                       "(--timeout) and was stopped")
            break
        for receive in ready:
            process, key = workers.pop(receive)
            try:
                status, payload = receive.recv()
            except (EOFError, OSError):
                status, payload = "died", None
            receive.close()
            process.join()
            if status == "ok":
                records += payload
            elif status == "error":
                records += failed(key, f"worker process for {label(key)} failed: {payload}")
            else:
                records += failed(key, f"worker process for {label(key)} {_exit_reason(process)} before reporting")
            done += 1
            if progress:
                progress(done, total, f"{label(key)} done")
    return records


def _worker_environ() -> dict:
    """The frameworks' settings (quiet logging included) a spawned worker applies before any import."""
    import os

    return {k: v for k, v in os.environ.items() if k.startswith(("POSENC_", "TF_", "KERAS_", "JAX_", "XLA_"))}


def run_implementations_isolated(cases, specs, *, dtypes, seed=0, timeout=None, progress=None):
    """`run_implementations` of the Implementations each `--impl` SPEC names, one spawned worker process per
    SPEC, so a kernel that crashes the interpreter (a segfault, the out-of-memory killer), raises outside a
    case or hangs past `timeout` seconds is reported as error records for its comparisons ("worker process
    for --impl ggml was killed by SIGSEGV before reporting") and the other SPECs' records are kept.

    Args:
        specs: `{spec: [implementation names]}` (the parent resolved each SPEC to check it and name them).
    """
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    ids, environ = [c.id for c in cases], _worker_environ()
    workers = {}
    for spec in specs:
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=_impl_main, daemon=True, name="posenc-check-impl",
                                  args=(send, (ids, spec, list(dtypes), seed, environ)))
        process.start()
        send.close()
        workers[receive] = (process, spec)

    def failed(spec, why):
        return [Record(encoding=c.encoding, family=c.family, convention=c.convention, case=c.case_set, backend=name,
                       dtype=d, mode="eager", description=c.description, status="error", message=why,
                       impl=UNVERSIONED)
                for c in cases for d in dtypes if d in c.dtypes and "eager" in c.modes for name in specs[spec]]

    return _gather(workers, timeout=timeout, progress=progress, label=lambda spec: f"--impl {spec}", failed=failed)


def _impl_main(conn, args):
    """Worker entry point of `run_implementations_isolated`: `("ok", records)` or `("error", message)`."""
    def compute():
        ids, spec, dtypes, seed, environ = args
        import os

        os.environ.update(environ)
        _test_fault([spec])
        from ..impl.resolve import resolve
        from .registry import all_cases

        wanted = set(ids)
        return run_implementations([c for c in all_cases() if c.id in wanted], resolve(spec), dtypes=dtypes,
                                   seed=seed)

    _reply(conn, compute)
