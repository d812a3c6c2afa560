"""`python -m posenc.ecosystem`: run the built-ins and write docs/ecosystem.json, docs/ecosystem.md and
docs/scoreboard.md (see `posenc.ecosystem`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..impl.builtin import BUILTINS
from ..io import write_atomic
from . import __doc__ as PACKAGE_DOC
from .render import render_markdown, render_scoreboard
from .table import collect, describe, findings, merge


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m posenc.ecosystem", description=PACKAGE_DOC.split("\n\n")[0])
    parser.add_argument("--json", help="the dated JSON written (default docs/ecosystem.json; with --from-json "
                                       "only when given)")
    parser.add_argument("--markdown", default="docs/ecosystem.md", help="the page written (docs/ecosystem.md)")
    parser.add_argument("--scoreboard", help="the site's scoreboard page written from the same JSON (default: "
                                             "scoreboard.md beside --markdown)")
    parser.add_argument("--from-json", help="render the Markdown from this JSON instead of running")
    parser.add_argument("--impl", action="append", help="built-in names to run (default: all)")
    parser.add_argument("--merge", action="store_true",
                        help="replace only the named built-ins' rows of the existing --json")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per built-in (default 1800)")
    parser.add_argument("--describe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.describe:
        print(json.dumps(describe(args.describe)))
        return 0
    unknown = [n for n in args.impl or [] if n not in BUILTINS]
    if unknown:
        parser.error(f"--impl {', '.join(unknown)}: not a built-in ({', '.join(BUILTINS)})")
    if args.from_json:  # the measurements as they were; the findings (text, not measured) as they are now
        report = {**json.loads(Path(args.from_json).read_text()), "findings": findings()}
    else:
        args.json = args.json or "docs/ecosystem.json"
        report = collect(args.impl, timeout=args.timeout, progress=lambda line: print(line, flush=True))
        if args.merge and Path(args.json).exists():
            report = merge(json.loads(Path(args.json).read_text()), report)
    if args.json:
        write_atomic(args.json, json.dumps(report, indent=1) + "\n", what="--json")
    write_atomic(args.markdown, render_markdown(report), what="--markdown")
    args.scoreboard = args.scoreboard or str(Path(args.markdown).with_name("scoreboard.md"))
    write_atomic(args.scoreboard, render_scoreboard(report), what="--scoreboard")
    print(f"wrote {args.markdown}, {args.scoreboard}" + (f" and {args.json}" if args.json else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
