"""Verification of a written port: recompute what the encodings feed, on the source and on the target.

Every check reads the target back from the written file (through its own format's reader, i.e.
safetensors / torch / h5py / flax msgpack) and compares it with the source under the tolerance policy
(`posenc_np.testing`):

* `written`: every output tensor equals the declared conversion of its source tensor (exact).
* `rope-logits`: for each q/k pair, attention logits `q . k` with RoPE in the source layout on the
  source weights vs the target layout on the target weights, at probe positions up to 8191, in
  float64 (`posenc_np.apply_rope`); grouped-query k heads are repeated as the models do. A permutation
  that is missing, applied to v, or uses the wrong head count fails here (scores differ by O(1)).
* `dense`: `x @ W_source.T` vs `x @ K_target` for every transposed kernel (float64).
* `table`: position tables with offsets: `learned(source, p + offset)` vs `learned(target, p)` (exact).
* `resize`: the target table vs `resize_table` of the source, in the spec and in each installed
  framework's `resize_table` (posenc_torch / posenc_tf / posenc_jax), float32 tolerance.
* `relative`: `relative_embeddings(source, sign="query-key")` vs `relative_embeddings(target,
  sign="key-query")` for reversed tables (HF BERT relative_key <-> Shaw), exact.
* `t5-bias`: `t5_bias` of the source table (transposed to `[buckets, heads]`) vs the target's, exact;
  encoder tables bidirectional, decoder tables (a name containing "decoder") unidirectional.
* `embeddings` (BERT presets): word + position + token type embeddings then LayerNorm computed by
  the frameworks (torch on the source file, JAX / Keras on the target file) vs float64 NumPy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..learned import learned, resize_table
from ..relative import relative_embeddings
from ..rope import apply_rope
from ..t5 import t5_bias
from ..testing import compare, tolerance

__all__ = ["Check", "verify_plan", "PROBE_POSITIONS"]

# short-range positions and long-range ones where a wrong base or scaling shows
PROBE_POSITIONS = np.array([0, 1, 2, 3, 7, 100, 511, 2047, 4095, 8191])


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


def _rope_logits(q_src, k_src, q_tgt, k_tgt, q_entry, k_entry, rope, rng):
    """Float64 logits `[heads, seq, seq]` of source and target q/k weights under their RoPE layouts."""
    hidden = q_src.shape[1]
    x = rng.standard_normal((len(PROBE_POSITIONS), hidden))

    def logits(wq, wk, layout):
        heads, kv = q_entry.tags["heads"], k_entry.tags["heads"]
        q = (x @ wq.T).reshape(len(x), heads, -1).transpose(1, 0, 2)
        k = (x @ wk.T).reshape(len(x), kv, -1).transpose(1, 0, 2)
        kw = dict(base=rope["base"], scaling=rope["scaling"], rotary_dim=rope["rotary_dim"], layout=layout)
        q = apply_rope(q, PROBE_POSITIONS, **kw)
        k = np.repeat(apply_rope(k, PROBE_POSITIONS, **kw), heads // kv, axis=0)
        return q @ k.transpose(0, 2, 1)

    return logits(q_src, k_src, rope["source"]), logits(q_tgt, k_tgt, rope["target"])


def verify_plan(entries, source, target, *, rope=None, extra=(), seed=0) -> list[Check]:
    """All checks for a written port. `source`/`target` are Readers; `extra` are callables -> [Check]."""
    rng = np.random.default_rng(seed)
    checks = []
    by_target = {}
    for entry in entries:
        actual = target.get(entry.target) if entry.target in target else None
        if actual is None:
            checks.append(Check("written", entry.target, float("inf"), 0.0, "exact", False, "missing in TARGET"))
            continue
        kinds = [op.kind for op in entry.ops]
        if kinds in ([], ["transpose"]):  # the large tensors: compare block by block from the memory maps
            checks.append(_written_blocks(entry, actual, source.get(entry.source), transposed=bool(kinds)))
        else:
            checks.append(_written(entry, actual, entry.produce(source)))
        if entry.tags.get("role") in ("q", "k"):
            by_target[entry.target] = np.asarray(actual)
        if entry.tags.get("transposed") and np.ndim(actual) == 2 and entry.tags.get("role") is None:
            # the layout check needs a few output units only: a float64 copy of a whole 1 GB kernel would not do
            src = _f64(_before(entry, ("transpose",))(source)[:256])
            x = rng.standard_normal((4, src.shape[1]))
            desired = x @ src.T
            checks.append(_check("dense", entry.target, x @ _f64(actual[:, :256]), desired,
                                 tolerance("float64", scale=np.abs(desired).max())))
        checks.extend(_table_checks(entry, source, actual, rng))
    if rope:
        checks.extend(_rope_checks(entries, source, by_target, rope, rng))
    for fn in extra:
        checks.extend(fn(source, target))
    return checks


def _written(entry, actual, desired, rows=1 << 22):
    """Exact equality, a chunk at a time: the float64 copies `compare` makes of a whole 1 GB tensor
    would dominate the port's memory."""
    actual, desired = np.asarray(actual), np.asarray(desired)
    if actual.shape != desired.shape or actual.dtype != desired.dtype:
        return Check("written", entry.target, float("inf"), 0.0, "exact", False,
                     f"{actual.shape} {actual.dtype} written, {desired.shape} {desired.dtype} expected")
    flat_a, flat_d = actual.reshape(-1), desired.reshape(-1)
    for start in range(0, flat_a.size, rows):
        a, d = flat_a[start:start + rows], flat_d[start:start + rows]
        if not np.array_equal(a, d, equal_nan=a.dtype.kind == "f" or a.dtype.name == "bfloat16"):
            return _check("written", entry.target, a, d, tolerance("float64", exact=True))
    return Check("written", entry.target, 0.0, 0.0, "exact", True)


