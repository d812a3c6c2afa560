"""Rotary position embedding in MLX (functions and an `mlx.nn.Module`). The math: `posenc_np.rope`.

Precision: the angle `p * inv_freq` is reduced modulo one turn in float64 on MLX's CPU device
(`t = p * turns`, `t - round(t)`, the spec's turns; `_common.F64`) before the float32 cos/sin, so the
angle error stays ~1e-7 rad up to position 2**24 and ~2e-7 rad at 2**31 (docs/rope-precision.md); a
plain float32 `p * inv_freq` (what `mx.fast.rope` does) is off by ~0.06 rad at position 1e6.
Inputs in bfloat16/float16 are upcast once to float32, rotated, and rounded once to their dtype.

Sequence-length dependent scaling (`dynamic`, `longrope`) is computed in-graph from
`seq_len = max(positions) + 1` (float64), so `mx.compile` traces it once and new positions never
recompile.

Eager calls whose positions all lie in `[0, 4096)` gather cos/sin from a float32 table computed once
by the float64 spec (one host read decides, as posenc_torch's eager path); under `mx.compile`, which
has no conditional, the angles are always computed (the same accuracy).
"""

from __future__ import annotations

import contextlib
import functools
import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from posenc_np.backend import RotaryConfig, check_float_dtype, check_heads_divide, check_integer_dtype, check_rope_input
from posenc_np.backend import cached_plan as _spec_plan
from posenc_np.backend import freeze as _freeze
from posenc_np.backend import mrope_key as _mrope
from posenc_np.backend import thaw as _thaw
from posenc_np.mrope import check_mrope_positions
from posenc_np.rope import check_rope_shapes, resolve_rotary_dim, scaling_from_hf_config
from posenc_np.rope import rope_cos_sin as spec_rope_cos_sin
from posenc_np.rope import rope_permutation as spec_rope_permutation

from ._common import F64, as_tensor, bind_config, is_floating, is_tracing, resolve_dtype, spec_constant

__all__ = ["rope_frequencies", "rope_cos_sin", "apply_rope", "rope_permutation", "permute_qk_rows",
           "scaling_from_hf_config", "RotaryEmbedding"]

# The private skeleton below has the same names and roles in posenc_torch/rope.py, posenc_tf/rope.py and
# posenc_jax/rope.py: _spec_plan, _plan, _check_positions, _turns, _half_cos_sin, _spec_table,
# _gather_or_compute, _rotate, _expand.

_TABLE_ROWS = 4096  # rows of the shared spec cos/sin table (positions 0..4095); beyond it: computed


def _plan(rotary_dim, base, scaling, layout, mrope=None):
    """`(kind, consts)`: the plan's kind and its numbers as the constants the graph reads.

    MLX: float64 `mx.array`s (on the CPU device, `F64`) for the frequencies in turns, Python numbers
    for lengths and factors. Multi-axis RoPE adds `consts["axis"]`, the int32 `[r/2]` pair -> axis map.
    """
    plan = _spec_plan(rotary_dim, base, scaling, layout, mrope)
    key = ("rope", rotary_dim, float(base), _freeze(scaling), layout, mrope)

    def const(field, dtype=mx.float64):
        return spec_constant(key + (field,), lambda: np.atleast_1d(getattr(plan, field)), dtype=dtype)

    consts = {"turns": const("turns"), "scale": float(plan.attention_scale)}
    if plan.axis_of_pair is not None:
        consts["axis"] = const("axis_of_pair", mx.int32)
    if plan.kind == "longrope":
        consts.update(turns_long=const("turns_long"), original=plan.original)
    if plan.kind == "dynamic":
        consts.update(exponent=const("dynamic_exponent"), original=plan.original, factor=plan.factor)
    return plan.kind, consts


def _check_positions(positions):
    check_integer_dtype("positions", positions.dtype, mx.issubdtype(positions.dtype, mx.integer))


