"""Worker processes: the backends spread over spawned interpreters, and each `--impl` SPEC in its own, so a
framework that segfaults, is killed for memory, raises outside a case or hangs is reported as error records
for its comparisons while the other workers' records are kept."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import time

from ..adapters import DEFAULT_TORCH_COMPILE_BACKEND, adapter
from ..impl.resolve import process_environ, resolve
from .record import UNVERSIONED, Record, backend_plan, impl_plan, one_line
from .registry import all_cases
from .run import run
from .run_impl import run_implementations

__all__ = ["run_parallel", "run_implementations_isolated", "WORKER_FAULT_ENV"]

#: Test hook (tests/app/check/test_faults.py): `POSENC_TEST_WORKER_FAULT=<backend>:<exit|kill|hang|raise>[,...]`
#: makes the worker process running that backend (or `--impl` SPEC) die (os._exit, SIGKILL), hang or raise
#: before it runs a case, as a framework segfault or the out-of-memory killer would.
WORKER_FAULT_ENV = "POSENC_TEST_WORKER_FAULT"


def _test_fault(names):
    faults = dict(item.partition(":")[::2] for item in os.environ.get(WORKER_FAULT_ENV, "").split(",") if item)
    kind = next((faults[b] for b in names if b in faults), None)
    if kind == "exit":
        os._exit(70)
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "hang":
        time.sleep(10**6)
    if kind == "raise":
        raise RuntimeError(f"{WORKER_FAULT_ENV} asked this worker to fail")


def _worker_environ() -> dict:
    """The frameworks' settings (quiet logging included) a spawned worker applies before any import."""
    return {k: v for k, v in os.environ.items() if k.startswith(("POSENC_", "TF_", "KERAS_", "JAX_", "XLA_"))}


def _cases(ids):
    wanted = set(ids)
    return [c for c in all_cases() if c.id in wanted]


def _reply(conn, compute) -> None:
    """Send `("ok", compute())` or `("error", message)` on a worker's `conn`: a failure is reported as that
    worker's comparisons failing, never lost."""
    try:
        reply = ("ok", compute())
    except BaseException as error:  # noqa: BLE001 - whatever ends the worker becomes its records' message
        reply = ("error", one_line(error))
    try:
        conn.send(reply)
    finally:
        conn.close()


def _spawn(context, target, args, name):
    """Start `target(send_end, args)` in a spawned process; returns `(receiving end, process)`."""
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=target, daemon=True, name=name, args=(send, args))
    process.start()
    send.close()  # the parent keeps only the receiving end: a dead worker reads as EOF
    return receive, process


def _exit_reason(process) -> str:
    code = process.exitcode
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _gather(workers, *, timeout, progress, label, failed):
    """Wait for the worker processes `workers` (receiving end -> (process, key)); their records, and
    `failed(key, why)` for each one that raised, died or outlived `timeout` seconds (then it is stopped).

    `label(key)` names a worker in the reasons ("worker process for backends torch,tf ...")."""
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
            if status == "ok":  # its reply is all a worker is for: not its frameworks' teardown (1-2 s)
                process.terminate()
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


# --- posenc's backends ------------------------------------------------------------------------------------

def _group_main(conn, args):
    """Worker: one process per backend group, so frameworks never share an interpreter or a core.

    `environ` (the parent's framework settings, quiet logging included) is applied before any framework
    is imported; the worker's stderr is the parent's, so the parent's log filter sees its output too. A group
    is `(backend, case ids)` pairs: a backend split over two workers runs part of its cases in each.
    """
    def compute():
        parts, dtypes, modes, seed, require, environ, compile_backend = args
        os.environ.update(environ)
        _test_fault([backend for backend, _ in parts])
        records = []
        for backend, ids in parts:
            records += run(_cases(ids), backends=[backend], dtypes=dtypes, modes=modes, seed=seed,
                           require=[r for r in require if r == backend], compile_backend=compile_backend)
        return records

    _reply(conn, compute)


#: the least `Adapter.cost` worth a second worker's share of a backend: about 5 s, a framework's import
_SMALLEST_SHARE = 0.1


