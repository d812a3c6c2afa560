"""Rotary position embedding in JAX (functions and a Flax NNX module). The math: `posenc_np.rope`.

Precision without float64: JAX (without x64) has no float64, so the angle `p * inv_freq` is formed in
double-float arithmetic. The spec splits `inv_freq / 2pi` (turns) into four float32 pieces of 12
significant bits (`posenc_np.rope.split_float32`); an int32 position splits exactly into
`high + low` with `low = p & 4095`. Every product piece * part is exact in float32 for |p| < 2**24,
each product's whole turns are dropped exactly (`x - round(x)`), and the fractions are summed with
TwoSum error compensation. The reduced angle is accurate to ~1e-7 rad up to position 2**24
(docs/rope-precision.md); beyond it the products stop being exact and the error grows slowly.
`dynamic` scaling forms its sequence-length dependent frequencies in-graph in double-float as well
(`_dynamic_pieces`: Newton steps for `g ** (-1/m)`, powers by squaring), keeping the same accuracy.

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

from posenc_np.rope import check_rope_shapes, resolve_rotary_dim, rope_cos_sin as spec_rope_cos_sin
from posenc_np.rope import rope_plan, rope_permutation as spec_rope_permutation, scaling_from_hf_config, split_float32

from ._common import resolve_dtype, spec_constant
from posenc_np._freeze import freeze as _freeze, thaw as _thaw

__all__ = ["rope_frequencies", "rope_cos_sin", "apply_rope", "rope_permutation", "permute_qk_rows",
           "scaling_from_hf_config", "RotaryEmbedding"]

_TWO_PI_HI = np.float32(2 * math.pi)
_TWO_PI_LO = np.float32(2 * math.pi - float(_TWO_PI_HI))


_TABLES: dict = {}


def _tables(rotary_dim, base, scaling, layout):
    """Validate once; return `(kind, arrays)`: the spec's plan as float32 NumPy arrays, cached.

    The arrays are passed to the compiled function as arguments, not baked in as constants, so one
    compilation serves every scaling of the same kind, shape and dtype.
    """
    key = (rotary_dim, float(base), _freeze(scaling), layout)
    if key not in _TABLES:
        plan = rope_plan(rotary_dim, base=base, scaling=scaling, layout=layout)
        arrays = {"parts": split_float32(plan.turns), "scale": np.float32(plan.attention_scale)}
        if plan.kind == "longrope":
            arrays.update(long=split_float32(plan.turns_long), original=np.float32(plan.original))
        if plan.kind == "dynamic":
            arrays.update(turns=_two_float(plan.turns), original=np.float32(plan.original),
                          slope=_two_float(plan.factor / plan.original), offset=_two_float(plan.factor - 1.0))
        _TABLES[key] = (plan.kind, arrays)
    return _TABLES[key]


def _check_positions(positions):
    if not jnp.issubdtype(positions.dtype, jnp.integer):
        raise ValueError(f"positions must be an integer array, got dtype {positions.dtype}")


def _pieces(positions, kind, t):
    """`[4, r/2]` float32 turn pieces for this call (in-graph for dynamic / longrope)."""
    if kind == "static":
        return jnp.asarray(t["parts"])
    seq_len = jnp.max(positions).astype(jnp.float32) + 1
    if kind == "longrope":
        return jnp.where(seq_len > t["original"], t["long"], t["parts"])
    return _dynamic_pieces(jnp.maximum(seq_len, t["original"]), t)


# --- double-float arithmetic for dynamic NTK (values as (hi, lo) float32 pairs) -----------------------

def _two_float(values):
    """float64 -> `[2, ...]` float32 (hi, lo) with hi + lo equal to the value to ~48 bits."""
    values = np.asarray(values, np.float64)
    hi = values.astype(np.float32)
    return np.stack([hi, (values - hi).astype(np.float32)])


def _split12(a):
    """a = hi + lo, each with at most 12 significant bits (bit mask: no rounding, no FMA contraction)."""
    hi = jax.lax.bitcast_convert_type(jax.lax.bitcast_convert_type(a, jnp.int32) & np.int32(-4096), jnp.float32)
    return hi, a - hi


def _renormalize(a, b):
    total = a + b
    return total, b - (total - a)


def _df_mul(a, b):
    """(a_hi + a_lo) * (b_hi + b_lo) as a double-float (Dekker's product; ~2**-46 relative)."""
    product = a[0] * b[0]
    ah, al = _split12(a[0])
    bh, bl = _split12(b[0])
    error = ((ah * bh - product) + ah * bl + al * bh) + al * bl  # every partial product is exact
    return _renormalize(product, error + (a[0] * b[1] + a[1] * b[0]))


def _df_pow(a, n):
    """a ** n for a static integer n >= 1, by squaring."""
    result = None
    while n:
        if n & 1:
            result = a if result is None else _df_mul(result, a)
        n >>= 1
        if n:
            a = _df_mul(a, a)
    return result


def _dynamic_pieces(seq_len, t):
    """Dynamic NTK turns `w_j * g ** (-j / m)`, m = r/2 - 1, as 12-bit pieces, in double-float.

    `g = factor * s / L - (factor - 1)` (exact: s < 2**24). `q = g ** (-1/m)` starts from float32 pow
    and takes two Newton steps on `g * q**m = 1`; `q ** j` is built by squaring. The result carries
    ~1e-13 relative error, so the angle reduction keeps its ~1e-7 rad accuracy.
    """
    half = t["parts"].shape[-1]
    m = half - 1
    p, e = _df_mul((seq_len, jnp.float32(0)), (t["slope"][0], t["slope"][1]))
    hi, lo = _renormalize(p, -t["offset"][0])  # exact: p = factor * s / L >= factor - 1
    g = _renormalize(hi, lo + e - t["offset"][1])
    q = (jnp.power(g[0], jnp.float32(-1.0 / m)), jnp.float32(0))
    for _ in range(2):
        gq = _df_mul(g, _df_pow(q, m))
        residual = (1.0 - gq[0]) - gq[1]  # 1 - g * q**m, small: exact enough in float32
        q = _renormalize(q[0], q[1] + q[0] * residual / m)
    j = np.arange(half)
    power = (jnp.ones(half, jnp.float32), jnp.zeros(half, jnp.float32))
    base = (jnp.broadcast_to(q[0], (half,)), jnp.broadcast_to(q[1], (half,)))
    for bit in range(max(m, 1).bit_length()):
        take = (j >> bit) & 1 == 1
        stepped = _df_mul(power, base)
        power = (jnp.where(take, stepped[0], power[0]), jnp.where(take, stepped[1], power[1]))
        base = _df_mul(base, base)
    w = _df_mul((t["turns"][0], t["turns"][1]), power)
    (h1, h2), (l1, l2) = _split12(w[0]), _split12(w[1])
    return jnp.stack([h1, h2, l1, l2])


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


def _half_cos_sin(positions, kind, t):
    angle = _reduced_angle(positions, _pieces(positions, kind, t))
    return jnp.cos(angle) * t["scale"], jnp.sin(angle) * t["scale"]


def _rotate(x, cos, sin, rotary_dim, layout):
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


_TABLE_ROWS = 4096


def _table(rotary_dim, base, scaling):
    """`[2, 4096, r/2]` float32 cos/sin of positions 0..4095 from the float64 spec, built once per parameters
    (a NumPy value; `spec_constant` never stores an array made under a trace)."""
    frozen = _freeze(scaling)

    def make():
        cos, sin = spec_rope_cos_sin(np.arange(_TABLE_ROWS), rotary_dim, base=base, scaling=_thaw(frozen))
        return np.stack([cos[:, : rotary_dim // 2], sin[:, : rotary_dim // 2]])

    return spec_constant(("rope_table", rotary_dim, float(base), frozen), make)


def _fast_cos_sin(positions, kind, t, table):
    """Half-size cos/sin: gathered from `table` when every position lies inside it (static kinds), else computed.

    Both are kept out of the rotation's loop fusion (the `cond`, or an optimization barrier): fused,
    XLA recomputes the angle reduction for every broadcast copy (batch x heads times).
    """
    if table is None:
        return jax.lax.optimization_barrier(_half_cos_sin(positions, kind, t))
    rows = table.shape[1]
    inside = (jnp.min(positions) >= 0) & (jnp.max(positions) < rows)
    return jax.lax.cond(inside, lambda p: tuple(table[:, jnp.clip(p, 0, rows - 1)]),
                        lambda p: _half_cos_sin(p, kind, t), positions)


@functools.partial(jax.jit, static_argnames=("kind", "rotary_dim", "layout"))
def _apply(x, positions, t, table, *, kind, rotary_dim, layout):
    """The whole rotation, one compiled function per (shapes, dtype, kind), also serving eager calls."""
    cos, sin = _fast_cos_sin(positions, kind, t, table)
    return _rotate(x, cos, sin, rotary_dim, layout)


def rope_frequencies(rotary_dim, *, base=10000.0, scaling=None, seq_len=None):
    """`(inv_freq float32 [r/2], attention_scale float)`; see `posenc_np.rope_frequencies`.

    `seq_len` may be an int or a traced integer scalar.
    """
    kind, t = _tables(rotary_dim, base, scaling, "half")
    pieces = jnp.asarray(t["parts"]) if seq_len is None else _pieces(jnp.asarray(seq_len) - 1, kind, t)
    return jnp.sum(pieces, axis=0) * _TWO_PI_HI, rope_plan(rotary_dim, base=base, scaling=scaling).attention_scale


def rope_cos_sin(positions, rotary_dim=None, *, base=10000.0, scaling=None, layout="half", rotary_pct=None,
                 head_dim=None, dtype=None):
    """`(cos, sin)`, each `[*positions.shape, rotary_dim]` in `dtype` (float32 when None); see `posenc_np.rope_cos_sin`."""
    rotary_dim = resolve_rotary_dim(head_dim, rotary_dim, rotary_pct)
    positions = jnp.asarray(positions)
    _check_positions(positions)
    cos, sin = _half_cos_sin(positions, *_tables(rotary_dim, base, scaling, layout))
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
    kind, t = _tables(rotary_dim, base, scaling, layout)
    table = _table(rotary_dim, base, scaling) if kind == "static" and positions.size else None
    return _apply(x, positions, t, table, kind=kind, rotary_dim=rotary_dim, layout=layout)


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
        planned = _tables(self.rotary_dim, self.base, self.scaling, self.layout)
        cache = self.cache[...]
        rows = cache.shape[1]
        if rows == 0:
            cos, sin = _half_cos_sin(positions, *planned)
        else:
            inside = (jnp.min(positions) >= 0) & (jnp.max(positions) < rows)
            cos, sin = jax.lax.cond(inside, lambda p: tuple(cache[:, jnp.clip(p, 0, rows - 1)]),
                                    lambda p: _half_cos_sin(p, *planned), positions)
        return _rotate(x, cos, sin, self.rotary_dim, self.layout)
