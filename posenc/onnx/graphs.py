"""ONNX graphs of posenc's encodings, built with `onnx.helper` from the float64 spec's numbers.

One builder per contract function; each returns an `onnx.ModelProto` whose named inputs and outputs
are those of `posenc export` (see docs/export.md):

    rope_model        x [batch, heads, seq, head_dim] (or [batch, seq, heads * head_dim] with
                      `x_layout="bsd"`), positions [batch, seq] int64 -> y like x. ONNX's standard
                      opset-23 `RotaryEmbedding` operator fed half-width `[max_len, r/2]` cos/sin caches
                      computed by the float64 spec (`posenc_np.rope_cos_sin`) and stored as float32;
                      `interleaved` = layout, `rotary_embedding_dim` = r (partial rotary).
    sinusoidal_model  positions [...] int64 -> table [..., dim]: a `[max_len, dim]` spec table, Gather.
    learned_model     positions [...] int64 -> table [..., dim]: the given table, Gather.
    alibi_model       q_positions [..., q], k_positions [..., k] int64 -> bias [..., heads, q, k].
    t5_model          same inputs -> bias [..., heads, q, k]: integer buckets, the table gathered.
    relative_model    same inputs -> bias [..., q, k, dim] (the clipped relative embeddings).

Versions: opset 23 (the first with `RotaryEmbedding`) and IR version 11, the IR version that opset 23
was released with (onnx 1.18). onnx 1.23's `make_model` would stamp IR 14, which ONNX Runtime 1.31
refuses ("max supported IR version: 13"); IR 11 loads in every ONNX Runtime that implements opset 23.

Precision rules (the tolerance policy of docs/tolerances.md): every table and cache is computed in
float64 by `posenc_np` and rounded once to float32 (or, for tables that are the output itself, to the
output dtype); a float16 RoPE model casts x to float32, rotates, and casts back once.

Positions that ONNX would silently wrap (Gather takes negative indices from the end) are routed to an
out-of-range index, so ONNX Runtime raises instead of returning a wrong row; positions >= max_len raise
in Gather and in `RotaryEmbedding` ("position_ids value ... is out of range").
"""

from __future__ import annotations

import numpy as np

from posenc_np.alibi import alibi_slopes, check_alibi_args
from posenc_np.backend import dtype_name
from posenc_np.relative import check_relative_args
from posenc_np.rope import resolve_rotary_dim, rope_cos_sin, rope_plan
from posenc_np.sinusoidal import check_sinusoidal_args, sinusoid_inv_freq, sinusoidal
from posenc_np.t5 import check_t5_args, t5_bucket_thresholds

__all__ = ["OPSET", "IR_VERSION", "ONNX_DTYPES", "CONTRIB_DOMAIN", "REQUIRES_KEY", "NotExportable", "rope_model",
           "mrope_model", "rope_caches", "sinusoidal_model", "sinusoidal_computed_model",
           "learned_model", "alibi_model", "t5_model", "relative_model", "session", "run_model"]

OPSET = 23
IR_VERSION = 11
#: ONNX Runtime's contrib operator domain (MRotaryEmbedding), and the model property that names what it needs
CONTRIB_DOMAIN = "com.microsoft"
REQUIRES_KEY = "posenc.requires"
ONNX_DTYPES = ("float32", "float16")


class NotExportable(ValueError):
    """A parameter combination the ONNX graphs cannot express (the message names it and says why)."""


def _onnx():
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    return onnx, TensorProto, helper, numpy_helper


def _elem(dtype: str) -> int:
    _, TP, _, _ = _onnx()
    return {"float32": TP.FLOAT, "float16": TP.FLOAT16}[check_dtype(dtype)]


def check_dtype(dtype) -> str:
    """The dtype name of `dtype` (default float32); `NotExportable` for a dtype the graphs are not built for."""
    name = dtype_name(dtype or "float32")
    if name not in ONNX_DTYPES:
        raise NotExportable(f"dtype={name!r}: the ONNX graphs are built for {list(ONNX_DTYPES)} (ONNX Runtime's CPU "
                            "kernels of RotaryEmbedding, Gather and the arithmetic have no bfloat16)")
    return name


