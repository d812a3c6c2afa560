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
`[0, rows)` (rows: 4096, doubled on demand up to 65536 by eager calls); other positions take the precise
in-graph reduction above. Eager rotation writes into one preallocated output with fused `mul` /
`addcmul` on the half-size tables (no `rotate_half`, no `cat`); compiled, Inductor fuses the
functional form into one kernel. `apply_rope(..., out=t)` writes into `t` (in place when `out is x`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from posenc_np.rope import check_rope_shapes, resolve_rotary_dim, rope_cos_sin as spec_rope_cos_sin
from posenc_np.rope import rope_plan, rope_permutation as spec_rope_permutation, scaling_from_hf_config

from ._common import as_tensor, resolve_dtype, spec_constant
from posenc_np._freeze import freeze as _freeze, thaw as _thaw

__all__ = ["rope_frequencies", "rope_cos_sin", "apply_rope", "rope_permutation", "permute_qk_rows",
           "scaling_from_hf_config", "RotaryEmbedding"]


class _Plan:
    """The spec's `RopePlan` as float64 tensors on one device."""

    def __init__(self, rotary_dim, base, scaling, layout, device):
        frozen = _freeze(scaling)

        def const(what):
            return spec_constant(("rope", rotary_dim, float(base), frozen, layout, what),
                                 lambda: np.atleast_1d(getattr(rope_plan(rotary_dim, base=base, scaling=_thaw(frozen),
                                                                         layout=layout), what)),
                                 dtype=torch.float64, device=device)

        self.turns = const("turns")
        self.scale = const("attention_scale")
        # `kind` decides the graph, so it is read from the (static) dict, after the spec validated it.
        name = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
        self.kind = name if name in ("dynamic", "longrope") else "static"
        self.original = scaling["original_max_position_embeddings"] if self.kind != "static" else None
        if self.kind == "longrope":
            self.turns_long = const("turns_long")
        if self.kind == "dynamic":
            self.factor = float(scaling["factor"])
            self.exponent = const("dynamic_exponent")


def _check_positions(positions):
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise ValueError(f"positions must be an integer tensor, got dtype {positions.dtype}")


def _turns(positions, kind, turns, original=None, turns_long=None, factor=None, exponent=None):
    """float64 frequencies in turns, in-graph for the sequence-length dependent kinds."""
    if kind == "static":
        return turns
    seq_len = positions.max().to(torch.float64) + 1
    if kind == "longrope":
        return torch.where(seq_len > original, turns_long, turns)
    growth = factor * torch.clamp(seq_len, min=original) / original - (factor - 1.0)
    return turns * growth ** exponent


def _half_cos_sin(positions, turns, scale):
    """`[..., r/2]` float32 cos and sin (scale folded in) with the angle reduced in float64."""
    t = positions.to(torch.float64)[..., None] * turns
    angle = ((t - torch.round(t)) * (2 * math.pi)).to(torch.float32)
    scale = scale.to(torch.float32)
    return torch.cos(angle) * scale, torch.sin(angle) * scale


def _plan_cos_sin(positions, plan: _Plan):
    turns = _turns(positions, plan.kind, plan.turns, plan.original, getattr(plan, "turns_long", None),
                   getattr(plan, "factor", None), getattr(plan, "exponent", None))
    return _half_cos_sin(positions, turns, plan.scale)


_MIN_ROWS, _MAX_ROWS = 4096, 65536
_TABLES: dict = {}


@torch.compiler.assume_constant_result
def _table(key, rows=_MIN_ROWS):
    """`(cos, sin)` float32 `[rows', r/2]` (rows' >= rows when rows <= _MAX_ROWS) from the float64 spec, cached.

    Under torch.compile this runs at trace time and the graph holds the tensors as constants, so
    the spec is never traced and a compiled call never rebuilds the table.
    """
    rotary_dim, base, frozen, device = key
    table = _TABLES.get(key)
    if table is None or (table[0].shape[0] < rows <= _MAX_ROWS):
        rows = max(_MIN_ROWS, 1 << (rows - 1).bit_length())
        cos, sin = spec_rope_cos_sin(np.arange(rows), rotary_dim, base=base, scaling=_thaw(frozen))
        half = rotary_dim // 2
        table = _TABLES[key] = tuple(torch.as_tensor(t[:, :half], dtype=torch.float32, device=device)
                                     for t in (cos, sin))
    return table


def _gather(positions, cos, sin):
    index = positions.clamp(0, cos.shape[0] - 1)
    return cos[index], sin[index]


def _fast_cos_sin(positions, rotary_dim, base, scaling, computed):
    """Half-size cos/sin: gathered from the spec table when all positions are inside it, else `computed(positions)`.

    Eager: one host read of min/max decides (and grows the table up to _MAX_ROWS rows). Compiled:
    `torch.cond` holds both branches, so a new position never recompiles.
    """
    key = (rotary_dim, float(base), _freeze(scaling), str(positions.device))
    if torch.compiler.is_compiling():
        cos, sin = _table(key)
        inside = (positions.min() >= 0) & (positions.max() < cos.shape[0])
        return torch.cond(inside, lambda p, c, s: _gather(p, c, s), lambda p, c, s: computed(p), (positions, cos, sin))
    if positions.numel() == 0:
        return computed(positions)
    low, high = (int(v) for v in torch.aminmax(positions))  # one host read
    cos, sin = _table(key, high + 1)
    if low >= 0 and high < cos.shape[0]:
        return _gather(positions, cos, sin)
    return computed(positions)


def _check_out(x, out):
    if not isinstance(out, torch.Tensor) or out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        got = (tuple(out.shape), out.dtype, out.device) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"out must be a tensor of x's shape, dtype and device {(tuple(x.shape), x.dtype, x.device)}, "
                         f"got {got}")
    if out is not x and not torch.compiler.is_compiling() and (
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
    if not torch.compiler.is_compiling() and not differentiable:
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


def rope_frequencies(rotary_dim, *, base=10000.0, scaling=None, seq_len=None):
    """`(inv_freq float32 [r/2], attention_scale float)`; see `posenc_np.rope_frequencies`.

    `seq_len` may be an int or a (traced) integer tensor; frequencies are formed in float64 and rounded once.
    """
    plan = _Plan(rotary_dim, base, scaling, "half", None)
    if seq_len is None:
        turns = plan.turns
    else:
        seq_len = as_tensor(seq_len)
        turns = _turns(seq_len - 1, plan.kind, plan.turns, plan.original, getattr(plan, "turns_long", None),
                       getattr(plan, "factor", None), getattr(plan, "exponent", None))
    return (turns * (2 * math.pi)).to(torch.float32), rope_plan(rotary_dim, base=base, scaling=scaling).attention_scale


def rope_cos_sin(positions, rotary_dim=None, *, base=10000.0, scaling=None, layout="half", rotary_pct=None,
                 head_dim=None, dtype=None):
    """`(cos, sin)`, each `[*positions.shape, rotary_dim]` in `dtype` (float32 when None); see `posenc_np.rope_cos_sin`."""
    rotary_dim = resolve_rotary_dim(head_dim, rotary_dim, rotary_pct)
    positions = as_tensor(positions)
    _check_positions(positions)
    cos, sin = _plan_cos_sin(positions, _Plan(rotary_dim, base, scaling, layout, positions.device))
    expand = (lambda t: torch.cat([t, t], -1)) if layout == "half" else (lambda t: t.repeat_interleave(2, -1))
    dtype = resolve_dtype(dtype)
    return expand(cos).to(dtype), expand(sin).to(dtype)


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None,
               out=None):
    """Rotate the first `rotary_dim` channels of `x`; see `posenc_np.apply_rope`.

    `positions` is an integer tensor broadcasting against `x.shape[:-1]` (float tensors raise).
    Returns a tensor like `x`; half-precision inputs are rotated in float32 and rounded once.

    `out` (PyTorch only): a tensor of x's shape, dtype and device to write the result into and
    return, skipping the allocation of fresh output memory; `out=x` rotates in place. Another
    tensor overlapping x raises ValueError. Eager in-place/`out=` calls are not differentiable
    through `x` (use the default for training).
    """
    rotary_dim = resolve_rotary_dim(x.shape[-1], rotary_dim, rotary_pct)
    positions = as_tensor(positions, device=x.device)
    _check_positions(positions)
    check_rope_shapes(x.shape, positions.shape)
    if out is not None:
        _check_out(x, out)
    plan = _Plan(rotary_dim, base, scaling, layout, x.device)
    if plan.kind == "static":
        cos, sin = _fast_cos_sin(positions, rotary_dim, base, scaling, lambda p: _plan_cos_sin(p, plan))
    else:
        cos, sin = _plan_cos_sin(positions, plan)
    return _rotate(x, cos, sin, rotary_dim, layout, out)


