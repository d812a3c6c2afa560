"""Rotary position embedding in PyTorch. The math, conventions and scaling types: `posenc_np.rope`.

Precision: angles are reduced modulo one turn in float64 (`t = p * inv_freq / 2pi`, `t - round(t)`)
before the float32 cos/sin, so the angle error stays ~1e-7 rad up to position 2**24 and beyond
(docs/rope-precision.md); a plain float32 `p * inv_freq` is off by ~0.06 rad at position 1e6.
Inputs in bfloat16/float16 are rotated in float32 and cast back.

Sequence-length dependent scaling (`dynamic`, `longrope`) is computed in-graph from
`seq_len = max(positions) + 1`, so `torch.compile(fullgraph=True)` traces it without a graph break
and new positions never recompile.

Speed (docs/performance.md): for the other scalings, cos/sin come from a float32 table computed once
by the float64 spec per (parameters, device) and gathered by position, when every position lies in
`[0, 4096)`; other positions take the precise in-graph reduction above (the same fixed table in every
backend, never grown by a call). Eager rotation writes into one preallocated output with fused `mul` /
`addcmul` on the half-size tables (no `rotate_half`, no `cat`); compiled, Inductor fuses the
functional form into one kernel. `apply_rope(..., out=t)` writes into `t` (in place when `out is x`).
Eager calls whose parameters, shapes, dtypes and devices were seen before skip the checks and reuse
the plan; consecutive calls with the same positions tensor (q, then k) share its cos/sin; small
inputs (decode) rotate in one pass with few ops (see `_EAGER`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from posenc_np.backend import RotaryConfig, check_float_dtype, check_heads_divide, check_integer_dtype, check_rope_input
from posenc_np.backend import cached_plan as _spec_plan
from posenc_np.backend import freeze as _freeze
from posenc_np.backend import mrope_key as _mrope
from posenc_np.backend import thaw as _thaw
from posenc_np.mrope import check_mrope_positions
from posenc_np.rope import check_rope_shapes, resolve_rotary_dim, scaling_from_hf_config
from posenc_np.rope import rope_cos_sin as spec_rope_cos_sin
from posenc_np.rope import rope_permutation as spec_rope_permutation

from ._common import as_tensor, is_tracing, resolve_dtype, spec_constant, spec_value

__all__ = ["rope_frequencies", "rope_cos_sin", "apply_rope", "rope_permutation", "permute_qk_rows",
           "scaling_from_hf_config", "RotaryEmbedding"]

# The private skeleton below has the same names and roles in posenc_tf/rope.py and posenc_jax/rope.py:
# _spec_plan, _plan, _check_positions, _turns, _half_cos_sin, _spec_table, _gather_or_compute, _rotate, _expand.

_TABLE_ROWS = 4096  # rows of the shared spec cos/sin table (positions 0..4095); beyond it: computed


def _plan_field(rotary_dim, base, frozen, layout, field, mrope=None):
    value = getattr(_spec_plan(rotary_dim, base, _thaw(frozen), layout, mrope), field)
    return np.atleast_1d(value) if isinstance(value, np.ndarray) else value


def _plan(rotary_dim, base, scaling, layout, device=None, mrope=None):
    """`(kind, consts)`: the plan's kind and its numbers as the constants the graph reads (float64
    tensors on `device` for the frequencies in turns; Python numbers for lengths and factors).

    Every `make` below closes over Python values only, so under torch.compile Dynamo runs it at trace
    time as a constant function and never traces the spec.

    Multi-axis RoPE (`mrope`, see `_mrope`): `consts["axis"]` is the int64 `[r/2]` pair -> axis map and
    `consts["axes"]` the size of the positions' leading axis; the turns are in pair order already.
    """
    key = ("rope", rotary_dim, float(base), _freeze(scaling), layout, mrope)
    frozen = key[3]
    kind, original, factor, axes = spec_value(key + ("scalars",), lambda: tuple(
        _plan_field(rotary_dim, base, frozen, layout, f, mrope) for f in ("kind", "original", "factor", "num_axes")))

    def const(field, dtype=torch.float64):
        return spec_constant(key + (field,), lambda: np.atleast_1d(_plan_field(rotary_dim, base, frozen, layout, field,
                                                                               mrope)), dtype=dtype, device=device)

    consts = {"turns": const("turns"), "scale": const("attention_scale")}
    if axes is not None:
        consts.update(axis=const("axis_of_pair", torch.int64), axes=axes)
    if kind == "longrope":
        consts.update(turns_long=const("turns_long"), original=original)
    if kind == "dynamic":
        consts.update(exponent=const("dynamic_exponent"), original=original, factor=factor)
    return kind, consts


def _check_positions(positions):
    check_integer_dtype("positions", positions.dtype, not (
        positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool))


def _turns(positions, kind, consts):
    """float64 frequencies in turns for this call, in-graph for the sequence-length dependent kinds."""
    if kind == "static" or positions.numel() == 0:  # no positions: an empty result, whatever the frequencies
        return consts["turns"]
    seq_len = positions.max().to(torch.float64) + 1
    if kind == "longrope":
        return torch.where(seq_len > consts["original"], consts["turns_long"], consts["turns"])
    factor, original = consts["factor"], consts["original"]
    growth = factor * torch.clamp(seq_len, min=original) / original - (factor - 1.0)
    return consts["turns"] * growth ** consts["exponent"]


def _half_cos_sin(positions, kind, consts):
    """`[..., r/2]` float32 cos and sin (attention scale folded in), the angle reduced in float64.

    Multi-axis positions `[A, ...]`: pair `j` reads axis `consts["axis"][j]` (a gather of the positions'
    leading axis moved last), so each axis keeps the float64 reduction of the 1-D path."""
    if "axis" in consts:
        per_pair = positions.movedim(0, -1)[..., consts["axis"]]
        t = per_pair.to(torch.float64) * _turns(positions, kind, consts)
    else:
        t = positions.to(torch.float64)[..., None] * _turns(positions, kind, consts)
    angle = ((t - torch.round(t)) * (2 * math.pi)).to(torch.float32)
    scale = consts["scale"].to(torch.float32)
    return torch.cos(angle) * scale, torch.sin(angle) * scale


def _spec_table(rotary_dim, base, scaling, device=None):
    """`(cos, sin)` float32 `[4096, r/2]` of positions 0..4095 from the float64 spec, built once per
    parameters and device (under torch.compile at trace time, held by the graph as a constant). Two
    separate tensors: `torch.cond` refuses operands that are views of one."""
    frozen = _freeze(scaling)

    def const(which):
        return spec_constant(("rope_table", rotary_dim, float(base), frozen, which),
                             lambda: _table_half(rotary_dim, base, frozen, which), device=device)

    return const(0), const(1)


def _table_half(rotary_dim, base, frozen, which):
    table = spec_rope_cos_sin(np.arange(_TABLE_ROWS), rotary_dim, base=base, scaling=_thaw(frozen))[which]
    return table[:, : rotary_dim // 2]


def _gather_or_compute(positions, table, kind, consts):
    """Half-size cos/sin: gathered from `table` (a `(cos, sin)` pair of `[rows, r/2]`, or None) when every
    position lies inside it, else computed.

    Eager: one host read of min/max decides. Compiled: `torch.cond` holds both branches, so a new
    position never recompiles.
    """
    if table is None or positions.numel() == 0:
        return _half_cos_sin(positions, kind, consts)
    cos, sin = table
    rows = cos.shape[0]

    def gather(p, c, s):
        index = p.long().clamp(0, rows - 1)
        return c[index], s[index]

    if is_tracing():
        inside = (positions.min() >= 0) & (positions.max() < rows)
        return torch.cond(inside, gather, lambda p, c, s: _half_cos_sin(p, kind, consts), (positions, cos, sin))
    low, high = (int(v) for v in torch.aminmax(positions))  # one host read
    if low >= 0 and high < rows:
        return gather(positions, cos, sin)
    return _half_cos_sin(positions, kind, consts)


def _expand(half, layout):
    """`[..., r/2]` per-pair values to `[..., r]` channels of the layout."""
    return torch.cat([half, half], -1) if layout == "half" else half.repeat_interleave(2, -1)


def _check_out(x, out):
    if not isinstance(out, torch.Tensor) or out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        got = (tuple(out.shape), out.dtype, out.device) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"out must be a tensor of x's shape, dtype and device {(tuple(x.shape), x.dtype, x.device)}, "
                         f"got {got}")
    if out is not x and not is_tracing() and x.numel() and (  # empty tensors hold no memory (data_ptr 0)
            out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()):
        raise ValueError("out shares memory with x without being x; pass out=x for an in-place rotation")


def _halves(t, rotary_dim, layout):
    if layout == "half":
        return t[..., : rotary_dim // 2], t[..., rotary_dim // 2: rotary_dim]
    return t[..., 0:rotary_dim:2], t[..., 1:rotary_dim:2]


# Elements per eager chunk: a chunk's float32 working set (8-16 MiB) stays in a server CPU's L3, and
# there are few chunks, so few OpenMP regions (many small ones stall when another process holds a core).
_CHUNK = 1 << 21


def _chunks(x, out, cos, sin):
    """`(x, out)` split along the flattened leading axes into cache-sized pieces, with `cos`/`sin`.

    Only when the tables broadcast over those axes (they are `[seq, r/2]` or smaller) and both tensors
    flatten without a copy; otherwise one piece. Each pass of the eager rotation then reads data
    that the previous pass left in cache, instead of streaming the whole tensor from memory again.
    """
    if x.dim() < 3 or cos.dim() > 2 or x.numel() < 2 * _CHUNK:
        return [(x, out)]
    try:
        x3, out3 = x.view(-1, *x.shape[-2:]), out.view(-1, *out.shape[-2:])
    except RuntimeError:
        return [(x, out)]
    step = max(1, _CHUNK // (x.shape[-2] * x.shape[-1]))
    return [(x3[i:i + step], out3[i:i + step]) for i in range(0, x3.shape[0], step)]


def _rotate_eager(x, cos, sin, rotary_dim, layout, out):
    """Eager rotation into `out` (fresh when None, may be `x`), float32 math, one rounding.

    Float32 inputs: two fused passes per half (`mul`, `addcmul`) straight into the output, no copy
    of x. Other dtypes: each chunk is upcast once into a reused float32 buffer, rotated there in
    place and rounded once on the way into the output.
    """
    if out is None:
        out = torch.empty_like(x)
    if out is not x and rotary_dim < x.shape[-1]:
        out[..., rotary_dim:] = x[..., rotary_dim:]
    in_place, buffers = out is x, {}

    def buffer(name, like):
        shape = tuple(like.shape)
        if name not in buffers or buffers[name].shape != shape:
            buffers[name] = torch.empty(shape, dtype=torch.promote_types(x.dtype, torch.float32), device=x.device)
        return buffers[name]

    for xs, outs in _chunks(x, out, cos, sin):
        (a, b), (o1, o2) = _halves(xs, rotary_dim, layout), _halves(outs, rotary_dim, layout)
        if x.dtype == torch.float32 and not in_place:
            torch.mul(a, cos, out=o1).addcmul_(b, sin, value=-1)
            torch.mul(b, cos, out=o2).addcmul_(a, sin)
            continue
        if x.dtype == torch.float32:  # in place (the chunks of x and out are distinct views of the same memory)
            work = outs
        else:
            work = buffer("work", xs[..., :rotary_dim]).copy_(xs[..., :rotary_dim])
        a, b = _halves(work, rotary_dim, layout)
        b_sin = torch.mul(b, sin, out=buffer("b_sin", b))  # kept before b changes
        b.mul_(cos).addcmul_(a, sin)
        a.mul_(cos).sub_(b_sin)
        if work is not outs:
            outs[..., :rotary_dim].copy_(work)
    return out


def _rotate(x, cos, sin, rotary_dim, layout, out=None):
    """Rotate the first `rotary_dim` channels of `x` by half-size float32 `cos`/`sin` (into `out` if given)."""
    differentiable = torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad)
    if not is_tracing() and not differentiable:
        return _rotate_eager(x, cos, sin, rotary_dim, layout, out)
    result = _rotate_functional(x, cos, sin, rotary_dim, layout)
    return result if out is None else out.copy_(result)


def _rotate_functional(x, cos, sin, rotary_dim, layout):
    """The same rotation as one expression (autograd, and what Inductor fuses into one kernel).

    Written as `x * [cos, cos] + flip(x) * [-sin, sin]` over a `(2, r/2)` (half) or `(r/2, 2)`
    (interleaved) view: `flip` is an index remap, so Inductor emits one vectorised loop that can
    write straight into `out=` (a `cat` of the halves needs masked loads and a temporary).
    """
    compute = torch.promote_types(x.dtype, torch.float32)
    axis = -2 if layout == "half" else -1
    pairs = x[..., :rotary_dim].to(compute).unflatten(-1, (2, rotary_dim // 2) if layout == "half" else
                                                      (rotary_dim // 2, 2))
    cos, sin = cos.to(compute), sin.to(compute)
    out = pairs * torch.stack([cos, cos], axis) + pairs.flip(axis) * torch.stack([-sin, sin], axis)
    out = out.flatten(-2).to(x.dtype)
    if rotary_dim == x.shape[-1]:
        return out
    return torch.cat([out, x[..., rotary_dim:]], dim=-1)


# Eager fast path (docs/performance.md, "Decode"). Everything an eager `apply_rope` checks and plans
# depends only on its parameters and the shapes, dtypes and devices of x and positions, so it runs once
# per such key; `_EAGER` keeps the outcome (Python values and concrete spec tensors), stored only after
# every check passed and never under torch.compile, torch.export or torch.jit.trace. A later call with
# the key reads the positions' values and rotates. The cos/sin of one positions tensor are kept for the
# next call (q then k with the same positions), recognised by identity and the version counter that
# every in-place write bumps; the entry holds the tensor, so its identity cannot pass to another.
_EAGER: dict = {}
_EAGER_KEYS = 256  # distinct keys kept (eager serving sees a few shapes); cleared when full
_LAST: list = [None]  # [(positions, version, source, _CosSin)]
_LAST_PAIRS = 1 << 20  # cos/sin values up to which the last positions' cos/sin are kept
_SMALL = 1 << 16  # elements of x up to which one flip-based pass beats the chunked halves (few ops)
_HOST_PAIRS = 1 << 14  # position x pair values that the CPU makes with NumPy (a torch op costs ~10x a NumPy one here)
_SOURCES: dict = {}  # interned (rotary_dim, base, scaling, mrope, device): what half cos/sin depend on


class _Prepared:
    """An eager call's validated plan: `rotary_dim`, `kind`, `consts`, the table (or None) and the cos/sin
    `source`; for static 1-D RoPE on the CPU also `host`: the table as NumPy views, the float64 turns and
    the attention scale."""

    __slots__ = ("rotary_dim", "kind", "consts", "table", "source", "host")

    def __init__(self, rotary_dim, kind, consts, table, source, host):
        self.rotary_dim, self.kind, self.consts, self.table = rotary_dim, kind, consts, table
        self.source, self.host = source, host


class _CosSin:
    """Half-size cos/sin of one positions tensor and their full-width forms per layout (made on first use)."""

    __slots__ = ("cos", "sin", "full")

    def __init__(self, cos, sin, full=None):
        self.cos, self.sin, self.full = cos, sin, full or {}

    def expanded(self, layout):
        """`(cos2, sin2)` of width r: `x * cos2 + swap(x) * sin2` is the rotation (sin2 carries the signs)."""
        if layout not in self.full:
            cos, sin = self.cos, self.sin
            if layout == "half":
                self.full[layout] = torch.cat([cos, cos], -1), torch.cat([-sin, sin], -1)
            else:
                self.full[layout] = torch.stack([cos, cos], -1).flatten(-2), torch.stack([-sin, sin], -1).flatten(-2)
        return self.full[layout]


def _eager_key(x, positions, params):
    """The `_EAGER` key of this call, or None when the call must take the general path."""
    if (type(x) is not torch.Tensor or type(positions) is not torch.Tensor or x.is_meta
            or torch.compiler.is_compiling() or torch._C._is_tracing()):
        return None
    key = (x.shape, x.dtype, x.device, positions.shape, positions.dtype, positions.device, params)
    try:
        hash(key)
    except TypeError:  # an unhashable argument: the general path validates (and reports) it
        return None
    return key


def _prepare(key, rotary_dim, base, scaling, layout, mrope, kind, consts, device):
    """Store the checked plan of `key` (called after every check of the general path passed)."""
    table = _spec_table(rotary_dim, base, scaling, device) if kind == "static" and mrope is None else None
    source = (rotary_dim, float(base), _freeze(scaling), mrope, device)
    source = _SOURCES.setdefault(source, source)
    host = None
    if table is not None and device.type == "cpu" and key[5].type == "cpu":
        plan = _spec_plan(rotary_dim, base, scaling, layout)
        host = (table[0].numpy(), table[1].numpy(), np.asarray(plan.turns, dtype=np.float64),
                float(plan.attention_scale))
    if len(_EAGER) >= _EAGER_KEYS:
        _EAGER.clear()
    _EAGER[key] = prepared = _Prepared(rotary_dim, kind, consts, table, source, host)
    return prepared


def _eager_cos_sin(positions, prepared, layout, full):
    """`_CosSin` of `positions` for `prepared` (with the `layout` full-width forms made when `full`): the
    last call's when it had the same, unchanged positions tensor."""
    last = _LAST[0]
    keep = not (positions.is_inference() or torch.is_inference_mode_enabled())  # no version counter there
    version = positions._version if keep else None
    if keep and last is not None and last[0] is positions and last[1] == version and last[2] is prepared.source:
        return last[3]
    host = prepared.host
    if host is not None and positions.numel() * host[2].size <= _HOST_PAIRS:
        cos_sin = _host_cos_sin(positions.numpy(), host, layout if full else None)
    else:
        cos_sin = _CosSin(*_gather_or_compute(positions, prepared.table, prepared.kind, prepared.consts))
    keep = keep and cos_sin.cos.numel() <= _LAST_PAIRS
    _LAST[0] = (positions, version, prepared.source, cos_sin) if keep else None
    return cos_sin


