"""`posenc plot`: figures of the encodings, computed by the spec (posenc_np) or a backend (`--backend`).

Every figure function takes keyword options and returns a matplotlib Figure (Agg canvas);
the command (`posenc/plot/command.py`) checks the output path first and saves atomically. Arrays come from
`posenc.adapters.adapter(backend).call(name, args, kwargs)`, so `--backend torch` plots what
posenc_torch computes, float32 included.
"""

from __future__ import annotations

import json
import zlib

import numpy as np

from posenc_np.conventions import conventions
from posenc_np.rope import load_hf_config, rope_plan
from posenc_np.schedule import rope_schedule_from_hf_config

from ..adapters import BackendUnavailable, adapter
from ..canvas import new_figure, suptitle
from ..errors import UsageError
from ..experiment.config import TRAINED
from ..experiment.figure import plot_perplexity
from ..io import parse_choices, parse_json_object

__all__ = ["FIGURES", "ATTENTION_ENCODINGS", "encoding_tables", "rope_decay_curves", "attention_weights",
           "load_table", "figure_table", "figure_rope_decay", "figure_bias", "figure_attention_maps", "figure_diff",
           "figure_experiment", "figure_mrope", "mrope_assignment", "figure_schedule", "schedule_rows",
           "research_arrays", "figure_research"]

TABLE_ENCODINGS = {"sinusoidal": "sinusoidal", "rope": "apply_rope", "learned": "learned"}
#: the encodings `posenc experiment` trains a model with, "none" included
ATTENTION_ENCODINGS = TRAINED


def _call(backend: str, fn: str, *args, **kwargs):
    """`fn` of the chosen package on NumPy inputs, NumPy float64 out; bad arguments become UsageError."""
    chosen = adapter(backend)
    if not chosen.available():
        raise UsageError(f"--backend {backend!r}: its framework is not installed")
    try:
        out = chosen.call(fn, args, kwargs)
    except BackendUnavailable as error:
        raise UsageError(str(error)) from error
    except (ValueError, TypeError) as error:
        raise UsageError(f"{fn}: {error}") from error
    return tuple(np.asarray(o, np.float64) for o in out) if isinstance(out, tuple) else np.asarray(out, np.float64)


def _resolve(name: str, family_of: dict, what: str):
    """A convention name or a family name -> (family, convention name or None, params, offset)."""
    if name in conventions:
        conv = conventions[name]
        families = {v: k for k, v in family_of.items()}
        if conv.encoding not in families:
            raise UsageError(f"{what} {name!r} is a {conv.encoding} convention; this figure takes "
                             f"{', '.join(sorted(family_of))} encodings")
        return families[conv.encoding], name, dict(conv.params), conv.position_offset
    if name in family_of:
        return name, None, {}, 0
    known = sorted(family_of) + sorted(n for n, c in conventions.items() if c.encoding in family_of.values())
    raise UsageError(f"unknown {what} {name!r}; choose from {', '.join(known)}")


def _positive(name, value):
    if value < 1:
        raise UsageError(f"--{name}={value} must be >= 1")
    return value


def load_table(path: str, ndim: int | None = 2) -> np.ndarray:
    """A table saved with `np.save` (e.g. by `posenc experiment --save-weights`), as float64; UsageError
    when it cannot be read or has the wrong number of dimensions (`ndim=None`: any)."""
    try:
        table = np.load(path)
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot read table {path!r}: {error}") from error
    if ndim is not None and table.ndim != ndim:
        raise UsageError(f"table {path!r} must be {ndim}-D, has shape {table.shape}")
    return table.astype(np.float64)


