"""`posenc port` and `posenc doctor`: the command line translated into `Rules` / `PresetOptions`, then `port()`."""

from __future__ import annotations

import json

from posenc_np.rope import ROPE_LAYOUTS, scaling_from_hf_config

from ..errors import UsageError
from ..formats import open_reader
from ..formats.gguf_quant import outtype_of
from ..formats.shards import parse_size
from ..io import check_output
from .core import port, report_text, write_json
from .doctor import diagnose_paths
from .hf_config import schedule_settings, sidecar_layers
from .mapping import GRID_CONVENTIONS, Rules
from .preset import rope_sidecar
from .presets import PRESETS, PresetOptions, get_preset

__all__ = ["add_parser", "cmd_port", "cmd_doctor", "rules_from_args"]


def _pair(value, what, convert=str):
    if "=" not in value:
        raise UsageError(f"{what} {value!r}: expected PATTERN=VALUE")
    left, right = value.rsplit("=", 1)
    try:
        return left, convert(right)
    except ValueError:
        raise UsageError(f"{what} {value!r}: {right!r} is not a valid value") from None


def _positive(value):
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


def _resize_target(value):
    """`LEN` (a table's rows) or `HxW` (a ViT grid's rows and columns)."""
    if "x" in value:
        h, w = value.split("x", 1)
        return _positive(h), _positive(w)
    return _positive(value)


def rules_from_args(args) -> Rules:
    """The conversion options of `posenc port` as `Rules`."""
    splits = []
    for value in args.split_qkv or ():
        glob, templates = _pair(value, "--split-qkv")
        parts = templates.split(",")
        if len(parts) != 3 or not args.heads:
            raise UsageError(f"--split-qkv {value!r}: needs three target names (q,k,v) and --heads")
        splits.append((glob, parts, None, ("q", "k", "v")))  # rows from --heads / --kv-heads
    layout = args.t5_source_layout
    other = "buckets-heads" if layout == "heads-buckets" else "heads-buckets"
    return Rules(rename=[_pair(v, "--rename") for v in args.rename or ()], drop=list(args.drop or ()),
                 transpose=list(args.transpose or ()) + list(args.t5_bias or ()), split=splits,
                 strip=[_pair(v, "--strip-offset", _positive) for v in args.strip_offset or ()],
                 pad=[_pair(v, "--add-offset", _positive) for v in args.add_offset or ()],
                 resize=[(*_pair(v, "--resize", _resize_target), args.resize_method) for v in args.resize or ()],
                 prefix_tokens=args.prefix_tokens,
                 reverse=list(args.reverse or ()), rope_q=list(args.rope_q or ()), rope_k=list(args.rope_k or ()),
                 heads=args.heads, kv_heads=args.kv_heads, rope_from=args.rope_from, rope_to=args.rope_to,
                 rotary_dim=args.rotary_dim,
                 tags=[(g, {"t5": {"source_layout": layout, "target_layout": other}}) for g in args.t5_bias or ()])


def _rope_scaling(args):
    """--rope-scaling parsed (None when not given); the namespace itself is never changed."""
    if args.rope_scaling is None:
        return None
    try:
        return json.loads(args.rope_scaling)
    except json.JSONDecodeError as error:
        raise UsageError(f"--rope-scaling {args.rope_scaling!r} is not JSON: {error}") from None


def _rope_settings(args, scaling):
    """Base, scaling and rotary_dim for verification and the sidecar (flags first, else --hf-config)."""
    found = {}
    if args.hf_config:
        per_layer = _per_layer_settings(args, scaling)
        if per_layer is not None:
            return per_layer
        try:
            found = scaling_from_hf_config(args.hf_config)
        except (ValueError, TypeError) as error:
            raise UsageError(f"--hf-config: {error}") from None
    settings = dict(base=float(args.rope_theta or found.get("base") or 10000.0),
                    scaling=scaling if scaling is not None else found.get("scaling"),
                    rotary_dim=args.rotary_dim or found.get("rotary_dim"))
    section = _mrope_section(args) or found.get("mrope_section")
    if section is None and getattr(args, "mrope_interleaved", False):
        raise UsageError("--mrope-interleaved needs --mrope-section (or an --hf-config with mrope_section)")
    if section is not None:  # multi-axis RoPE: flags first, else the config's (Qwen2-VL / Qwen3-VL)
        settings.update(mrope_section=section,
                        mrope_interleaved=bool(getattr(args, "mrope_interleaved", False) or
                                               (not _mrope_section(args) and found.get("mrope_interleaved"))))
    return settings


