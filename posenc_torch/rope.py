"""Rotary position embedding in PyTorch. The math, conventions and scaling types: `posenc_np.rope`.

Precision: angles are reduced modulo one turn in float64 (`t = p * inv_freq / 2pi`, `t - round(t)`)
before the float32 cos/sin, so the angle error stays ~1e-7 rad up to position 2**24 and beyond
(docs/rope-precision.md); a plain float32 `p * inv_freq` is off by ~0.06 rad at position 1e6.
Inputs in bfloat16/float16 are rotated in float32 and cast back.

Sequence-length dependent scaling (`dynamic`, `longrope`) is computed in-graph from
`seq_len = max(positions) + 1`, so `torch.compile(fullgraph=True)` traces it without a graph break
and new positions never recompile.
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


def _rotate(x, cos, sin, rotary_dim, layout):
    """Rotate the first `rotary_dim` channels of `x` by half-size `cos`/`sin` (float32 math)."""
    compute = torch.promote_types(x.dtype, torch.float32)
    rot = x[..., :rotary_dim].to(compute)
    cos, sin = cos.to(compute), sin.to(compute)
    if layout == "half":
        a, b = rot[..., : rotary_dim // 2], rot[..., rotary_dim // 2:]
        out = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)  # no rotate_half copy
    else:
        pairs = rot.unflatten(-1, (rotary_dim // 2, 2))
        a, b = pairs[..., 0], pairs[..., 1]
        out = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)
    out = out.to(x.dtype)
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


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None):
    """Rotate the first `rotary_dim` channels of `x`; see `posenc_np.apply_rope`.

    `positions` is an integer tensor broadcasting against `x.shape[:-1]` (float tensors raise).
    Returns a tensor like `x`; half-precision inputs are rotated in float32.
    """
    rotary_dim = resolve_rotary_dim(x.shape[-1], rotary_dim, rotary_pct)
    positions = as_tensor(positions, device=x.device)
    _check_positions(positions)
    check_rope_shapes(x.shape, positions.shape)
    cos, sin = _plan_cos_sin(positions, _Plan(rotary_dim, base, scaling, layout, x.device))
    return _rotate(x, cos, sin, rotary_dim, layout)


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
    never recompiles for a new length. `dynamic` and `longrope` scaling depend on the sequence length
    and always compute directly (no cache).

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
        if self._cache is None:
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
