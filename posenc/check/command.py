"""`posenc check`: the command line translated into a selection of cases, then `run_parallel` and reports."""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import time

from posenc_np.conventions import conventions, families

from ..adapters import (
    ADAPTERS,
    DEFAULT_TORCH_COMPILE_BACKEND,
    DEVICE_ENV,
    TORCH_COMPILE_BACKENDS,
)
from ..adapters import CHECK_BACKENDS as BACKENDS
from ..errors import UsageError
from ..impl import ImplementationUnavailable
from ..impl.builtin import BUILTINS, builtin_module, builtin_status
from ..impl.resolve import ENV, ImplementationSpecError, declared_names, resolve, split_env
from ..io import check_output, parse_choices, write_atomic
from .environment import compile_cache, default_compile_cache, resolve_device, run_environ
from .html import render_html
from .record import UNVERSIONED
from .registry import DTYPES, MODES, all_cases
from .report import json_report, markdown_table, summary_line, terminal_table
from .run import terminal_progress
from .run_impl import run_implementations
from .workers import run_implementations_isolated, run_parallel

__all__ = ["add_parser", "run", "select"]

def _versions():
    """Installed versions of every adapter's distributions, for the JSON report."""
    out = {}
    for dist in (d for a in ADAPTERS.values() for d in a.distributions):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def select(cases, *, encodings=None, dtypes=DTYPES, modes=MODES):
    """The cases of `encodings` (families, conventions or contract names; None: all) that run in at least
    one of `dtypes` and `modes`. An empty selection is a UsageError saying which filter emptied it: a
    selection must never pass by running nothing."""
    if encodings:
        cases = [c for c in cases if c.family in encodings or c.convention in encodings or c.encoding in encodings]
        if not cases:
            raise UsageError(f"--encoding {','.join(encodings)} has no registered case")
    what = f"--encoding {','.join(encodings)}" if encodings else "the registry"
    for flag, chosen, axis in (("--dtype", dtypes, "dtypes"), ("--mode", modes, "modes")):
        kept = [c for c in cases if set(getattr(c, axis)) & set(chosen)]
        if not kept:
            offered = sorted({x for c in cases for x in getattr(c, axis)})
            raise UsageError(f"{what} with {flag} {','.join(chosen)} selects nothing: its cases run in "
                             f"{axis} {', '.join(offered)} only")
        cases = kept
    return cases  # dtypes and modes are independent axes of a case: each kept case runs at least once


def run(args) -> int:
    cases = all_cases()
    # families of the contract's encodings, then those only cases name (e.g. the reference `attention`)
    case_families = [f for f in dict.fromkeys(c.family for c in cases) if f not in families()]
    known = families() + case_families + sorted(conventions) + sorted({c.convention for c in cases} - set(conventions))
    encodings = parse_choices(args.encoding, known, "--encoding")
    impl_specs = _impl_specs(args.impl)
    if impl_specs == ["list"]:
        print(_impl_list())
        return 0
    in_process = args.jobs == 1 and args.timeout is None
    impls, names_by_spec = _implementations(impl_specs, in_process=in_process)
    # with --impl only the named implementations run, unless --backend names posenc's own alongside
    backends = parse_choices(args.backend, BACKENDS, "--backend", default=[] if names_by_spec else list(BACKENDS))
    dtypes = parse_choices(args.dtype, DTYPES, "--dtype", default=list(DTYPES))
    modes = parse_choices(args.mode, MODES, "--mode", default=list(MODES))
    require = parse_choices(args.require, BACKENDS, "--require", default=[])
    backends += [b for b in require if b not in backends]
    if args.jobs < 1:
        raise UsageError(f"--jobs={args.jobs} must be >= 1")
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError(f"--timeout={args.timeout} must be a number of seconds > 0")
    for flag, path in (("--json", args.json), ("--markdown", args.markdown), ("--html", args.html)):
        if path:
            check_output(path, what=f"{flag} report")
    if names_by_spec and "eager" not in modes:
        raise UsageError(f"--impl runs implementations eagerly; --mode {','.join(modes)} excludes eager")
    cases = select(cases, encodings=encodings, dtypes=dtypes, modes=modes)
    device = resolve_device(args.device, backends, impls=bool(names_by_spec))
    runtimes = _distributed_runtimes(backends) if args.distributed else []
    started = time.perf_counter()
    progress = None if args.quiet else terminal_progress()
    with compile_cache(args.compile_cache, backends), run_environ({DEVICE_ENV: device}):
        records = [] if not backends else run_parallel(
            cases, backends=backends, dtypes=dtypes, modes=modes, seed=args.seed, require=require, jobs=args.jobs,
            compile_backend=args.torch_compile_backend, timeout=args.timeout, progress=progress)
        if impls:
            records += run_implementations(cases, impls, dtypes=dtypes, seed=args.seed, progress=progress)
        elif names_by_spec:  # a worker per SPEC: a kernel that crashes or hangs is reported, never the end of the run
            records += run_implementations_isolated(cases, names_by_spec, dtypes=dtypes, seed=args.seed,
                                                    timeout=args.timeout, progress=progress)
    print(terminal_table(records, verbose=args.verbose, summary=False))
    print(f"({len(cases)} cases, {time.perf_counter() - started:.1f} s; seed {args.seed}; torch.compile backend "
          f"{args.torch_compile_backend}; device {device})")
    if runtimes:  # after the suite's table; their records join the JSON and Markdown reports
        records += _distributed_section(runtimes, require)
    seconds = time.perf_counter() - started
    # the last line counts every comparison of the reports, the distributed section's included
    print(summary_line(records))
    if args.json or args.html:
        versions = {**_versions(), **{f"impl:{r.backend}": r.impl for r in records
                                      if r.impl and r.impl != UNVERSIONED}}
        report = json_report(records, argv=sys.argv[1:], seed=args.seed, seconds=seconds, versions=versions,
                             device=device)
    if args.json:
        write_atomic(args.json, report, what="--json report")
    if args.html:
        write_atomic(args.html, render_html(json.loads(report)), what="--html report")
    if args.markdown:
        write_atomic(args.markdown, markdown_table(records), what="--markdown report")
    failed = any(r.status in ("fail", "error") for r in records)
    return 1 if failed else 0