def _written_blocks(entry, actual, source, *, transposed, elements=1 << 22):
    """`_written` for an unchanged or transposed tensor without materialising either side."""
    if transposed and np.ndim(source) == 2:
        if tuple(actual.shape) != tuple(source.shape[::-1]) or actual.dtype != source.dtype:
            return _written(entry, actual, np.transpose(source))  # reports the mismatch
        step = max(1, elements // max(1, actual.shape[1]))
        for start in range(0, actual.shape[0], step):
            a, d = np.asarray(actual[start:start + step]), np.asarray(source[:, start:start + step]).T
            if not np.array_equal(a, d, equal_nan=a.dtype.kind == "f" or a.dtype.name == "bfloat16"):
                return _check("written", entry.target, a, d, tolerance("float64", exact=True))
        return Check("written", entry.target, 0.0, 0.0, "exact", True)
    return _written(entry, actual, np.transpose(source) if transposed else source)


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
        if pair["q"].target not in by_target or pair["k"].target not in by_target:
            continue
        q_src, k_src = (_f64(_before(e, ("rope", "transpose"))(source)) for e in (q_entry, k_entry))
        q_tgt, k_tgt = (_f64(by_target[e.target]) for e in (q_entry, k_entry))
        if q_entry.tags.get("transposed"):
            q_tgt, k_tgt = q_tgt.T, k_tgt.T
        desired, actual = _rope_logits(q_src, k_src, q_tgt, k_tgt, q_entry, k_entry, rope, rng)
        out.append(_check("rope-logits", f"{q_entry.target} . {k_entry.target}", actual, desired,
                          tolerance("float64", scale=np.abs(desired).max())))
    return out


def _table_checks(entry, source, actual, rng):
    out = []
    tags = entry.tags
    if "offset" in tags and "resize" not in tags:
        offset = tags["offset"]
        table = _before(entry, ("strip", "pad"))(source)
        rows = min(table.shape[0] - max(offset, 0), actual.shape[0] - max(-offset, 0))
        p = np.unique(np.concatenate([[0, rows - 1], rng.integers(0, rows, 16)]))
        src_p, tgt_p = (p + offset, p) if offset > 0 else (p, p - offset)
        out.append(_check("table", entry.target, learned(actual, tgt_p), learned(table, src_p),
                          tolerance("float64", exact=True), note=f"source row = target row {offset:+d}"))
    if "resize" in tags:
        old, new, method = tags["resize"]
        table = _before(entry, ("resize",))(source)
        out.append(_check("resize", f"{entry.target} (spec)", actual, resize_table(table, new, method=method),
                          tolerance("float64", exact=True), note=f"{old} -> {new} rows, {method}"))
        out.extend(framework_resize_checks(entry.target, table, actual, new, method))
    if tags.get("reversed"):
        table = _before(entry, ("reverse",))(source)
        if table.shape[0] % 2:
            k = (table.shape[0] - 1) // 2
            q_pos, k_pos = np.arange(0, 2 * k + 1, 3), np.arange(0, 2 * k + 1, 2)
            out.append(_check("relative", entry.target,
                              relative_embeddings(actual, q_pos, k_pos, max_distance=k, sign="key-query"),
                              relative_embeddings(table, q_pos, k_pos, max_distance=k, sign="query-key"),
                              tolerance("float64", exact=True), note="query-key (HF relative_key) -> key-query (Shaw)"))
    if "t5" in tags:
        buckets_first = _before(entry, ("transpose",))(source)
        if tags["t5"]["source_layout"] == "heads-buckets":
            buckets_first = buckets_first.T
        target_table = actual.T if tags["t5"]["target_layout"] == "heads-buckets" else actual
        bidirectional = "decoder" not in entry.source
        positions = np.arange(0, 300, 7)
        kw = dict(bidirectional=bidirectional, num_buckets=buckets_first.shape[0])
        out.append(_check("t5-bias", entry.target, t5_bias(target_table, positions, positions, **kw),
                          t5_bias(buckets_first, positions, positions, **kw), tolerance("float64", exact=True),
                          note=f"bidirectional={bidirectional}"))
    return out


def installed_backends():
    from ..suite.backends import adapter

    return [name for name in ("torch", "tf", "jax") if adapter(name).available()]


def framework_resize_checks(name, table, actual, new_len, method):
    """Each installed framework's `resize_table` on the source table vs the written (spec) table."""
    from ..suite.backends import adapter

    out = []
    scale = float(np.abs(_f64(table)).max())
    for backend in installed_backends():
        ad = adapter(backend)
        got = ad.to_numpy(ad.module.resize_table(ad.from_numpy(np.array(table)), new_len, method=method))
        # the framework sums 2 (4 for cubic) float32 products; the written table is float64-rounded
        out.append(_check("resize", f"{name} ({backend})", got, actual, tolerance(got.dtype, scale=scale)))
    return out
