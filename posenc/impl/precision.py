"""What another implementation's RoPE is allowed, and what it costs: the tolerance of each precision class
and the worst angle error against the float64 spec (docs/tolerances.md, "Other implementations").

RoPE outputs are read pair by pair: `spec_rotation` gives, for every pair of channels the layout rotates
together, the spec's `c = s cos(t)` and `d = s sin(t)` (s the attention scale), found by rotating a
probe (1, 0) through the spec itself, so every scaling, partial rotary and multi-axis map is the spec's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from posenc_np._dtypes import dtype_name
from posenc_np.testing import EPS32, Tolerance, tolerance

__all__ = ["Rotation", "spec_rotation", "class_tolerance", "table_tolerance", "float32_tolerance", "max_angle",
           "AngleError", "angle_error", "UNIT_ROUNDOFF", "ANGLE_PAIR_FLOOR"]

#: Unit roundoff (half an ulp at 1, relative) of round-to-nearest in each dtype.
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
#: Pairs whose spec norm is below this fraction of the largest are left out of the angle error: their
#: angle is rounding noise in half precision.
ANGLE_PAIR_FLOOR = 0.1

_ROPE_KEYS = ("base", "layout", "rotary_dim", "scaling", "rotary_pct", "mrope_section", "mrope_interleaved",
              "mrope_frequencies")


@dataclass(frozen=True)
class Rotation:
    """The spec's rotation of `x [..., dim]`: `c`, `d` `[*x.shape[:-1], r/2]` (`s cos t`, `s sin t`),
    the channel of each pair's first (`first`) and second (`second`) element, and `positions`
    `[*x.shape[:-1], r/2]`: the position each pair turned by (its own axis for multi-axis RoPE)."""

    c: np.ndarray
    d: np.ndarray
    first: np.ndarray
    second: np.ndarray
    positions: np.ndarray
    attention_scale: float


def rope_kwargs(kwargs) -> dict:
    return {k: v for k, v in kwargs.items() if k in _ROPE_KEYS}


def spec_rotation(x_shape, positions, kwargs) -> Rotation:
    """The spec's per-pair rotation for `apply_rope(x, positions, **kwargs)` with `x.shape == x_shape`."""
    import posenc_np
    from posenc_np.rope import resolve_rotary_dim, rope_plan

    kw = rope_kwargs(kwargs)
    r = resolve_rotary_dim(x_shape[-1], kw.get("rotary_dim"), kw.get("rotary_pct"))
    half = kw.get("layout", "half") == "half"
    first = np.arange(r // 2) if half else np.arange(0, r, 2)
    second = first + r // 2 if half else first + 1
    probe = np.zeros(x_shape)
    probe[..., first] = 1.0
    y = posenc_np.apply_rope(probe, positions, **kw)
    plan = rope_plan(r, base=kw.get("base", 10000.0), scaling=kw.get("scaling"), layout=kw.get("layout", "half"),
                     mrope_section=kw.get("mrope_section"), mrope_interleaved=kw.get("mrope_interleaved", False),
                     mrope_frequencies=kw.get("mrope_frequencies", "shared"))
    positions = np.asarray(positions)
    lead = tuple(x_shape[:-1])
    if plan.axis_of_pair is None:
        per_pair = np.broadcast_to(np.broadcast_to(positions, lead)[..., None], lead + (r // 2,))
    else:
        axes = np.stack([np.broadcast_to(p, lead) for p in positions], axis=-1)  # [..., A]
        per_pair = axes[..., plan.axis_of_pair]
    return Rotation(y[..., first], y[..., second], first, second, per_pair, plan.attention_scale)


def max_angle(positions, kwargs, x_shape) -> float:
    """The largest |p * inv_freq| (radians, unreduced) of the case: the float32 class's angle."""
    from posenc_np.rope import resolve_rotary_dim, rope_plan

    kw = rope_kwargs(kwargs)
    positions = np.asarray(positions)
    if not positions.size:
        return 0.0
    r = resolve_rotary_dim(x_shape[-1], kw.get("rotary_dim"), kw.get("rotary_pct"))
    plan = rope_plan(r, base=kw.get("base", 10000.0), scaling=kw.get("scaling"), layout=kw.get("layout", "half"),
                     mrope_section=kw.get("mrope_section"), mrope_interleaved=kw.get("mrope_interleaved", False),
                     mrope_frequencies=kw.get("mrope_frequencies", "shared"))
    turns = plan.turns_at(int(positions.max()) + 1)
    return float(np.abs(positions).max()) * float(np.max(turns)) * 2 * math.pi


def float32_tolerance(desired, dtype, x, positions, kwargs, *, factor: float = 1.0) -> Tolerance:
    """The `"float32"` class: the policy's float32 angle term `2 eps32 |t|max` (x `factor`) instead of the
    RoPE goal, with the policy's final rounding for half precision."""
    scale = float(np.abs(np.asarray(desired, np.float64)).max()) if np.size(desired) else 1.0
    return tolerance(dtype, max_angle=factor * max_angle(positions, kwargs, np.shape(x)), scale=scale)


def table_tolerance(desired, dtype, x, positions, kwargs) -> Tolerance:
    """The `"table"` class: posenc's float64 tables cast to the inputs' dtype, applied as transformers does.

    In a dtype of unit roundoff u, output `y_a = a c - b d` (and `y_b = a d + b c`) is formed from a
    rounded `c~ = c (1 + e1)`, `d~`, two rounded products and a rounded sum, so
    `|y~_a - y_a| <= (2u + u^2)(1 + u)(|a c| + |b d|) + u |y_a|` (docs/tolerances.md derives it). The
    atol is the largest of these bounds over the elements, plus the policy's 8 float32 ulps x scale.
    """
    name = dtype_name(dtype)
    desired = np.asarray(desired, np.float64)
    scale = float(np.abs(desired).max()) if desired.size else 1.0
    if name == "float64":
        return tolerance("float64", scale=scale)
    x = np.asarray(x, np.float64)
    rot = spec_rotation(x.shape, positions, kwargs)
    a, b = x[..., rot.first], x[..., rot.second]
    u = UNIT_ROUNDOFF[name]
    k = (2 * u + u * u) * (1 + u)
    bound_a = k * (np.abs(a * rot.c) + np.abs(b * rot.d)) + u * np.abs(desired[..., rot.first])
    bound_b = k * (np.abs(a * rot.d) + np.abs(b * rot.c)) + u * np.abs(desired[..., rot.second])
    worst = float(max(bound_a.max(), bound_b.max())) if bound_a.size else 0.0
    slack = 8 * EPS32 * scale
    return Tolerance(worst + slack, f"table class: cos/sin rounded to {name}, two products and a sum "
                                    f"(u=2^{int(math.log2(u))}: max (2u+u^2)(1+u)(|a c|+|b s|) + u|y| "
                                    f"= {worst:.3g}) + float32 8 ulp x scale {scale:.3g}")


def class_tolerance(angles, case_tol, desired, dtype, x, positions, kwargs) -> Tolerance:
    """The tolerance of an `apply_rope` record for an implementation of precision class `angles`."""
    if angles == "float64":
        return case_tol
    if angles == "float32":
        return float32_tolerance(desired, dtype, x, positions, kwargs)
    return table_tolerance(desired, dtype, x, positions, kwargs)


@dataclass(frozen=True)
class AngleError:
    """The worst angle error of an output against the spec: radians, the element's index (the pair's first
    channel last), and the position that pair turned by."""

    radians: float
    index: tuple
    position: int


def angle_error(actual, desired, x_shape, positions, kwargs) -> AngleError | None:
    """The largest |angle(actual pair) - angle(spec pair)| (wrapped to [0, pi]) over the pairs whose spec
    norm is at least `ANGLE_PAIR_FLOOR` of the largest; None when no such pair has finite outputs.

    Each rotated pair `(y_a, y_b)` is read as the complex number `y_a + i y_b`; the angle between the
    implementation's and the spec's is `arg(y * conj(y_spec))`. The attention scale cancels.
    """
    rot = spec_rotation(x_shape, positions, kwargs)
    actual = np.asarray(actual, np.float64)
    desired = np.asarray(desired, np.float64)
    got = actual[..., rot.first] + 1j * actual[..., rot.second]
    want = desired[..., rot.first] + 1j * desired[..., rot.second]
    norm = np.abs(want)
    if not norm.size:
        return None
    keep = (norm >= ANGLE_PAIR_FLOOR * norm.max()) & np.isfinite(got) & (norm > 0)
    if not keep.any():
        return None
    err = np.where(keep, np.abs(np.angle(got * np.conj(want))), -1.0)
    flat = int(np.argmax(err))
    index = np.unravel_index(flat, err.shape)
    channel = int(rot.first[index[-1]])
    return AngleError(float(err.flat[flat]), tuple(int(i) for i in index[:-1]) + (channel,),
                      int(rot.positions[index]))
