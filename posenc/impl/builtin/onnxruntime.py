"""ONNX Runtime's rotary operators (checked on onnxruntime 1.31.1, CPU), fed cos/sin caches from the spec.

Three Implementations, one graph per call built with `onnx.helper` and run on the CPU provider with
every graph optimisation off:

* "onnxruntime": `com.microsoft.RotaryEmbedding(input, position_ids, cos_cache, sin_cache)` for 1-D RoPE
  and `com.microsoft.MRotaryEmbedding` (`position_ids [3, batch, seq]`, `mrope_section`, `mrope_layout`
  0 contiguous / 1 interleaved; shared frequencies) for multi-axis RoPE;
* "onnxruntime-opset23": the standard `RotaryEmbedding(X, cos_cache, sin_cache, position_ids)` (opset 23);
* "onnxruntime-gqa": `com.microsoft.GroupQueryAttention(do_rotary=1)`, whose rotated keys come back in
  `present_key`: positions are implicit (`seqlens_k`), so it runs batches whose row b holds positions
  `offset_b .. offset_b + seq - 1` with a zero past cache of `offset_b` rows.

Mapping of the contract: `x [batch, heads, seq, dim]` is the operators' 4-D `[B, N, S, H]` (`[batch, seq,
heads, dim]` is transposed there and back); `layout` -> `interleaved`; partial rotary ->
`rotary_embedding_dim`. The caches are `[TABLE_ROWS, r/2]` rows of the spec's angles (with the
frequencies of the case's `max(positions) + 1` for dynamic and LongRoPE, the attention scale folded in),
cast to the inputs' dtype: declared `max_positions=TABLE_ROWS`, precision class "table", dtypes
float32 and float16 (bfloat16 has no NumPy feed in ONNX Runtime's Python API without ml_dtypes support).
"""

from __future__ import annotations

import numpy as np

from ...adapters import NotSupported
from ..implementation import TABLE_ROWS, Implementation, ImplementationUnavailable
from ..rotary_kernel import hf_position_ids
from ._kernel_inputs import require_shared_three_axes, rotary_width, spec_table

DISTRIBUTION = "onnxruntime"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ('onnxruntime', 'onnxruntime-opset23', 'onnxruntime-gqa')
DTYPES = ("float32", "float16")
_MS = "com.microsoft"


def _onnx():
    try:
        import onnx
        import onnxruntime
        from onnx import TensorProto, helper
    except ImportError as error:
        raise ImplementationUnavailable(f"--impl onnxruntime: {error}") from error
    return onnx, onnxruntime, TensorProto, helper


def _elem(dtype) -> int:
    _, _, TP, _ = _onnx()
    return {"float32": TP.FLOAT, "float16": TP.FLOAT16}[np.dtype(dtype).name]


def _run(node, feeds: dict, outputs: dict):
    """Run a one-node graph: `feeds` name -> array (inputs), `outputs` name -> (dtype, rank)."""
    _, _, TP, helper = _onnx()
    from ...onnx.graphs import IR_VERSION, OPSET, session

    def value(name, array_or_spec):
        if isinstance(array_or_spec, np.ndarray):
            kind = array_or_spec.dtype
            elem = TP.INT32 if kind == np.int32 else TP.INT64 if kind.kind in "iu" else _elem(kind)
            return helper.make_tensor_value_info(name, elem, list(array_or_spec.shape))
        dtype, rank = array_or_spec
        return helper.make_tensor_value_info(name, _elem(dtype), [None] * rank)

    graph = helper.make_graph([node], "posenc_impl_onnxruntime", [value(k, v) for k, v in feeds.items()],
                              [value(k, v) for k, v in outputs.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(_MS, 1)],
                              ir_version=IR_VERSION, producer_name="posenc")
    return session(model).run(list(outputs), feeds)


def caches(positions, rotary_dim, *, base, scaling, layout, dtype):
    """Half-width `[TABLE_ROWS, r/2]` cos/sin caches of the 1-D frequencies at the case's
    `max(positions) + 1` (dynamic NTK, LongRoPE), attention scale folded in, cast to `dtype`."""
    angles, scale = spec_table(rotary_dim, TABLE_ROWS, base=base, scaling=scaling, positions=positions, layout=layout)
    return (scale * np.cos(angles)).astype(dtype), (scale * np.sin(angles)).astype(dtype)


def _bnsh(x, positions, axes=None):
    """`(x [B, N, S, H], position_ids, back)`: the operators' 4-D form and the inverse transpose."""
    ids, heads_axis = hf_position_ids(positions, x.shape, axes=axes)
    if heads_axis == 2:
        return np.ascontiguousarray(x.transpose(0, 2, 1, 3)), ids, (lambda y: y.transpose(0, 2, 1, 3))
    return np.ascontiguousarray(x), ids, (lambda y: y)


def _rope_inputs(x, positions, rotary_dim, rotary_pct, mrope_section):
    x = np.asarray(x)
    if x.dtype.name not in DTYPES:
        raise NotSupported(f"ONNX Runtime is fed {', '.join(DTYPES)} here, not {x.dtype}")
    r = rotary_width(x.shape[-1], rotary_dim, rotary_pct)
    axes = None if mrope_section is None else (int(mrope_section) if np.isscalar(mrope_section)
                                               else len(mrope_section))
    return x, r, axes