def _host_cos_sin(p, host, layout):
    """`_gather_or_compute` in NumPy for a few CPU positions `p`: gathered from the table's NumPy views
    when every position lies inside it, else `_half_cos_sin`'s arithmetic (`t - round(t)` in float64, then
    float32 cos/sin times the float32 scale); with `layout`, the full-width forms too."""
    cos_table, sin_table, turns, scale = host
    if p.size and p.min() >= 0 and p.max() < cos_table.shape[0]:
        cos, sin = cos_table[p], sin_table[p]
    else:
        t = p.astype(np.float64)[..., None] * turns
        angle = ((t - np.rint(t)) * (2 * math.pi)).astype(np.float32)  # rint: half to even, as torch.round
        cos, sin = np.cos(angle) * np.float32(scale), np.sin(angle) * np.float32(scale)  # as `_half_cos_sin`
    full = {}
    if layout == "half":
        full[layout] = (torch.from_numpy(np.concatenate([cos, cos], -1)),
                        torch.from_numpy(np.concatenate([-sin, sin], -1)))
    elif layout is not None:
        # the explicit width: an empty table (no positions) cannot infer a -1 axis
        full[layout] = (torch.from_numpy(np.stack([cos, cos], -1).reshape(*cos.shape[:-1], 2 * cos.shape[-1])),
                        torch.from_numpy(np.stack([-sin, sin], -1).reshape(*sin.shape[:-1], 2 * sin.shape[-1])))
    return _CosSin(torch.from_numpy(cos), torch.from_numpy(sin), full)