class _Builder:
    """Collects nodes and initializers; `out(op, inputs, **attrs)` returns a fresh output name."""

    def __init__(self):
        self.nodes, self.inits, self._n = [], [], 0

    def const(self, array, name=None):
        _, _, _, nh = _onnx()
        self._n += 1
        name = name or f"const_{self._n}"
        self.inits.append(nh.from_array(np.asarray(array), name))
        return name

    def out(self, op, inputs, name=None, **attrs):
        _, _, helper, _ = _onnx()
        self._n += 1
        name = name or f"{op.lower()}_{self._n}"
        self.nodes.append(helper.make_node(op, list(inputs), [name], **attrs))
        return name

    def model(self, graph_name, inputs, outputs, doc=""):
        onnx, _, helper, _ = _onnx()
        graph = helper.make_graph(self.nodes, graph_name, inputs, outputs, self.inits)
        imports = [helper.make_opsetid("", OPSET)]
        contrib = sorted({n.op_type for n in self.nodes if n.domain == CONTRIB_DOMAIN})
        if contrib:  # ONNX Runtime's own operators: other runtimes do not load the model
            imports.append(helper.make_opsetid(CONTRIB_DOMAIN, 1))
        model = helper.make_model(graph, opset_imports=imports, ir_version=IR_VERSION, producer_name="posenc",
                                  doc_string=doc)
        if contrib:
            helper.set_model_props(model, {REQUIRES_KEY: f"ONNX Runtime contrib domain {CONTRIB_DOMAIN} "
                                                         f"({', '.join(contrib)})"})
        onnx.checker.check_model(model)
        return model


def _value(name, elem, shape):
    _, _, helper, _ = _onnx()
    return helper.make_tensor_value_info(name, elem, list(shape))


def _index_guard(b, positions, rows):
    """Positions as Gather indices that never wrap: negative ones become `rows` (Gather then raises)."""
    negative = b.out("Less", [positions, b.const(np.array(0, np.int64))])
    return b.out("Where", [negative, b.const(np.array(rows, np.int64)), positions])


def _position_dims(prefix, rank, last):
    return [f"{prefix}{i}" for i in range(rank - 1)] + [last]


# --- RoPE ------------------------------------------------------------------------------------------------

def rope_caches(max_len, rotary_dim, *, base=10000.0, scaling=None, cache_positions=None):
    """Half-width `[rows, r/2]` float64 cos/sin caches from the spec, row i for position i (or for
    `cache_positions[i]` when given).

    Static scalings: `posenc_np.rope_cos_sin` of the row positions (attention scale folded in), first
    half of its "half" layout (the operator expands the half-width cache to either layout itself).
    LongRoPE: a dict `{"short": (cos, sin), "long": (cos, sin)}` from the plan's two frequency sets.
    """
    plan = rope_plan(rotary_dim, base=base, scaling=scaling)
    half = rotary_dim // 2
    rows = np.arange(max_len) if cache_positions is None else np.asarray(cache_positions, np.int64)
    if plan.kind == "static":
        cos, sin = rope_cos_sin(rows, rotary_dim, base=base, scaling=scaling)
        return cos[:, :half], sin[:, :half]
    if plan.kind == "longrope":
        p = rows.astype(np.float64)[:, None]
        # the spec's `_angles`: float64 p * inv_freq, then cos/sin, times the attention scale
        return {name: (plan.attention_scale * np.cos(p * turns * 2 * np.pi),
                       plan.attention_scale * np.sin(p * turns * 2 * np.pi))
                for name, turns in (("short", plan.turns), ("long", plan.turns_long))}
    raise NotExportable(
        f"scaling rope_type={scaling.get('rope_type', scaling.get('type'))!r}: dynamic NTK frequencies change "
        "continuously with max(positions) + 1, so no fixed cache holds them; export a static type "
        "(default, linear, ntk, yarn, llama3, keras-hub-*) or longrope")


