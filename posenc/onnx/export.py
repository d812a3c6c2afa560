"""`posenc.onnx.export.export` (the library behind `posenc export`): an ONNX model of a named convention or an encoding, checked once on ONNX Runtime.

    posenc export hf-llama --out rope.onnx --head-dim 128 --max-len 8192 --scaling '{"rope_type": "llama3", ...}'
    posenc export vaswani --out pe.onnx --dim 512 --max-len 2048
    posenc export t5 --out t5.onnx --table relative_attention_bias.npy

Named inputs and outputs (the contract; docs/export.md):
    rotary    x [batch, heads, seq, head_dim], positions [batch, seq] int64 -> y like x
    absolute  positions [batch, seq] int64 -> table [batch, seq, dim]
    bias      q_positions [q], k_positions [k] int64 -> bias [heads, q, k]
              (relative embeddings: bias [q, k, dim], the per-pair vectors of a `[2k+1, dim]` table)

The graphs are built by `posenc.onnx.graphs` from the float64 spec. Before anything is written the
model runs once on ONNX Runtime (CPU, all graph optimisations on) on inputs that reach the end of the
cache, and is compared with the spec: RoPE caches reduce their angles in float64, so the bound is the
tolerance policy's float32 rounding (`tolerance(dtype, scale=...)`, no angle term); tables and
biases are held to the same policy as `posenc check`. Exit 0 written, 1 the check failed (nothing
written), 2 bad usage or bad input (a message naming the value, nothing written).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import posenc_np
from posenc_np.conventions import conventions
from posenc_np.testing import Tolerance, compare, tolerance

from ..io import write_atomic
from . import graphs as G

__all__ = ["export", "ExportResult", "Graph", "BUILDERS", "EXPORT_TARGETS", "DEFAULT_MAX_LEN"]

#: Encoding (family) names accepted besides the conventions, with the convention whose parameters they take.
EXPORT_TARGETS = {"rope": "hf-llama", "sinusoidal": "vaswani", "learned": "bert", "alibi": None,
                  "relative": "shaw"}
DEFAULT_MAX_LEN = 4096


@dataclass
class ExportResult:
    """What `export` built and how its one ONNX Runtime run compared with the spec."""

    name: str
    encoding: str
    model: object  # onnx.ModelProto
    inputs: dict  # name -> shape (symbolic names for dynamic axes)
    outputs: dict
    max_abs_err: float
    tol: Tolerance
    passed: bool
    written: str | None = None
    notes: list = field(default_factory=list)


def _resolve(name, scaling):
    """(encoding, params) of a convention name or an encoding name."""
    if name in conventions:
        c = conventions[name]
        return c.encoding, dict(c.params)
    if name == "alibi":
        return "alibi_bias", {"form": "symmetric"}
    if name in EXPORT_TARGETS:
        c = conventions[EXPORT_TARGETS[name]]
        return c.encoding, dict(c.params)
    known = sorted(set(conventions) | set(EXPORT_TARGETS))
    raise ValueError(f"convention {name!r} is not one of {known}")


def _need(value, flag, name):
    if value is None:
        raise ValueError(f"{name} needs {flag}")
    return value


def _rng_x(shape, dtype):
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


@dataclass
class Graph:
    """One encoding's model with the inputs its check feeds, the spec's answer and the bound they must meet."""

    model: object  # onnx.ModelProto
    feeds: dict
    desired: np.ndarray
    tol: Tolerance
    inputs: dict  # name -> shape (symbolic names for dynamic axes)
    outputs: dict
    notes: list = field(default_factory=list)


def _end_rows(max_len):
    """Positions `[2, seq]`: the cache's (table's) first and last `min(8, max_len)` rows."""
    seq = min(8, max_len)
    return np.stack([np.arange(seq), np.arange(max_len - seq, max_len)])


def _table_tol(table, dtype):
    """A given table gathered: exact in its own dtype, else one rounding to `dtype` of values up to its max."""
    if dtype == str(table.dtype):
        return tolerance(dtype, exact=True)
    return tolerance(dtype, scale=float(np.abs(table).max()), slack_ulps=0.0)


def _rotary(name, params, *, dtype, head_dim, heads, max_len, scaling, rotary_dim, **_):
    head_dim = _need(head_dim, "--head-dim", name)
    max_len = DEFAULT_MAX_LEN if max_len is None else max_len
    if rotary_dim is not None:
        params.pop("rotary_pct", None)
        params["rotary_dim"] = rotary_dim
    if scaling is not None:
        params["scaling"] = scaling
    if params.get("mrope_section") is not None:
        return _mrope(params, dtype=dtype, head_dim=head_dim, heads=heads, max_len=max_len)
    model = G.rope_model(head_dim=head_dim, max_len=max_len, dtype=dtype, heads=heads, **params)
    positions = _end_rows(max_len)
    x = _rng_x((2, heads or 2, positions.shape[1], head_dim), np.dtype(dtype))
    desired = posenc_np.apply_rope(x.astype(np.float64), positions[:, None, :], **params)
    # float64-reduced caches: no angle term, only float32 rounding (and the output dtype's)
    tol = tolerance(dtype, scale=float(np.abs(desired).max()))
    inputs = {"x": ["batch", heads or "heads", "seq", head_dim], "positions": ["batch", "seq"]}
    return Graph(model, {"x": x, "positions": positions}, desired, tol, inputs, {"y": inputs["x"]})


def _mrope(params, *, dtype, head_dim, heads, max_len):
    """Multi-axis RoPE on ONNX Runtime's contrib `MRotaryEmbedding`, checked on three different position streams
    (the cache's first and last rows, reversed, and rolled, per axis)."""
    if params.pop("mrope_frequencies", "shared") != "shared":
        raise G.NotExportable("per-axis or strided mrope_frequencies: MRotaryEmbedding's axes share one cos/sin cache")
    model = G.mrope_model(head_dim=head_dim, max_len=max_len, dtype=dtype, heads=heads, **params)
    rows = _end_rows(max_len)
    positions = np.stack([rows, rows[:, ::-1], np.roll(rows, 1, axis=1)])  # [3, batch, seq]
    x = _rng_x((2, heads or 2, positions.shape[-1], head_dim), np.dtype(dtype))
    desired = posenc_np.apply_rope(x.astype(np.float64), positions[:, :, None, :], **params)
    tol = tolerance(dtype, scale=float(np.abs(desired).max()))
    inputs = {"x": ["batch", heads or "heads", "seq", head_dim], "positions": [3, "batch", "seq"]}
    notes = [f"needs ONNX Runtime: MRotaryEmbedding is an operator of its contrib domain {G.CONTRIB_DOMAIN} (the "
             f"model's {G.REQUIRES_KEY} property says so); other ONNX runtimes do not load it"]
    return Graph(model, {"x": x, "positions": positions}, desired, tol, inputs, {"y": inputs["x"]}, notes)


#: Positions of the computed sinusoid's check: small, past any table, 2**20 and beyond
_ANY_POSITIONS = np.array([[0, 1, 2, 3, 4095, 65535, 2 ** 20 - 1, 2 ** 20],
                           [7, 100, 2 ** 20 + 1, 2 ** 24, 2 ** 30, 2 ** 31, 2 ** 40, 3]])


def _absolute(model, reference, tol, max_len, dim, name, positions=None):
    positions = _end_rows(max_len) if positions is None else positions
    notes = []
    if name == "fairseq":
        notes.append("fairseq zeroes the row padding_idx=1 for pad tokens; this table holds the formula's "
                     "row there (real tokens start at position 2)")
    return Graph(model, {"positions": positions}, reference(positions), tol, {"positions": ["batch", "seq"]},
                 {"table": ["batch", "seq", dim]}, notes)


def _sinusoidal(name, params, *, dtype, dim, max_len, **_):
    dim = _need(dim, "--dim", name)
    tol = tolerance(dtype, slack_ulps=1.0)  # the spec's float64 values rounded once
    reference = lambda p: posenc_np.sinusoidal(p, dim, **params)  # noqa: E731
    if max_len is None:  # computed in the graph from float64 angles: any position
        model = G.sinusoidal_computed_model(dim=dim, dtype=dtype, **params)
        return _absolute(model, reference, tol, None, dim, name, positions=_ANY_POSITIONS)
    model = G.sinusoidal_model(dim=dim, max_len=max_len, dtype=dtype, **params)
    return _absolute(model, reference, tol, max_len, dim, name)


def _learned(name, params, *, dtype, table, max_len, **_):
    table = np.asarray(table)
    if max_len is not None and table.shape[0] != max_len:
        raise ValueError(f"--max-len={max_len} disagrees with the table's {table.shape[0]} rows")
    model = G.learned_model(table, dtype=dtype)
    reference = lambda p: posenc_np.learned(table.astype(np.float64), p)  # noqa: E731
    return _absolute(model, reference, _table_tol(table, dtype), table.shape[0], table.shape[1], name)


#: Query and key positions of the bias checks: a block of queries against every key before it and beyond.
_Q, _K = np.arange(28, 32), np.arange(32)
_BIAS_INPUTS = {"q_positions": ["q"], "k_positions": ["k"]}


def _bias(model, desired, tol, outputs, notes=()):
    return Graph(model, {"q_positions": _Q, "k_positions": _K}, desired, tol, dict(_BIAS_INPUTS), outputs,
                 list(notes))


def _alibi(name, params, *, dtype, heads, **_):
    heads = _need(heads, "--heads", name)
    desired = posenc_np.alibi_bias(heads, _Q, _K, **params)
    return _bias(G.alibi_model(heads=heads, dtype=dtype, **params), desired,
                 tolerance(dtype, scale=float(np.abs(desired).max())), {"bias": [heads, "q", "k"]})


def _t5(name, params, *, dtype, heads, table, **_):
    table = np.asarray(table)
    if heads is not None and table.ndim == 2 and table.shape[1] != heads:
        raise ValueError(f"--heads={heads} disagrees with the table's {table.shape[1]} columns "
                         f"([num_buckets, heads]; a t5x [heads, num_buckets] table needs a transpose)")
    model = G.t5_model(table, dtype=dtype, **params)
    desired = posenc_np.t5_bias(table.astype(np.float64), _Q, _K, **params)
    return _bias(model, desired, _table_tol(table, dtype), {"bias": [table.shape[1], "q", "k"]})


def _relative(name, params, *, dtype, table, **_):
    table = np.asarray(table)
    if table.ndim != 2 or table.shape[0] % 2 != 1:
        raise ValueError(f"the relative table must be [2 * max_distance + 1, dim], got shape {table.shape}")
    max_distance = (table.shape[0] - 1) // 2
    model = G.relative_model(table, max_distance=max_distance, dtype=dtype, **params)
    desired = posenc_np.relative_embeddings(table.astype(np.float64), _Q, _K, max_distance=max_distance, **params)
    return _bias(model, desired, _table_tol(table, dtype), {"bias": ["q", "k", table.shape[1]]},
                 [f"max_distance = (rows - 1) / 2 = {max_distance}"])


#: The graph builder of each exportable encoding: `(name, params, **options) -> Graph`.
BUILDERS = {"apply_rope": _rotary, "sinusoidal": _sinusoidal, "learned": _learned, "alibi_bias": _alibi,
            "t5_bias": _t5, "relative_embeddings": _relative}


def _check_options(name, encoding, *, scaling, base, table):
    """The options that apply to some encodings only, refused (naming them) for the others."""
    if scaling is not None and encoding != "apply_rope":
        raise ValueError(f"scaling applies to rotary conventions, not to {name!r} ({encoding})")
    if base is not None and encoding not in ("apply_rope", "sinusoidal"):
        raise ValueError(f"base applies to rotary and sinusoidal conventions, not to {name!r} ({encoding})")
    if table is None and encoding == "learned":
        raise ValueError(f"{name} needs --table FILE.npy (the learned [max_len, dim] table)")
    if encoding in ("t5_bias", "relative_embeddings") and table is None:
        raise ValueError(f"{name} needs --table FILE.npy (the {encoding.split('_')[0]} table)")
    if table is not None and encoding not in ("learned", "t5_bias", "relative_embeddings"):
        raise ValueError(f"--table applies to learned, t5 and relative conventions, not to {name!r}")


def export(convention_or_encoding, out=None, *, head_dim=None, heads=None, dim=None, max_len=None, scaling=None,
           dtype="float32", table=None, base=None, rotary_dim=None) -> ExportResult:
    """Build the ONNX model of a convention (or encoding), run it once on ONNX Runtime against the spec,
    and write it to `out` (atomically, only when the check passed).

    Args:
        convention_or_encoding: a `posenc_np.conventions` name ("hf-llama", "vaswani", "t5", ...) or an
            encoding name: "rope" (= hf-llama's parameters), "sinusoidal" (vaswani), "learned",
            "alibi" (symmetric form), "relative" (shaw).
        out: path of the `.onnx` file, or None to build and check only.
        head_dim: rotary: the per-head width (required). heads: rotary: fixes the heads axis
            (symbolic otherwise); ALiBi: the number of heads (required); T5: must match the table.
        dim: sinusoidal: the encoding width (required).
        max_len: rotary: rows of the cache (default 4096); sinusoidal: rows of a table (default: none, the
            sinusoid is computed in the graph from float64 angles and any position works); positions must lie
            in [0, max_len) (ONNX Runtime raises for others). Multi-axis RoPE (a convention with
            `mrope_section`): ONNX Runtime's contrib MRotaryEmbedding, positions `[3, batch, seq]`.
        scaling: rotary: an HF `rope_scaling` dict (every static type, and longrope; dynamic is
            refused by name).
        dtype: "float32" or "float16", the model's float inputs and outputs.
        table: learned `[max_len, dim]`, T5 `[num_buckets, heads]`, relative `[2k+1, dim]` array.
        base: `rope_theta` / the sinusoid base (default: the convention's, else 10000).
        rotary_dim: rotary: rotated width (default: the convention's, else head_dim).

    Returns:
        `ExportResult` (the model, its input/output shapes, the check's error and tolerance).

    Raises:
        ValueError/TypeError: an unknown name, a missing or bad parameter (the message names it);
            `posenc.onnx_graphs.NotExportable` (a ValueError) for what ONNX cannot express.
    """
    name = convention_or_encoding
    encoding, params = _resolve(name, scaling)
    if encoding not in BUILDERS:
        raise ValueError(f"convention {name!r} is a {encoding} convention; posenc export writes "
                         f"{', '.join(BUILDERS)} conventions")
    dtype = G.check_dtype(dtype)
    _check_options(name, encoding, scaling=scaling, base=base, table=table)
    if base is not None:
        params["base"] = float(base)
    graph = BUILDERS[encoding](name, params, dtype=dtype, head_dim=head_dim, heads=heads, dim=dim, max_len=max_len,
                               scaling=scaling, table=table, rotary_dim=rotary_dim)
    actual = G.run_model(graph.model, graph.feeds, optimize=True)
    result = compare(actual.astype(np.float64), np.asarray(graph.desired, np.float64), graph.tol)
    done = ExportResult(name, encoding, graph.model, graph.inputs, graph.outputs, result.max_abs_err, graph.tol,
                        result.passed, notes=graph.notes)
    if out is not None and result.passed:
        write_atomic(str(out), graph.model.SerializeToString(), what="model")
        done.written = str(out)
    return done
