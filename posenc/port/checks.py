"""Verification of a written port: recompute what the encodings feed, on the source and on the target,
and the helpers the presets' own checks share (`probe_positions`, `rope_logits`, `layer_of_key`).
Every logits check probes where `posenc.modelspec.compare.band_probe_positions` says (the one probe rule).

Every check reads the target back from the written file (through its own format's reader, i.e.
safetensors / torch / h5py / flax msgpack) and compares it with the source under the tolerance policy
(`posenc_np.testing`). Large tensors are read a block of whole rows at a time (see `_row_blocks`):

* `written`: every output tensor equals the declared conversion of its source tensor (exact).
* `rope-logits`: for each q/k pair, attention logits `q . k` with RoPE in the source layout on the
  source weights vs the target layout on the target weights, at the probe positions of the pair's
  frequencies (`rope_probe_positions`: a quarter and half turn of every band, 0..7, the original context of
  a scaling, up to 8191), in float64 (`posenc_np.apply_rope`); grouped-query k heads are repeated as the models do. A missing or
  inverted permutation, or q and k head dims that disagree, fails here (scores differ by O(1)).
  With a multi-axis RoPE (`mrope_section` in the settings: Qwen2-VL / Qwen3-VL), one check per probe
  prompt: text only (the probe positions on every axis), text + image, text + video (`MROPE_VISION_PROBES`,
  the ids of `mrope_position_ids`), each
  rotated with the section and interleaving of the settings. With per-layer settings (`rope["layers"]`, from
  an `--hf-config` whose layers differ: posenc/port/hf_config.py), each pair is checked with the settings of
  the layer its glob captures name (a NoPE layer without rotation), and the check's note names the layer type.
* `dense`: `x @ W_source.T` vs `x @ K_target` for every transposed kernel, first 256 output units
  (float64).
* `table`: position tables with offsets: `learned(source, p + offset)` vs `learned(target, p)` (exact).
* `resize`: the target table vs `resize_table` of the source, in the spec and in each installed
  framework's `resize_table` (posenc_torch / posenc_tf / posenc_jax), float32 tolerance.
* `relative`: `relative_embeddings(source, sign="query-key")` vs `relative_embeddings(target,
  sign="key-query")` for reversed tables (HF BERT relative_key <-> Shaw), exact.
* `t5-bias`: `t5_bias` of the source table (transposed to `[buckets, heads]`) vs the target's, exact;
  encoder tables bidirectional, decoder tables (a name containing "decoder") unidirectional.
  `relative` and `t5-bias` also run in the target format's framework (safetensors/.pt: posenc_torch,
  .weights.h5: posenc_tf, .msgpack: posenc_jax).
* `embeddings` (BERT presets): word + position + token type embeddings then LayerNorm computed by
  the frameworks (torch on the source file, JAX / Keras on the target file) vs float64 NumPy.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from posenc_np.conventions import conventions
from posenc_np.learned import learned, resize_grid, resize_table
from posenc_np.mrope import mrope_position_ids
from posenc_np.relative import relative_embeddings
from posenc_np.rope import apply_rope, rope_frequencies
from posenc_np.t5 import t5_bias
from posenc_np.testing import compare, tolerance

from ..adapters import BACKENDS, adapter
from ..formats.base import drop_pages
from ..modelspec.compare import band_probe_positions

__all__ = ["Check", "verify_plan", "PROBE_LIMIT", "MROPE_VISION_PROBES", "mrope_probes", "probe_positions",
           "rope_probe_positions", "rope_logits", "layer_of_key", "installed_backends", "framework_resize_checks"]

#: One past the last position a logits check probes when the port names no context length.
PROBE_LIMIT = 8192


def _mrope_probe(types, **grids):
    ids, _ = mrope_position_ids(np.array([types]), spatial_merge_size=2, tokens_per_second=2, **grids)
    return ids[:, 0]


#: Multi-axis vision probes `[3, seq]`: text + a 4 x 6 image (ids differ per axis), text + a 3-frame video 2 s per
#: grid step (temporal ids 4 apart), each resuming text after the vision run.
MROPE_VISION_PROBES = {
    "image": _mrope_probe([0, 0, 0] + [1] * 6 + [0, 0], image_grid_thw=[[1, 4, 6]]),
    "video": _mrope_probe([0, 0] + [2] * 12 + [0, 0, 0], video_grid_thw=[[3, 4, 4]], second_per_grid_ts=[2.0]),
}


def mrope_probes(text_positions) -> dict:
    """The multi-axis probe prompts: "text" (`text_positions` on every axis, `[3, seq]`) and the vision ones."""
    text = np.asarray(text_positions, dtype=np.int64)
    return {"text": np.broadcast_to(text, (3, len(text))), **MROPE_VISION_PROBES}


def probe_positions(inv_freq, limit=PROBE_LIMIT, *, boundaries=()) -> np.ndarray:
    """`band_probe_positions` of one rotary setting given as `inv_freq` (radians per position), up to `limit - 1`."""
    return band_probe_positions([np.asarray(inv_freq, np.float64) / (2 * math.pi)], limit, boundaries=boundaries)


def rope_probe_positions(rope, head_dim, limit=PROBE_LIMIT) -> np.ndarray:
    """The probe positions of the settings `rope` (`base`, `scaling`, `rotary_dim`, None: `head_dim`) up to
    `limit - 1`, the scaling's original context length a boundary; 0..7 and `limit - 1` for a NoPE layer."""
    if rope.get("nope"):
        return band_probe_positions([], limit)
    inv_freq, _ = rope_frequencies(rope.get("rotary_dim") or head_dim, base=rope["base"], scaling=rope["scaling"])
    original = (rope["scaling"] or {}).get("original_max_position_embeddings")
    return probe_positions(inv_freq, limit, boundaries=[original - 1, original] if original else ())


