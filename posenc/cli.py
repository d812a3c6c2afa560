"""The `posenc` command line. Exit status: 0 success, 1 a check failed, 2 bad usage or bad input."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
import tempfile
import time

from posenc_np._dtypes import BACKEND_DTYPES
from .errors import UsageError
from posenc_np.conventions import conventions, families

__all__ = ["main"]

BACKEND_CHOICES = ("torch", "tf", "jax")


#: Modules that add subcommands: each defines `add_subcommands(subparsers)`; a parser's `func(args)`
#: returns the exit status and raises `UsageError` for bad usage or input.
SUBCOMMAND_MODULES = ("posenc.port.command", "posenc.tools.cli")


def _split(values, allowed, name):
    """`--backend torch,jax --backend tf` -> ["torch", "jax", "tf"]; unknown values are usage errors."""
    if not values:
        return None
    chosen = [v.strip() for value in values for v in value.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in allowed]
    if unknown:
        raise UsageError(f"unknown {name} {', '.join(map(repr, unknown))}; choose from {', '.join(allowed)}")
    return list(dict.fromkeys(chosen))


def _versions():
    out = {}
    for dist in ("numpy", "torch", "tensorflow-cpu", "tensorflow", "keras", "jax", "jaxlib", "flax"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def _write_atomic(path, text):
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"cannot write {path!r}: directory {directory!r} does not exist")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".posenc-", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def cmd_check(args) -> int:
    from .check.registry import all_cases
    from .check.report import json_report, markdown_table, terminal_table
    from .check.runner import run_parallel, terminal_progress

    cases = all_cases()
    known_encodings = families() + sorted(conventions) + sorted({c.convention for c in cases} - set(conventions))
    encodings = _split(args.encoding, known_encodings, "--encoding")
    backends = _split(args.backend, BACKEND_CHOICES, "--backend") or list(BACKEND_CHOICES)
    dtypes = _split(args.dtype, BACKEND_DTYPES, "--dtype") or list(BACKEND_DTYPES)
    modes = _split(args.mode, ("eager", "jit"), "--mode") or ["eager", "jit"]
    require = _split(args.require, BACKEND_CHOICES, "--require") or []
    for b in require:
        if b not in backends:
            backends.append(b)
    if encodings:
        cases = [c for c in cases if c.family in encodings or c.convention in encodings or c.encoding in encodings]
    for path in (args.json, args.markdown):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise UsageError(f"cannot write {path!r}: its directory does not exist")
    os.environ["POSENC_TORCH_COMPILE_BACKEND"] = args.torch_compile_backend
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()
    if args.jobs < 1:
        raise UsageError(f"--jobs={args.jobs} must be >= 1")
    records = run_parallel(cases, backends=backends, dtypes=dtypes, modes=modes, seed=args.seed, require=require,
                           jobs=args.jobs, progress=None if args.quiet else terminal_progress())
    seconds = time.perf_counter() - started
    print(terminal_table(records, verbose=args.verbose))
    print(f"({len(cases)} cases, {seconds:.1f} s; seed {args.seed}; torch.compile backend "
          f"{args.torch_compile_backend})")
    if args.json:
        _write_atomic(args.json, json_report(records, argv=sys.argv[1:], seed=args.seed, seconds=seconds,
                                             versions=_versions()))
    if args.markdown:
        _write_atomic(args.markdown, markdown_table(records))
    return 1 if any(r.status in ("fail", "error") for r in records) else 0


def build_parser():
    parser = argparse.ArgumentParser(prog="posenc", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="cross-framework equivalence suite: every encoding x backend x dtype x mode "
                                         "against the float64 spec")
    check.add_argument("--encoding", action="append", help="family (sinusoidal, learned, resize, rope, alibi, t5, "
                                                           "relative, ...) or convention name; comma-separated")
    check.add_argument("--backend", action="append", help="torch, tf, jax (default: all installed)")
    check.add_argument("--dtype", action="append", help="float32, bfloat16, float16 (default: all)")
    check.add_argument("--mode", action="append", help="eager, jit (default: both)")
    check.add_argument("--require", action="append", help="backends that must be installed: missing is a failure")
    check.add_argument("--json", metavar="PATH", help="write the machine-readable report")
    check.add_argument("--markdown", metavar="PATH", help="write a Markdown table of every comparison")
    check.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    check.add_argument("--torch-compile-backend", choices=("aot_eager", "inductor"), default="aot_eager",
                       help="torch.compile backend of torch's jit mode. aot_eager (default) captures the same "
                            "fullgraph (any graph break fails) and runs it with eager kernels; inductor also "
                            "generates C++ kernels, about 2-20 s per graph on a 2-core CPU")
    check.add_argument("--jobs", "-j", type=int, default=min(2, os.cpu_count() or 1),
                       help="processes to spread the backends over (default: 2, or 1 on a single core); "
                            "compiling dominates a run and is CPU-bound")
    check.add_argument("--verbose", "-v", action="store_true", help="list every passing comparison")
    check.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    check.set_defaults(func=cmd_check)
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:  # a tool not written yet; any other import error raises
            if error.name is None or not name.startswith(error.name):
                raise
            continue
        module.add_subcommands(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits 2 on bad usage already; keep its code
        return int(exit_.code or 0)
    try:
        return args.func(args)
    except UsageError as error:
        print(f"posenc {args.command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
