"""`posenc export`: the command line translated into `posenc.onnx.export.export`'s keyword options.

Exit 0 written, 1 the ONNX Runtime check failed (nothing written), 2 bad usage or bad input.
"""

from __future__ import annotations

import numpy as np

from ..errors import UsageError
from ..io import check_output, parse_json_object, write_atomic
from . import graphs as G
from .export import DEFAULT_MAX_LEN, export

__all__ = ["add_parser", "run"]


def _load_table(path):
    try:
        table = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise UsageError(f"--table {path!r} is not a readable .npy file: {error}") from None
    if table.dtype.kind != "f":
        raise UsageError(f"--table {path!r} holds {table.dtype} values; a float table is needed")
    return table


def run(args) -> int:
    """`posenc export` from parsed arguments; returns the exit status (UsageError for bad input)."""
    check_output(args.out, formats=("onnx",), what="model")
    table = _load_table(args.table) if args.table else None
    scaling = None if args.scaling is None else parse_json_object(
        args.scaling, "--scaling", what="a JSON object like HF's rope_scaling", allow_null=True)
    try:
        result = export(args.convention, None, head_dim=args.head_dim, heads=args.heads, dim=args.dim,
                        max_len=args.max_len, scaling=scaling, dtype=args.dtype, table=table,
                        base=args.base, rotary_dim=args.rotary_dim)
    except (ValueError, TypeError) as error:
        raise UsageError(str(error)) from None
    shapes = lambda d: ", ".join(f"{k} {v}" for k, v in d.items())  # noqa: E731
    verdict = "passed" if result.passed else "FAILED"
    print(f"{args.convention} ({result.encoding}): {shapes(result.inputs)} -> {shapes(result.outputs)}")
    print(f"ONNX Runtime check {verdict}: max_abs_err {result.max_abs_err:.3g} vs the float64 spec, tol {result.tol}")
    for note in result.notes:
        print(f"note: {note}")
    if not result.passed:
        print(f"nothing written to {args.out}")
        return 1
    write_atomic(args.out, result.model.SerializeToString(), what="model")
    print(f"wrote {args.out} (opset {G.OPSET}, IR version {G.IR_VERSION})")
    return 0


def add_parser(subparsers):
    parser = subparsers.add_parser("export", help="write an ONNX model of a convention, checked on ONNX Runtime")
    parser.add_argument("convention", help="convention (hf-llama, meta-llama, gptj, gpt-neox, vaswani, tensor2tensor, "
                                           "fairseq, bert, roberta, press-alibi, bloom-alibi, t5, t5-decoder, shaw, "
                                           "hf-bert-relative-key) or encoding (rope, sinusoidal, learned, alibi, "
                                           "relative)")
    parser.add_argument("--out", required=True, metavar="FILE.onnx", help="the model file (written atomically)")
    parser.add_argument("--head-dim", type=int, help="rotary: per-head width")
    parser.add_argument("--heads", type=int, help="ALiBi: number of heads; rotary: fixes the heads axis")
    parser.add_argument("--dim", type=int, help="sinusoidal: encoding width")
    parser.add_argument("--max-len", type=int, help=f"rotary/sinusoidal: cache rows (default {DEFAULT_MAX_LEN})")
    parser.add_argument("--scaling", metavar="JSON", help="rotary: HF rope_scaling dict as JSON")
    parser.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    parser.add_argument("--table", metavar="FILE.npy", help="learned / t5 / relative table")
    parser.add_argument("--base", type=float, help="rope_theta or sinusoid base (default: the convention's)")
    parser.add_argument("--rotary-dim", type=int, help="rotary: rotated width (default: the convention's)")
    parser.set_defaults(func=run)
    return parser
