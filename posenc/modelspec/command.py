"""`posenc spec SOURCE [SOURCE2] [--json PATH] [--runtime NAME] [--lint]`.

One source: print its canonical per-layer spec (a terminal table; `--json PATH` writes the JSON, `-` for
stdout). Two sources: compare them; exit 0 when they mean the same encoding, 1 when they differ (each
difference named, with the detection horizon and the shortest prompt a logits comparison needs). `--runtime`
reads an HF config the way that runtime does (both sources, when two). `--lint` exits 1 when a source relies
on a silently defaulted value. Exit 2 on bad input (one message, nothing half-written).
"""

from __future__ import annotations

import json
import sys

from ..errors import UsageError
from ..io import check_output, write_atomic
from .compare import HORIZON_LIMIT, compare_specs
from .readers import DIALECTS
from .runtimes import RUNTIMES
from .source import read_source

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    p = subparsers.add_parser("spec", help="read position settings from any config dialect; compare two",
                              description=__doc__.splitlines()[0])
    p.add_argument("source", help="config.json, params.json, .gguf, keras-hub config.json, MaxText .yml, torchtitan "
                   "job-config .json/.toml, Megatron config .yaml/.json, NeMo model.yaml (or a dir)")
    p.add_argument("source2", nargs="?", help="a second source to compare with")
    p.add_argument("--json", metavar="PATH", help="write the spec (or the comparison) as JSON ('-' = stdout)")
    p.add_argument("--runtime", choices=sorted(RUNTIMES), help="what this runtime computes for an HF config")
    p.add_argument("--runtime2", choices=sorted(RUNTIMES), help="the runtime of SOURCE2 (default: --runtime)")
    p.add_argument("--dialect", choices=DIALECTS, help="force the reader (detected from the file otherwise)")
    p.add_argument("--max-model-len", type=int, help="vLLM --max-model-len / llama.cpp context (LongRoPE's set)")
    p.add_argument("--hf-overrides", metavar="JSON", help="vLLM's hf_overrides dict (with --runtime vllm)")
    p.add_argument("--limit", type=int, default=HORIZON_LIMIT, help="largest position the horizon search looks at")
    p.add_argument("--lint", action="store_true", help="exit 1 when a source relies on a silently defaulted value")
    p.set_defaults(func=run)
    return p


def _read(source, runtime, args):
    options = {}
    if args.max_model_len is not None:
        if args.max_model_len < 1:
            raise UsageError(f"--max-model-len {args.max_model_len} must be >= 1")
        options["max_model_len"] = args.max_model_len
    if args.hf_overrides:
        try:
            overrides = json.loads(args.hf_overrides)
        except json.JSONDecodeError as error:
            raise UsageError(f"--hf-overrides is not JSON: {error}") from None
        if not isinstance(overrides, dict):
            raise UsageError("--hf-overrides must be a JSON object")
        options["hf_overrides"] = overrides
    try:
        return read_source(source, dialect=args.dialect, runtime=runtime, **options)
    except (ValueError, TypeError, KeyError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise UsageError(f"{source}: {message}") from None


def run(args) -> int:
    if args.json and args.json != "-":
        check_output(args.json, formats=("json",), what="--json output")
    if args.limit < 1:
        raise UsageError(f"--limit {args.limit} must be >= 1")
    first = _read(args.source, args.runtime, args)
    specs = [first]
    if args.source2 is not None:
        specs.append(_read(args.source2, args.runtime2 or args.runtime, args))
    lint_failed = args.lint and any(spec.lint_findings for spec in specs)
    if len(specs) == 1:
        text, payload, status = first.table(), first.as_dict(), 0
    else:
        result = compare_specs(specs[0], specs[1], limit=args.limit)
        lines = [spec.table() for spec in specs]
        if result.same:
            lines.append(f"SAME encoding: no logit difference beyond bfloat16 tolerance up to position {result.limit}")
        else:
            lines.append("DIFFERENT encoding:")
            lines += [f"  {d}" for d in result.differences]
            if result.horizon is None:
                lines.append(f"  detection horizon: none up to position {result.limit} (structure differs)")
            else:
                lines.append(f"  detection horizon: position {result.horizon} (first position whose logits differ "
                             f"beyond bfloat16 tolerance for random unit-norm q, k); a logits comparison needs a "
                             f"prompt of at least {result.prompt_length} tokens")
        lines += [f"note: {n}" for n in result.notes]
        text = "\n".join(lines) + "\n"
        payload = {"sources": [s.as_dict() for s in specs], "comparison": result.as_dict()}
        status = 0 if result.same else 1
    if args.json == "-":
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        sys.stdout.write(text)
        if args.json:
            write_atomic(args.json, json.dumps(payload, indent=2) + "\n", what="--json output")
    if lint_failed:
        for spec in specs:
            for f in spec.lint_findings:
                print(f"posenc spec --lint: {spec.source}: {f.key}: {f.message}", file=sys.stderr)
        return 1
    return status
