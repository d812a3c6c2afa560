"""Rotary position embedding in JAX (functions and a Flax NNX module). The math: `posenc_np.rope`.

Precision without float64: JAX (without x64) has no float64, so the angle `p * inv_freq` is formed in
double-float arithmetic. The spec splits `inv_freq / 2pi` (turns) into four float32 pieces of 12
significant bits (`posenc_jax._doublefloat.split_float32`); an int32 position splits exactly into
`high + low` with `low = p & 4095`. Every product piece * part is exact in float32 for |p| < 2**24,
each product's whole turns are dropped exactly (`x - round(x)`), and the fractions are summed with
TwoSum error compensation. The reduced angle is accurate to ~1e-7 rad up to position 2**24
(docs/rope-precision.md); beyond it the products stop being exact and the error grows slowly.
`dynamic` scaling forms its sequence-length dependent frequencies in-graph in double-float as well
(`_doublefloat.dynamic_pieces`: Newton steps for `g ** (-1/m)`, powers by squaring), keeping the same accuracy.

Inputs in bfloat16/float16 are rotated in float32 and cast back. Under `jax.jit` the sequence
length of `dynamic`/`longrope` is `max(positions) + 1`, traced.

Speed (docs/performance.md): `apply_rope` with a length-independent scaling gathers cos/sin from a
float32 table of positions 0..4095 computed once by the float64 spec (a `lax.cond` on the traced
positions falls back to the reduction above for any position outside it; no recompilation).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from posenc_np.backend import RotaryConfig, check_float_dtype, check_heads_divide, check_integer_dtype, check_rope_input
from posenc_np.backend import cached_plan as _spec_plan
from posenc_np.backend import freeze as _freeze
from posenc_np.backend import mrope_key as _mrope
from posenc_np.backend import thaw as _thaw
from posenc_np.mrope import check_mrope_positions
from posenc_np.rope import check_rope_shapes, resolve_rotary_dim, scaling_from_hf_config
from posenc_np.rope import rope_cos_sin as spec_rope_cos_sin
from posenc_np.rope import rope_permutation as spec_rope_permutation

from ._common import as_tensor, resolve_dtype, spec_constant, spec_value
from ._doublefloat import dynamic_pieces, reduced_angle, split_float32, two_float

__all__ = ["rope_frequencies", "rope_cos_sin", "apply_rope", "rope_permutation", "permute_qk_rows",
           "scaling_from_hf_config", "RotaryEmbedding"]

# The private skeleton below has the same names and roles in posenc_torch/rope.py and posenc_tf/rope.py:
# _spec_plan, _plan, _check_positions, _turns, _half_cos_sin, _spec_table, _gather_or_compute, _rotate, _expand.

_TABLE_ROWS = 4096  # rows of the shared spec cos/sin table (positions 0..4095); beyond it: computed


def _plan(rotary_dim, base, scaling, layout, mrope=None):
    """`(kind, consts)`: the plan's kind and its numbers as the constants the graph reads.

    JAX: float32 NumPy arrays (double-float pieces), passed to the compiled `_apply` as arguments, so
    one compilation serves every scaling of the same kind, shape and dtype. Multi-axis RoPE adds
    `consts["axis"]`, the int32 `[r/2]` pair -> axis map (the number of axes is the positions' leading size).
    """
    plan = _spec_plan(rotary_dim, base, scaling, layout, mrope)
    frozen = _freeze(scaling)

    def make():
        consts = {"parts": split_float32(plan.turns), "scale": np.float32(plan.attention_scale)}
        if plan.axis_of_pair is not None:
            consts["axis"] = plan.axis_of_pair.astype(np.int32)
        if plan.kind == "longrope":
            consts.update(long=split_float32(plan.turns_long), original=np.float32(plan.original))
        if plan.kind == "dynamic":
            consts.update(turns=two_float(plan.turns), original=np.float32(plan.original),
                          slope=two_float(plan.factor / plan.original), offset=two_float(plan.factor - 1.0))
        return consts

    return plan.kind, spec_value(("rope_consts", rotary_dim, float(base), frozen, layout, mrope), make)


def _check_positions(positions):
    check_integer_dtype("positions", positions.dtype, jnp.issubdtype(positions.dtype, jnp.integer))


def _turns(positions, kind, consts):
    """The frequencies in turns for this call as `[4, r/2]` float32 pieces (in-graph for dynamic/longrope)."""
    if kind == "static":
        return jnp.asarray(consts["parts"])
    # initial: no positions (an empty result) must not fail the reduction; it changes no other maximum
    seq_len = jnp.max(positions, initial=jnp.iinfo(positions.dtype).min).astype(jnp.float32) + 1
    if kind == "longrope":
        return jnp.where(seq_len > consts["original"], consts["long"], consts["parts"])
    return dynamic_pieces(jnp.maximum(seq_len, consts["original"]), consts)


def _half_cos_sin(positions, kind, consts):
    """`[..., r/2]` float32 cos and sin (attention scale folded in), the angle reduced in double-float.

    Multi-axis positions `[A, ...]`: each axis's angles are reduced as in 1-D RoPE and pair `j` keeps the
    one of axis `consts["axis"][j]` (A <= 4 reductions: the double-float precision holds per axis)."""
    pieces = _turns(positions, kind, consts)
    if "axis" in consts:
        axis = jnp.asarray(consts["axis"])
        angle = reduced_angle(positions[0], pieces)
        for a in range(1, positions.shape[0]):
            angle = jnp.where(axis == a, reduced_angle(positions[a], pieces), angle)
    else:
        angle = reduced_angle(positions, pieces)
    return jnp.cos(angle) * consts["scale"], jnp.sin(angle) * consts["scale"]


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
    position lies inside it, else computed; a `lax.cond` on the traced positions, so no recompilation.

    Both are kept out of the rotation's loop fusion: fused, XLA recomputes the angle reduction for every
    broadcast copy (batch x heads times; 22x the time of the gathered path for multi-axis RoPE at
    [4, 16, 2048, 128], docs/performance.md). The table path has its `cond`. Without a table (multi-axis,
    `dynamic`, `longrope`) the computed cos/sin pass through a product with the identity: XLA never fuses
    a dot into a loop, and at HIGHEST precision the product is exact (one term times 1.0, the rest exact
    zeros). XLA's CPU pipeline fuses through an `optimization_barrier`, and a `cond` needs a predicate
    over the positions, which sharded positions would turn into a collective (docs/distributed.md).
    """
    if table is None:
        cos, sin = _half_cos_sin(positions, kind, consts)
        eye = jnp.eye(cos.shape[-1], dtype=cos.dtype)
        return tuple(jnp.matmul(v, eye, precision=jax.lax.Precision.HIGHEST) for v in (cos, sin))
    cos, sin = table
    rows = cos.shape[0]
    # one boolean reduction, not a min and a max: with positions sharded like the tokens (NamedSharding)
    # the predicate is a single pred[] all-reduce, the only collective of the call (docs/distributed.md)
    inside = jnp.all((positions >= 0) & (positions < rows))
    return jax.lax.cond(inside, lambda p: (cos[jnp.clip(p, 0, rows - 1)], sin[jnp.clip(p, 0, rows - 1)]),
                        lambda p: _half_cos_sin(p, kind, consts), positions)


def _rotate(x, cos, sin, rotary_dim, layout):
    """Rotate the first `rotary_dim` channels of `x` by half-size `cos`/`sin`, in float32 (or x's wider dtype)."""
    compute = jnp.promote_types(x.dtype, jnp.float32)
    rot = x[..., :rotary_dim].astype(compute)
    cos, sin = cos.astype(compute), sin.astype(compute)
    half = rotary_dim // 2
    a, b = (rot[..., :half], rot[..., half:]) if layout == "half" else (rot[..., 0::2], rot[..., 1::2])
    # stacked on a new (2, r/2) or (r/2, 2) axis and reshaped: XLA's CPU loop fusion handles this
    # without the per-element select that a concatenate of the halves compiles to (docs/performance.md)
    out = jnp.stack([a * cos - b * sin, b * cos + a * sin], -2 if layout == "half" else -1)
    out = out.astype(x.dtype).reshape(rot.shape)
    if rotary_dim == x.shape[-1]:
        return out
    return jnp.concatenate([out, x[..., rotary_dim:]], axis=-1)


def _expand(half, layout):
    """`[..., r/2]` per-pair values to `[..., r]` channels of the layout."""
    return jnp.concatenate([half, half], -1) if layout == "half" else jnp.repeat(half, 2, -1)


@functools.partial(jax.jit, static_argnames=("kind",))
def _cos_sin(positions, consts, table, *, kind):
    """The half-size cos/sin, one compiled function per (positions signature, kind): the angle reduction
    is most of a compilation, and x's dtype and shape do not enter it (eager calls in three dtypes
    compile it once)."""
    return _gather_or_compute(positions, table, kind, consts)


@functools.partial(jax.jit, static_argnames=("rotary_dim", "layout"))
def _rotate_compiled(x, cos, sin, *, rotary_dim, layout):
    return _rotate(x, cos, sin, rotary_dim, layout)


def _apply(x, positions, consts, table, *, kind, rotary_dim, layout):
    """The whole rotation as two compiled functions, also serving eager calls; under an outer jit both
    are inlined into one program, as one function would be."""
    cos, sin = _cos_sin(positions, consts, table, kind=kind)
    return _rotate_compiled(x, cos, sin, rotary_dim=rotary_dim, layout=layout)


def rope_frequencies(rotary_dim, *, base=10000.0, scaling=None, seq_len=None):
    """`(inv_freq float32 [r/2], attention_scale float)`; see `posenc_np.rope_frequencies`.

    `seq_len` may be an int or a traced integer scalar.
    """
    kind, consts = _plan(rotary_dim, base, scaling, "half")
    pieces = jnp.asarray(consts["parts"]) if seq_len is None else _turns(as_tensor(seq_len) - 1, kind, consts)
    return jnp.sum(pieces, axis=0) * np.float32(2 * math.pi), _spec_plan(rotary_dim, base, scaling, "half").attention_scale


def rope_cos_sin(positions, rotary_dim=None, *, base=10000.0, scaling=None, layout="half", rotary_pct=None,
                 head_dim=None, dtype=None, mrope_section=None, mrope_interleaved=False,
                 mrope_frequencies="shared", mrope_axes=None):
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
    check_rope_shapes(x_shape, positions_shape)


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None,
               mrope_section=None, mrope_interleaved=False,
                 mrope_frequencies="shared", mrope_axes=None):
    """Rotate the first `rotary_dim` channels of `x`; see `posenc_np.apply_rope`.

    `positions`: integer array broadcasting against `x.shape[:-1]` (float arrays raise); with
    `mrope_section` (multi-axis RoPE) `[A, ...]`, the angles always computed (double-float per axis).
    """
    x = as_tensor(x)
    rotary_dim = resolve_rotary_dim(x.shape[-1], rotary_dim, rotary_pct)
    positions = as_tensor(positions)
    _check_positions(positions)
    mrope = _mrope(mrope_section, mrope_interleaved, mrope_frequencies, mrope_axes)
    plan = _spec_plan(rotary_dim, base, scaling, layout, mrope)
    check_float_dtype("x", x.dtype, jnp.issubdtype(x.dtype, jnp.floating))  # after the parameters, as the spec
    _check_shapes(x.shape, positions.shape, plan)
    kind, consts = _plan(rotary_dim, base, scaling, layout, mrope)
    table = _spec_table(rotary_dim, base, scaling) if kind == "static" and positions.size and mrope is None else None
    return _apply(x, positions, consts, table, kind=kind, rotary_dim=rotary_dim, layout=layout)