def _per_layer_settings(args, scaling):
    """Settings of an --hf-config whose layers differ (Gemma local/global, Llama 4 NoPE...): `layers` holds
    `(schedule, layer_types)` and the flat base/scaling are None; None when one setting serves every layer."""
    try:
        found = schedule_settings(args.hf_config)
    except UsageError:
        return None  # not a per-layer config the reader reads: scaling_from_hf_config names the problem
    if found is None:
        return None
    schedule, types = found
    flags = [f for f, v in (("--rope-theta", args.rope_theta), ("--rope-scaling", scaling),
                            ("--mrope-section", getattr(args, "mrope_section", None))) if v is not None]
    if flags:
        raise UsageError(f"--hf-config {args.hf_config} sets RoPE per layer; {', '.join(flags)} would set one value "
                         "for every layer")
    layouts = {e["layout"] for e in schedule if e is not None}
    if args.rope_from and layouts and layouts != {args.rope_from}:
        raise UsageError(f"--rope-from {args.rope_from}, but the model of --hf-config {args.hf_config} rotates "
                         f"{'/'.join(sorted(layouts))} pairs (posenc_np.schedule.INTERLEAVED_FAMILIES)")
    return dict(base=None, scaling=None, rotary_dim=args.rotary_dim, layers=(schedule, types))


def _mrope_section(args):
    """--mrope-section T,H,W parsed (None when not given)."""
    text = getattr(args, "mrope_section", None)
    if text is None:
        return None
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise UsageError(f"--mrope-section {text!r} must be comma-separated pair counts, e.g. 16,24,24") from None


_CONVERSION_FLAGS = ("rename", "drop", "transpose", "split_qkv", "strip_offset", "add_offset", "resize", "reverse",
                     "rope_q", "rope_k", "t5_bias")


def _outtype(args):
    """--outtype checked before anything is read or written (GGUF presets only)."""
    value = getattr(args, "outtype", None)
    if value is None:
        return None
    try:
        outtype_of(value)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if not (args.preset or "").endswith("-to-gguf"):
        raise UsageError(f"--outtype {value} belongs to the presets that write GGUF (hf-...-to-gguf); got "
                         f"{'--preset ' + args.preset if args.preset else 'no --preset'}")
    return value


def cmd_port(args) -> int:
    if args.json:
        check_output(args.json, what="--json report")
    outtype = _outtype(args)
    scaling = _rope_scaling(args)
    if args.preset:
        conversion_flags = [f for f in _CONVERSION_FLAGS if getattr(args, f)]
        if conversion_flags:
            raise UsageError(f"--preset {args.preset} takes no conversion options (got --"
                             f"{', --'.join(f.replace('_', '-') for f in conversion_flags)})")
        options = PresetOptions(heads=args.heads, kv_heads=args.kv_heads, rope_theta=args.rope_theta,
                                rotary_dim=args.rotary_dim, rope_scaling=scaling,
                                resize_positions=args.resize_positions,
                                resize_method=args.resize_method or "linear",
                                outtype=outtype)
        preset = get_preset(args.preset, open_reader(args.source), options)
        rules = preset.rules
        kwargs = dict(rope=preset.rope, sidecar=preset.sidecar, extra=preset.extra, metadata=preset.metadata,
                      target_format=preset.target_format, layout=preset.layout, stack_config=preset.stack_config)
    else:
        if args.resize_positions is not None:
            raise UsageError("--resize-positions belongs to the BERT presets; use --resize GLOB=LEN otherwise")
        rules = rules_from_args(args)
        rope = sidecar = None
        if rules.rope_from or args.rope_theta or scaling is not None or args.hf_config or args.mrope_section or args.mrope_interleaved:
            settings = _rope_settings(args, scaling)
            layers = settings.pop("layers", None)
            if rules.rope_from:
                rope = dict(settings, source=rules.rope_from, target=rules.rope_to)
            sidecar = rope_sidecar(layout=rules.rope_to, source_layout=rules.rope_from, num_heads=rules.heads,
                                   num_kv_heads=rules.kv_heads or rules.heads, **settings)
            if layers is not None:  # per-layer settings (posenc.port.hf_config): sidecar rope.layers, checks per layer
                sidecar["rope"]["layers"] = sidecar_layers(*layers, rules.rope_to)
                if rope is not None:
                    rope["layers"] = sidecar["rope"]["layers"]
        kwargs = dict(rope=rope, sidecar=sidecar)
    if args.max_shard_size is not None:
        kwargs["max_shard_size"] = parse_size(args.max_shard_size)
    result = port(args.source, args.target, rules, seed=args.seed, **kwargs)
    print(report_text(result))
    if args.json:
        write_json(args.json, result.as_dict())
    return 0 if result.verified else 1


