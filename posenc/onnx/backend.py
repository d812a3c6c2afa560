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

What the graphs cannot express raises `NotExportable` with the reason (the suite reports a skip):
bfloat16 (no ONNX Runtime CPU kernels), functions other than the six contract encodings (gradients,
attention paths, resizing), float positions, dynamic NTK scaling, positions that vary across heads.
"""

from __future__ import annotations

import hashlib

import numpy as np

from posenc_np._dtypes import dtype_name
from posenc_np._freeze import freeze
from posenc_np.rope import resolve_rotary_dim

from . import graphs
from .graphs import NotExportable

__all__ = ["onnx_call", "SUPPORTED", "NotExportable"]

#: Above this many cache rows a case feeds a compacted cache: one row per distinct position of the case,
#: holding the spec's values for that position, and positions replaced by row indices (LongRoPE's
#: in-graph length test reads the true positions back from the rows). A million-row cache costs
#: seconds per graph; tests/app/test_export.py runs the full-size cache of an exported model.
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
    if kwargs.get("mrope_section") is not None:  # never drop it silently: the rotation would be 1-D RoPE's
        raise NotExportable("multi-axis RoPE (mrope_section): RotaryEmbedding takes one position per token")
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


def _compact(positions):
    """(max_len, positions, None), or above COMPACT_ABOVE rows (rows, row indices, row positions)."""
    max_len = int(positions.max()) + 1
    if max_len <= COMPACT_ABOVE or positions.min() < 0:
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
        max_len, positions, rows = _compact(positions)
        build = dict(dim=dim, max_len=max_len, dtype=dtype, positions_rank=positions.ndim, table_positions=rows,
                     **params)
        return "sinusoidal_model", build, (), {"positions": positions}, None
    if fn == "learned":
        table, positions = args
        _float_dtype(table)
        positions = _int_positions("positions", positions)
        return "learned_model", dict(positions_rank=positions.ndim), (table,), {"positions": positions}, None
    if fn in ("alibi_bias", "t5_bias", "relative_embeddings"):
        if fn == "alibi_bias":
            heads, q, k = args
            baked = ()
            build = dict(heads=heads, form=kwargs.get("form", "symmetric"),
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
