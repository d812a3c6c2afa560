"""The `posenc` command line. Exit status: 0 success, 1 a check failed, 2 bad usage or bad input.

Each subcommand lives in its own module, which adds its parser (`add_parser(subparsers)`) and
translates the parsed arguments into the options of the library functions it calls; a parser's
`func(args)` returns the exit status and raises `UsageError` for bad usage or input.
"""

from __future__ import annotations

import argparse
import sys

from .check import command as check_command
from .errors import UsageError
from .experiment import command as experiment_command
from .modelspec import command as spec_command
from .onnx import command as export_command
from .plot import command as plot_command
from .port import command as port_command
from .quiet import quiet_frameworks

__all__ = ["main", "build_parser", "SUBCOMMANDS"]

#: The modules that add subcommands, in help order: check; port and doctor; plot; experiment; export; spec.
SUBCOMMANDS = (check_command, port_command, plot_command, experiment_command, export_command, spec_command)


def build_parser():
    parser = argparse.ArgumentParser(prog="posenc", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", dest="framework_logs", action="store_true",
                        help="show the frameworks' own C++ log lines (TensorFlow/XLA), hidden by default "
                             "(`posenc check -v` shows them too)")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits 2 on bad usage already; keep its code
        return int(exit_.code or 0)
    try:
        with quiet_frameworks(not (args.framework_logs or getattr(args, "verbose", False))):
            return args.func(args)
    except UsageError as error:
        print(f"posenc {args.command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