def _impl_specs(values) -> list[str]:
    """The `--impl` SPECs (repeatable, comma-separated), else those of `POSENC_IMPL`; `list` stands alone."""
    specs = [v for value in values for v in split_env(value)] if values else split_env(os.environ.get(ENV))
    if values and not specs:
        raise UsageError(f"--impl {','.join(values)!r} names nothing; give a built-in name, module:attr or "
                         "path/to/file.py:attr (--impl list shows the built-ins)")
    if "list" in specs and len(specs) > 1:
        raise UsageError("--impl list stands alone")
    return list(dict.fromkeys(specs))


def _implementations(specs, *, in_process: bool) -> tuple[list, dict]:
    """`(Implementations, {spec: names})`: in process, the Implementations the SPECs name; otherwise none
    (each SPEC is resolved once, in its worker) and the names a built-in declares (`declared_names`), a
    user's SPEC being resolved here only to name it. A SPEC naming nothing usable is a UsageError naming it."""
    impls, names_by_spec = [], {}
    for spec in specs:
        try:
            names = None if in_process else declared_names(spec)
            if names is None:
                found = resolve(spec)
                impls += found if in_process else []
                names = [i.name for i in found]
        except (ImplementationSpecError, ImplementationUnavailable) as error:
            raise UsageError(str(error)) from None
        names_by_spec[spec] = list(names)
    names = [n for found in names_by_spec.values() for n in found]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UsageError(f"--impl names two implementations called {', '.join(map(repr, repeated))}")
    return impls, names_by_spec


def _impl_list() -> str:
    """`--impl list`: every built-in with installed / not installed, its version and distribution."""
    rows = []
    for name in BUILTINS:
        installed, version = builtin_status(name)
        try:
            distribution = builtin_module(name).DISTRIBUTION
        except ImportError:
            distribution = "(adapter missing)"
        rows.append(f"{name:20} {'installed' if installed else 'not installed':14} {version or '-':12} "
                    f"pip: {distribution}")
    return "\n".join(rows)


def _distributed_runtimes(backends) -> list:
    """The sharded runtimes `--backend` selects (all of them without `--backend`); none is bad usage."""
    from .distributed import RUNTIMES

    runtimes = [r for r in RUNTIMES if r in backends]
    if not runtimes:
        raise UsageError(f"--distributed runs on {' and '.join(RUNTIMES)}; --backend {','.join(backends)} "
                         "selects neither")
    return runtimes


_RUNTIME_WORDS = {"jax": "JAX 8-device mesh", "torch": "torch.distributed gloo x 4"}