def rope_permutation(head_dim, *, source, target, rotary_dim=None):
    """int32 array `perm` with `W_target = W_source[perm]` per head; see `posenc_np.rope_permutation`."""
    return jnp.asarray(spec_rope_permutation(head_dim, source=source, target=target, rotary_dim=rotary_dim))


def permute_qk_rows(weight, num_heads, *, source, target, rotary_dim=None):
    """Permute every head's rows of a `[num_heads * head_dim, ...]` q/k weight; see `posenc_np.permute_qk_rows`."""
    weight = as_tensor(weight)
    head_dim = check_heads_divide(num_heads, weight.shape[0])
    perm = spec_rope_permutation(head_dim, source=source, target=target, rotary_dim=rotary_dim)
    return weight.reshape(num_heads, head_dim, *weight.shape[1:])[:, perm].reshape(weight.shape)


class RotaryEmbedding(nnx.Module):
    """`apply_rope` with its parameters bound (Flax NNX); called with `(x, positions)`, returns like `x`.

    Cache policy (the same in every backend): a float32 cos/sin table computed by the float64 spec,
    `[max_len, r/2]` held as `nnx.Cache` (not a parameter) when `max_len` is given, else `apply_rope`'s
    shared 4096-row table. A call whose positions all lie inside it gathers; otherwise the angles are
    computed (double-float reduction). The choice is a `lax.cond` on the traced positions, so jit never
    recompiles for a new length. `dynamic`/`longrope` always compute. No trainable weights.
    `mrope_section`, `mrope_interleaved`, `mrope_frequencies`: multi-axis RoPE (positions `[A, ...]`,
    always computed, no cache).
    """

    def __init__(self, rotary_dim=None, *, base=10000.0, layout="half", scaling=None, max_len=None, rotary_pct=None,
                 head_dim=None, mrope_section=None, mrope_interleaved=False,
                 mrope_frequencies="shared", mrope_axes=None):
        config = RotaryConfig(rotary_dim, base=base, layout=layout, scaling=scaling, max_len=max_len,
                              rotary_pct=rotary_pct, head_dim=head_dim, mrope_section=mrope_section,
                              mrope_interleaved=mrope_interleaved, mrope_frequencies=mrope_frequencies,
                              mrope_axes=mrope_axes)
        config.bind(self)
        self._mrope = _mrope(self.mrope_section, self.mrope_interleaved, self.mrope_frequencies,
                             self.mrope_axes)
        self.inv_freq = nnx.Cache(jnp.asarray(config.plan.turns * 2 * math.pi, jnp.float32))
        self.cache = nnx.Cache(jnp.asarray(np.stack(config.cache_cos_sin()), jnp.float32))  # [2, rows, r/2]

    def __call__(self, x, positions):
        x, positions = as_tensor(x), as_tensor(positions)
        check_rope_input(x.shape[-1], self.rotary_dim, self.head_dim)
        check_float_dtype("x", x.dtype, jnp.issubdtype(x.dtype, jnp.floating))
        _check_positions(positions)
        _check_shapes(x.shape, positions.shape, _spec_plan(self.rotary_dim, self.base, self.scaling, self.layout,
                                                           self._mrope))
        kind, consts = _plan(self.rotary_dim, self.base, self.scaling, self.layout, self._mrope)
        cache = self.cache[...]
        if kind != "static" or self._mrope is not None:
            table = None
        elif cache.shape[1]:
            table = (cache[0], cache[1])
        else:
            table = _spec_table(self.rotary_dim, self.base, self.scaling)
        cos, sin = _gather_or_compute(positions, table, kind, consts)
        return _rotate(x, cos, sin, self.rotary_dim, self.layout)
