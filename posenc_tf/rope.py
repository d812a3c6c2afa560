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

from posenc_np.rope import check_rope_shapes, resolve_rotary_dim, rope_cos_sin as spec_rope_cos_sin
from posenc_np.rope import rope_plan, rope_permutation as spec_rope_permutation, scaling_from_hf_config

from ._common import as_tensor, register_serializable, resolve_dtype, spec_constant
from posenc_np._freeze import freeze as _freeze, thaw as _thaw

__all__ = ["rope_frequencies", "rope_cos_sin", "apply_rope", "rope_permutation", "permute_qk_rows",
           "scaling_from_hf_config", "RotaryEmbedding"]

_PLANS: dict = {}


def _plan(rotary_dim, base, scaling, layout):
    """The spec's plan and its float64 constants, cached per parameters."""
    key = ("rope", rotary_dim, float(base), _freeze(scaling), layout)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = rope_plan(rotary_dim, base=base, scaling=scaling, layout=layout)
    const = lambda what, value: spec_constant(key + (what,), lambda: value, dtype=tf.float64)  # noqa: E731
    arrays = {"turns": const("turns", plan.turns)}
    if plan.kind == "longrope":
        arrays["long"] = const("long", plan.turns_long)
    if plan.kind == "dynamic":
        arrays["exponent"] = const("exponent", plan.dynamic_exponent)
    return plan, arrays


def _check_positions(positions):
    if not positions.dtype.is_integer:
        raise ValueError(f"positions must be an integer tensor, got dtype {positions.dtype.name}")


def _turns(positions, plan, arrays):
    if plan.kind == "static":
        return arrays["turns"]
    seq_len = tf.cast(tf.reduce_max(positions), tf.float64) + 1
    if plan.kind == "longrope":
        return tf.where(seq_len > plan.original, arrays["long"], arrays["turns"])
    growth = plan.factor * tf.maximum(seq_len, float(plan.original)) / plan.original - (plan.factor - 1.0)
    return arrays["turns"] * tf.pow(growth, arrays["exponent"])


def _half_cos_sin(positions, plan, arrays):
    t = tf.cast(positions, tf.float64)[..., None] * _turns(positions, plan, arrays)
    angle = tf.cast((t - tf.round(t)) * (2 * math.pi), tf.float32)
    scale = tf.constant(plan.attention_scale, tf.float32)
    return tf.cos(angle) * scale, tf.sin(angle) * scale


_TABLE_ROWS = 4096