def _rotate_prepared(x, positions, prepared, layout, out=None):
    """The eager rotation of a prepared call (into `out` if given): small full-width inputs in one
    flip-based pass (`x * cos2 + swap(x) * sin2`: three ops, the full-width tables shared by q and k),
    others `_rotate`."""
    small = x.numel() <= _SMALL and prepared.rotary_dim == x.shape[-1]
    cos_sin = _eager_cos_sin(positions, prepared, layout, small)
    if not small:
        return _rotate(x, cos_sin.cos, cos_sin.sin, prepared.rotary_dim, layout, out)
    cos2, sin2 = cos_sin.expanded(layout)
    if layout == "half":
        swapped = torch.roll(x, x.shape[-1] // 2, -1)  # [a, b] -> [b, a]: one op (a flip needs two views)
    else:
        swapped = x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
    result = torch.mul(x, cos2).addcmul_(swapped, sin2)  # float32 (or wider) math: cos2 is float32
    result = result if result.dtype == x.dtype else result.to(x.dtype)
    return result if out is None else out.copy_(result)


def rope_frequencies(rotary_dim, *, base=10000.0, scaling=None, seq_len=None):
    """`(inv_freq float32 [r/2], attention_scale float)`; see `posenc_np.rope_frequencies`.

    `seq_len` may be an int or a (traced) integer tensor; frequencies are formed in float64 and rounded once.
    """
    kind, consts = _plan(rotary_dim, base, scaling, "half")
    turns = consts["turns"] if seq_len is None else _turns(as_tensor(seq_len) - 1, kind, consts)
    frozen = _freeze(scaling)
    scale = spec_value(("rope", rotary_dim, float(base), frozen, "half", "scale"),
                       lambda: float(_plan_field(rotary_dim, base, frozen, "half", "attention_scale")))
    return (turns * (2 * math.pi)).to(torch.float32), scale


def rope_cos_sin(positions, rotary_dim=None, *, base=10000.0, scaling=None, layout="half", rotary_pct=None,
                 head_dim=None, dtype=None, mrope_section=None, mrope_interleaved=False,
                 mrope_frequencies="shared", mrope_axes=None):
    """`(cos, sin)`, each `[*positions.shape, rotary_dim]` in `dtype` (float32 when None); see `posenc_np.rope_cos_sin`.

    With `mrope_section`, positions `[A, ...]` give `[..., rotary_dim]` (multi-axis RoPE, `posenc_np.mrope`)."""
    rotary_dim = resolve_rotary_dim(head_dim, rotary_dim, rotary_pct)
    positions = as_tensor(positions)
    _check_positions(positions)
    mrope = _mrope(mrope_section, mrope_interleaved, mrope_frequencies, mrope_axes)
    kind, consts = _plan(rotary_dim, base, scaling, layout, positions.device, mrope)
    if "axis" in consts:
        check_mrope_positions(positions.shape, consts["axes"])
    cos, sin = _half_cos_sin(positions, kind, consts)
    dtype = resolve_dtype(dtype)
    return _expand(cos, layout).to(dtype), _expand(sin, layout).to(dtype)


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None,
               out=None, mrope_section=None, mrope_interleaved=False,
                 mrope_frequencies="shared", mrope_axes=None):
    """Rotate the first `rotary_dim` channels of `x`; see `posenc_np.apply_rope`.

    `positions` is an integer tensor broadcasting against `x.shape[:-1]` (float tensors raise).
    Returns a tensor like `x`; half-precision inputs are rotated in float32 and rounded once.

    `out` (PyTorch only): a tensor of x's shape, dtype and device to write the result into and
    return, skipping the allocation of fresh output memory; `out=x` rotates in place. Another
    tensor overlapping x raises ValueError. Eager in-place/`out=` calls are not differentiable
    through `x` (use the default for training).

    Multi-axis RoPE (`mrope_section`, `mrope_interleaved`, `mrope_frequencies`; `posenc_np.apply_rope`):
    positions `[A, ...]`, `positions[0]` broadcasting against `x.shape[:-1]`; the angles are always
    computed (float64 reduction per axis), never gathered from the 1-D table.
    """
    positions = as_tensor(positions, device=x.device)
    key = _eager_key(x, positions, (base, layout, rotary_dim, rotary_pct, scaling if scaling is None else
                                         _freeze(scaling), mrope_section if mrope_section is None else
                                         _freeze(mrope_section), mrope_interleaved, mrope_frequencies,
                                         mrope_axes if mrope_axes is None else _freeze(list(mrope_axes))))
    prepared = None if key is None else _EAGER.get(key)
    if prepared is not None:  # checked before with these parameters, shapes, dtypes and devices
        if out is not None:
            _check_out(x, out)
        return _rotate_prepared(x, positions, prepared, layout, out)
    rotary_dim = resolve_rotary_dim(x.shape[-1], rotary_dim, rotary_pct)
    _check_positions(positions)
    mrope = _mrope(mrope_section, mrope_interleaved, mrope_frequencies, mrope_axes)
    kind, consts = _plan(rotary_dim, base, scaling, layout, x.device, mrope)
    check_float_dtype("x", x.dtype, x.is_floating_point())  # after the parameters, as the spec; never _EAGER
    _check_shapes(x.shape, positions.shape, consts)
    if out is not None:
        _check_out(x, out)
    if key is not None:
        return _rotate_prepared(x, positions, _prepare(key, rotary_dim, base, scaling, layout, mrope, kind, consts,
                                                       x.device), layout, out)
    table = _spec_table(rotary_dim, base, scaling, x.device) if kind == "static" and mrope is None else None
    cos, sin = _gather_or_compute(positions, table, kind, consts)
    return _rotate(x, cos, sin, rotary_dim, layout, out)


