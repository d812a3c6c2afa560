"""Rotary position embedding in TensorFlow (functions and a Keras 3 layer). The math: `posenc_np.rope`.

Precision: angles are reduced modulo one turn in float64 (`t = p * inv_freq / 2pi`, `t - round(t)`,
also under XLA) before the float32 cos/sin: ~1e-7 rad at any position up to 2**24
(docs/rope-precision.md). bfloat16/float16 inputs (including a Keras mixed-precision policy) are
rotated in float32 and cast back; positions and angles never take the compute dtype.

`dynamic`/`longrope` scaling reads `seq_len = max(positions) + 1` in-graph, so
`tf.function(jit_compile=True)` traces once for all position values.

Speed (docs/performance.md): `apply_rope` with a length-independent scaling gathers cos/sin from a
float32 table of positions 0..4095 computed once by the float64 spec; a `tf.cond` falls back to the
reduction above for any position outside it.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf

from posenc_np.backend import RotaryConfig, check_float_dtype, check_heads_divide, check_integer_dtype, check_rope_input
from posenc_np.backend import cached_plan as _spec_plan
from posenc_np.backend import freeze as _freeze
from posenc_np.backend import mrope_key as _mrope
from posenc_np.backend import thaw as _thaw
from posenc_np.mrope import check_mrope_positions
from posenc_np.rope import check_rope_shapes, resolve_rotary_dim, scaling_from_hf_config
from posenc_np.rope import rope_cos_sin as spec_rope_cos_sin
from posenc_np.rope import rope_permutation as spec_rope_permutation

from ._common import as_tensor, register_serializable, resolve_dtype, spec_constant

__all__ = ["rope_frequencies", "rope_cos_sin", "apply_rope", "rope_permutation", "permute_qk_rows",
           "scaling_from_hf_config", "RotaryEmbedding"]

# The private skeleton below has the same names and roles in posenc_torch/rope.py and posenc_jax/rope.py:
# _spec_plan, _plan, _check_positions, _turns, _half_cos_sin, _spec_table, _gather_or_compute, _rotate, _expand.

_TABLE_ROWS = 4096  # rows of the shared spec cos/sin table (positions 0..4095); beyond it: computed


def _plan(rotary_dim, base, scaling, layout, mrope=None):
    """`(kind, consts)`: the plan's kind and its numbers as the constants the graph reads (float64
    tensors for the frequencies in turns; Python numbers for lengths and factors). Multi-axis RoPE adds
    `consts["axis"]` (int64 `[r/2]` pair -> axis map) and `consts["axes"]` (the positions' leading size)."""
    plan = _spec_plan(rotary_dim, base, scaling, layout, mrope)
    frozen = _freeze(scaling)

    def const(field, dtype=tf.float64):
        return spec_constant(("rope", rotary_dim, float(base), frozen, layout, mrope, field),
                             lambda: getattr(plan, field), dtype=dtype)

    consts = {"turns": const("turns"), "scale": const("attention_scale")}
    if plan.axis_of_pair is not None:
        consts.update(axis=const("axis_of_pair", tf.int64), axes=plan.num_axes)
    if plan.kind == "longrope":
        consts.update(turns_long=const("turns_long"), original=plan.original)
    if plan.kind == "dynamic":
        consts.update(exponent=const("dynamic_exponent"), original=plan.original, factor=plan.factor)
    return plan.kind, consts


def _check_positions(positions):
    check_integer_dtype("positions", positions.dtype.name, positions.dtype.is_integer)


def _turns(positions, kind, consts):
    """float64 frequencies in turns for this call, in-graph for the sequence-length dependent kinds."""
    if kind == "static":
        return consts["turns"]
    seq_len = tf.cast(tf.reduce_max(positions), tf.float64) + 1
    if kind == "longrope":
        return tf.where(seq_len > consts["original"], consts["turns_long"], consts["turns"])
    factor, original = consts["factor"], float(consts["original"])
    growth = factor * tf.maximum(seq_len, original) / original - (factor - 1.0)
    return consts["turns"] * tf.pow(growth, consts["exponent"])


def _half_cos_sin(positions, kind, consts):
    """`[..., r/2]` float32 cos and sin (attention scale folded in), the angle reduced in float64.

    Multi-axis positions `[A, ...]`: pair `j` reads axis `consts["axis"][j]` (a gather on the leading
    axis moved last), each axis keeping the float64 reduction."""
    if "axis" in consts:
        rank = positions.shape.rank
        moved = tf.transpose(positions, list(range(1, rank)) + [0])
        t = tf.cast(tf.gather(moved, consts["axis"], axis=-1), tf.float64) * _turns(positions, kind, consts)
    else:
        t = tf.cast(positions, tf.float64)[..., None] * _turns(positions, kind, consts)
    angle = tf.cast((t - tf.round(t)) * (2 * math.pi), tf.float32)
    scale = tf.cast(consts["scale"], tf.float32)
    return tf.cos(angle) * scale, tf.sin(angle) * scale


def _spec_table(rotary_dim, base, scaling):
    """`(cos, sin)` float32 `[4096, r/2]` of positions 0..4095 from the float64 spec, built once per parameters."""
    frozen = _freeze(scaling)

    def make():
        cos, sin = spec_rope_cos_sin(range(_TABLE_ROWS), rotary_dim, base=base, scaling=_thaw(frozen))
        return np.stack([cos[:, : rotary_dim // 2], sin[:, : rotary_dim // 2]])

    table = spec_constant(("rope_table", rotary_dim, float(base), frozen), make)
    return table[0], table[1]


def _gather_or_compute(positions, table, kind, consts):
    """Half-size cos/sin: gathered from `table` (a `(cos, sin)` pair of `[rows, r/2]`, or None) when every
    position lies inside it, else computed; a `tf.cond`, so XLA compiles once for all positions and keeps
    the angle reduction out of the rotation's fused loop. Without a table (multi-axis RoPE, `dynamic`,
    `longrope`) both branches compute, and the `tf.cond` (its predicate only has to be data) still keeps
    XLA from recomputing the reduction for every broadcast copy: 7.5x the gathered path's time for
    multi-axis RoPE at [4, 16, 2048, 128] without it (docs/performance.md)."""
    if positions.shape.num_elements() == 0:
        return _half_cos_sin(positions, kind, consts)
    if table is None:
        compute = lambda: _half_cos_sin(positions, kind, consts)  # noqa: E731
        return tf.cond(tf.reduce_any(positions >= 0), compute, compute)
    cos, sin = table
    rows = cos.shape[0]
    inside = (tf.reduce_min(positions) >= 0) & (tf.reduce_max(positions) < rows)
    index = tf.clip_by_value(positions, 0, rows - 1)
    return tf.cond(inside, lambda: (tf.gather(cos, index), tf.gather(sin, index)),
                   lambda: _half_cos_sin(positions, kind, consts))


def _rotate(x, cos, sin, rotary_dim, layout):
    """Rotate the first `rotary_dim` channels of `x` by half-size `cos`/`sin`, in float32 (float64 for float64 x)."""
    compute = tf.float64 if x.dtype == tf.float64 else tf.float32
    rot = tf.cast(x[..., :rotary_dim], compute)
    cos, sin = tf.cast(cos, compute), tf.cast(sin, compute)
    half = rotary_dim // 2
    a, b = (rot[..., :half], rot[..., half:]) if layout == "half" else (rot[..., 0::2], rot[..., 1::2])
    # stacked on a new (2, r/2) or (r/2, 2) axis and reshaped: XLA's CPU loop fusion handles this
    # without the per-element select that a concat of the halves compiles to (docs/performance.md)
    out = tf.stack([a * cos - b * sin, b * cos + a * sin], -2 if layout == "half" else -1)
    out = tf.reshape(tf.cast(out, x.dtype), tf.shape(rot))
    if rotary_dim == x.shape[-1]:
        return out
    return tf.concat([out, x[..., rotary_dim:]], axis=-1)


def _expand(half, layout):
    """`[..., r/2]` per-pair values to `[..., r]` channels of the layout."""
    return tf.concat([half, half], -1) if layout == "half" else tf.repeat(half, 2, axis=-1)


def _check_shapes(x, positions, consts=None):
    lead = tuple(positions.shape)
    if consts is not None and "axis" in consts:
        check_mrope_positions(lead, consts["axes"])
        lead = lead[1:]
    if None not in tuple(x.shape) and None not in lead:  # symbolic Keras shapes skip it
        check_rope_shapes(tuple(x.shape), lead)


def rope_frequencies(rotary_dim, *, base=10000.0, scaling=None, seq_len=None):
    """`(inv_freq float32 [r/2], attention_scale float)`; see `posenc_np.rope_frequencies`.

    `seq_len` may be an int or a (symbolic) integer tensor; frequencies are formed in float64.
    """
    kind, consts = _plan(rotary_dim, base, scaling, "half")
    turns = consts["turns"] if seq_len is None else _turns(as_tensor(seq_len) - 1, kind, consts)
    return tf.cast(turns * (2 * math.pi), tf.float32), _spec_plan(rotary_dim, base, scaling, "half").attention_scale


def rope_cos_sin(positions, rotary_dim=None, *, base=10000.0, scaling=None, layout="half", rotary_pct=None,
                 head_dim=None, dtype=None, mrope_section=None, mrope_interleaved=False,
                 mrope_frequencies="shared", mrope_axes=None):
    """`(cos, sin)`, each `[*positions.shape, rotary_dim]` in `dtype` (float32 when None); see `posenc_np.rope_cos_sin`.

    With `mrope_section`, positions `[A, ...]` give `[..., rotary_dim]` (multi-axis RoPE, `posenc_np.mrope`)."""
    rotary_dim = resolve_rotary_dim(head_dim, rotary_dim, rotary_pct)
    positions = as_tensor(positions)
    _check_positions(positions)
    kind, consts = _plan(rotary_dim, base, scaling, layout, _mrope(mrope_section, mrope_interleaved, mrope_frequencies, mrope_axes))
    if "axis" in consts:
        check_mrope_positions(tuple(positions.shape), consts["axes"])
    cos, sin = _half_cos_sin(positions, kind, consts)
    dtype = resolve_dtype(dtype)
    return tf.cast(_expand(cos, layout), dtype), tf.cast(_expand(sin, layout), dtype)


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None,
               mrope_section=None, mrope_interleaved=False,
                 mrope_frequencies="shared", mrope_axes=None):
    """Rotate the first `rotary_dim` channels of `x`; see `posenc_np.apply_rope`.

    `positions`: integer tensor broadcasting against `x.shape[:-1]` (float tensors raise); with
    `mrope_section` (multi-axis RoPE) `[A, ...]`, the angles always computed (float64 reduction per axis).
    """
    x, positions = as_tensor(x), as_tensor(positions)
    rotary_dim = resolve_rotary_dim(x.shape[-1], rotary_dim, rotary_pct)
    _check_positions(positions)
    mrope = _mrope(mrope_section, mrope_interleaved, mrope_frequencies, mrope_axes)
    kind, consts = _plan(rotary_dim, base, scaling, layout, mrope)
    check_float_dtype("x", x.dtype.name, x.dtype.is_floating)  # after the parameters, as the spec
    _check_shapes(x, positions, consts)
    table = _spec_table(rotary_dim, base, scaling) if kind == "static" and mrope is None else None
    cos, sin = _gather_or_compute(positions, table, kind, consts)
    return _rotate(x, cos, sin, rotary_dim, layout)


def rope_permutation(head_dim, *, source, target, rotary_dim=None):
    """int64 tensor `perm` with `W_target = W_source[perm]` per head; see `posenc_np.rope_permutation`."""
    return tf.constant(spec_rope_permutation(head_dim, source=source, target=target, rotary_dim=rotary_dim))


def permute_qk_rows(weight, num_heads, *, source, target, rotary_dim=None):
    """Permute every head's rows of a `[num_heads * head_dim, ...]` q/k weight; see `posenc_np.permute_qk_rows`."""
    weight = as_tensor(weight)
    head_dim = check_heads_divide(num_heads, weight.shape[0])
    perm = rope_permutation(head_dim, source=source, target=target, rotary_dim=rotary_dim)
    per_head = tf.reshape(weight, [num_heads, head_dim, *weight.shape[1:]])
    return tf.reshape(tf.gather(per_head, perm, axis=1), tf.shape(weight))


@register_serializable
class RotaryEmbedding(keras.layers.Layer):
    """`apply_rope` as a Keras 3 layer; called with `(x, positions)`, returns a tensor like `x`.

    Cache policy (the same in every backend): a float32 cos/sin table computed by the float64 spec,
    `[max_len, r/2]` held as a constant (not a weight) when `max_len` is given, else `apply_rope`'s
    shared 4096-row table. A call whose positions all lie inside it gathers, otherwise the angles are
    computed; the choice is a `tf.cond`, so XLA compiles once for every length. `dynamic`/`longrope`
    always compute. The output dtype follows `x` (inputs are not autocast to the dtype policy: in a
    mixed_bfloat16 model `x` arrives in bfloat16 and is rotated in float32); positions, frequencies
    and angles are never cast to the policy. `get_config` holds every constructor argument.
    `mrope_section`, `mrope_interleaved`, `mrope_frequencies`: multi-axis RoPE (positions `[A, ...]`,
    always computed, no cache).
    """

    def __init__(self, rotary_dim=None, *, base=10000.0, layout="half", scaling=None, max_len=None, rotary_pct=None,
                 head_dim=None, mrope_section=None, mrope_interleaved=False,
                 mrope_frequencies="shared", mrope_axes=None, **kwargs):
        super().__init__(**kwargs)
        self._convert_input_args = False  # the output follows x's dtype, as apply_rope's does; no autocast
        self._allow_non_tensor_positional_args = True  # NumPy x / positions, converted in call
        config = RotaryConfig(rotary_dim, base=base, layout=layout, scaling=scaling, max_len=max_len,
                              rotary_pct=rotary_pct, head_dim=head_dim, mrope_section=mrope_section,
                              mrope_interleaved=mrope_interleaved, mrope_frequencies=mrope_frequencies,
                              mrope_axes=mrope_axes)
        config.bind(self)
        self._mrope = _mrope(self.mrope_section, self.mrope_interleaved, self.mrope_frequencies,
                             self.mrope_axes)
        self._cache = None
        if config.cache_rows:
            cos, sin = config.cache_cos_sin()
            with tf.init_scope():  # eager constants, also when the layer is built inside a tf.function
                self._cache = (tf.constant(cos, tf.float32), tf.constant(sin, tf.float32))

    def call(self, x, positions):
        x = as_tensor(x)
        check_rope_input(x.shape[-1], self.rotary_dim, self.head_dim)
        check_float_dtype("x", x.dtype.name, x.dtype.is_floating)
        positions = as_tensor(positions)
        _check_positions(positions)
        kind, consts = _plan(self.rotary_dim, self.base, self.scaling, self.layout, self._mrope)
        _check_shapes(x, positions, consts)
        if kind != "static" or self._mrope is not None:
            table = None
        else:
            table = self._cache or _spec_table(self.rotary_dim, self.base, self.scaling)
        cos, sin = _gather_or_compute(positions, table, kind, consts)
        return _rotate(x, cos, sin, self.rotary_dim, self.layout)

    def compute_output_shape(self, x_shape, positions_shape=None):
        return x_shape

    def get_config(self):
        return {**super().get_config(), **self.config.as_dict()}  # rotary_dim as given: None with rotary_pct