def layer_of_key(key):
    """The decoder layer index a q/k pair's glob captures name (the first all-digit capture), or None."""
    for part in key or ():
        if isinstance(part, str) and part.isdigit():
            return int(part)
    return None


@dataclass
class Check:
    kind: str
    name: str
    max_abs_err: float
    atol: float
    tol_why: str
    passed: bool
    note: str = ""

    def as_dict(self):
        return asdict(self)


def _check(kind, name, actual, desired, tol, note=""):
    result = compare(actual, desired, tol)
    return Check(kind, name, result.max_abs_err, result.atol, result.tol_why, result.passed,
                 note or result.message)


def _f64(array):
    return np.asarray(array).astype(np.float64)


def _before(entry, kinds_after):
    """The source tensor with the conversions that come before `kinds_after` applied."""
    def produce(reader):
        array = reader.get(entry.source)
        for op in entry.ops:
            if op.kind in kinds_after:
                break
            array = op.apply(array)
        return array
    return produce


def _project(x, weight, transposed=False):
    """`x @ W.T` (torch `[out, in]`) or `x @ K` (`transposed`: `[in, out]`) in float64, a block of rows of
    the weight at a time, so neither a float64 copy nor the whole memory map stays in memory."""
    if transposed:
        out = np.zeros((x.shape[0], weight.shape[1]))
        for start, rows in _row_blocks(weight):
            out += x[:, start:start + len(rows)] @ _f64(rows)
        return out
    out = np.empty((x.shape[0], weight.shape[0]))
    for start, rows in _row_blocks(weight):
        out[:, start:start + len(rows)] = x @ _f64(rows).T
    return out