def _check_shapes(x_shape, positions_shape, consts):
    if "axis" in consts:
        check_mrope_positions(positions_shape, consts["axes"])
        positions_shape = positions_shape[1:]
    check_rope_shapes(x_shape, positions_shape)


def rope_permutation(head_dim, *, source, target, rotary_dim=None):
    """int64 tensor `perm` with `W_target = W_source[perm]` per head; see `posenc_np.rope_permutation`."""
    return torch.as_tensor(spec_rope_permutation(head_dim, source=source, target=target, rotary_dim=rotary_dim))


def permute_qk_rows(weight, num_heads, *, source, target, rotary_dim=None):
    """Permute every head's rows of a `[num_heads * head_dim, ...]` q/k weight; see `posenc_np.permute_qk_rows`."""
    head_dim = check_heads_divide(num_heads, weight.shape[0])
    perm = rope_permutation(head_dim, source=source, target=target, rotary_dim=rotary_dim).to(weight.device)
    return weight.reshape(num_heads, head_dim, *weight.shape[1:])[:, perm].reshape(weight.shape)


class RotaryEmbedding(torch.nn.Module):
    """`apply_rope` with its parameters bound; called with `(x, positions)`, returns a tensor like `x`.

    Buffers (all non-persistent, so the state dict is empty): `inv_freq` (float32, for inspection),
    the float64 frequencies in turns, and with `max_len` a float32 cos/sin cache of `max_len` rows
    (`cos_cache`, `sin_cache`, `[max_len, r/2]`, computed by the float64 spec, hence correctly
    rounded). Casting the module (`.to(torch.bfloat16)`, `.half()`) moves these buffers between
    devices but never lowers their precision; the output dtype follows `x`.

    Cache policy (the same in every backend): the table is the module's `max_len` rows, or without
    `max_len` `apply_rope`'s shared 4096-row spec table; it never grows. Positions inside it are
    gathered; if any position lies outside, the whole call computes its angles directly (float64
    reduction, same accuracy). Eager calls decide with one host read; compiled calls use
    `torch.cond`, so the graph holds both paths and never recompiles for a new length. `dynamic` and
    `longrope` scaling depend on the sequence length and always compute directly (no table).

    `rotary_pct` (GPT-NeoX) needs `head_dim`; `rotary_dim = int(head_dim * rotary_pct)`.

    `mrope_section`, `mrope_interleaved`, `mrope_frequencies`: multi-axis RoPE (called with positions
    `[A, ...]`); the pair -> axis map is the int64 buffer `axis_of_pair`, and the angles are always
    computed (no cache).
    """

    def __init__(self, rotary_dim=None, *, base=10000.0, layout="half", scaling=None, max_len=None, rotary_pct=None,
                 head_dim=None, mrope_section=None, mrope_interleaved=False,
                 mrope_frequencies="shared", mrope_axes=None):
        super().__init__()
        config = RotaryConfig(rotary_dim, base=base, layout=layout, scaling=scaling, max_len=max_len,
                              rotary_pct=rotary_pct, head_dim=head_dim, mrope_section=mrope_section,
                              mrope_interleaved=mrope_interleaved, mrope_frequencies=mrope_frequencies,
                              mrope_axes=mrope_axes)
        config.bind(self)
        self._mrope = _mrope(self.mrope_section, self.mrope_interleaved, self.mrope_frequencies,
                             self.mrope_axes)
        self._spec = config.plan
        self._cache = config.cache_cos_sin() if config.cache_rows else None  # float64, made float32 by _build
        self._build(None)

    def _build(self, device):
        """(Re)create the buffers from the float64 plan in their own dtypes (also after `.to(...)`)."""
        spec = self._spec
        buffers = {"inv_freq": (spec.turns * 2 * math.pi, torch.float32), "turns": (spec.turns, torch.float64),
                   "scale": (np.atleast_1d(spec.attention_scale), torch.float64)}
        if spec.kind == "longrope":
            buffers["turns_long"] = (spec.turns_long, torch.float64)
        if spec.kind == "dynamic":
            buffers["exponent"] = (spec.dynamic_exponent, torch.float64)
        if spec.axis_of_pair is not None:
            buffers["axis_of_pair"] = (spec.axis_of_pair, torch.int64)
        if self._cache is not None:
            buffers["cos_cache"] = (self._cache[0], torch.float32)
            buffers["sin_cache"] = (self._cache[1], torch.float32)
        for name, (value, dtype) in buffers.items():
            self.register_buffer(name, torch.as_tensor(value, dtype=dtype, device=device), persistent=False)

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        self._build(self.turns.device)  # keep float64/float32 whatever dtype `fn` cast to
        return self

    def _consts(self):
        """The `consts` of `_plan`, read from this module's buffers (on the module's device)."""
        consts = {"turns": self.turns, "scale": self.scale}
        if self._spec.kind == "longrope":
            consts.update(turns_long=self.turns_long, original=self._spec.original)
        if self._spec.kind == "dynamic":
            consts.update(exponent=self.exponent, original=self._spec.original, factor=self._spec.factor)
        if self._spec.axis_of_pair is not None:
            consts.update(axis=self.axis_of_pair, axes=self._spec.num_axes)
        return consts

    def forward(self, x, positions):
        check_rope_input(x.shape[-1], self.rotary_dim, self.head_dim)
        check_float_dtype("x", x.dtype, x.is_floating_point())
        positions = as_tensor(positions, device=x.device)
        _check_positions(positions)
        consts = self._consts()
        _check_shapes(x.shape, positions.shape, consts)
        if self._spec.kind != "static" or self._mrope is not None:
            table = None
        elif self._cache is not None:
            table = (self.cos_cache, self.sin_cache)
        else:
            table = _spec_table(self.rotary_dim, self.base, self.scaling, x.device)
        cos, sin = _gather_or_compute(positions, table, self._spec.kind, consts)
        return _rotate(x, cos, sin, self.rotary_dim, self.layout)

    def extra_repr(self):
        return self.config.repr_args()
