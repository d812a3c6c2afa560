"""Rotary position embedding in JAX (functions and a Flax NNX module). The math: `posenc_np.rope`.

Precision without float64: JAX (without x64) has no float64, so the angle `p * inv_freq` is formed in
double-float arithmetic. The spec splits `inv_freq / 2pi` (turns) into four float32 pieces of 12
significant bits (`posenc_np.rope.split_float32`); an int32 position splits exactly into
`high + low` with `low = p & 4095`. Every product piece * part is exact in float32 for |p| < 2**24,
each product's whole turns are dropped exactly (`x - round(x)`), and the fractions are summed with
TwoSum error compensation. The reduced angle is accurate to ~1e-7 rad up to position 2**24
(docs/rope-precision.md); beyond it the products stop being exact and the error grows slowly.
`dynamic` scaling multiplies the pieces by a float32 growth factor computed in-graph, which costs
exactness: its angles carry a float32 relative error (~1e-7 * angle).

Inputs in bfloat16/float16 are rotated in float32 and cast back. Under `jax.jit` the sequence
length of `dynamic`/`longrope` is `max(positions) + 1`, traced.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from posenc_np.rope import check_rope_shapes, resolve_rotary_dim, rope_cos_sin as spec_rope_cos_sin
from posenc_np.rope import rope_plan, rope_permutation as spec_rope_permutation, scaling_from_hf_config, split_float32

from ._common import resolve_dtype, spec_constant

__all__ = ["rope_frequencies", "rope_cos_sin", "apply_rope", "rope_permutation", "permute_qk_rows",
           "scaling_from_hf_config", "RotaryEmbedding"]

_TWO_PI_HI = np.float32(2 * math.pi)
_TWO_PI_LO = np.float32(2 * math.pi - float(_TWO_PI_HI))


def _freeze(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


_PLANS: dict = {}


def _plan(rotary_dim, base, scaling, layout):
    """The spec's plan plus its float32 pieces (NumPy constants, cached per parameters)."""
    key = ("rope", rotary_dim, float(base), _freeze(scaling), layout)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = rope_plan(rotary_dim, base=base, scaling=scaling, layout=layout)
    parts = spec_constant(key + ("parts",), lambda: split_float32(plan.turns))
    long = None if plan.turns_long is None else spec_constant(key + ("long",), lambda: split_float32(plan.turns_long))
    return plan, parts, long


def _check_positions(positions):
    if not jnp.issubdtype(positions.dtype, jnp.integer):
        raise ValueError(f"positions must be an integer array, got dtype {positions.dtype}")


def _pieces(positions, plan, parts, long):
    """`[4, r/2]` float32 turn pieces for this call (in-graph for dynamic / longrope)."""
    if plan.kind == "static":
        return jnp.asarray(parts)
    seq_len = jnp.max(positions).astype(jnp.float32) + 1
    if plan.kind == "longrope":
        return jnp.where(seq_len > plan.original, long, parts)
    growth = plan.factor * jnp.maximum(seq_len, plan.original) / plan.original - (plan.factor - 1.0)
    return parts * jnp.exp(jnp.asarray(plan.dynamic_exponent, jnp.float32) * jnp.log(growth))


def _reduced_angle(positions, pieces):
    """`[..., r/2]` float32 angle `p * inv_freq` reduced to [-pi, pi] in double-float arithmetic."""
    p = positions.astype(jnp.int32)
    low = jnp.bitwise_and(p, 4095)
    halves = ((p - low).astype(jnp.float32)[..., None], low.astype(jnp.float32)[..., None])
    hi = lo = jnp.zeros(positions.shape + pieces.shape[1:], jnp.float32)
    for k in range(pieces.shape[0]):
        for half in halves:
            term = half * pieces[k]  # exact: <= 12 + 12 significant bits
            term = term - jnp.round(term)  # whole turns dropped exactly
            total = hi + term
            back = total - hi
            lo = lo + ((hi - (total - back)) + (term - back))  # TwoSum: the rounding error of hi + term
            hi = total - jnp.round(total)
    turns = hi + lo
    turns = turns - jnp.round(turns)
    return turns * _TWO_PI_HI + turns * _TWO_PI_LO


def _half_cos_sin(positions, plan, parts, long):
    angle = _reduced_angle(positions, _pieces(positions, plan, parts, long))
    scale = np.float32(plan.attention_scale)
    return jnp.cos(angle) * scale, jnp.sin(angle) * scale