def encoding_tables(name, positions, dim, *, backend="numpy", base=None, table=None, seed=0):
    """`(title, {panel: [positions, channels]})` for a table encoding or convention.

    sinusoidal: the table; rope: RoPE's cos and sin tables (`rope_cos_sin`, channels in the convention's
    layout); learned: `table` (e.g. a trained one) or a random N(0, 0.02) init, gathered with `learned`.
    Conventions with a `position_offset` (fairseq, RoBERTa) start at that position.
    """
    family, conv, params, offset = _resolve(name, TABLE_ENCODINGS, "--encoding")
    if table is not None and family != "learned":
        raise UsageError(f"--table is a learned table; {name!r} is a {family} encoding")
    _positive("positions", positions)
    pos = np.arange(offset, offset + positions, dtype=np.int64)
    if base is not None and family != "learned":
        params["base"] = base
    label = conv or family
    if family == "sinusoidal":
        out = {"sinusoidal": _call(backend, "sinusoidal", pos, dim, **params)}
        detail = ", ".join(f"{k}={v}" for k, v in params.items())
    elif family == "rope":
        if "rotary_pct" in params:
            params["head_dim"] = dim
        elif "rotary_dim" not in params:
            params["rotary_dim"] = dim
        cos, sin = _call(backend, "rope_cos_sin", pos, **params)
        out = {"cos": cos, "sin": sin}
        detail = ", ".join(f"{k}={v}" for k, v in params.items())
    else:
        if table is None:
            table = np.random.default_rng(seed).normal(0.0, 0.02, size=(offset + positions, dim))
            detail = f"random N(0, 0.02) init, seed {seed}"
        else:
            detail = "given table"
        if table.shape[0] < offset + positions:
            raise UsageError(f"the table has {table.shape[0]} rows; --positions={positions} needs "
                             f"{offset + positions}")
        out = {"learned": _call(backend, "learned", table, pos)}
    return f"{label} [{backend}]\n{detail}", out, pos


def _heatmap(figure, ax, data, *, title, xlabel, ylabel, cmap="RdBu_r", symmetric=True, extent=None, label="",
             fontsize="medium"):
    vmax = float(np.max(np.abs(data))) or 1.0
    kwargs = dict(vmin=-vmax, vmax=vmax) if symmetric else {}
    image = ax.imshow(data, aspect="auto", cmap=cmap, interpolation="nearest", origin="upper", extent=extent,
                      **kwargs)
    ax.set_title(title, fontsize=fontsize)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    figure.colorbar(image, ax=ax, label=label)
    return image


def figure_table(*, encoding="sinusoidal", positions=128, dim=64, backend="numpy", base=None, table=None, seed=0):
    """Heatmap(s) of an encoding's table: `encoding` a family or a convention, `table` a learned table
    (array `[positions, dim]`; then `dim` is its width)."""
    dim = table.shape[1] if table is not None else _positive("dim", dim)
    title, panels, pos = encoding_tables(encoding, positions, dim, backend=backend, base=base, table=table,
                                         seed=seed)
    figure = new_figure(max(7.0, 5.5 * len(panels)), 4.8)
    extent = (-0.5, dim - 0.5, pos[-1] + 0.5, pos[0] - 0.5)
    for i, (panel, data) in enumerate(panels.items()):
        ax = figure.add_subplot(1, len(panels), i + 1)
        _heatmap(figure, ax, data, title=panel, xlabel="channel", ylabel="position", extent=extent, label="value")
    suptitle(figure, title)
    return figure


def parse_scaling(texts):
    """`--scaling` JSON texts -> HF rope_scaling dicts; UsageError naming a text that is not a JSON object."""
    return [parse_json_object(text, "--scaling", what="a JSON object (an HF rope_scaling dict)") for text in texts]


def rope_decay_curves(dim, max_distance, *, base=10000.0, scaling=None, backend="numpy"):
    """`(distances, upper_bound, logits)` of RoPE at relative distances 0..max_distance.

    upper_bound: RoFormer (Su et al. 2021, sec. 3.4.3, fig. 2): `(1/(d/2)) sum_j |S_j|`,
    `S_j = sum_{k<j} exp(i m theta_k)`, the bound on `|q^T R_m k|` (up to the largest query/key
    differences) that decays with the distance m. logits: `q . k` with q = k = ones(d) after
    `apply_rope` at positions m and 0, i.e. `2 sum_j cos(m theta_j)` times the attention scale
    squared: the logit two identical constant vectors get at distance m.
    """
    distances = np.arange(max_distance + 1, dtype=np.int64)
    inv_freq, _ = _call(backend, "rope_frequencies", dim, base=base, scaling=scaling)
    partial = np.cumsum(np.exp(1j * distances[:, None] * inv_freq[None, :]), axis=1)
    upper = np.abs(partial).mean(axis=1)
    rotated = _call(backend, "apply_rope", np.ones((max_distance + 1, dim)), distances, base=base, scaling=scaling)
    return distances, upper, rotated @ rotated[0]