def rope_model(*, head_dim, max_len, rotary_dim=None, rotary_pct=None, base=10000.0, scaling=None, layout="half",
               dtype="float32", heads=None, x_layout="bhsd", cache_positions=None):
    """The opset-23 `RotaryEmbedding` model of `apply_rope` with these parameters.

    Args:
        head_dim: per-head width D.
        max_len: cache rows: positions 0..max_len-1 (others raise in ONNX Runtime).
        rotary_dim, rotary_pct, base, scaling, layout: as `posenc_np.apply_rope`.
        dtype: "float32" or "float16" (x and y); the caches and the rotation are float32 either way.
        heads: the heads axis size (required with `x_layout="bsd"`, where it is the operator's
            `num_heads`); None leaves it symbolic for "bhsd".
        x_layout: "bhsd" (x `[batch, heads, seq, head_dim]`, the contract) or "bsd"
            (x `[batch, seq, heads * head_dim]`, the operator's 3-D form).
        cache_positions: the position each cache row holds (default `arange(max_len)`; max_len is then
            ignored); `positions` are then row indices. The suite uses it for positions near 2**20, so
            a case does not build a million-row cache; exported models never do.

    Returns:
        `onnx.ModelProto`: inputs `x`, `positions [batch, seq]` int64; output `y`.

    Raises:
        ValueError: what the spec raises for these parameters; `NotExportable` for dynamic NTK.
    """
    _, TP, _, _ = _onnx()
    dtype = check_dtype(dtype)
    rotary_dim = resolve_rotary_dim(head_dim, rotary_dim, rotary_pct)
    rope_plan(rotary_dim, base=base, scaling=scaling, layout=layout)  # validates layout and scaling
    max_len = _positive("max_len", max_len) if cache_positions is None else len(cache_positions)
    caches = rope_caches(max_len, rotary_dim, base=base, scaling=scaling, cache_positions=cache_positions)
    b = _Builder()
    f32 = np.float32
    if isinstance(caches, dict):
        # LongRoPE: long factors for the whole call once seq_len = max(positions) + 1 exceeds the original
        # length (HF `_compute_longrope_parameters`), chosen in-graph from two spec caches
        original = rope_plan(rotary_dim, base=base, scaling=scaling).original
        true = "positions" if cache_positions is None else b.out(
            "Gather", [b.const(np.asarray(cache_positions, np.int64), "cache_positions"), "positions"])
        seq_len = b.out("Add", [b.out("ReduceMax", [true], keepdims=0), b.const(np.array(1, np.int64))])
        use_long = b.out("Greater", [seq_len, b.const(np.array(original, np.int64))])
        cos = b.out("Where", [use_long, b.const(caches["long"][0].astype(f32), "cos_cache_long"),
                              b.const(caches["short"][0].astype(f32), "cos_cache_short")], name="cos_cache")
        sin = b.out("Where", [use_long, b.const(caches["long"][1].astype(f32), "sin_cache_long"),
                              b.const(caches["short"][1].astype(f32), "sin_cache_short")], name="sin_cache")
    else:
        cos, sin = b.const(caches[0].astype(f32), "cos_cache"), b.const(caches[1].astype(f32), "sin_cache")
    if x_layout == "bhsd":
        shape = ["batch", heads if heads is not None else "heads", "seq", head_dim]
        attrs = {}
    elif x_layout == "bsd":
        heads = _positive("heads", heads)
        shape = ["batch", "seq", heads * head_dim]
        attrs = {"num_heads": heads}
    else:
        raise ValueError(f"x_layout={x_layout!r} is not one of ['bhsd', 'bsd']")
    x = "x" if dtype == "float32" else b.out("Cast", ["x"], to=TP.FLOAT)
    y = b.out("RotaryEmbedding", [x, cos, sin, "positions"], name="y" if dtype == "float32" else None,
              interleaved=int(layout == "interleaved"), rotary_embedding_dim=rotary_dim, **attrs)
    if dtype != "float32":
        b.out("Cast", [y], name="y", to=_elem(dtype))
    doc = (f"posenc apply_rope: layout={layout}, rotary_dim={rotary_dim}, base={base}, scaling={scaling}, "
           f"max_len={max_len}; caches from the float64 spec")
    return b.model("posenc_rope", [_value("x", _elem(dtype), shape), _value("positions", TP.INT64, ["batch", "seq"])],
                   [_value("y", _elem(dtype), shape)], doc)