def _turns(positions, kind, consts):
    """float64 frequencies in turns for this call, in-graph for the sequence-length dependent kinds."""
    if kind == "static" or positions.size == 0:  # no positions: an empty result, whatever the frequencies
        return consts["turns"]
    with mx.stream(F64):
        seq_len = mx.max(positions).astype(mx.float64) + 1
        if kind == "longrope":
            return mx.where(seq_len > consts["original"], consts["turns_long"], consts["turns"])
        factor, original = consts["factor"], consts["original"]
        growth = factor * mx.maximum(seq_len, original) / original - (factor - 1.0)
        return consts["turns"] * mx.power(growth, consts["exponent"])


def _half_cos_sin(positions, kind, consts):
    """`[..., r/2]` float32 cos and sin (attention scale folded in), the angle reduced in float64.

    Multi-axis positions `[A, ...]`: pair `j` reads axis `consts["axis"][j]` (a gather of the positions'
    leading axis moved last), so each axis keeps the float64 reduction of the 1-D path."""
    turns = _turns(positions, kind, consts)
    if "axis" in consts:
        per_pair = mx.take(mx.moveaxis(positions, 0, -1), consts["axis"], axis=-1)
    else:
        per_pair = positions[..., None]
    with mx.stream(F64):
        t = per_pair.astype(mx.float64) * turns
        angle = ((t - mx.round(t)) * (2 * math.pi)).astype(mx.float32)
    scale = consts["scale"]
    cos, sin = mx.cos(angle), mx.sin(angle)
    return (cos, sin) if scale == 1.0 else (cos * scale, sin * scale)