def figure_rope_decay(*, dim=128, max_distance=512, base=10000.0, scalings=(), backend="numpy"):
    """RoPE's decay curves without scaling and with each HF rope_scaling dict of `scalings`."""
    dim, distance = _positive("dim", dim), _positive("max-distance", max_distance)
    curves = [(scaling, rope_decay_curves(dim, distance, base=base, scaling=scaling, backend=backend))
              for scaling in [None, *scalings]]
    figure = new_figure(11, 4.2)
    bound, logit = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    for scaling, (d, upper, logits) in curves:
        label = "no scaling" if scaling is None else json.dumps(scaling)
        bound.plot(d, upper, label=label, linewidth=1)
        logit.plot(d, logits, label=label, linewidth=1)
    bound.set_title("relative upper bound (RoFormer fig. 2)", fontsize="medium")
    bound.set_ylabel(r"$\frac{1}{d/2}\sum_j |S_j|$")
    logit.set_title("q·k of q = k = ones after RoPE", fontsize="medium")
    logit.set_ylabel("logit (unscaled)")
    for ax in (bound, logit):
        ax.set_xlabel("relative distance m")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    suptitle(figure, f"RoPE long-range decay: head dim {dim}, base {base:g} [{backend}]")
    return figure


def figure_bias(*, encoding="alibi", heads=8, length=64, table=None, seed=0, backend="numpy"):
    """ALiBi or T5 bias per head; `table` a T5 table `[num_buckets, heads]` (default random N(0, 1))."""
    family, conv, params, _ = _resolve(encoding, {"alibi": "alibi_bias", "t5": "t5_bias"}, "--encoding")
    heads, length = _positive("heads", heads), _positive("length", length)
    pos = np.arange(length, dtype=np.int64)
    if family == "alibi":
        params.setdefault("form", "causal")
        bias = _call(backend, "alibi_bias", heads, pos, pos, **params)
        detail = f"form={params['form']!r}"
        bias = np.where(pos[:, None] >= pos[None, :], bias, np.nan)  # causal: the future is masked anyway
    else:
        params.setdefault("bidirectional", False)
        if table is not None:
            heads = table.shape[1]
            detail = "given table"
        else:
            table = np.random.default_rng(seed).normal(size=(params.get("num_buckets", 32), heads))
            detail = f"random N(0, 1) table, seed {seed}"
        bias = _call(backend, "t5_bias", table, pos, pos, **params)
        detail += ", " + ", ".join(f"{k}={v}" for k, v in params.items())
        if not params["bidirectional"]:
            bias = np.where(pos[:, None] >= pos[None, :], bias, np.nan)
    figure = new_figure(12, 4.5)
    lines = figure.add_subplot(1, 2, 1)
    query = length - 1 if not (family == "t5" and params["bidirectional"]) else length // 2
    for h in range(heads):
        lines.plot(pos - query, bias[h, query], label=f"head {h}", linewidth=1)
    lines.set_xlabel(f"key position - query position (query {query})")
    lines.set_ylabel("bias added to the logit")
    lines.set_title("bias per head against relative position", fontsize="medium")
    lines.grid(alpha=0.3)
    lines.legend(fontsize="x-small", ncol=2)
    _heatmap(figure, figure.add_subplot(1, 2, 2), bias[0], title="head 0: bias[query, key] (future masked)",
             xlabel="key position", ylabel="query position", cmap="viridis", symmetric=False, label="bias")
    suptitle(figure, f"{conv or family} attention bias, {heads} heads ({detail}) [{backend}]")
    return figure