def mrope_model(*, head_dim, max_len, mrope_section, mrope_interleaved=False, rotary_dim=None, rotary_pct=None,
                base=10000.0, scaling=None, layout="half", dtype="float32", heads=None, cache_positions=None):
    """ONNX Runtime's contrib `com.microsoft.MRotaryEmbedding` model of multi-axis `apply_rope` (Qwen2-VL's
    chunked sections, `mrope_layout` 0; Qwen3-VL's interleaved ones, `mrope_layout` 1).

    The operator (onnxruntime 1.32 contrib schema) gathers, for each pair j of the half-width cache, the row
    of the position on the axis (T, H, W) that `mrope_section` assigns to j, then rotates like
    `RotaryEmbedding`; every axis shares the cache's frequencies (`mrope_frequencies="shared"`). Caches as
    `rope_model`'s (float64 spec, stored float32); static scalings only.

    Returns:
        `onnx.ModelProto`: inputs `x [batch, heads, seq, head_dim]`, `positions [3, batch, seq]` int64 (the T, H,
        W streams); output `y`. Its metadata property `posenc.requires` names the contrib domain.

    Raises:
        ValueError: what the spec raises; `NotExportable` for other than three axes or a non-static scaling.
    """
    _, TP, _, _ = _onnx()
    dtype = check_dtype(dtype)
    rotary_dim = resolve_rotary_dim(head_dim, rotary_dim, rotary_pct)
    plan = rope_plan(rotary_dim, base=base, scaling=scaling, layout=layout, mrope_section=mrope_section,
                     mrope_interleaved=mrope_interleaved)
    if plan.num_axes != 3:
        raise NotExportable(f"mrope_section={list(plan.mrope_section)}: MRotaryEmbedding takes three position axes "
                            "(temporal, height, width)")
    if rope_plan(rotary_dim, base=base, scaling=scaling).kind != "static":
        raise NotExportable(f"scaling={scaling!r} with mrope_section: MRotaryEmbedding takes one fixed cos/sin cache")
    max_len = _positive("max_len", max_len) if cache_positions is None else len(cache_positions)
    cos, sin = rope_caches(max_len, rotary_dim, base=base, scaling=scaling, cache_positions=cache_positions)
    attrs = {}
    if rotary_dim != head_dim:  # the kernel takes a partial rotary width only together with num_heads
        attrs = {"rotary_embedding_dim": rotary_dim, "num_heads": _positive("heads (partial rotary)", heads)}
    b = _Builder()
    shape = ["batch", heads if heads is not None else "heads", "seq", head_dim]
    x = "x" if dtype == "float32" else b.out("Cast", ["x"], to=TP.FLOAT)
    y = b.out("MRotaryEmbedding", [x, "positions", b.const(cos.astype(np.float32), "cos_cache"),
                                   b.const(sin.astype(np.float32), "sin_cache")],
              name="y" if dtype == "float32" else None, domain=CONTRIB_DOMAIN,
              mrope_section=[int(s) for s in plan.mrope_section], mrope_layout=int(bool(mrope_interleaved)),
              interleaved=int(layout == "interleaved"), **attrs)
    if dtype != "float32":
        b.out("Cast", [y], name="y", to=_elem(dtype))
    doc = (f"posenc apply_rope (multi-axis): mrope_section={list(plan.mrope_section)}, "
           f"mrope_interleaved={bool(mrope_interleaved)}, layout={layout}, rotary_dim={rotary_dim}, base={base}, "
           f"scaling={scaling}, max_len={max_len}; caches from the float64 spec; ONNX Runtime contrib operator")
    return b.model("posenc_mrope", [_value("x", _elem(dtype), shape),
                                    _value("positions", TP.INT64, [3, "batch", "seq"])],
                   [_value("y", _elem(dtype), shape)], doc)