def _spec_table(rotary_dim, base, scaling):
    """`(cos, sin)` float32 `[4096, r/2]` of positions 0..4095 from the float64 spec, built once per parameters."""
    frozen = _freeze(scaling)

    def make():
        cos, sin = spec_rope_cos_sin(np.arange(_TABLE_ROWS), rotary_dim, base=base, scaling=_thaw(frozen))
        return np.stack([cos[:, : rotary_dim // 2], sin[:, : rotary_dim // 2]])

    table = spec_constant(("rope_table", rotary_dim, float(base), frozen), make)
    return table[0], table[1]


def _gather_or_compute(positions, table, kind, consts):
    """Half-size cos/sin: gathered from `table` (a `(cos, sin)` pair of `[rows, r/2]`, or None) when every
    position lies inside it, else computed.

    Eager: one host read of min/max decides. Under mx.compile (placeholders) the angles are computed:
    MLX graphs have no conditional, and computing is as accurate as gathering.
    """
    if table is None or positions.size == 0 or is_tracing(positions):
        return _half_cos_sin(positions, kind, consts)
    cos, sin = table
    low, high = (int(v) for v in (mx.min(positions), mx.max(positions)))  # one host read
    if low >= 0 and high < cos.shape[0]:
        index = positions.astype(mx.int32)
        return mx.take(cos, index, axis=0), mx.take(sin, index, axis=0)
    return _half_cos_sin(positions, kind, consts)


def _rotate(x, cos, sin, rotary_dim, layout):
    """Rotate the first `rotary_dim` channels of `x` by half-size `cos`/`sin`, in float32 (or x's wider
    dtype): half precision is upcast once and the result rounded once."""
    compute = mx.float64 if x.dtype == mx.float64 else mx.float32
    stream = F64 if compute == mx.float64 else None
    rot = x[..., :rotary_dim].astype(compute, stream=stream)
    cos, sin = cos.astype(compute, stream=stream), sin.astype(compute, stream=stream)
    half = rotary_dim // 2
    with mx.stream(stream) if stream is not None else contextlib.nullcontext():
        a, b = (rot[..., :half], rot[..., half:]) if layout == "half" else (rot[..., 0::2], rot[..., 1::2])
        out = mx.stack([a * cos - b * sin, b * cos + a * sin], -2 if layout == "half" else -1)
        out = out.reshape(rot.shape).astype(x.dtype)
        if rotary_dim == x.shape[-1]:
            return out
        return mx.concatenate([out, x[..., rotary_dim:]], axis=-1)


@functools.lru_cache(maxsize=None)
def _rotate_compiled(rotary_dim, layout):
    """`_rotate` for one (rotary_dim, layout) under `mx.compile`: eager calls run it as one fused kernel
    instead of one pass per operation (docs/performance.md); inside an outer mx.compile it is inlined."""
    return mx.compile(lambda x, cos, sin: _rotate(x, cos, sin, rotary_dim, layout))


def _apply(x, cos, sin, rotary_dim, layout):
    """The rotation: compiled, except for float64 x (its operations run on the CPU stream, `F64`)."""
    if x.dtype == mx.float64:
        return _rotate(x, cos, sin, rotary_dim, layout)
    return _rotate_compiled(rotary_dim, layout)(x, cos, sin)


def _expand(half, layout):
    """`[..., r/2]` per-pair values to `[..., r]` channels of the layout."""
    return mx.concatenate([half, half], -1) if layout == "half" else mx.repeat(half, 2, -1)


def rope_frequencies(rotary_dim, *, base=10000.0, scaling=None, seq_len=None):
    """`(inv_freq float32 [r/2], attention_scale float)`; see `posenc_np.rope_frequencies`.

    `seq_len` may be an int or an integer scalar array (a placeholder under mx.compile).
    """
    kind, consts = _plan(rotary_dim, base, scaling, "half")
    turns = consts["turns"] if seq_len is None else _turns(mx.reshape(as_tensor(seq_len) - 1, (1,)), kind, consts)
    inv_freq = mx.multiply(turns, 2 * math.pi, stream=F64).astype(mx.float32, stream=F64)
    return inv_freq, _spec_plan(rotary_dim, base, scaling, "half").attention_scale


def rope_cos_sin(positions, rotary_dim=None, *, base=10000.0, scaling=None, layout="half", rotary_pct=None,
                 head_dim=None, dtype=None, mrope_section=None, mrope_interleaved=False, mrope_frequencies="shared",
                 mrope_axes=None):
    """`(cos, sin)`, each `[*positions.shape, rotary_dim]` in `dtype` (float32 when None); see `posenc_np.rope_cos_sin`.

    With `mrope_section`, positions `[A, ...]` give `[..., rotary_dim]` (multi-axis RoPE, `posenc_np.mrope`)."""
    rotary_dim = resolve_rotary_dim(head_dim, rotary_dim, rotary_pct)
    positions = as_tensor(positions)
    _check_positions(positions)
    mrope = _mrope(mrope_section, mrope_interleaved, mrope_frequencies, mrope_axes)
    kind, consts = _plan(rotary_dim, base, scaling, layout, mrope)
    if mrope is not None:
        check_mrope_positions(positions.shape, _spec_plan(rotary_dim, base, scaling, layout, mrope).num_axes)
    cos, sin = _half_cos_sin(positions, kind, consts)
    dtype = resolve_dtype(dtype)
    return _expand(cos, layout).astype(dtype), _expand(sin, layout).astype(dtype)


def _check_shapes(x_shape, positions_shape, plan):
    if plan.num_axes is not None:
        check_mrope_positions(positions_shape, plan.num_axes)
        positions_shape = positions_shape[1:]
    check_rope_shapes(tuple(x_shape), tuple(positions_shape))


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None,
               mrope_section=None, mrope_interleaved=False, mrope_frequencies="shared", mrope_axes=None):
    """Rotate the first `rotary_dim` channels of `x`; see `posenc_np.apply_rope`.

    `positions`: integer array broadcasting against `x.shape[:-1]` (float arrays raise); with
    `mrope_section` (multi-axis RoPE) `[A, ...]`, the angles always computed (float64 per axis).
    """
    x = as_tensor(x)
    rotary_dim = resolve_rotary_dim(x.shape[-1], rotary_dim, rotary_pct)
    positions = as_tensor(positions)
    _check_positions(positions)
    mrope = _mrope(mrope_section, mrope_interleaved, mrope_frequencies, mrope_axes)
    plan = _spec_plan(rotary_dim, base, scaling, layout, mrope)
    check_float_dtype("x", x.dtype, is_floating(x))  # after the parameters, as the spec
    _check_shapes(x.shape, positions.shape, plan)
    kind, consts = _plan(rotary_dim, base, scaling, layout, mrope)
    table = _spec_table(rotary_dim, base, scaling) if kind == "static" and mrope is None else None
    cos, sin = _gather_or_compute(positions, table, kind, consts)
    return _apply(x, cos, sin, rotary_dim, layout)


def rope_permutation(head_dim, *, source, target, rotary_dim=None):
    """int32 array `perm` with `W_target = W_source[perm]` per head; see `posenc_np.rope_permutation`."""
    return mx.array(spec_rope_permutation(head_dim, source=source, target=target, rotary_dim=rotary_dim)
                    .astype(np.int32))


def permute_qk_rows(weight, num_heads, *, source, target, rotary_dim=None):
    """Permute every head's rows of a `[num_heads * head_dim, ...]` q/k weight; see `posenc_np.permute_qk_rows`.

    An mlx-lm / `nn.Linear` weight is `[out, in]`, the torch orientation this takes."""
    weight = as_tensor(weight)
    head_dim = check_heads_divide(num_heads, weight.shape[0])
    perm = mx.array(spec_rope_permutation(head_dim, source=source, target=target, rotary_dim=rotary_dim)
                    .astype(np.int32))
    per_head = weight.reshape(num_heads, head_dim, *weight.shape[1:])
    return mx.take(per_head, perm, axis=1).reshape(weight.shape)


class RotaryEmbedding(nn.Module):
    """`apply_rope` with its parameters bound (`mlx.nn.Module`); called with `(x, positions)`, returns like `x`.

    Cache policy (the same in every backend): a float32 cos/sin table computed by the float64 spec,
    `[2, max_len, r/2]` held as the non-parameter attribute `_cache` (read as `cache`; it is not in
    `parameters()` nor in saved weights) when `max_len` is given, else `apply_rope`'s shared 4096-row
    table. An eager call whose positions all lie inside it gathers; otherwise, and always under
    `mx.compile`, the angles are computed (float64 reduction, same accuracy). `dynamic`/`longrope`
    always compute. No trainable weights. `mrope_section`, `mrope_interleaved`, `mrope_frequencies`:
    multi-axis RoPE (positions `[A, ...]`, always computed, no cache).
    """

    def __init__(self, rotary_dim=None, *, base=10000.0, layout="half", scaling=None, max_len=None, rotary_pct=None,
                 head_dim=None, mrope_section=None, mrope_interleaved=False, mrope_frequencies="shared",
                 mrope_axes=None):
        super().__init__()
        config = RotaryConfig(rotary_dim, base=base, layout=layout, scaling=scaling, max_len=max_len,
                              rotary_pct=rotary_pct, head_dim=head_dim, mrope_section=mrope_section,
                              mrope_interleaved=mrope_interleaved, mrope_frequencies=mrope_frequencies,
                              mrope_axes=mrope_axes)
        bind_config(config, self)
        self._mrope = _mrope(self.mrope_section, self.mrope_interleaved, self.mrope_frequencies, self.mrope_axes)
        self._inv_freq = mx.array((config.plan.turns * 2 * math.pi).astype(np.float32))
        self._cache = mx.array(np.stack(config.cache_cos_sin()).astype(np.float32))  # [2, rows, r/2]

    @property
    def inv_freq(self):
        """float32 `[r/2]` frequencies at initialisation (not a parameter)."""
        return self._inv_freq

    @property
    def cache(self):
        """float32 `[2, rows, r/2]` cos/sin cache (0 rows without `max_len`; not a parameter)."""
        return self._cache

    def __call__(self, x, positions):
        x, positions = as_tensor(x), as_tensor(positions)
        check_rope_input(x.shape[-1], self.rotary_dim, self.head_dim)
        check_float_dtype("x", x.dtype, is_floating(x))
        _check_positions(positions)
        _check_shapes(x.shape, positions.shape, self.config.plan)
        kind, consts = _plan(self.rotary_dim, self.base, self.scaling, self.layout, self._mrope)
        if kind != "static" or self._mrope is not None:
            table = None
        elif self._cache.shape[1]:
            table = (self._cache[0], self._cache[1])
        else:
            table = _spec_table(self.rotary_dim, self.base, self.scaling)
        cos, sin = _gather_or_compute(positions, table, kind, consts)
        return _apply(x, cos, sin, self.rotary_dim, self.layout)

    def _extra_repr(self):
        return self.config.repr_args()
