"""Double-float arithmetic in float32 for JAX, which has no float64 without x64.

A value is carried as an unevaluated sum of float32 numbers: `(hi, lo)` pairs (~48 bits) for
products and powers, or four 12-bit pieces (`split_float32`) whose products with integers below
2**12 are exact. `reduced_angle` uses it to form `p * inv_freq` modulo one turn to ~1e-7 rad for
every int32 position below 2**24 (docs/rope-precision.md); `dynamic_pieces` forms dynamic NTK's
length-dependent frequencies in-graph with the same accuracy. Used by `posenc_jax.rope` only.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["split_float32", "two_float", "split12", "renormalize", "df_mul", "df_pow", "dynamic_pieces",
           "reduced_angle"]

_TWO_PI_HI = np.float32(2 * math.pi)
_TWO_PI_LO = np.float32(2 * math.pi - float(_TWO_PI_HI))


def split_float32(values, *, parts: int = 4, bits: int = 12) -> np.ndarray:
    """Split float64 values into `parts` float32 pieces of at most `bits` significant bits each.

    `sum(pieces)` equals `values` to ~`parts * bits` bits, and a piece times an integer below
    `2 ** (24 - bits)` is exact in float32: the backbone of the double-float angle reduction below
    (JAX has no float64 without x64). Returns `[parts, *values.shape]` float32.
    """
    rest = np.asarray(values, dtype=np.float64).copy()
    pieces = []
    for _ in range(parts):
        mantissa, exponent = np.frexp(rest)
        piece = np.ldexp(np.round(np.ldexp(mantissa, bits)), exponent - bits)
        pieces.append(piece)
        rest = rest - piece
    return np.stack(pieces).astype(np.float32)


def two_float(values):
    """float64 -> `[2, ...]` float32 (hi, lo) with hi + lo equal to the value to ~48 bits."""
    values = np.asarray(values, np.float64)
    hi = values.astype(np.float32)
    return np.stack([hi, (values - hi).astype(np.float32)])


def split12(a):
    """a = hi + lo, each with at most 12 significant bits (bit mask: no rounding, no FMA contraction)."""
    hi = jax.lax.bitcast_convert_type(jax.lax.bitcast_convert_type(a, jnp.int32) & np.int32(-4096), jnp.float32)
    return hi, a - hi


def renormalize(a, b):
    total = a + b
    return total, b - (total - a)


def df_mul(a, b):
    """(a_hi + a_lo) * (b_hi + b_lo) as a double-float (Dekker's product; ~2**-46 relative)."""
    product = a[0] * b[0]
    ah, al = split12(a[0])
    bh, bl = split12(b[0])
    error = ((ah * bh - product) + ah * bl + al * bh) + al * bl  # every partial product is exact
    return renormalize(product, error + (a[0] * b[1] + a[1] * b[0]))


def df_pow(a, n):
    """a ** n for a static integer n >= 1, by squaring."""
    result = None
    while n:
        if n & 1:
            result = a if result is None else df_mul(result, a)
        n >>= 1
        if n:
            a = df_mul(a, a)
    return result


def dynamic_pieces(seq_len, consts):
    """Dynamic NTK turns `w_j * g ** (-j / m)`, m = r/2 - 1, as 12-bit pieces, in double-float.

    `g = factor * s / L - (factor - 1)` (exact: s < 2**24). `q = g ** (-1/m)` starts from float32 pow
    and takes two Newton steps on `g * q**m = 1`; `q ** j` is built by squaring. The result carries
    ~1e-13 relative error, so the angle reduction keeps its ~1e-7 rad accuracy.
    """
    half = consts["parts"].shape[-1]
    m = half - 1
    p, e = df_mul((seq_len, jnp.float32(0)), (consts["slope"][0], consts["slope"][1]))
    hi, lo = renormalize(p, -consts["offset"][0])  # exact: p = factor * s / L >= factor - 1
    g = renormalize(hi, lo + e - consts["offset"][1])
    q = (jnp.power(g[0], jnp.float32(-1.0 / m)), jnp.float32(0))
    for _ in range(2):
        gq = df_mul(g, df_pow(q, m))
        residual = (1.0 - gq[0]) - gq[1]  # 1 - g * q**m, small: exact enough in float32
        q = renormalize(q[0], q[1] + q[0] * residual / m)
    j = np.arange(half)
    power = (jnp.ones(half, jnp.float32), jnp.zeros(half, jnp.float32))
    base = (jnp.broadcast_to(q[0], (half,)), jnp.broadcast_to(q[1], (half,)))
    for bit in range(max(m, 1).bit_length()):
        take = (j >> bit) & 1 == 1
        stepped = df_mul(power, base)
        power = (jnp.where(take, stepped[0], power[0]), jnp.where(take, stepped[1], power[1]))
        base = df_mul(base, base)
    w = df_mul((consts["turns"][0], consts["turns"][1]), power)
    (h1, h2), (l1, l2) = split12(w[0]), split12(w[1])
    return jnp.stack([h1, h2, l1, l2])


def reduced_angle(positions, pieces):
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