def _table(rotary_dim, base, scaling):
    """`(cos, sin)` float32 `[4096, r/2]` of positions 0..4095 from the float64 spec, built once per parameters."""
    frozen = _freeze(scaling)

    def make():
        cos, sin = spec_rope_cos_sin(range(_TABLE_ROWS), rotary_dim, base=base, scaling=_thaw(frozen))
        return np.stack([cos[:, : rotary_dim // 2], sin[:, : rotary_dim // 2]])

    table = spec_constant(("rope_table", rotary_dim, float(base), frozen), make)
    return table[0], table[1]


def _cached_cos_sin(positions, table, planned):
    """Gather from `table` when every position lies inside it, else compute; a `tf.cond`, so XLA compiles
    once for all positions and keeps the angle reduction out of the rotation's fused loop."""
    rows = table[0].shape[0]
    inside = (tf.reduce_min(positions) >= 0) & (tf.reduce_max(positions) < rows)
    index = tf.clip_by_value(positions, 0, rows - 1)
    return tf.cond(inside, lambda: (tf.gather(table[0], index), tf.gather(table[1], index)),
                   lambda: _half_cos_sin(positions, *planned))


def _rotate(x, cos, sin, rotary_dim, layout):
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


def _check_shapes(x, positions):
    if None not in tuple(x.shape) and None not in tuple(positions.shape):  # symbolic Keras shapes skip it
        check_rope_shapes(tuple(x.shape), tuple(positions.shape))


def rope_frequencies(rotary_dim, *, base=10000.0, scaling=None, seq_len=None):
    """`(inv_freq float32 [r/2], attention_scale float)`; see `posenc_np.rope_frequencies`.

    `seq_len` may be an int or a (symbolic) integer tensor; frequencies are formed in float64.
    """
    plan, arrays = _plan(rotary_dim, base, scaling, "half")
    turns = arrays["turns"] if seq_len is None else _turns(as_tensor(seq_len) - 1, plan, arrays)
    return tf.cast(turns * (2 * math.pi), tf.float32), plan.attention_scale


def rope_cos_sin(positions, rotary_dim=None, *, base=10000.0, scaling=None, layout="half", rotary_pct=None,
                 head_dim=None, dtype=None):
    """`(cos, sin)`, each `[*positions.shape, rotary_dim]` in `dtype` (float32 when None); see `posenc_np.rope_cos_sin`."""
    rotary_dim = resolve_rotary_dim(head_dim, rotary_dim, rotary_pct)
    positions = as_tensor(positions)
    _check_positions(positions)
    cos, sin = _half_cos_sin(positions, *_plan(rotary_dim, base, scaling, layout))
    expand = (lambda t: tf.concat([t, t], -1)) if layout == "half" else (lambda t: tf.repeat(t, 2, axis=-1))
    dtype = resolve_dtype(dtype)
    return tf.cast(expand(cos), dtype), tf.cast(expand(sin), dtype)


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None):
    """Rotate the first `rotary_dim` channels of `x`; see `posenc_np.apply_rope`.

    `positions`: integer tensor broadcasting against `x.shape[:-1]` (float tensors raise).
    """
    x, positions = as_tensor(x), as_tensor(positions)
    rotary_dim = resolve_rotary_dim(x.shape[-1], rotary_dim, rotary_pct)
    _check_positions(positions)
    _check_shapes(x, positions)
    planned = _plan(rotary_dim, base, scaling, layout)
    if planned[0].kind == "static" and positions.shape.num_elements() != 0:
        cos, sin = _cached_cos_sin(positions, _table(rotary_dim, base, scaling), planned)
    else:
        cos, sin = _half_cos_sin(positions, *planned)
    return _rotate(x, cos, sin, rotary_dim, layout)


def rope_permutation(head_dim, *, source, target, rotary_dim=None):
    """int64 tensor `perm` with `W_target = W_source[perm]` per head; see `posenc_np.rope_permutation`."""
    return tf.constant(spec_rope_permutation(head_dim, source=source, target=target, rotary_dim=rotary_dim))


def permute_qk_rows(weight, num_heads, *, source, target, rotary_dim=None):
    """Permute every head's rows of a `[num_heads * head_dim, ...]` q/k weight; see `posenc_np.permute_qk_rows`."""
    weight = as_tensor(weight)
    if num_heads < 1 or weight.shape[0] % num_heads:
        raise ValueError(f"num_heads={num_heads} does not divide the weight's first axis {weight.shape[0]}")
    head_dim = weight.shape[0] // num_heads
    perm = rope_permutation(head_dim, source=source, target=target, rotary_dim=rotary_dim)
    per_head = tf.reshape(weight, [num_heads, head_dim, *weight.shape[1:]])
    return tf.reshape(tf.gather(per_head, perm, axis=1), tf.shape(weight))


@register_serializable
class RotaryEmbedding(keras.layers.Layer):
    """`apply_rope` as a Keras 3 layer; called with `(x, positions)`, returns a tensor like `x`.

    With `max_len` (and a length-independent scaling) a float32 cos/sin cache `[max_len, r/2]`
    computed by the float64 spec is held as a constant (not a weight): a call whose positions all lie
    in `[0, max_len)` gathers from it, otherwise the angles are computed; the choice is a `tf.cond`, so
    XLA compiles once for every length. The output dtype follows `x` (inputs are not autocast to the
    dtype policy: in a mixed_bfloat16 model `x` arrives in bfloat16 and is rotated in float32);
    positions, frequencies and angles are never cast to the policy.
    `get_config` holds every constructor argument.
    """

    def __init__(self, rotary_dim=None, *, base=10000.0, layout="half", scaling=None, max_len=None, rotary_pct=None,
                 head_dim=None, **kwargs):
        super().__init__(**kwargs)
        self._convert_input_args = False  # the output follows x's dtype, as apply_rope's does; no autocast
        self._allow_non_tensor_positional_args = True  # NumPy x / positions, converted in call
        self.rotary_dim = resolve_rotary_dim(head_dim, rotary_dim, rotary_pct)
        self._config = dict(rotary_dim=rotary_dim, base=float(base), layout=layout, scaling=scaling, max_len=max_len,
                            rotary_pct=rotary_pct, head_dim=head_dim)
        plan = rope_plan(self.rotary_dim, base=base, scaling=scaling, layout=layout)
        self._cache = None
        if max_len is not None and plan.kind == "static":
            cos, sin = spec_rope_cos_sin(range(int(max_len)), self.rotary_dim, base=base, scaling=scaling)
            half = self.rotary_dim // 2
            with tf.init_scope():
                self._cache = (tf.constant(cos[:, :half], tf.float32), tf.constant(sin[:, :half], tf.float32))

    def call(self, x, positions):
        cfg = self._config
        x = as_tensor(x)
        if cfg["head_dim"] is not None and x.shape[-1] != cfg["head_dim"]:
            raise ValueError(f"x has {x.shape[-1]} channels, this RotaryEmbedding was built for head_dim={cfg['head_dim']}")
        if self.rotary_dim > x.shape[-1]:
            raise ValueError(f"rotary_dim={self.rotary_dim} is larger than the head dim {x.shape[-1]}")
        positions = as_tensor(positions)
        _check_positions(positions)
        _check_shapes(x, positions)
        planned = _plan(self.rotary_dim, cfg["base"], cfg["scaling"], cfg["layout"])
        if self._cache is None:
            cos, sin = _half_cos_sin(positions, *planned)
        else:
            cos, sin = _cached_cos_sin(positions, self._cache, planned)
        return _rotate(x, cos, sin, self.rotary_dim, cfg["layout"])

    def compute_output_shape(self, x_shape, positions_shape=None):
        return x_shape

    def get_config(self):
        return {**super().get_config(), **self._config}