def _word_embeddings(words, dim, scale, shared):
    """A fixed random vector per word (seeded by the word's CRC32, so a repeated word repeats its vector)
    plus one vector common to all words (std `shared`), as real embeddings share a mean direction:
    it is what lets a relative encoding's distance pattern show (for RoPE, the decay of `c . R(m) c`)."""
    common = np.random.default_rng(0).normal(0.0, shared, dim)
    return common + np.stack([np.random.default_rng(zlib.crc32(w.lower().encode())).normal(0.0, scale, dim)
                              for w in words])


def attention_weights(encoding, words, dim, *, backend="numpy", table=None, scale=0.5, shared=1.0, causal=False,
                      seed=0):
    """`[n, n]` attention weights of one sentence with q = k = v = the (encoded) word vectors.

    No learned projections: the map shows what the encoding alone adds to the similarity of the
    word vectors. sinusoidal / learned add the table to the vectors; rope rotates q and k; alibi
    (8 heads, head 0 shown) and t5 (random N(0,1) table, head 0) add their bias to the logits.
    """
    n = len(words)
    x = _word_embeddings(words, dim, scale, shared)
    pos = np.arange(n, dtype=np.int64)
    bias, note = None, ""
    if encoding == "sinusoidal":
        x = x + _call(backend, "sinusoidal", pos, dim)
    elif encoding == "learned":
        if table is None:
            table = np.random.default_rng(seed).normal(0.0, 0.02, size=(max(n, 64), dim))
            note = "random N(0, 0.02) init"
        else:
            note = "trained table"
        if table.shape[0] < n:
            raise UsageError(f"the learned table has {table.shape[0]} rows, the sentence {n} words")
        x = x + _call(backend, "learned", table, pos)
    elif encoding == "rope":
        x = _call(backend, "apply_rope", x, pos)  # q and k are the same rotated vectors
    elif encoding == "alibi":
        bias, note = _call(backend, "alibi_bias", 8, pos, pos, form="causal")[0], "head 0 of 8"
    elif encoding == "t5":
        t5_table = np.random.default_rng(seed).normal(size=(32, 1))
        bias, note = _call(backend, "t5_bias", t5_table, pos, pos, bidirectional=True)[0], "random table"
    _, weights = _call(backend, "attention", x, x, x, bias=bias, causal=causal)
    return weights, note


def figure_attention_maps(*, sentence, encodings=("sinusoidal", "learned", "rope"), dim=64, table=None,
                          embedding_scale=0.5, shared_scale=1.0, causal=False, seed=0, backend="numpy"):
    """Attention maps of one sentence, one panel per encoding of `encodings` (names of ATTENTION_ENCODINGS)."""
    encodings = parse_choices(encodings, ATTENTION_ENCODINGS, "--encodings")
    words = sentence.split()
    if len(words) < 2:
        raise UsageError(f"--sentence {sentence!r} needs at least two words")
    dim = table.shape[1] if table is not None else _positive("dim", dim)
    if dim % 2:
        raise UsageError(f"--dim={dim} must be even")
    maps = [attention_weights(encoding, words, dim, backend=backend, table=table, scale=embedding_scale,
                              shared=shared_scale, causal=causal, seed=seed) for encoding in encodings]
    figure = new_figure(4.6 * len(encodings) + 0.8, 4.8)
    axes = [figure.add_subplot(1, len(encodings), i + 1) for i in range(len(encodings))]
    vmax = max(float(weights.max()) for weights, _ in maps)
    image = None
    for ax, encoding, (weights, note) in zip(axes, encodings, maps, strict=True):
        image = ax.imshow(weights, cmap="magma", vmin=0.0, vmax=vmax, interpolation="nearest")
        ax.set_title(encoding + (f" ({note})" if note else ""), fontsize="medium")
        ticks = np.arange(len(words))
        ax.set_xticks(ticks, words, rotation=90, fontsize="x-small")
        ax.set_yticks(ticks, words, fontsize="x-small")
        ax.set_xlabel("key")
    axes[0].set_ylabel("query")
    figure.colorbar(image, ax=axes, label="attention weight", shrink=0.8)
    suptitle(figure, f"Attention of one sentence: q = k = v = word vector (std {embedding_scale:g}) + shared "
                     f"vector (std {shared_scale:g}) + encoding, dim {dim}, no projections [{backend}]")
    return figure


