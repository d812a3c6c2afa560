"""ONNX Runtime as a `posenc check` backend: a registry case runs on the graph `posenc export` would write.

`onnx_call(fn, args, kwargs, optimize=...)` takes a case's NumPy inputs (the same the spec and the
framework backends get), builds the `posenc.onnx.graphs` model of that contract function with the
case's parameters (cached per function, parameters, shapes and tables), runs it once on ONNX Runtime
(CPU) and returns the output. "eager" is ONNX Runtime with every graph optimisation disabled, "jit"
with `ORT_ENABLE_ALL` (constant folding, fusions), so a fusion that changes a result fails the check.

Inputs are fed in the exported graphs' form: RoPE `x [batch, heads, seq, head_dim]` with
`positions [batch, seq]` int64; an `x [batch, seq, heads, head_dim]` case (positions `[batch, seq, 1]`)
runs the operator's 3-D form `[batch, seq, heads * head_dim]` with `num_heads`. Per-row positions
(batch > 1, KV-cache offsets, left padding, packed sequences) reach the operator's `position_ids` as
they are. The cache holds `max(positions) + 1` rows (every position of the case).

Multi-axis RoPE (`mrope_section` with three axes sharing the frequencies: Qwen2-VL's chunked and Qwen3-VL's
interleaved sections) runs ONNX Runtime's contrib `com.microsoft.MRotaryEmbedding` with position streams
`[3, batch, seq]`; sinusoidal cases run the graph computed from float64 angles (`posenc export` without
`--max-len`).

What the graphs cannot express raises `NotExportable` with the reason (the suite reports a skip):
bfloat16 (no ONNX Runtime CPU kernels), functions other than the six contract encodings (gradients,
attention paths, resizing), float positions, dynamic NTK scaling, positions that vary across heads,
multi-axis RoPE with other than three axes or with per-axis frequencies, or with a length-dependent scaling.
"""

from __future__ import annotations

import hashlib

import numpy as np

from posenc_np.backend import dtype_name, freeze
from posenc_np.rope import resolve_rotary_dim

from . import graphs
from .graphs import NotExportable

__all__ = ["onnx_call", "SUPPORTED", "NotExportable"]

#: Above this many cache rows a case feeds a compacted cache: one row per distinct position of the case,
#: holding the spec's values for that position, and positions replaced by row indices (LongRoPE's
#: in-graph length test reads the true positions back from the rows). A million-row cache costs
#: seconds per graph; tests/app/onnx/test_export.py runs the full-size cache of an exported model.
COMPACT_ABOVE = 1 << 14

SUPPORTED = ("apply_rope", "sinusoidal", "learned", "alibi_bias", "t5_bias", "relative_embeddings")


def _int_positions(name, positions):
    positions = np.asarray(positions)
    if positions.dtype.kind not in "iu":
        raise NotExportable(f"{name} of dtype {positions.dtype}: the exported graphs take int64 positions")
    return positions.astype(np.int64)


def _digest(array):
    return hashlib.sha1(np.ascontiguousarray(array).view(np.uint8)).hexdigest()


def _float_dtype(array):
    return graphs.check_dtype(dtype_name(array.dtype))


def _rope(args, kwargs):
    x, positions = args
    x = np.asarray(x)
    dtype = _float_dtype(x)
    positions = _int_positions("positions", positions)
    if kwargs.get("mrope_axes") is not None:  # an explicit per-pair axis map (ERNIE 4.5-VL, short sections)
        raise NotExportable("mrope_axes (an axis per pair): MRotaryEmbedding takes three contiguous (mrope_layout 0) "
                            "or interleaved (1) sections")
    if kwargs.get("mrope_section") is not None:
        return _mrope(x, positions, kwargs)
    if x.ndim != 4:
        raise NotExportable(f"x of rank {x.ndim}: the RotaryEmbedding operator takes 4-D (or 3-D) x")
    lead = np.broadcast_to(positions, x.shape[:-1])  # [B, A, S] with A the heads axis or the seq axis
    params = {k: v for k, v in kwargs.items() if k in ("base", "layout", "rotary_dim", "scaling", "rotary_pct")}
    params["rotary_dim"] = resolve_rotary_dim(x.shape[-1], params.pop("rotary_dim", None), params.pop("rotary_pct", None))
    if np.all(lead == lead[:, :1, :]):  # x [batch, heads, seq, dim]: the contract's form
        position_ids, x_layout, feed = lead[:, 0, :], "bhsd", x
        heads = x.shape[1]
    elif np.all(lead == lead[:, :, :1]):  # x [batch, seq, heads, dim]: the operator's 3-D form
        position_ids, x_layout, feed = lead[:, :, 0], "bsd", x.reshape(*x.shape[:2], -1)
        heads = x.shape[2]
    else:
        raise NotExportable("positions that differ between heads: RotaryEmbedding takes position_ids [batch, seq]")
    max_len, position_ids, rows = _compact(position_ids)
    build = dict(head_dim=x.shape[-1], max_len=max_len, dtype=dtype, heads=heads, x_layout=x_layout,
                 cache_positions=rows, **params)
    feeds = {"x": feed, "positions": np.ascontiguousarray(position_ids)}
    return "rope_model", build, (), feeds, lambda y: y.reshape(x.shape)