def _rotate(x, cos, sin, rotary_dim, layout):
    compute = jnp.promote_types(x.dtype, jnp.float32)
    rot = x[..., :rotary_dim].astype(compute)
    cos, sin = cos.astype(compute), sin.astype(compute)
    if layout == "half":
        a, b = rot[..., : rotary_dim // 2], rot[..., rotary_dim // 2:]
        out = jnp.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = jnp.stack([a * cos - b * sin, b * cos + a * sin], axis=-1).reshape(rot.shape)
    out = out.astype(x.dtype)
    if rotary_dim == x.shape[-1]:
        return out
    return jnp.concatenate([out, x[..., rotary_dim:]], axis=-1)


def rope_frequencies(rotary_dim, *, base=10000.0, scaling=None, seq_len=None):
    """`(inv_freq float32 [r/2], attention_scale float)`; see `posenc_np.rope_frequencies`.

    `seq_len` may be an int or a traced integer scalar.
    """
    plan, parts, long = _plan(rotary_dim, base, scaling, "half")
    pieces = jnp.asarray(parts) if seq_len is None else _pieces(jnp.asarray(seq_len) - 1, plan, parts, long)
    return jnp.sum(pieces, axis=0) * _TWO_PI_HI, plan.attention_scale


def rope_cos_sin(positions, rotary_dim=None, *, base=10000.0, scaling=None, layout="half", rotary_pct=None,
                 head_dim=None, dtype=None):
    """`(cos, sin)`, each `[*positions.shape, rotary_dim]` in `dtype` (float32 when None); see `posenc_np.rope_cos_sin`."""
    rotary_dim = resolve_rotary_dim(head_dim, rotary_dim, rotary_pct)
    positions = jnp.asarray(positions)
    _check_positions(positions)
    cos, sin = _half_cos_sin(positions, *_plan(rotary_dim, base, scaling, layout))
    expand = (lambda t: jnp.concatenate([t, t], -1)) if layout == "half" else (lambda t: jnp.repeat(t, 2, -1))
    dtype = resolve_dtype(dtype)
    return expand(cos).astype(dtype), expand(sin).astype(dtype)


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None):
    """Rotate the first `rotary_dim` channels of `x`; see `posenc_np.apply_rope`.

    `positions`: integer array broadcasting against `x.shape[:-1]` (float arrays raise).
    """
    x = jnp.asarray(x)
    rotary_dim = resolve_rotary_dim(x.shape[-1], rotary_dim, rotary_pct)
    positions = jnp.asarray(positions)
    _check_positions(positions)
    check_rope_shapes(x.shape, positions.shape)
    cos, sin = _half_cos_sin(positions, *_plan(rotary_dim, base, scaling, layout))
    return _rotate(x, cos, sin, rotary_dim, layout)


def rope_permutation(head_dim, *, source, target, rotary_dim=None):
    """int32 array `perm` with `W_target = W_source[perm]` per head; see `posenc_np.rope_permutation`."""
    return jnp.asarray(spec_rope_permutation(head_dim, source=source, target=target, rotary_dim=rotary_dim))


def permute_qk_rows(weight, num_heads, *, source, target, rotary_dim=None):
    """Permute every head's rows of a `[num_heads * head_dim, ...]` q/k weight; see `posenc_np.permute_qk_rows`."""
    weight = jnp.asarray(weight)
    if num_heads < 1 or weight.shape[0] % num_heads:
        raise ValueError(f"num_heads={num_heads} does not divide the weight's first axis {weight.shape[0]}")
    head_dim = weight.shape[0] // num_heads
    perm = spec_rope_permutation(head_dim, source=source, target=target, rotary_dim=rotary_dim)
    return weight.reshape(num_heads, head_dim, *weight.shape[1:])[:, perm].reshape(weight.shape)


class RotaryEmbedding(nnx.Module):
    """`apply_rope` with its parameters bound (Flax NNX); called with `(x, positions)`, returns like `x`.

    With `max_len` (and a length-independent scaling), a float32 cos/sin cache `[max_len, r/2]`
    computed by the float64 spec is held as `nnx.Cache` (not a parameter). A call whose positions all
    lie in `[0, max_len)` gathers from it; otherwise the angles are computed (double-float
    reduction). The choice is a `lax.cond` on the traced positions, so jit never recompiles for a new
    length. `dynamic`/`longrope` always compute. No trainable weights.
    """

    def __init__(self, rotary_dim=None, *, base=10000.0, layout="half", scaling=None, max_len=None, rotary_pct=None,
                 head_dim=None):
        self.rotary_dim = resolve_rotary_dim(head_dim, rotary_dim, rotary_pct)
        self.base, self.layout, self.scaling, self.max_len, self.head_dim = float(base), layout, scaling, max_len, head_dim
        plan = rope_plan(self.rotary_dim, base=base, scaling=scaling, layout=layout)
        self.inv_freq = nnx.Cache(jnp.asarray(plan.turns * 2 * math.pi, jnp.float32))
        rows = int(max_len) if max_len is not None and plan.kind == "static" else 0
        cos, sin = spec_rope_cos_sin(np.arange(rows), self.rotary_dim, base=base, scaling=scaling)
        half = self.rotary_dim // 2
        self.cache = nnx.Cache(jnp.asarray(np.stack([cos[:, :half], sin[:, :half]]), jnp.float32))  # [2, rows, r/2]

    def __call__(self, x, positions):
        x, positions = jnp.asarray(x), jnp.asarray(positions)
        if self.head_dim is not None and x.shape[-1] != self.head_dim:
            raise ValueError(f"x has {x.shape[-1]} channels, this RotaryEmbedding was built for head_dim={self.head_dim}")
        if self.rotary_dim > x.shape[-1]:
            raise ValueError(f"rotary_dim={self.rotary_dim} is larger than the head dim {x.shape[-1]}")
        _check_positions(positions)
        check_rope_shapes(x.shape, positions.shape)
        planned = _plan(self.rotary_dim, self.base, self.scaling, self.layout)
        cache = self.cache[...]
        rows = cache.shape[1]
        if rows == 0:
            cos, sin = _half_cos_sin(positions, *planned)
        else:
            inside = (jnp.min(positions) >= 0) & (jnp.max(positions) < rows)
            cos, sin = jax.lax.cond(inside, lambda p: tuple(cache[:, jnp.clip(p, 0, rows - 1)]),
                                    lambda p: _half_cos_sin(p, *planned), positions)
        return _rotate(x, cos, sin, self.rotary_dim, self.layout)