def contrib_apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None,
                       rotary_pct=None, mrope_section=None, mrope_interleaved=False, mrope_frequencies="shared"):
    """The contract's `apply_rope` through `com.microsoft.RotaryEmbedding` / `MRotaryEmbedding`."""
    _, _, _, helper = _onnx()
    x, r, axes = _rope_inputs(x, positions, rotary_dim, rotary_pct, mrope_section)
    x4, ids, back = _bnsh(x, positions, axes=axes)
    cos, sin = caches(positions, r, base=base, scaling=scaling, layout=layout, dtype=x.dtype)
    attrs = dict(interleaved=int(layout == "interleaved"), num_heads=x4.shape[1], rotary_embedding_dim=r)
    if axes is None:
        node = helper.make_node("RotaryEmbedding", ["input", "position_ids", "cos_cache", "sin_cache"], ["y"],
                                domain=_MS, **attrs)
    else:
        require_shared_three_axes("MRotaryEmbedding", mrope_section, mrope_frequencies)
        node = helper.make_node("MRotaryEmbedding", ["input", "position_ids", "cos_cache", "sin_cache"], ["y"],
                                domain=_MS, mrope_section=[int(s) for s in mrope_section],
                                mrope_layout=int(bool(mrope_interleaved)), **attrs)
    feeds = {"input": x4, "position_ids": ids.astype(np.int64), "cos_cache": cos, "sin_cache": sin}
    return back(_run(node, feeds, {"y": (x.dtype, 4)})[0])


def opset23_apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None,
                       rotary_pct=None):
    """The contract's `apply_rope` through the standard opset-23 `RotaryEmbedding`."""
    _, _, _, helper = _onnx()
    x, r, _ = _rope_inputs(x, positions, rotary_dim, rotary_pct, None)
    x4, ids, back = _bnsh(x, positions)
    cos, sin = caches(positions, r, base=base, scaling=scaling, layout=layout, dtype=x.dtype)
    node = helper.make_node("RotaryEmbedding", ["X", "cos_cache", "sin_cache", "position_ids"], ["y"],
                            interleaved=int(layout == "interleaved"), rotary_embedding_dim=r)
    feeds = {"X": x4, "cos_cache": cos, "sin_cache": sin, "position_ids": ids.astype(np.int64)}
    return back(_run(node, feeds, {"y": (x.dtype, 4)})[0])


def gqa_apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None):
    """The contract's `apply_rope` as the keys `GroupQueryAttention(do_rotary=1)` writes to `present_key`."""
    _, _, _, helper = _onnx()
    x, r, _ = _rope_inputs(x, positions, rotary_dim, rotary_pct, None)
    if r != x.shape[-1]:
        raise NotSupported("GroupQueryAttention rotates the whole head (no rotary_embedding_dim attribute)")
    x4, ids, back = _bnsh(x, positions)
    batch, seq = x4.shape[0], x4.shape[2]
    offsets = ids[:, 0]
    if not np.array_equal(ids, offsets[:, None] + np.arange(seq)) or offsets.min() < 0:
        raise NotSupported("GroupQueryAttention's positions are implicit: row b holds offset_b .. offset_b + seq - 1 "
                           "(its past length); these positions are not of that form")
    cos, sin = caches(positions, r, base=base, scaling=scaling, layout=layout, dtype=x.dtype)
    # one call per row: with a past cache GroupQueryAttention takes several new tokens only at batch size 1
    rows = [_gqa_keys(x4[b:b + 1], int(offsets[b]), cos, sin, layout) for b in range(batch)]
    return back(np.concatenate(rows))


def _gqa_keys(x4, past, cos, sin, layout):
    """`present_key[:, :, past:]` of GroupQueryAttention fed keys `x4 [1, N, S, H]` after `past` zero rows."""
    _, _, _, helper = _onnx()
    _, heads, seq, dim = x4.shape
    key = x4.transpose(0, 2, 1, 3).reshape(1, seq, heads * dim)  # packed [B, S, N * H]; q and v are zeros
    zeros = np.zeros((1, heads, past, dim), dtype=x4.dtype)
    node = helper.make_node("GroupQueryAttention", ["query", "key", "value", "past_key", "past_value", "seqlens_k",
                                                    "total_sequence_length", "cos_cache", "sin_cache"],
                            ["output", "present_key", "present_value"], domain=_MS, num_heads=heads,
                            kv_num_heads=heads, do_rotary=1, rotary_interleaved=int(layout == "interleaved"))
    feeds = {"query": np.zeros_like(key), "key": key, "value": np.zeros_like(key), "past_key": zeros,
             "past_value": zeros, "seqlens_k": np.array([past + seq - 1], dtype=np.int32),
             "total_sequence_length": np.array([past + seq], dtype=np.int32), "cos_cache": cos, "sin_cache": sin}
    present = _run(node, feeds, {"output": (x4.dtype, 3), "present_key": (x4.dtype, 4),
                                 "present_value": (x4.dtype, 4)})[1]
    return present[:, :, past:past + seq]


def load():
    _, onnxruntime, _, _ = _onnx()
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    # ONNX Runtime refuses position ids outside the cos/sin cache with INVALID_ARGUMENT
    common = dict(version=onnxruntime.__version__, dtypes=DTYPES, angles="table", max_positions=TABLE_ROWS,
                  refusals=(InvalidArgument,))
    return (Implementation("onnxruntime", "numpy", {"apply_rope": contrib_apply_rope},
                           description="com.microsoft RotaryEmbedding and MRotaryEmbedding", **common),
            Implementation("onnxruntime-opset23", "numpy", {"apply_rope": opset23_apply_rope},
                           description="ai.onnx RotaryEmbedding (opset 23)", **common),
            Implementation("onnxruntime-gqa", "numpy", {"apply_rope": gqa_apply_rope},
                           description="com.microsoft GroupQueryAttention do_rotary (present_key)", **common))


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ("`pip install onnxruntime` (posenc's dev extra)")
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = ()

#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
EXPECTED = {}