# --- absolute encodings --------------------------------------------------------------------------------

def _table_model(table, name, dtype, positions_rank, doc):
    _, TP, _, _ = _onnx()
    rows, dim = table.shape
    b = _Builder()
    b.out("Gather", [b.const(table, "position_table"), _index_guard(b, "positions", rows)], name="table", axis=0)
    dims = _position_dims("batch", positions_rank, "seq")
    return b.model(name, [_value("positions", TP.INT64, dims)], [_value("table", _elem(dtype), dims + [dim])], doc)


def sinusoidal_model(*, dim, max_len, base=10000.0, layout="interleaved", denominator="dim", dtype="float32",
                     positions_rank=2, table_positions=None):
    """`positions [batch, seq]` int64 -> `table [batch, seq, dim]`: rows of `posenc_np.sinusoidal(arange(max_len))`.

    The table is computed in float64 and rounded once to `dtype` (it is the output itself).
    `table_positions`: the position each row holds instead (as `rope_model`'s `cache_positions`).
    """
    dtype = check_dtype(dtype)
    max_len = _positive("max_len", max_len) if table_positions is None else len(table_positions)
    rows = np.arange(max_len) if table_positions is None else np.asarray(table_positions, np.int64)
    table = sinusoidal(rows, dim, base=base, layout=layout, denominator=denominator)
    return _table_model(table.astype(dtype), "posenc_sinusoidal", dtype, positions_rank,
                        f"posenc sinusoidal: dim={dim}, base={base}, layout={layout}, denominator={denominator}, "
                        f"max_len={max_len}")


def sinusoidal_computed_model(*, dim, base=10000.0, layout="interleaved", denominator="dim", dtype="float32",
                              positions_rank=2):
    """`positions [...]` int64 -> `table [..., dim]` computed in the graph, so any int64 position works:
    float64 angles `p * w_i` (`Cast` to double, `Mul` by the spec's `sinusoid_inv_freq` in float64), float64
    `Sin`/`Cos`, the spec's layout (`interleaved`: pairs `(sin, cos)`; `concat`: `[sin | cos]`; `concat-cos`:
    `[cos | sin]`), one `Cast` to
    `dtype`. At position 2**20 the float64 angle is off by about 1e-10 rad, far inside float32 rounding."""
    _, TP, _, _ = _onnx()
    dtype = check_dtype(dtype)
    check_sinusoidal_args(dim, base, layout, denominator)
    b = _Builder()
    p = b.out("Unsqueeze", [b.out("Cast", ["positions"], to=TP.DOUBLE), b.const(np.array([-1], np.int64))])
    angles = b.out("Mul", [p, b.const(sinusoid_inv_freq(dim, base=base, denominator=denominator), "inv_freq")])
    sin, cos = b.out("Sin", [angles]), b.out("Cos", [angles])
    if layout == "interleaved":
        pairs = b.out("Concat", [b.out("Unsqueeze", [t, b.const(np.array([-1], np.int64))]) for t in (sin, cos)],
                      axis=-1)
        shape = b.out("Concat", [b.out("Shape", ["positions"]), b.const(np.array([dim], np.int64))], axis=0)
        table = b.out("Reshape", [pairs, shape])
    else:
        table = b.out("Concat", [sin, cos] if layout == "concat" else [cos, sin], axis=-1)
    b.out("Cast", [table], name="table", to=_elem(dtype))
    dims = _position_dims("p", positions_rank, "seq")
    return b.model("posenc_sinusoidal", [_value("positions", TP.INT64, dims)],
                   [_value("table", _elem(dtype), [*dims, dim])],
                   f"posenc sinusoidal: dim={dim}, base={base}, layout={layout}, denominator={denominator}; computed "
                   "in the graph from float64 angles (any position)")


