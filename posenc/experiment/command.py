"""`posenc experiment`: the command line translated into an experiment `Config`, then `run_experiment`."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

from ..canvas import FIGURE_FORMATS, new_figure, require_matplotlib, save_figure
from ..errors import UsageError
from ..io import check_output, parse_choices, write_atomic
from . import config
from .corpus import load_corpus
from .figure import plot_perplexity
from .report import json_text, markdown_table, terminal_table

__all__ = ["add_parser", "cmd_experiment"]


def _ints(text: str, name: str, minimum: int = 1) -> tuple:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"{name}={text!r} must be comma-separated integers") from None
    if not values or min(values) < minimum:
        raise UsageError(f"{name}={text!r} must list integers >= {minimum}")
    if len(set(values)) != len(values):
        raise UsageError(f"{name}={text!r} lists a value twice")
    return values


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


def _encodings(args) -> list:
    """The variants to run: `--encodings`, each with the `--random-crop` / `--progressive` suffixes."""
    encodings = parse_choices(args.encodings, config.VARIANTS, "--encodings", default=list(config.BASELINE))
    suffix = "".join(s for s, flag in (("+crop", args.random_crop), ("+prog", args.progressive)) if flag)
    if suffix:
        if any(n in config.ROPE_SCALING for n in encodings):
            raise UsageError("--random-crop/--progressive train new models; rope-pi/ntk/yarn evaluate the rope "
                             "model: select rope instead")
        encodings = list(dict.fromkeys(config.split_variant(n)[0] + suffix for n in encodings))
    return encodings


def _check_outputs(args) -> None:
    """Every output path writable (and matplotlib importable for --plot) before anything trains."""
    for path in (args.json, args.markdown):
        if path:
            check_output(path, what="report")
    if args.plot:
        check_output(args.plot, formats=FIGURE_FORMATS, what="figure")
        require_matplotlib()
    if args.save_weights and not os.path.isdir(args.save_weights):
        raise UsageError(f"--save-weights {args.save_weights!r} is not a directory")


def _config(args, encodings) -> config.Config:
    """`--quick`'s or the default sizes with the options given, each checked."""
    base = config.QUICK if args.quick else config.DEFAULT
    factors = _ints(args.eval_factors, "--eval-factors") if args.eval_factors else None
    cfg = config.with_overrides(base, train_len=args.train_len, steps=args.steps, batch=args.batch,
                                d_model=args.d_model, d_ff=args.d_ff, layers=args.layers, heads=args.heads, lr=args.lr,
                                seed=args.seed, eval_tokens=args.eval_tokens, eval_factors=factors, stack=args.stack,
                                stack_bias=args.stack_bias)
    for name in ("train_len", "steps", "batch", "d_model", "d_ff", "layers", "heads", "eval_tokens"):
        if getattr(cfg, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')}={getattr(cfg, name)} must be >= 1")
    if cfg.d_model % cfg.heads or (cfg.d_model // cfg.heads) % 2:
        raise UsageError(f"--d-model={cfg.d_model} must split into --heads={cfg.heads} heads of even size")
    if any(config.split_variant(n)[0] == "hybrid" for n in encodings):
        config.parse_stack(cfg.stack, cfg.layers)  # a bad --stack exits 2 before anything trains
    return cfg


def _write_reports(report, args) -> None:
    argv = _experiment_argv(args)
    command = shlex.join(["posenc", "experiment", *argv])
    print(terminal_table(report))
    print(f"({report['seconds']:.0f} s in all)")
    if args.json:
        write_atomic(args.json, json_text(report, argv), what="report")
    if args.markdown:
        write_atomic(args.markdown, f"Made by `{command}` ({report['seconds']:.0f} s, {report['threads']} "
                                    f"thread(s), torch {report['torch']}, {report['device']}).\n\n"
                                    + markdown_table(report), what="report")
    if args.plot:
        save_figure(plot_perplexity(report, new_figure(7, 4.5)), args.plot)


def cmd_experiment(args) -> int:
    encodings = _encodings(args)
    seeds = _ints(args.seeds, "--seeds", minimum=0) if args.seeds else None
    _check_outputs(args)
    cfg = _config(args, encodings)
    corpus = load_corpus(args.corpus)

    from .run import run_experiment, use_device  # torch is imported here, once the options are checked

    threads = use_device(args.device, args.threads or default_threads())
    log = (lambda *a, **k: None) if args.quiet else (lambda *a, **k: print(*a, **k, file=sys.stderr, flush=True))
    log(f"corpus {corpus.describe()}")
    log(f"config {cfg}; {threads} torch thread(s) on {args.device}")
    started = time.perf_counter()
    report = run_experiment(cfg, corpus, encodings=encodings, device=args.device, progress=not args.quiet,
                            save_weights=args.save_weights, log=log, seeds=seeds)
    report["seconds"] = time.perf_counter() - started
    _write_reports(report, args)
    if not all(r["loss_last"] < r["loss_first"] for r in report["rows"]):
        print("warning: the training loss did not fall for every encoding", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    """Add `experiment` to the `posenc` command line."""
    from .. import experiment

    p = sub.add_parser("experiment", help="train a small causal LM per encoding on Shakespeare (or --corpus), "
                                          "report perplexity at 1x-8x the training length, speed, memory",
                       description=experiment.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help=f"a smoke test (<60 s): {config.QUICK}")
    p.add_argument("--encodings", action="append",
                   help=f"comma-separated, from {', '.join(config.BASELINE + config.RESEARCH)}, any trained "
                        f"one with +crop and/or +prog (default {','.join(config.BASELINE)})")
    p.add_argument("--stack", help=f"the hybrid row's per-layer stack, bottom first, NAME:LAYERS with NAME from "
                                   f"{', '.join(config.STACK_ENCODINGS)} and LAYERS a count or 'half' "
                                   f"(default {config.DEFAULT.stack})")
    p.add_argument("--stack-bias", choices=config.STACK_BIASES,
                   help=f"the hybrid row's relative bias in every layer (default {config.DEFAULT.stack_bias})")
    p.add_argument("--random-crop", action="store_true",
                   help="train on crops of longer sequences keeping their positions (every row, as +crop)")
    p.add_argument("--progressive", action="store_true",
                   help="progressively longer training sequences: train_len/4, /2, then train_len (every row, "
                        "as +prog)")
    p.add_argument("--seeds", help="comma-separated seeds: one model per seed, mean ± std reported "
                                   "(overrides --seed)")
    p.add_argument("--corpus", help="a .txt file or a directory of .txt files (default: the `shakespeare` "
                                    "package's Gutenberg plays)")
    for name, help_ in (("train-len", "training length (bytes)"), ("steps", "training steps"),
                        ("batch", "sequences per step"), ("d-model", "model width"), ("d-ff", "MLP width"),
                        ("layers", "layers"), ("heads", "attention heads"),
                        ("eval-tokens", "validation bytes per evaluation length")):
        p.add_argument(f"--{name}", type=int, help=f"{help_} (default {getattr(config.DEFAULT, name.replace('-', '_'))}, "
                                                   f"--quick {getattr(config.QUICK, name.replace('-', '_'))})")
    p.add_argument("--eval-factors", help="evaluation lengths as multiples of --train-len (default 1,2,4,8)")
    p.add_argument("--lr", type=float, help=f"peak learning rate (default {config.DEFAULT.lr})")
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