def rope_logits(q, k, heads, kv_heads, rope, layout, positions):
    """Float64 logits `[heads, seq, seq]` of projections `q`, `k` (`[seq, heads * head_dim]`) at
    `positions` (`[seq]`, or `[A, seq]` with the settings' `mrope_section`) under RoPE `layout`; the kv
    heads are repeated as grouped-query attention does."""
    seq = positions.shape[-1]
    q, k = q.reshape(seq, heads, -1).transpose(1, 0, 2), k.reshape(seq, kv_heads, -1).transpose(1, 0, 2)
    if not rope.get("nope"):  # a NoPE layer of a per-layer schedule: plain q . k
        kw = dict(base=rope["base"], scaling=rope["scaling"], rotary_dim=rope["rotary_dim"], layout=layout)
        if rope.get("mrope_section") is not None:
            kw.update(mrope_section=rope["mrope_section"], mrope_interleaved=bool(rope.get("mrope_interleaved")))
        q, k = apply_rope(q, positions, **kw), apply_rope(k, positions, **kw)
    return q @ np.repeat(k, heads // kv_heads, axis=0).transpose(0, 2, 1)


def verify_plan(entries, source, target, *, rope=None, extra=(), seed=0, framework=None) -> list[Check]:
    """All checks for a written port. `source`/`target` are Readers; `extra` are callables -> [Check].

    `framework` ("torch", "tf", "jax" or None) also computes the T5 and relative checks on the target
    with that backend (the framework the target's format belongs to)."""
    rng = np.random.default_rng(seed)
    checks = []
    by_target = {}
    for entry in entries:
        actual = target.get(entry.target) if entry.target in target else None
        if actual is None:
            checks.append(Check("written", entry.target, float("inf"), 0.0, "exact", False, "missing in TARGET"))
            continue
        kinds = [op.kind for op in entry.ops]
        if entry.source is None:  # generated by the preset (llama.cpp rope_freqs): its planned values
            checks.append(_written(entry, actual, entry.tags["generated"]))
            continue
        if kinds in ([], ["transpose"]):  # the large tensors: compare block by block from the memory maps
            checks.append(_written_blocks(entry, actual, source.get(entry.source), transposed=bool(kinds)))
        else:
            checks.append(_written(entry, actual, entry.produce(source)))
        if entry.tags.get("role") in ("q", "k"):
            by_target[entry.target] = actual  # a memory map: read again, a block at a time, by the logits check
        if entry.tags.get("transposed") and np.ndim(actual) == 2 and entry.tags.get("role") is None:
            checks.append(_dense_check(entry, source, actual, rng))
        checks.extend(_table_checks(entry, source, actual, rng, framework))
    if rope:
        checks.extend(_rope_checks(entries, source, by_target, rope, rng))
    for fn in extra:
        checks.extend(fn(source, target))
    return checks


def _same_bits(a, d):
    """Bitwise equality of two blocks (NaN payloads included), with one contiguous copy at most."""
    a, d = np.ascontiguousarray(a), np.ascontiguousarray(d)
    if a.dtype.itemsize not in (1, 2, 4, 8):
        return np.array_equal(a, d)
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    return bool(np.array_equal(a.view(unsigned), d.view(unsigned)))


def _written(entry, actual, desired, elements=1 << 20):
    """Exact equality, a block at a time: the float64 copies `compare` makes of a whole 1 GB tensor
    would dominate the port's memory, and the memory maps' pages are dropped as they are checked."""
    if tuple(np.shape(actual)) != tuple(np.shape(desired)) or actual.dtype != desired.dtype:
        return Check("written", entry.target, float("inf"), 0.0, "exact", False,
                     f"{np.shape(actual)} {actual.dtype} written, {np.shape(desired)} {desired.dtype} expected")
    flat_a, flat_d = np.asarray(actual).reshape(-1), np.asarray(desired).reshape(-1)
    for start in range(0, flat_a.size, elements):
        a, d = flat_a[start:start + elements], flat_d[start:start + elements]
        if not _same_bits(a, d):
            return _check("written", entry.target, a, d, tolerance("float64", exact=True))
        drop_pages(actual, desired)
    return Check("written", entry.target, 0.0, 0.0, "exact", True)


def _row_blocks(array, elements=1 << 20):
    """`(start, array[start:start + step])` of about `elements` each, dropping the pages read after each.

    Only whole rows are read from a memory map: a column band of a map faults in (fault-around) nearly
    every page of the file region anyway."""
    step = max(1, elements // max(1, int(np.prod(array.shape[1:], dtype=np.int64))))
    for start in range(0, array.shape[0], step):
        yield start, array[start:start + step]
        drop_pages(array)


def _written_blocks(entry, actual, source, *, transposed):
    """`_written` for an unchanged or transposed tensor without materialising either side: a transpose
    is compared tile by tile, rows of the source against rows of the target."""
    if not (transposed and np.ndim(source) == 2):
        return _written(entry, actual, np.transpose(source) if transposed else source)
    if tuple(actual.shape) != tuple(source.shape[::-1]) or actual.dtype != source.dtype:
        return _written(entry, actual, np.transpose(source))  # reports the mismatch
    for i, rows in _row_blocks(source):
        for j, cols in _row_blocks(actual):
            a, d = cols[:, i:i + len(rows)], rows[:, j:j + len(cols)].T
            if not _same_bits(a, d):
                return _check("written", entry.target, a, d, tolerance("float64", exact=True))
    return Check("written", entry.target, 0.0, 0.0, "exact", True)


def _dense_check(entry, source, actual, rng, units=256):
    """`x @ W.T` vs `x @ K` on the first `units` outputs of a transposed kernel, reading whole rows only."""
    weight = _before(entry, ("transpose",))(source)
    src = _f64(weight[:units])
    drop_pages(weight)
    x = rng.standard_normal((4, src.shape[1]))
    desired = x @ src.T
    got = np.zeros_like(desired)
    for start, rows in _row_blocks(actual):
        got += x[:, start:start + len(rows)] @ _f64(rows[:, :units])
    return _check("dense", entry.target, got, desired, tolerance("float64", scale=np.abs(desired).max()))


def _rope_checks(entries, source, by_target, rope, rng):
    pairs = {}
    for entry in entries:
        if entry.tags.get("role") in ("q", "k"):
            pairs.setdefault(entry.tags["key"], {})[entry.tags["role"]] = entry
    out = []
    for key, pair in pairs.items():
        if set(pair) != {"q", "k"}:
            out.append(Check("rope-logits", ", ".join(e.target for e in pair.values()), float("inf"), 0.0, "",
                             False, "a q projection without its k (or the reverse): cannot compute logits"))
            continue
        q_entry, k_entry = pair["q"], pair["k"]
        if q_entry.target not in by_target or k_entry.target not in by_target:
            continue
        if q_entry.tags["head_dim"] != k_entry.tags["head_dim"]:
            out.append(Check("rope-logits", f"{q_entry.target} . {k_entry.target}", float("inf"), 0.0, "", False,
                             f"head dims differ: q {q_entry.tags['head_dim']} ({q_entry.tags['heads']} heads), "
                             f"k {k_entry.tags['head_dim']} ({k_entry.tags['heads']} heads); check --heads/--kv-heads"))
            continue
        heads, kv_heads = q_entry.tags["heads"], k_entry.tags["heads"]
        layer_rope, layer_note = _layer_rope(rope, key)
        if layer_rope is None:
            out.append(Check("rope-logits", f"{q_entry.target} . {k_entry.target}", float("inf"), 0.0, "", False,
                             layer_note))
            continue
        positions = rope_probe_positions(layer_rope, q_entry.tags["head_dim"])
        probes = mrope_probes(positions) if rope.get("mrope_section") is not None else {None: positions}
        for probe, positions in probes.items():
            x = rng.standard_normal((positions.shape[-1], q_entry.source_shape[-1]))
            q_src, k_src = (_project(x, _before(e, ("rope", "transpose"))(source)) for e in (q_entry, k_entry))
            q_tgt, k_tgt = (_project(x, by_target[e.target], bool(e.tags.get("transposed")))
                            for e in (q_entry, k_entry))
            desired = rope_logits(q_src, k_src, heads, kv_heads, layer_rope, rope["source"], positions)
            actual = rope_logits(q_tgt, k_tgt, heads, kv_heads, layer_rope, rope["target"], positions)
            name = f"{q_entry.target} . {k_entry.target}" + (f" ({probe} positions)" if probe else "")
            out.append(_check("rope-logits", name, actual, desired, tolerance("float64", scale=np.abs(desired).max()),
                              note=layer_note))
    return out


def _layer_rope(rope, key):
    """The settings a q/k pair is checked with, and a note: `rope` itself, or with per-layer settings
    (`rope["layers"]`, posenc.port.hf_config) the entry of the layer its glob captures name (NoPE: no rotation);
    `(None, reason)` when the pair names no layer of the schedule."""
    layers = rope.get("layers")
    if layers is None:
        return rope, ""
    layer = layer_of_key(key)
    if layer is None or not 0 <= layer < len(layers):
        return None, (f"per-layer RoPE settings ({len(layers)} layers) but the pair's glob captures {key} name no "
                      "layer of them")
    entry = layers[layer]
    if entry is None:
        return {**rope, "nope": True}, f"layer {layer}: NoPE (no rotation)"
    kind = (entry.get("scaling") or {}).get("rope_type", "default")
    return ({**rope, **{k: entry[k] for k in ("base", "scaling", "rotary_dim")}},
            f"layer {layer} ({entry.get('layer_type') or 'rope'}): base {entry['base']:g}, {kind} scaling, "
            f"rotary_dim {entry['rotary_dim']}")


def _in_framework(framework, fn_name, table, *args, **kwargs):
    """`posenc_<framework>.<fn_name>(table, *positions, **kwargs)` as NumPy, or None without a framework."""
    if framework is None or not adapter(framework).available():
        return None
    ad = adapter(framework)
    tensors = [ad.from_numpy(np.array(a)) for a in (table, *args)]
    return ad.to_numpy(getattr(ad.module, fn_name)(*tensors, **kwargs))


def _table_checks(entry, source, actual, rng, framework=None):
    """The checks an entry's tags ask for: offset table, resize, relative reversal, T5 bias."""
    tags = entry.tags
    out = []
    if "offset" in tags and "resize" not in tags:
        out.append(_offset_check(entry, source, actual, rng))
    if "resize" in tags:
        old, new, method = tags["resize"]
        table = _before(entry, ("resize",))(source)
        out.append(_check("resize", f"{entry.target} (spec)", actual, resize_table(table, new, method=method),
                          tolerance("float64", exact=True), note=f"{old} -> {new} rows, {method}"))
        out.extend(framework_resize_checks(entry.target, table, actual, new, method))
    if "resize_grid" in tags:
        out.append(_grid_check(entry, source, actual))
    if tags.get("reversed"):
        out.extend(_relative_checks(entry, source, actual, framework))
    if "t5" in tags:
        out.extend(_t5_checks(entry, source, actual, framework))
    return out


def _grid_check(entry, source, actual):
    """The resized ViT grid against `resize_grid` under the chosen convention (exact), with what each other
    convention would have written, as the largest difference in % of the source table's range."""
    from .mapping import GRID_CONVENTIONS, grid_resize_arguments

    old, new, prefix, convention = entry.tags["resize_grid"]
    table = np.asarray(_before(entry, ("resize_grid",))(source), np.float64)
    table = table.reshape(table.shape[-2:]) if table.ndim == 3 else table
    got = np.asarray(actual, np.float64).reshape(-1, table.shape[-1])

    def under(name):
        grids = grid_resize_arguments(old, new, prefix, name)
        return resize_grid(table, *grids[:2], **grids[2])

    span = float(np.ptp(table[prefix:])) or 1.0
    want = under(convention)
    # the target holds the table in its dtype: rounding to it is the whole allowed error
    tol = tolerance(str(np.asarray(actual).dtype), scale=float(np.abs(want).max())) \
        if np.asarray(actual).dtype != np.float64 else tolerance("float64", exact=True)

    def differs(name):
        gap = float(np.abs(under(name) - want).max()) / span
        return f"{name} {100 * gap:.2g}%" if gap > 1e-12 else f"{name} the same"

    others = ", ".join(differs(name) for name in GRID_CONVENTIONS if name != convention)
    params = conventions[convention].params
    return _check("resize", f"{entry.target} (spec)", got, want, tol,
                  note=f"{old[0]}x{old[1]} -> {new[0]}x{new[1]} grid, {prefix} prefix row(s), convention {convention} "
                       f"({', '.join(f'{k}={v}' for k, v in params.items())}); the others would differ by {others} "
                       "of the table's range")


def _offset_check(entry, source, actual, rng):
    offset = entry.tags["offset"]
    table = _before(entry, ("strip", "pad"))(source)
    rows = min(table.shape[0] - max(offset, 0), actual.shape[0] - max(-offset, 0))
    p = np.unique(np.concatenate([[0, rows - 1], rng.integers(0, rows, 16)]))
    src_p, tgt_p = (p + offset, p) if offset > 0 else (p, p - offset)
    return _check("table", entry.target, learned(actual, tgt_p), learned(table, src_p),
                  tolerance("float64", exact=True), note=f"source row = target row {offset:+d}")


def _spec_and_framework(kind, entry, fn, framework, table, args, kwargs, desired, note):
    """The spec's `fn` and the target framework's on the target table, each against `desired` (exact)."""
    out = []
    for label, got in (("spec", fn(table, *args, **kwargs)),
                       (framework, _in_framework(framework, fn.__name__, table, *args, **kwargs))):
        if got is not None:
            out.append(_check(kind, f"{entry.target} ({label})", got, desired, tolerance("float64", exact=True),
                              note=note))
    return out


def _relative_checks(entry, source, actual, framework):
    table = _before(entry, ("reverse",))(source)
    if table.shape[0] % 2 == 0:
        return []  # not a [2k + 1, dim] relative table: the reversal is checked by `written` only
    k = (table.shape[0] - 1) // 2
    q_pos, k_pos = np.arange(0, 2 * k + 1, 3), np.arange(0, 2 * k + 1, 2)
    desired = relative_embeddings(table, q_pos, k_pos, max_distance=k, sign="query-key")
    return _spec_and_framework("relative", entry, relative_embeddings, framework, actual, (q_pos, k_pos),
                               dict(max_distance=k, sign="key-query"), desired,
                               "query-key (HF relative_key) -> key-query (Shaw)")


def _t5_checks(entry, source, actual, framework):
    layouts = entry.tags["t5"]
    table = _before(entry, ("transpose",))(source)
    table = table.T if layouts["source_layout"] == "heads-buckets" else table
    target = actual.T if layouts["target_layout"] == "heads-buckets" else actual
    bidirectional = "decoder" not in entry.source
    positions = np.arange(0, 300, 7)
    kwargs = dict(bidirectional=bidirectional, num_buckets=table.shape[0])
    desired = t5_bias(table, positions, positions, **kwargs)
    return _spec_and_framework("t5-bias", entry, t5_bias, framework, target, (positions, positions), kwargs,
                               desired, f"bidirectional={bidirectional}")


def installed_backends():
    """The backends whose framework is installed."""
    return [name for name in BACKENDS if adapter(name).available()]


def framework_resize_checks(name, table, actual, new_len, method):
    """Each installed framework's `resize_table` on the source table vs the written (spec) table."""
    out = []
    scale = float(np.abs(_f64(table)).max())
    for backend in installed_backends():
        ad = adapter(backend)
        got = ad.to_numpy(ad.module.resize_table(ad.from_numpy(np.array(table)), new_len, method=method))
        # the framework sums 2 (4 for cubic) float32 products; the written table is float64-rounded
        out.append(_check("resize", f"{name} ({backend})", got, actual, tolerance(got.dtype, scale=scale)))
    return out