def rope_permutation(head_dim, *, source, target, rotary_dim=None):
    """int64 tensor `perm` with `W_target = W_source[perm]` per head; see `posenc_np.rope_permutation`."""
    return torch.as_tensor(spec_rope_permutation(head_dim, source=source, target=target, rotary_dim=rotary_dim))


def permute_qk_rows(weight, num_heads, *, source, target, rotary_dim=None):
    """Permute every head's rows of a `[num_heads * head_dim, ...]` q/k weight; see `posenc_np.permute_qk_rows`."""
    if num_heads < 1 or weight.shape[0] % num_heads:
        raise ValueError(f"num_heads={num_heads} does not divide the weight's first axis {weight.shape[0]}")
    head_dim = weight.shape[0] // num_heads
    perm = rope_permutation(head_dim, source=source, target=target, rotary_dim=rotary_dim).to(weight.device)
    return weight.reshape(num_heads, head_dim, *weight.shape[1:])[:, perm].reshape(weight.shape)


class RotaryEmbedding(torch.nn.Module):
    """`apply_rope` with its parameters bound; called with `(x, positions)`, returns a tensor like `x`.

    Buffers (all non-persistent, so the state dict is empty): `inv_freq` (float32, for inspection),
    the float64 frequencies in turns, and with `max_len` a float32 cos/sin cache of `max_len` rows
    (`[max_len, r/2]`, computed by the float64 spec, hence correctly rounded). Casting the module
    (`.to(torch.bfloat16)`, `.half()`) moves these buffers between devices but never lowers their
    precision; the output dtype follows `x`.

    Cache use: positions inside `[0, max_len)` are gathered from the cache; if any position lies
    outside, the whole call computes its angles directly (float64 reduction, same accuracy). Eager
    calls decide with one host read; compiled calls use `torch.cond`, so the graph holds both paths and
    never recompiles for a new length. Without `max_len` the module shares `apply_rope`'s spec table
    (same rule: gathered inside it, computed outside). `dynamic` and `longrope` scaling depend on the
    sequence length and always compute directly (no cache).

    `rotary_pct` (GPT-NeoX) needs `head_dim`; `rotary_dim = int(head_dim * rotary_pct)`.
    """

    def __init__(self, rotary_dim=None, *, base=10000.0, layout="half", scaling=None, max_len=None, rotary_pct=None,
                 head_dim=None):
        super().__init__()
        self.rotary_dim = resolve_rotary_dim(head_dim, rotary_dim, rotary_pct)
        self._spec = rope_plan(self.rotary_dim, base=base, scaling=scaling, layout=layout)
        self.base, self.layout, self.scaling, self.max_len = float(base), layout, scaling, max_len
        self.head_dim = head_dim
        if max_len is not None and self._spec.kind == "static":
            cos, sin = spec_rope_cos_sin(range(int(max_len)), self.rotary_dim, base=base, scaling=scaling)
            self._cache = (cos[:, : self.rotary_dim // 2], sin[:, : self.rotary_dim // 2])
        else:
            self._cache = None
        self._build(None)

    def _build(self, device):
        """(Re)create the buffers from the float64 plan in their own dtypes (also after `.to(...)`)."""
        spec = self._spec
        buffers = {"inv_freq": (spec.turns * 2 * math.pi, torch.float32), "turns": (spec.turns, torch.float64),
                   "scale": (spec.attention_scale, torch.float64)}
        if spec.kind == "longrope":
            buffers["turns_long"] = (spec.turns_long, torch.float64)
        if spec.kind == "dynamic":
            buffers["exponent"] = (spec.dynamic_exponent, torch.float64)
        if self._cache is not None:
            buffers["cos_cache"] = (self._cache[0], torch.float32)
            buffers["sin_cache"] = (self._cache[1], torch.float32)
        for name, (value, dtype) in buffers.items():
            self.register_buffer(name, torch.as_tensor(value, dtype=dtype, device=device), persistent=False)

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        self._build(self.turns.device)  # keep float64/float32 whatever dtype `fn` cast to
        return self

    def _computed(self, positions):
        turns = _turns(positions, self._spec.kind, self.turns, self._spec.original, getattr(self, "turns_long", None),
                       self._spec.factor, getattr(self, "exponent", None))
        return _half_cos_sin(positions, turns, self.scale)

    def _gathered(self, positions):
        index = positions.long().clamp(0, self.cos_cache.shape[0] - 1)
        return self.cos_cache[index], self.sin_cache[index]

    def forward(self, x, positions):
        if self.head_dim is not None and x.shape[-1] != self.head_dim:
            raise ValueError(f"x has {x.shape[-1]} channels, this RotaryEmbedding was built for head_dim={self.head_dim}")
        if self.rotary_dim > x.shape[-1]:
            raise ValueError(f"rotary_dim={self.rotary_dim} is larger than the head dim {x.shape[-1]}")
        positions = as_tensor(positions, device=x.device)
        _check_positions(positions)
        check_rope_shapes(x.shape, positions.shape)
        if self._cache is None and self._spec.kind == "static":
            cos, sin = _fast_cos_sin(positions, self.rotary_dim, self.base, self.scaling, self._computed)
        elif self._cache is None:
            cos, sin = self._computed(positions)
        else:
            inside = (positions.min() >= 0) & (positions.max() < self.cos_cache.shape[0])
            if torch.compiler.is_compiling():
                cos, sin = torch.cond(inside, self._gathered, self._computed, (positions,))
            else:
                cos, sin = self._gathered(positions) if bool(inside) else self._computed(positions)
        return _rotate(x, cos, sin, self.rotary_dim, self.layout)

    def extra_repr(self):
        return (f"rotary_dim={self.rotary_dim}, base={self.base}, layout={self.layout!r}, scaling={self.scaling!r}, "
                f"max_len={self.max_len}")