def _distributed_section(runtimes, require) -> list:
    """`--distributed`: the sharded-runtime checks (posenc.check.distributed) printed, and returned as
    `Record`s of family "distributed" for the JSON and Markdown reports. A required runtime that is not
    installed is an error, as for the suite's backends."""
    from .distributed import as_records, run_distributed

    started = time.perf_counter()
    records = run_distributed(runtimes)
    for r in records:
        if r["status"] == "skip" and r["runtime"] in require:
            r.update(status="error", message=f"required runtime {r['runtime']} is not installed")
    print(f"\ndistributed (sharded = unsharded; {', '.join(_RUNTIME_WORDS[r] for r in runtimes)}):")
    for r in records:
        detail = (f"max_abs_err={r['max_abs_err']:.3g} tol={r['tol']:.3g}" if "max_abs_err" in r
                  else r.get("message", ""))
        print(f"  {r['status']:5} {r['runtime']:5} {r['check']:48} {detail}")
    print(f"({len(records)} distributed checks, {time.perf_counter() - started:.1f} s)")
    return as_records(records)


def add_parser(subparsers) -> None:
    """Add `check` to the `posenc` command line."""
    check = subparsers.add_parser("check", help="cross-framework equivalence suite: every encoding x backend x "
                                                "dtype x mode against the float64 spec")
    check.add_argument("--encoding", action="append", help="family (sinusoidal, learned, resize, rope, alibi, t5, "
                                                           "relative, ...) or convention name; comma-separated")
    check.add_argument("--backend", action="append", help=f"{', '.join(BACKENDS)} (default: all installed)")
    check.add_argument("--dtype", action="append", help=f"{', '.join(DTYPES)} (default: all)")
    check.add_argument("--mode", action="append", help=f"{', '.join(MODES)} (default: both)")
    check.add_argument("--require", action="append", help="backends that must be installed: missing is a failure")
    check.add_argument("--impl", action="append", metavar="SPEC",
                       help="check another implementation instead of posenc's backends (add --backend to run "
                            "them alongside): a built-in name (transformers, onnxruntime, mlx, ...), module:attr "
                            "or path/to/file.py:attr (attr defaults to IMPL) holding a posenc.impl.Implementation; "
                            "repeatable, comma-separated; default $POSENC_IMPL; '--impl list' lists the built-ins. "
                            "Each SPEC runs in a worker process of its own (in this process with --jobs 1 and no "
                            "--timeout)")
    check.add_argument("--json", metavar="PATH", help="write the machine-readable report")
    check.add_argument("--markdown", metavar="PATH", help="write a Markdown table of every comparison")
    check.add_argument("--html", metavar="PATH", help="write one self-contained page: the summary, failures "
                                                      "first, the matrix coloured by err/tol, filters")
    check.add_argument("--device", default="cpu",
                       help="where every framework's inputs are placed: cpu (default), cuda, cuda:N, mps, ... as the "
                            "frameworks name them (posenc's backends and --impl implementations run there); an "
                            "unavailable device is exit 2")
    check.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    check.add_argument("--torch-compile-backend", choices=TORCH_COMPILE_BACKENDS,
                       default=DEFAULT_TORCH_COMPILE_BACKEND,
                       help=f"torch.compile backend of torch's jit mode. {DEFAULT_TORCH_COMPILE_BACKEND} (default) "
                            "captures the same fullgraph (any graph break fails) and runs it with eager kernels; "
                            "inductor also generates C++ kernels, about 2-20 s per graph on a 2-core CPU")
    check.add_argument("--jobs", "-j", type=int, default=min(2, os.cpu_count() or 1),
                       help="processes to spread the backends over (default: 2, or 1 on a single core); "
                            "compiling dominates a run and is CPU-bound")
    check.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                       help="stop a backend's worker process still running after SECONDS and report its "
                            "comparisons as errors (default: no limit); a worker that dies is reported the same way")
    check.add_argument("--verbose", "-v", action="store_true",
                       help="list every passing comparison, and show the frameworks' own log lines")
    check.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    check.add_argument("--compile-cache", metavar="DIR", default=default_compile_cache(),
                       help="keep the backends' compiled programs here across runs (JAX's persistent cache: its "
                            "eager and jit calls compile; a warm cache saves most of JAX's time); 'none' turns it "
                            "off (default: $POSENC_COMPILE_CACHE or ~/.cache/posenc/compile)")
    check.add_argument("--distributed", action="store_true",
                       help="also run the sharded-runtime section: JAX NamedSharding/shard_map on 8 host CPU "
                            "devices and torch.distributed (gloo, 4 processes) with DTensor, those --backend "
                            "selects; their records join --json and --markdown (family distributed); ~1 min")
    check.set_defaults(func=run)