def _mrope(x, positions, kwargs):
    """Multi-axis RoPE on ONNX Runtime's `MRotaryEmbedding`: x `[batch, heads, seq, head_dim]`, positions
    `[3, ..., seq]` broadcast to the operator's `[3, batch, seq]` (one stream per axis, the same for every head)."""
    if kwargs.get("mrope_frequencies", "shared") != "shared":
        raise NotExportable(f"mrope_frequencies={kwargs['mrope_frequencies']!r}: MRotaryEmbedding's axes share one "
                            "cos/sin cache")
    if x.ndim != 4 or positions.ndim < 2 or positions.shape[0] != 3:
        raise NotExportable(f"x {list(x.shape)}, positions {list(positions.shape)}: MRotaryEmbedding takes x [batch, "
                            "heads, seq, head_dim] and three position streams")
    lead = np.broadcast_to(positions.reshape(3, *([1] * (4 - positions.ndim)), *positions.shape[1:]),
                           (3, *x.shape[:-1]))
    if not np.all(lead == lead[:, :, :1, :]):
        raise NotExportable("positions that differ between heads: MRotaryEmbedding takes position_ids [3, batch, seq]")
    params = {k: v for k, v in kwargs.items()
              if k in ("base", "layout", "rotary_dim", "scaling", "rotary_pct", "mrope_section", "mrope_interleaved")}
    params["rotary_dim"] = resolve_rotary_dim(x.shape[-1], params.pop("rotary_dim", None), params.pop("rotary_pct", None))
    max_len, position_ids, rows = _compact(lead[:, :, 0, :])
    seq = x.shape[2]  # the kernel refuses a cache shorter than the sequence ("Updating cos_cache ... not supported")
    if rows is None:
        max_len = max(max_len, seq)
    elif len(rows) < seq:
        rows = np.concatenate([rows, np.full(seq - len(rows), rows[-1])])
    build = dict(head_dim=x.shape[-1], max_len=max_len, dtype=_float_dtype(x), heads=x.shape[1],
                 cache_positions=rows, **params)
    return "mrope_model", build, (), {"x": x, "positions": np.ascontiguousarray(position_ids)}, None


def _compact(positions):
    """(max_len, positions, None), or above COMPACT_ABOVE rows or for negative positions (which no cache row
    index can name) (rows, row indices, row positions)."""
    max_len = int(positions.max()) + 1
    if max_len <= COMPACT_ABOVE and positions.min() >= 0:
        return max_len, positions, None
    rows, index = np.unique(positions, return_inverse=True)
    return len(rows), index.reshape(positions.shape).astype(np.int64), rows


def _prepare(fn, args, kwargs):
    """(builder name, keyword arguments, arrays baked into the graph, feeds, output reshaper)."""
    if fn == "apply_rope":
        return _rope(args, kwargs)
    if fn == "sinusoidal":
        positions, dim = args
        positions = _int_positions("positions", positions)
        params = {k: v for k, v in kwargs.items() if k in ("base", "layout", "denominator")}
        dtype = graphs.check_dtype(kwargs.get("dtype"))
        # the graph `posenc export` writes without --max-len: the sinusoid computed from float64 angles
        build = dict(dim=dim, dtype=dtype, positions_rank=positions.ndim, **params)
        return "sinusoidal_computed_model", build, (), {"positions": positions}, None
    if fn == "learned":
        table, positions = args
        _float_dtype(table)
        positions = _int_positions("positions", positions)
        return "learned_model", dict(positions_rank=positions.ndim), (table,), {"positions": positions}, None
    if fn in ("alibi_bias", "t5_bias", "relative_embeddings"):
        if fn == "alibi_bias":
            heads, q, k = args
            baked = ()
            build = dict(heads=heads, form=kwargs.get("form", "symmetric"), max_bias=kwargs.get("max_bias", 8.0),
                         dtype=graphs.check_dtype(kwargs.get("dtype")))
        else:
            table, q, k = args
            _float_dtype(table)
            baked = (table,)
            names = ("bidirectional", "num_buckets", "max_distance") if fn == "t5_bias" else ("max_distance", "sign")
            build = {key: kwargs[key] for key in names if key in kwargs}
        q, k = _int_positions("q_positions", q), _int_positions("k_positions", k)
        build.update(q_rank=q.ndim, k_rank=k.ndim)
        builder = {"alibi_bias": "alibi_model", "t5_bias": "t5_model", "relative_embeddings": "relative_model"}[fn]
        return builder, build, baked, {"q_positions": q, "k_positions": k}, None
    raise NotExportable(f"{fn if isinstance(fn, str) else getattr(fn, '__name__', fn)!r}: not one of the exported "
                        f"encodings {list(SUPPORTED)} (gradients, attention paths and resizing have no ONNX graph)")


def onnx_call(fn, args: tuple, kwargs: dict, *, optimize: bool = False, cache: dict | None = None) -> np.ndarray:
    """Run contract function `fn` (a name) with the case's `args`/`kwargs` on its ONNX graph in ONNX Runtime.

    `cache` (a dict) keeps one ONNX Runtime session per (function, parameters, input shapes, baked
    tables, optimisation level). Raises `NotExportable` for what the graphs cannot express.
    """
    builder, build, baked, feeds, reshape = _prepare(fn, args, kwargs)
    frozen = {k: (None if v is None else tuple(np.asarray(v).tolist())) if k.endswith("_positions") else v
              for k, v in build.items()}
    key = ("onnx", builder, freeze(frozen), tuple(_digest(t) for t in baked),
           tuple((name, a.shape) for name, a in feeds.items()), optimize)
    session = None if cache is None else cache.get(key)
    if session is None:
        model = getattr(graphs, builder)(*baked, **build)  # looked up per call: tests plant wrappers here
        session = graphs.session(model, optimize=optimize)
        if cache is not None:
            cache[key] = session
    out = session.run(None, feeds)[0]
    return reshape(out) if reshape else out