def _balanced_groups(backends, jobs):
    """Backends spread over `jobs` groups by their `Adapter.cost`: the heaviest first onto the lightest group,
    except that backends whose second import is cheap (`Adapter.splittable`) go last and are split by their
    cases' share of their cost so the groups' loads meet. Each group is `[(backend, start, stop)]`, the
    fractions of that backend's cases it runs."""
    count = min(jobs, len(backends))
    groups = [[] for _ in range(count)]
    load = [0.0] * count
    whole = sorted((b for b in backends if not adapter(b).splittable), key=lambda b: -adapter(b).cost)
    split = sorted((b for b in backends if adapter(b).splittable), key=lambda b: -adapter(b).cost)
    for backend in whole:
        i = load.index(min(load))
        groups[i].append((backend, 0.0, 1.0))
        load[i] += adapter(backend).cost
    target = (sum(load) + sum(adapter(b).cost for b in split)) / count
    for backend in split:
        cost, start = adapter(backend).cost, 0.0
        for i in sorted(range(count), key=lambda i: load[i]):
            if start >= 1.0:
                break
            room = max(target - load[i], 0.0)
            stop = 1.0 if cost * (1.0 - start) <= room + 1e-9 or room == 0.0 else min(1.0, start + room / cost)
            if cost * (1.0 - stop) < _SMALLEST_SHARE:  # a sliver would cost another import, not save time
                stop = 1.0
            if room == 0.0 and i != min(range(count), key=lambda j: load[j]):
                continue
            groups[i].append((backend, start, stop))
            load[i] += cost * (stop - start)
            start = stop
    return [g for g in groups if g]


def _case_share(ids, start, stop):
    """The case ids in `[start, stop)` of the list by position (cases of one family sit together: each share
    gets whole families where it can, so a worker compiles fewer distinct shapes)."""
    n = len(ids)
    return ids[round(start * n): round(stop * n)]


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
    groups = _balanced_groups(backends, jobs)
    if len(groups) < 2 and timeout is None:
        return run(cases, backends=backends, dtypes=dtypes, modes=modes, seed=seed, require=require,
                   progress=progress, compile_backend=compile_backend)
    environ, ids = _worker_environ(), [c.id for c in cases]
    context = multiprocessing.get_context("spawn")
    workers = {}  # receiving end -> (process, parts)
    for group in groups:
        parts = tuple((backend, tuple(_case_share(ids, start, stop))) for backend, start, stop in group)
        name = "-".join(b if (a, z) == (0.0, 1.0) else f"{b}{a:.2f}" for b, a, z in group)
        receive, process = _spawn(context, _group_main, (parts, dtypes, modes, seed, list(require), environ,
                                                         compile_backend), f"posenc-check-{name}")
        workers[receive] = (process, parts)

    def failed(parts, why):
        return [Record.for_case(c, b, d, m, status="error", message=why)
                for backend, part_ids in parts
                for c, d, b, m in backend_plan(_cases(part_ids), dtypes=dtypes, backends=[backend], modes=modes)]

    def label(parts):
        return "backends " + ",".join(dict.fromkeys(b for b, _ in parts))

    records = _gather(workers, timeout=timeout, progress=progress, label=label, failed=failed)
    order = {(c.family, c.convention, c.case_set, d, b, m): n
             for n, (c, d, b, m) in enumerate(backend_plan(cases, dtypes=dtypes, backends=backends, modes=modes))}
    return sorted(records, key=lambda r: order.get((r.family, r.convention, r.case, r.dtype, r.backend, r.mode), 0))


# --- other implementations (posenc check --impl) ----------------------------------------------------------

def _impl_main(conn, args):
    """Worker of `run_implementations_isolated`: resolves its SPEC (the one import of the library) and runs it."""
    def compute():
        ids, spec, dtypes, seed, environ = args
        os.environ.update({**environ, **process_environ(spec)})
        _test_fault([spec])
        return run_implementations(_cases(ids), resolve(spec), dtypes=dtypes, seed=seed)

    _reply(conn, compute)


def run_implementations_isolated(cases, specs, *, dtypes, seed=0, timeout=None, progress=None):
    """`run_implementations` of the Implementations each `--impl` SPEC names, one spawned worker process per
    SPEC, so a kernel that crashes the interpreter (a segfault, the out-of-memory killer), raises outside a
    case or hangs past `timeout` seconds is reported as error records for its comparisons ("worker process
    for --impl ggml was killed by SIGSEGV before reporting") and the other SPECs' records are kept.

    Args:
        specs: `{spec: [implementation names]}`: the names a failed worker's error records carry (a built-in
            declares them, `posenc.impl.resolve.declared_names`).
    """
    context = multiprocessing.get_context("spawn")
    ids, environ = [c.id for c in cases], _worker_environ()
    workers = {}
    for spec in specs:
        receive, process = _spawn(context, _impl_main, (ids, spec, list(dtypes), seed, environ), "posenc-check-impl")
        workers[receive] = (process, spec)

    def failed(spec, why):
        return [Record.for_case(c, name, d, "eager", status="error", message=why, impl=UNVERSIONED)
                for c, d, name in impl_plan(cases, dtypes=dtypes, names=specs[spec])]

    return _gather(workers, timeout=timeout, progress=progress, label=lambda spec: f"--impl {spec}", failed=failed)