def figure_diff(a_name, b_name, *, positions=128, dim=64, backend="numpy", backend_b=None):
    """Two conventions' tables and their difference; B computed with `backend_b` (default `backend`)."""
    backend_b = backend_b or backend
    title_a, a, _ = encoding_tables(a_name, positions, _positive("dim", dim), backend=backend)
    title_b, b, _ = encoding_tables(b_name, positions, dim, backend=backend_b)
    if list(a) != list(b):
        raise UsageError(f"{a_name!r} and {b_name!r} are different encodings ({', '.join(a)} vs {', '.join(b)})")
    figure = new_figure(16, 4.2 * len(a))
    for row, key in enumerate(a):
        diff = a[key] - b[key]
        for col, (data, title) in enumerate(((a[key], f"A: {title_a}"), (b[key], f"B: {title_b}"),
                                             (diff, f"A - B\nmax |A - B| = {np.max(np.abs(diff)):.3g}"))):
            ax = figure.add_subplot(len(a), 3, 3 * row + col + 1)
            _heatmap(figure, ax, data, title=f"{key} {title}" if len(a) > 1 else title, xlabel="channel",
                     ylabel="position index", label="difference" if col == 2 else "value", fontsize="small")
    suptitle(figure, f"{a_name} vs {b_name}: {positions} positions x {dim} channels")
    return figure


def figure_experiment(report_path):
    """Perplexity against evaluation length from a saved `posenc experiment --json` report."""
    try:
        with open(report_path) as f:
            report = json.load(f)
        figure = plot_perplexity(report, new_figure(7, 4.5))
    except OSError as error:
        raise UsageError(f"cannot read report {report_path!r}: {error.strerror}") from error
    except (ValueError, KeyError, TypeError) as error:
        raise UsageError(f"{report_path!r} is not a `posenc experiment --json` report ({error!r})") from error
    return figure


def mrope_assignment(convention, dim=None):
    """`(rotary_dim, channel_axes [r], channel_inv_freq [r], axis names)` of a multi-axis RoPE convention."""
    conv = conventions.get(convention)
    if conv is None or conv.encoding != "apply_rope" or "mrope_section" not in conv.params:
        names = sorted(n for n, c in conventions.items() if "mrope_section" in c.params)
        raise UsageError(f"--convention {convention!r} is not a multi-axis RoPE convention; choose from {names}")
    params = dict(conv.params)
    dim = _positive("--dim", dim) if dim is not None else conv.extra.get("head_dim", 64)
    try:
        plan = rope_plan(dim, base=params.get("base", 10000.0), scaling=params.get("scaling"),
                         layout=params.get("layout", "half"), mrope_section=params["mrope_section"],
                         mrope_interleaved=params.get("mrope_interleaved", False),
                         mrope_frequencies=params.get("mrope_frequencies", "shared"))
    except (TypeError, ValueError) as error:
        raise UsageError(f"--convention {convention} with --dim {dim}: {error}") from None
    pair_axis, pair_freq = plan.axis_of_pair, plan.turns * 2 * np.pi
    if plan.layout == "half":
        axes, freqs = np.concatenate([pair_axis, pair_axis]), np.concatenate([pair_freq, pair_freq])
    else:
        axes, freqs = np.repeat(pair_axis, 2), np.repeat(pair_freq, 2)
    names = tuple(conv.extra.get("axes", [f"axis {a}" for a in range(plan.num_axes)]))
    return dim, axes, freqs, names


