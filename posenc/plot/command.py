"""`posenc plot KIND`: the command line translated into a figure function's keyword options."""

from __future__ import annotations

from ..adapters import BACKENDS, SPEC
from ..canvas import FIGURE_FORMATS, require_matplotlib, save_figure
from ..io import check_output
from . import figures
from .figures import ATTENTION_ENCODINGS, FIGURES, load_table

__all__ = ["add_parser", "run"]

_COMPUTED_BY = (SPEC, *BACKENDS)


def _table(path):
    return None if path is None else load_table(path)


def _figure(args):
    """The figure of `args.kind`, its options taken from `args` (files already loaded)."""
    if args.kind == "table":
        return figures.figure_table(encoding=args.convention or args.encoding, positions=args.positions, dim=args.dim,
                                    backend=args.backend, base=args.base, table=_table(args.table), seed=args.seed)
    if args.kind == "rope-decay":
        return figures.figure_rope_decay(dim=args.dim, max_distance=args.max_distance, base=args.base,
                                         scalings=figures.parse_scaling(args.scaling), backend=args.backend)
    if args.kind == "bias":
        return figures.figure_bias(encoding=args.encoding, heads=args.heads, length=args.length,
                                   table=_table(args.table), seed=args.seed, backend=args.backend)
    if args.kind == "attention-maps":
        return figures.figure_attention_maps(sentence=args.sentence, encodings=args.encodings, dim=args.dim,
                                             table=_table(args.table), embedding_scale=args.embedding_scale,
                                             shared_scale=args.shared_scale, causal=args.causal, seed=args.seed,
                                             backend=args.backend)
    if args.kind == "diff":
        return figures.figure_diff(args.a, args.b, positions=args.positions, dim=args.dim, backend=args.backend,
                                   backend_b=args.backend_b)
    if args.kind == "research":
        weights = [load_table(path, ndim=None) for path in args.weights]
        return figures.figure_research(encoding=args.encoding, heads=args.heads, length=args.length, dim=args.dim,
                                       weights=weights, seed=args.seed, backend=args.backend)
    if args.kind == "mrope":
        return figures.figure_mrope(convention=args.convention, dim=args.dim)
    if args.kind == "schedule":
        return figures.figure_schedule(config=args.config)
    return figures.figure_experiment(args.report)


def run(args) -> int:
    check_output(args.out, formats=FIGURE_FORMATS, what="figure")
    require_matplotlib()
    save_figure(_figure(args), args.out, dpi=args.dpi)
    print(f"wrote {args.out}")
    return 0


def add_parser(sub) -> None:
    """Add `plot` and its figure kinds to the `posenc` command line."""
    plot = sub.add_parser("plot", help="figures of the encodings (PNG, SVG or PDF by the suffix of --out)")
    kinds = plot.add_subparsers(dest="kind", required=True)

    def kind(name, help_):
        assert name in FIGURES, name
        p = kinds.add_parser(name, help=help_, description=help_)
        p.add_argument("--out", default=f"posenc-{name}.png", help=f"output file (default posenc-{name}.png)")
        p.add_argument("--backend", default=SPEC, choices=_COMPUTED_BY,
                       help="compute with the spec (numpy, default) or a backend")
        p.add_argument("--dpi", type=int, default=150)
        p.set_defaults(func=run)
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
    p.add_argument("--backend-b", choices=_COMPUTED_BY,
                   help="compute B with another backend (default: --backend), e.g. to see float32 error")
    p.add_argument("--positions", type=int, default=128)
    p.add_argument("--dim", type=int, default=64)

    p = kind("research", "a research encoding: KERPLE / Sandwich / FIRE bias per head, DeBERTa's log buckets, "
                         "the dynamic encoding's table, xPos' scale")
    p.add_argument("--encoding", default="kerple-log",
                   help="kerple-log, kerple-power, sandwich, fire, deberta, dynamic or xpos (default kerple-log)")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--length", type=int, default=64, help="positions 0..length-1")
    p.add_argument("--dim", type=int, default=64, help="sandwich's sinusoid width, the dynamic/xpos table width")
    p.add_argument("--weights", nargs="*", default=[], metavar="NPY",
                   help="trained weights from `posenc experiment --save-weights`: KERPLE r1 r2, or dynamic "
                        "weight bias (default: the initialisation, seeded)")
    p.add_argument("--seed", type=int, default=0)

    p = kind("mrope", "multi-axis RoPE: which channel reads which position axis, with which frequency")
    p.add_argument("--convention", default="qwen2-vl",
                   help="qwen2-vl, qwen3-vl, qwen2-vl-vision, pixtral or flux (default qwen2-vl)")
    p.add_argument("--dim", type=int, help="head dim (default: the convention's, 64 for the vision towers)")

    p = kind("schedule", "a model's per-layer RoPE schedule: layer x (base, scaling type, NoPE)")
    p.add_argument("--config", required=True, help="a Hugging Face config.json (Gemma 2/3/4, Llama 4, Cohere2, "
                                                   "SmolLM3, DeepSeek MLA, any Llama-like family)")

    p = kind("experiment", "perplexity against evaluation length from a saved `posenc experiment --json` report")
    p.add_argument("report", help="the JSON report")