def learned_model(table, *, dtype=None, positions_rank=2):
    """`positions` int64 -> `table[positions]`; the table is an initializer (its dtype, or `dtype`)."""
    table = np.asarray(table)
    if table.ndim != 2:
        raise ValueError(f"table must be 2-D [max_len, dim], got shape {table.shape}")
    dtype = check_dtype(dtype or table.dtype)
    return _table_model(table.astype(dtype), "posenc_learned", dtype, positions_rank,
                        f"posenc learned: table {list(table.shape)}")


# --- biases ---------------------------------------------------------------------------------------------

def _pair_inputs(b, q_rank, k_rank):
    """`[..., q, 1]` and `[..., 1, k]` views of the two position inputs, and their value infos."""
    _, TP, _, _ = _onnx()
    q = b.out("Unsqueeze", ["q_positions", b.const(np.array([-1], np.int64))])
    k = b.out("Unsqueeze", ["k_positions", b.const(np.array([-2], np.int64))])
    infos = [_value("q_positions", TP.INT64, _position_dims("batch", q_rank, "q")),
             _value("k_positions", TP.INT64, _position_dims("batch", k_rank, "k"))]
    return q, k, infos


def _lead(q_rank, k_rank):
    return [f"batch{i}" for i in range(max(q_rank, k_rank) - 1)]


def alibi_model(*, heads, form="symmetric", max_bias=8.0, dtype="float32", q_rank=1, k_rank=1):
    """`q_positions [q]`, `k_positions [k]` int64 -> `bias [heads, q, k]` (`posenc_np.alibi_bias`).

    Distances are formed in int64 and converted once to float32 (exact below 2**24), times the
    float32-rounded slopes `alibi_slopes(heads, max_bias=max_bias)`; float16 output is cast once at the end.
    """
    _, TP, _, _ = _onnx()
    heads = check_alibi_args(heads, form, max_bias)
    dtype = check_dtype(dtype)
    b = _Builder()
    q, k, infos = _pair_inputs(b, q_rank, k_rank)
    slopes = alibi_slopes(heads, max_bias=max_bias).astype(np.float32)[:, None, None]
    if form == "bloom":
        # + m * j on the full [..., q, k] grid: j + 0 * i keeps the query axis like the spec
        grid = b.out("Add", [b.out("Mul", [q, b.const(np.array(0, np.int64))]), k])
        value, scale = b.out("Cast", [grid], to=TP.FLOAT), slopes
    else:
        distance = b.out("Sub", [q, k])  # i - j
        if form == "symmetric":
            distance = b.out("Abs", [distance])
        value, scale = b.out("Cast", [distance], to=TP.FLOAT), -slopes
    value = b.out("Unsqueeze", [value, b.const(np.array([-3], np.int64))])  # [..., 1, q, k]
    bias = b.out("Mul", [b.const(scale.astype(np.float32), "slopes"), value], name="bias" if dtype == "float32" else None)
    if dtype != "float32":
        b.out("Cast", [bias], name="bias", to=_elem(dtype))
    return b.model("posenc_alibi", infos, [_value("bias", _elem(dtype), _lead(q_rank, k_rank) + [heads, "q", "k"])],
                   f"posenc alibi_bias: heads={heads}, form={form}, max_bias={max_bias}")