def figure_mrope(*, convention="qwen2-vl", dim=None):
    """Which channel reads which position axis, and with which inverse frequency, for a multi-axis RoPE
    convention (qwen2-vl, qwen3-vl, qwen2-vl-vision, pixtral, flux); docs/conventions.md §3.16."""
    dim, axes, freqs, names = mrope_assignment(convention, dim)
    figure = new_figure(12, 5.2)
    strip = figure.add_subplot(2, 1, 1)
    onehot = (axes[None, :] == np.arange(len(names))[:, None]).astype(float)
    strip.imshow(onehot, aspect="auto", cmap="Greys", interpolation="nearest", vmin=0, vmax=1)
    strip.set_yticks(range(len(names)), names)
    strip.set_xlabel("channel")
    strip.set_title("position axis read by each channel (black)")
    scatter = figure.add_subplot(2, 1, 2)
    colours = ("tab:blue", "tab:orange", "tab:green", "tab:red")
    for a, name in enumerate(names):
        mine = np.flatnonzero(axes == a)
        scatter.scatter(mine, freqs[mine], s=10, color=colours[a % len(colours)], label=name)
    scatter.set_yscale("log")
    scatter.set_xlim(strip.get_xlim())
    scatter.set_xlabel("channel")
    scatter.set_ylabel("inverse frequency (rad / position)")
    scatter.legend(loc="upper right", fontsize=8)
    suptitle(figure, f"{convention}: per-axis frequency assignment, head dim {dim}")
    return figure


def schedule_rows(config):
    """One row per decoder layer of a Hugging Face config (a dict, a transformers config or a config.json path):
    `(layer, base or None, scaling type or "NoPE", rotary_dim or 0, layout or "")`, from
    `posenc_np.rope_schedule_from_hf_config`; a config it cannot read is a UsageError naming why."""
    try:
        schedule = rope_schedule_from_hf_config(config)
    except (TypeError, ValueError) as error:
        raise UsageError(f"--config: {error}") from None
    rows = []
    for i, entry in enumerate(schedule):
        if entry is None:
            rows.append((i, None, "NoPE", 0, ""))
        else:
            kind = (entry["scaling"] or {}).get("rope_type", "default")
            rows.append((i, entry["base"], kind, entry["rotary_dim"], entry["layout"]))
    return rows, load_hf_config(config)


