"""`posenc plot ...` and `posenc experiment`: subcommands added to the `posenc` CLI (posenc_np/cli.py)."""

from __future__ import annotations

import os
import shlex
import sys
import time

from ..errors import UsageError
from ._output import FIGURE_FORMATS, check_output, new_figure, require_matplotlib, save_figure, write_text

__all__ = ["add_subcommands", "cmd_experiment"]


def _ints(text: str, name: str) -> tuple:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"{name}={text!r} must be comma-separated integers") from None
    if not values or min(values) < 1:
        raise UsageError(f"{name}={text!r} must list positive integers")
    return values


def _names(values, allowed, name):
    chosen = [v.strip() for value in values for v in value.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in allowed]
    if unknown:
        raise UsageError(f"unknown {name} {', '.join(map(repr, unknown))}; choose from {', '.join(allowed)}")
    if not chosen:
        raise UsageError(f"{name} is empty")
    return list(dict.fromkeys(chosen))


def default_threads() -> int:
    """Half the cores, at most 4: on a busy 2-core machine a second OpenMP thread made training ~4x slower."""
    return max(1, min(4, (os.cpu_count() or 2) // 2))


def _experiment_argv(args) -> list:
    """The options the user gave, rebuilt from `args` (sys.argv is not this command's when called in-process)."""
    out = []
    for key, value in vars(args).items():
        if key in ("command", "func") or value in (None, False, []):
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        else:
            for v in value if isinstance(value, list) else [value]:
                out += [flag, str(v)]
    return out


def cmd_experiment(args) -> int:
    from . import experiment as ex
    from .corpus import load_corpus

    encodings = _names(args.encodings or [",".join(ex.VARIANTS)], ex.VARIANTS, "--encodings")
    for path in (args.json, args.markdown):
        if path:
            check_output(path, what="report")
    if args.plot:
        check_output(args.plot, formats=FIGURE_FORMATS, what="figure")
        require_matplotlib()
    if args.save_weights and not os.path.isdir(args.save_weights):
        raise UsageError(f"--save-weights {args.save_weights!r} is not a directory")
    base = ex.QUICK if args.quick else ex.DEFAULT
    factors = _ints(args.eval_factors, "--eval-factors") if args.eval_factors else None
    cfg = ex.with_overrides(base, train_len=args.train_len, steps=args.steps, batch=args.batch, d_model=args.d_model,
                            layers=args.layers, heads=args.heads, lr=args.lr, seed=args.seed,
                            eval_tokens=args.eval_tokens, eval_factors=factors)
    for name in ("train_len", "steps", "batch", "d_model", "layers", "heads", "eval_tokens"):
        if getattr(cfg, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')}={getattr(cfg, name)} must be >= 1")
    if cfg.d_model % cfg.heads or (cfg.d_model // cfg.heads) % 2:
        raise UsageError(f"--d-model={cfg.d_model} must split into --heads={cfg.heads} heads of even size")
    corpus = load_corpus(args.corpus)

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device={args.device!r}: CUDA is not available")
    torch.set_num_threads(args.threads or default_threads())
    log = (lambda *a, **k: None) if args.quiet else (lambda *a, **k: print(*a, **k, file=sys.stderr, flush=True))
    log(f"corpus {corpus.describe()}")
    log(f"config {cfg}; {torch.get_num_threads()} torch thread(s) on {args.device}")
    started = time.perf_counter()
    report = ex.run_experiment(cfg, corpus, encodings=encodings, device=args.device, progress=not args.quiet,
                               save_weights=args.save_weights, log=log)
    report["seconds"] = time.perf_counter() - started
    argv = _experiment_argv(args)
    command = shlex.join(["posenc", "experiment", *argv])
    print(ex.terminal_table(report))
    print(f"({report['seconds']:.0f} s in all)")
    if args.json:
        write_text(args.json, ex.json_text(report, argv))
    if args.markdown:
        write_text(args.markdown, f"Made by `{command}` ({report['seconds']:.0f} s, {report['threads']} "
                                  f"thread(s), torch {report['torch']}, {report['device']}).\n\n"
                                  + ex.markdown_table(report))
    if args.plot:
        save_figure(ex.plot_perplexity(report, new_figure(7, 4.5)), args.plot)
    losses_ok = all(r["loss_last"] < r["loss_first"] for r in report["rows"])
    if not losses_ok:
        print("warning: the training loss did not fall for every encoding", file=sys.stderr)
    return 0


def _plot(args) -> int:
    from . import plot

    check_output(args.out, formats=FIGURE_FORMATS, what="figure")
    require_matplotlib()
    figure = plot.FIGURES[args.kind](args)
    save_figure(figure, args.out, dpi=args.dpi)
    print(f"wrote {args.out}")
    return 0


def _add_plot(sub) -> None:
    from .plot import ATTENTION_ENCODINGS

    plot = sub.add_parser("plot", help="figures of the encodings (PNG, SVG or PDF by the suffix of --out)")
    kinds = plot.add_subparsers(dest="kind", required=True)

    def kind(name, help_):
        p = kinds.add_parser(name, help=help_, description=help_)
        p.add_argument("--out", default=f"posenc-{name}.png", help=f"output file (default posenc-{name}.png)")
        p.add_argument("--backend", default="numpy", choices=("numpy", "torch", "tf", "jax"),
                       help="compute with the spec (numpy, default) or a backend")
        p.add_argument("--dpi", type=int, default=150)
        p.set_defaults(func=_plot)
        return p

    p = kind("table", "an encoding's table as a heatmap (position x channel)")
    p.add_argument("--encoding", default="sinusoidal", help="sinusoidal, rope or learned, or a convention name "
                   "(vaswani, tensor2tensor, fairseq, bert, roberta, meta-llama, hf-llama, gptj, gpt-neox)")
    p.add_argument("--convention", help="a convention name (overrides --encoding)")
    p.add_argument("--positions", type=int, default=128)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--base", type=float, help="frequency base (default: the convention's)")
    p.add_argument("--table", help="a learned table [positions, dim] as .npy (default: random N(0, 0.02) init)")
    p.add_argument("--seed", type=int, default=0)

    p = kind("rope-decay", "RoPE's long-range decay: RoFormer's relative upper bound and q.k of constant vectors")
    p.add_argument("--dim", type=int, default=128, help="head dim (default 128, as in RoFormer's figure)")
    p.add_argument("--max-distance", type=int, default=512)
    p.add_argument("--base", type=float, default=10000.0)
    p.add_argument("--scaling", action="append", default=[],
                   help='an HF rope_scaling dict as JSON, e.g. \'{"rope_type": "linear", "factor": 4}\'; repeatable')

    p = kind("bias", "ALiBi or T5 attention bias per head")
    p.add_argument("--encoding", default="alibi", help="alibi or t5, or a convention (press-alibi, bloom-alibi, "
                                                        "t5, t5-decoder)")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--length", type=int, default=64, help="query/key positions 0..length-1")
    p.add_argument("--table", help="T5 table [num_buckets, heads] as .npy (default: random N(0, 1), seeded)")
    p.add_argument("--seed", type=int, default=0)

    p = kind("attention-maps", "attention maps of one sentence under several encodings, side by side")
    p.add_argument("--sentence", default="To be , or not to be , that is the question : whether 'tis nobler "
                                         "in the mind to suffer")
    p.add_argument("--encodings", default="sinusoidal,learned,rope",
                   help=f"comma-separated, from {', '.join(ATTENTION_ENCODINGS)}")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--table", help="a (trained) learned table [positions, dim] as .npy, e.g. from "
                                   "`posenc experiment --save-weights DIR`; default: random N(0, 0.02) init")
    p.add_argument("--embedding-scale", type=float, default=0.5, help="std of the random word vectors")
    p.add_argument("--shared-scale", type=float, default=1.0,
                   help="std of the vector added to every word (their common direction)")
    p.add_argument("--causal", action="store_true", help="mask future tokens")
    p.add_argument("--seed", type=int, default=0)

    p = kind("diff", "two conventions' tables and their difference (e.g. vaswani vs tensor2tensor)")
    p.add_argument("a", help="convention (or encoding) A")
    p.add_argument("b", help="convention (or encoding) B")
    p.add_argument("--backend-b", choices=("numpy", "torch", "tf", "jax"),
                   help="compute B with another backend (default: --backend), e.g. to see float32 error")
    p.add_argument("--positions", type=int, default=128)
    p.add_argument("--dim", type=int, default=64)

    p = kind("experiment", "perplexity against evaluation length from a saved `posenc experiment --json` report")
    p.add_argument("report", help="the JSON report")


def _add_experiment(sub) -> None:
    from .experiment import DEFAULT, QUICK, VARIANTS

    p = sub.add_parser("experiment", help="train a small causal LM per encoding on Shakespeare (or --corpus), "
                                          "report perplexity at 1x-8x the training length, speed, memory",
                       description=__import__("posenc.tools.experiment", fromlist=["x"]).__doc__,
                       formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help=f"a smoke test (<60 s): {QUICK}")
    p.add_argument("--encodings", action="append", help=f"comma-separated, from {', '.join(VARIANTS)} (default all)")
    p.add_argument("--corpus", help="a .txt file or a directory of .txt files (default: the `shakespeare` "
                                    "package's Gutenberg plays)")
    for name, help_ in (("train-len", "training length (bytes)"), ("steps", "training steps"),
                        ("batch", "sequences per step"), ("d-model", "model width"), ("layers", "layers"),
                        ("heads", "attention heads"), ("eval-tokens", "validation bytes per evaluation length")):
        p.add_argument(f"--{name}", type=int, help=f"{help_} (default {getattr(DEFAULT, name.replace('-', '_'))}, "
                                                   f"--quick {getattr(QUICK, name.replace('-', '_'))})")
    p.add_argument("--eval-factors", help="evaluation lengths as multiples of --train-len (default 1,2,4,8)")
    p.add_argument("--lr", type=float, help=f"peak learning rate (default {DEFAULT.lr})")
    p.add_argument("--seed", type=int, help="seed of the initialisation and the data order (default 0)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: half the cores, at most 4)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--json", metavar="PATH", help="write the full report (per-step losses included)")
    p.add_argument("--markdown", metavar="PATH", help="write the table as Markdown, with the command")
    p.add_argument("--plot", metavar="PATH", help="perplexity vs evaluation length (.png/.svg/.pdf)")
    p.add_argument("--save-weights", metavar="DIR", help="save the trained learned and T5 tables as .npy "
                                                         "(for `posenc plot ... --table`)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress output")
    p.set_defaults(func=cmd_experiment)


def add_subcommands(sub) -> None:
    """Add `plot` and `experiment` to the `posenc` CLI's subparsers."""
    _add_plot(sub)
    _add_experiment(sub)