def t5_model(table, *, bidirectional=True, num_buckets=32, max_distance=128, dtype=None, q_rank=1, k_rank=1):
    """`q_positions`, `k_positions` int64 -> `bias [heads, q, k]` = `table[t5_bucket(k - q)]` moved to heads-first.

    Buckets are integer-only, as the backends compute them: `min(n, max_exact) + count(thresholds <= n)`
    with the spec's `t5_bucket_thresholds` (HF's float32 log boundaries), plus the direction offset.
    The table `[num_buckets, heads]` is an initializer.
    """
    _, TP, _, _ = _onnx()
    table = np.asarray(table)
    per_direction, max_exact = check_t5_args(bidirectional, num_buckets, max_distance)
    if table.ndim != 2 or table.shape[0] != num_buckets:
        raise ValueError(f"table must be [num_buckets={num_buckets}, heads], got shape {table.shape}")
    dtype = check_dtype(dtype or table.dtype)
    thresholds = t5_bucket_thresholds(bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    b = _Builder()
    q, k, infos = _pair_inputs(b, q_rank, k_rank)
    relative = b.out("Sub", [k, q])  # key - query
    zero = b.const(np.array(0, np.int64))
    if bidirectional:
        offset = b.out("Where", [b.out("Greater", [relative, zero]), b.const(np.array(per_direction, np.int64)), zero])
        distance = b.out("Abs", [relative])
    else:
        offset = zero
        distance = b.out("Max", [b.out("Neg", [relative]), zero])
    exact = b.out("Min", [distance, b.const(np.array(max_exact, np.int64))])
    above = b.out("GreaterOrEqual", [b.out("Unsqueeze", [distance, b.const(np.array([-1], np.int64))]),
                                     b.const(thresholds, "t5_thresholds")])
    logs = b.out("ReduceSum", [b.out("Cast", [above], to=TP.INT64), b.const(np.array([-1], np.int64))], keepdims=0)
    bucket = b.out("Add", [b.out("Add", [exact, logs]), offset], name="bucket")
    gathered = b.out("Gather", [b.const(table.astype(dtype), "relative_attention_bias"), bucket], axis=0)
    rank = max(q_rank, k_rank) + 2  # [..., q, k, heads]
    perm = list(range(rank - 3)) + [rank - 1, rank - 3, rank - 2]
    b.out("Transpose", [gathered], name="bias", perm=perm)
    return b.model("posenc_t5", infos,
                   [_value("bias", _elem(dtype), _lead(q_rank, k_rank) + [table.shape[1], "q", "k"])],
                   f"posenc t5_bias: bidirectional={bidirectional}, num_buckets={num_buckets}, "
                   f"max_distance={max_distance}")


def relative_model(table, *, max_distance, sign="key-query", dtype=None, q_rank=1, k_rank=1):
    """`q_positions`, `k_positions` int64 -> `bias [q, k, dim]` = `table[clip(j - i, -k, k) + k]` (sign flips it)."""
    _, TP, _, _ = _onnx()
    table = np.asarray(table)
    max_distance = check_relative_args(table.shape, max_distance, sign)
    dtype = check_dtype(dtype or table.dtype)
    b = _Builder()
    q, k, infos = _pair_inputs(b, q_rank, k_rank)
    distance = b.out("Sub", [k, q] if sign == "key-query" else [q, k])
    clipped = b.out("Min", [b.out("Max", [distance, b.const(np.array(-max_distance, np.int64))]),
                            b.const(np.array(max_distance, np.int64))])
    index = b.out("Add", [clipped, b.const(np.array(max_distance, np.int64))])
    b.out("Gather", [b.const(table.astype(dtype), "relative_table"), index], name="bias", axis=0)
    return b.model("posenc_relative", infos,
                   [_value("bias", _elem(dtype), _lead(q_rank, k_rank) + ["q", "k", table.shape[1]])],
                   f"posenc relative_embeddings: max_distance={max_distance}, sign={sign}")


# --- running --------------------------------------------------------------------------------------------

def session(model, *, optimize: bool = False):
    """An ONNX Runtime CPU session: `optimize=False` disables every graph optimisation (the suite's
    "eager"), `True` enables all of them (`ORT_ENABLE_ALL`, the suite's "jit": fusions included)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    options.log_severity_level = 3  # a bad position is raised to the caller; no duplicate stderr line
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def run_model(model, feeds: dict, *, optimize: bool = False):
    """Run `model` once on ONNX Runtime; returns the first output as a NumPy array."""
    return session(model, optimize=optimize).run(None, feeds)[0]


def _positive(name, value):
    from posenc_np.backend import check_positive_int

    return check_positive_int(name, value)