def figure_schedule(*, config):
    """Layer x (RoPE base, scaling type, NoPE) of a per-layer schedule (docs/schedules.md): bars of the base on
    a log axis coloured by scaling type, NoPE layers as hatched grey bars, and the rotary width per layer."""
    rows, cfg = schedule_rows(config)
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) and "num_hidden_layers" not in cfg \
        else cfg
    layers = np.array([r[0] for r in rows])
    kinds = list(dict.fromkeys(r[2] for r in rows if r[1] is not None))
    colours = dict(zip(kinds, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"), strict=False))
    bases = [r[1] for r in rows if r[1] is not None]
    floor = min(bases) / 10 if bases else 1.0
    top = max(bases) * 10 if bases else 10.0
    figure = new_figure(max(6.0, min(16.0, 0.25 * len(rows) + 4)), 5.5)
    ax_base, ax_dim = figure.subplots(2, 1, sharex=True, height_ratios=(2, 1))
    for kind in kinds:
        mine = [r for r in rows if r[2] == kind and r[1] is not None]
        ax_base.bar([r[0] for r in mine], [r[1] - floor for r in mine], bottom=floor, color=colours[kind],
                    label=kind, width=0.8)
        ax_dim.bar([r[0] for r in mine], [r[3] for r in mine], color=colours[kind], width=0.8)
    nope = [r[0] for r in rows if r[1] is None]
    if nope:
        label = "NoPE" + (" (+ query temperature)" if text.get("attn_temperature_tuning") else "")
        ax_base.bar(nope, [top - floor] * len(nope), bottom=floor, color="0.85", hatch="//", edgecolor="0.5",
                    label=label, width=0.8)
    ax_base.set_yscale("log")
    ax_base.set_ylim(floor, top)
    ax_base.set_ylabel("RoPE base (rope_theta)")
    ax_base.legend(loc="upper right", fontsize=8, title="scaling type", title_fontsize=8)
    layouts = sorted({r[4] for r in rows if r[4]})
    ax_dim.set_ylabel("rotary_dim")
    ax_dim.set_xlabel("decoder layer")
    ax_dim.set_title(f"rotated channels per layer ({' / '.join(layouts) or 'none'} layout)", fontsize="small")
    step = max(1, len(rows) // 32)
    ax_dim.set_xticks(layers[::step])
    mla = " (MLA rope slice)" if text.get("qk_rope_head_dim") else ""
    suptitle(figure, f"{text.get('model_type', 'config')}: per-layer RoPE schedule, {len(rows)} layers, "
                     f"{len(nope)} NoPE{mla}")
    return figure


RESEARCH_BIASES = ("kerple-log", "kerple-power", "sandwich", "fire", "deberta")
RESEARCH_TABLES = ("dynamic", "xpos")
RESEARCH_ENCODINGS = RESEARCH_BIASES + RESEARCH_TABLES


def research_arrays(encoding, *, heads=8, length=64, dim=64, weights=(), seed=0, backend="numpy"):
    """`(detail, array)` of a research encoding, computed by the spec or a backend.

    Biases `[heads, length, length]` (causal use: query >= key): kerple-log/-power (`weights` = r1, r2
    `[heads]`, e.g. `posenc experiment --save-weights`' kerple-log_r1.npy / _r2.npy; default the paper's
    init U(0, 2), U(0, 1)), sandwich (fixed, `dim` its width), fire (default: nn.Linear's init
    U(+-1/sqrt(fan_in)), c = 0.1, L = 512), deberta (`[1, length, length]`: `build_relative_position` with
    bucket_size 16 and max_position `length`, the bucket index, not a bias).
    Tables `[length, dim]`: dynamic (`weights` = weight `[dim, dim]`, bias `[dim]`, e.g. dynamic_weight.npy /
    dynamic_bias.npy; default nn.Linear's init) applied to zeros, i.e. `Linear(sinusoidal(p))`; xpos
    (`xpos_scale`, the query factor; keys use its inverse).
    """
    if encoding not in RESEARCH_ENCODINGS:
        raise UsageError(f"--encoding {encoding!r}: choose from {', '.join(RESEARCH_ENCODINGS)}")
    heads, length, dim = _positive("heads", heads), _positive("length", length), _positive("dim", dim)
    rng = np.random.default_rng(seed)
    pos = np.arange(length, dtype=np.int64)
    weights = list(weights)
    if encoding.startswith("kerple"):
        kernel = encoding.split("-")[1]
        if weights:
            if len(weights) != 2 or weights[0].shape != weights[1].shape or weights[0].ndim != 1:
                raise UsageError("--weights for KERPLE: two .npy files, r1 and r2, each [heads]")
            r1, r2 = weights
            detail = "given r1, r2 (clamped as the module does)"
        else:
            r1, r2 = rng.uniform(0, 2, heads), rng.uniform(0, 1, heads)
            detail = f"paper init r1 ~ U(0, 2), r2 ~ U(0, 1), seed {seed}"
        r1 = np.maximum(r1, 0.01)
        r2 = np.clip(r2, 0.01, 2.0) if kernel == "power" else np.maximum(r2, 0.01)
        return f"{detail}, kernel={kernel!r}", _call(backend, "kerple_bias", r1, r2, pos, pos, kernel=kernel)
    if encoding == "sandwich":
        return f"dim={dim}", _call(backend, "sandwich_bias", heads, pos, pos, dim=dim)
    if encoding == "fire":
        width = 32
        w1, b1 = rng.uniform(-1, 1, (width, 1)), rng.uniform(-1, 1, width)
        bound = 1 / np.sqrt(width)
        w2, b2 = rng.uniform(-bound, bound, (heads, width)), rng.uniform(-bound, bound, heads)
        detail = f"random init (nn.Linear's), c=0.1, L=512, width {width}, seed {seed}"
        return detail, _call(backend, "fire_bias", np.array(0.1), np.array(512.0), w1, b1, w2, b2, pos, pos)
    if encoding == "deberta":
        bucket_size = 16
        buckets = _call(backend, "build_relative_position", pos, pos, bucket_size=bucket_size,
                        max_position=max(length, bucket_size // 2 + 2))
        return f"bucket index of query - key, bucket_size={bucket_size}, max_position={length}", buckets[None]
    if encoding == "dynamic":
        if weights:
            if len(weights) != 2 or weights[0].shape != (weights[1].shape[0],) * 2:
                raise UsageError("--weights for dynamic: two .npy files, weight [dim, dim] and bias [dim]")
            weight, bias = weights
            detail = "given projection"
        else:
            bound = 1 / np.sqrt(dim)
            weight, bias = rng.uniform(-bound, bound, (dim, dim)), rng.uniform(-bound, bound, dim)
            detail = f"random nn.Linear init, seed {seed}"
        zeros = np.zeros((length, weight.shape[0]))
        return f"Linear(sinusoidal(p)) ({detail})", _call(backend, "dynamic_position_encoding", zeros, weight, bias)
    return "query factor zeta_i ** (p / 512), gamma 0.4 (keys: the inverse)", _call(backend, "xpos_scale", pos, dim)


def figure_research(*, encoding="kerple-log", heads=8, length=64, dim=64, weights=(), seed=0, backend="numpy"):
    """A research encoding: bias per head against distance plus head 0's map (kerple-log, kerple-power,
    sandwich, fire), DeBERTa's bucket map and bucket curve, or a table heatmap (dynamic, xpos)."""
    detail, data = research_arrays(encoding, heads=heads, length=length, dim=dim, weights=weights, seed=seed,
                                   backend=backend)
    figure = new_figure(12, 4.5)
    if encoding in RESEARCH_TABLES:
        if encoding == "xpos":
            data = np.log(data)
        extent = (-0.5, data.shape[1] - 0.5, data.shape[0] - 0.5, -0.5)
        _heatmap(figure, figure.add_subplot(1, 2, 1), data, title="ln(scale)" if encoding == "xpos" else "table",
                 xlabel="channel", ylabel="position", extent=extent, label="value")
        lines = figure.add_subplot(1, 2, 2)
        for c in sorted({0, 1, data.shape[1] // 2, data.shape[1] - 1}):
            lines.plot(np.arange(data.shape[0]), data[:, c], label=f"channel {c}", linewidth=1)
        lines.set_xlabel("position")
        lines.set_ylabel("ln(scale)" if encoding == "xpos" else "value")
        lines.grid(alpha=0.3)
        lines.legend(fontsize="x-small")
        suptitle(figure, f"{encoding}: {detail} [{backend}]")
        return figure
    pos = np.arange(data.shape[-1])
    causal = pos[:, None] >= pos[None, :]
    shown = np.where(causal, data, np.nan) if encoding != "deberta" else data
    lines = figure.add_subplot(1, 2, 1)
    query = data.shape[-1] - 1
    for h in range(data.shape[0]):
        lines.plot(pos - query, shown[h, query], label=f"head {h}" if encoding != "deberta" else "bucket",
                   linewidth=1)
    lines.set_xlabel(f"key position - query position (query {query})")
    lines.set_ylabel("bucket" if encoding == "deberta" else "bias added to the logit")
    lines.set_title("per head against relative position" if encoding != "deberta" else
                    "bucket against relative position", fontsize="medium")
    lines.grid(alpha=0.3)
    lines.legend(fontsize="x-small", ncol=2)
    title = "bucket[query, key]" if encoding == "deberta" else "head 0: bias[query, key] (future masked)"
    _heatmap(figure, figure.add_subplot(1, 2, 2), shown[0], title=title, xlabel="key position",
             ylabel="query position", cmap="viridis", symmetric=False,
             label="bucket" if encoding == "deberta" else "bias")
    heads_text = "" if encoding == "deberta" else f", {data.shape[0]} heads"
    suptitle(figure, f"{encoding}{heads_text} ({detail}) [{backend}]")
    return figure


FIGURES = {"research": figure_research, "table": figure_table, "rope-decay": figure_rope_decay, "bias": figure_bias,
           "attention-maps": figure_attention_maps, "diff": figure_diff, "experiment": figure_experiment,
           "mrope": figure_mrope, "schedule": figure_schedule}