def cmd_doctor(args) -> int:
    if args.json:
        check_output(args.json, what="--json report")
    diagnosis = diagnose_paths(args.a, args.b)
    print(diagnosis.text())
    if args.json:
        write_json(args.json, diagnosis.as_dict())
    return 0 if diagnosis.explained else 1


def add_parser(subparsers) -> None:
    """Add `port` and `doctor` to the `posenc` command line."""
    port = subparsers.add_parser(
        "port", help="convert a checkpoint between frameworks and conventions, then verify it",
        description="Convert SOURCE into TARGET (format from the name: .safetensors, .npz, .pt/.bin, .weights.h5, "
                    ".msgpack, .gguf, or a checkpoint directory ending in /; SOURCE may also be a sharded HF "
                    "checkpoint directory or its model.safetensors.index.json, Meta's consolidated.NN.pth "
                    "shards, or a training stack's checkpoint directory: torch DCP (torchtitan), Orbax (MaxText), "
                    "Megatron torch_dist / NeMo 2; the stack presets write those directories, named with or "
                    "without a trailing /), verify the encodings numerically, and write TARGET only when verified (exit 0). "
                    "A failed verification keeps the output as TARGET.unverified and exits 1; bad input exits 2 "
                    "and writes nothing. Globs match SOURCE names; '*' matches any text, dots included.")
    port.add_argument("source", metavar="SOURCE")
    port.add_argument("target", metavar="TARGET")
    port.add_argument("--preset", help=f"a known port: {', '.join(PRESETS)}")
    port.add_argument("--json", metavar="REPORT", help="write the verification report as JSON")
    port.add_argument("--seed", type=int, default=0, help="seed of the random probes")
    port.add_argument("--outtype", metavar="TYPE",
                      help="GGUF presets: type of 2-D weights, llama.cpp's converter's flag (f32, f16, bf16, q8_0, "
                           "q4_0, q4_1, q5_0, q5_1); norms and 1-D tensors stay F32. Default: each tensor's dtype")
    port.add_argument("--max-shard-size", metavar="SIZE",
                      help="write .safetensors above SIZE (5GB, 500MB, 2GiB) as save_pretrained's shards and index; "
                           "a TARGET ending in / is a checkpoint directory (default SIZE 50GB, as transformers 5)")
    g = port.add_argument_group("conversion options (instead of --preset)")
    g.add_argument("--rename", action="append", metavar="SRC=DST", help="rename; DST's '*'s take SRC's matches")
    g.add_argument("--drop", action="append", metavar="GLOB", help="leave these tensors out")
    g.add_argument("--transpose", action="append", metavar="GLOB",
                   help="transpose (torch Linear [out, in] <-> Keras/Flax Dense kernel [in, out]); never implied")
    g.add_argument("--split-qkv", action="append", metavar="GLOB=Q,K,V",
                   help="split a fused QKV weight by rows into three tensors (q: heads, k and v: kv heads)")
    g.add_argument("--rope-q", action="append", metavar="GLOB", help="q projections to permute (--heads heads)")
    g.add_argument("--rope-k", action="append", metavar="GLOB", help="k projections to permute (--kv-heads heads)")
    g.add_argument("--rope-from", choices=ROPE_LAYOUTS, help="RoPE layout of SOURCE")
    g.add_argument("--rope-to", choices=ROPE_LAYOUTS, help="RoPE layout of TARGET")
    g.add_argument("--heads", type=int, help="query heads")
    g.add_argument("--kv-heads", type=int, help="key/value heads (grouped-query attention; default --heads)")
    g.add_argument("--rotary-dim", type=int, help="rotated channels per head (partial rotary; default all)")
    g.add_argument("--rope-theta", type=float, help="RoPE base, for verification and the sidecar")
    g.add_argument("--rope-scaling", metavar="JSON", help="HF rope_scaling dict, for verification and the sidecar")
    g.add_argument("--hf-config", metavar="CONFIG_JSON",
                   help="read base, scaling and rotary dim from an HF config; per layer when its layers differ "
                        "(Gemma 2/3/4, Llama 4, Cohere2...): sidecar rope.layers, one logits check per layer")
    g.add_argument("--mrope-section", metavar="T,H,W", help="multi-axis RoPE pairs per axis (Qwen2-VL 16,24,24); "
                                                           "verified on text, image and video positions")
    g.add_argument("--mrope-interleaved", action="store_true", help="Qwen3-VL's interleaved sections")
    g.add_argument("--strip-offset", action="append", metavar="GLOB=N",
                   help="drop the first N rows of a position table (RoBERTa/fairseq 2 -> 0-based)")
    g.add_argument("--add-offset", action="append", metavar="GLOB=N",
                   help="prepend N zero rows (0-based -> RoBERTa/fairseq)")
    g.add_argument("--resize", action="append", metavar="GLOB=LEN|HxW",
                   help="resize a position table to LEN rows, or a ViT position grid to H x W patches")
    g.add_argument("--resize-positions", type=int, metavar="LEN",
                   help="(BERT presets) resize embeddings.position_embeddings to LEN rows")
    g.add_argument("--resize-method", choices=("linear", "nearest", "cubic", *GRID_CONVENTIONS), default=None,
                   help="a table's kernel (linear, nearest, cubic; default linear), or a grid's convention: "
                        f"{', '.join(GRID_CONVENTIONS)} (default timm)")
    g.add_argument("--prefix-tokens", type=int, metavar="N",
                   help="(grids) rows before the grid: CLS, registers (default: the rows past the largest square)")
    g.add_argument("--reverse", action="append", metavar="GLOB",
                   help="reverse the rows of a relative table (HF BERT relative_key <-> Shaw)")
    g.add_argument("--t5-bias", action="append", metavar="GLOB",
                   help="a T5 relative bias table to transpose ([heads, buckets] <-> [buckets, heads]) and verify")
    g.add_argument("--t5-source-layout", choices=("heads-buckets", "buckets-heads"), default="heads-buckets",
                   help="how SOURCE stores --t5-bias tables (t5x/Mesh: heads-buckets; HF: buckets-heads)")
    port.set_defaults(func=cmd_port)

    doctor = subparsers.add_parser(
        "doctor", help="name the known convention mismatch between two tables or weights",
        description="Compare A and B (.npy, or single-tensor .safetensors) and name the known mismatch that "
                    "explains their difference; or two checkpoints of one model (.gguf, HF .safetensors / directory "
                    "/ index with config.json) and name q/k row order against the rope type, wrong architecture, "
                    "llama3 factors, base, per layer. Exit 0 identical or explained, 1 unexplained, 2 bad input.")
    doctor.add_argument("a", metavar="A")
    doctor.add_argument("b", metavar="B")
    doctor.add_argument("--json", metavar="REPORT", help="write the diagnosis as JSON")
    doctor.set_defaults(func=cmd_doctor)
