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

from posenc_np.backend import UNIT_ROUNDOFF, dtype_name
from posenc_np.testing import EPS32, ROPE_ANGLE_GOAL, Tolerance

__all__ = ["Rotation", "spec_rotation", "class_tolerance", "class_angle_error", "rounding_bound", "max_angle",
           "AngleError", "angle_error", "UNIT_ROUNDOFF", "ANGLE_PAIR_FLOOR"]

#: Pairs whose spec norm is below this fraction of the largest are left out of the angle error: their
#: angle is rounding noise in half precision.
ANGLE_PAIR_FLOOR = 0.1



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
    """The keywords of `kwargs` that `posenc_np.apply_rope` takes (every RoPE parameter, present and future)."""
    import inspect

    import posenc_np

    keys = set(inspect.signature(posenc_np.apply_rope).parameters) - {"x", "positions"}
    return {k: v for k, v in kwargs.items() if k in keys}


def _plan(x_shape, kw):
    """`(rotary_dim, RopePlan)` of `apply_rope(x, ..., **kw)` for `x.shape == x_shape`."""
    from posenc_np.rope import resolve_rotary_dim, rope_plan

    r = resolve_rotary_dim(x_shape[-1], kw.get("rotary_dim"), kw.get("rotary_pct"))
    return r, rope_plan(r, **{k: v for k, v in kw.items() if k not in ("rotary_dim", "rotary_pct")})


def spec_rotation(x_shape, positions, kwargs) -> Rotation:
    """The spec's per-pair rotation for `apply_rope(x, positions, **kwargs)` with `x.shape == x_shape`."""
    import posenc_np

    kw = rope_kwargs(kwargs)
    r, plan = _plan(x_shape, kw)
    half = kw.get("layout", "half") == "half"
    first = np.arange(r // 2) if half else np.arange(0, r, 2)
    second = first + r // 2 if half else first + 1
    probe = np.zeros(x_shape)
    probe[..., first] = 1.0
    y = posenc_np.apply_rope(probe, positions, **kw)
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
    positions = np.asarray(positions)
    if not positions.size:
        return 0.0
    _, plan = _plan(x_shape, rope_kwargs(kwargs))
    turns = plan.turns_at(int(positions.max()) + 1)
    return float(np.abs(positions).max()) * float(np.max(turns)) * 2 * math.pi


def class_angle_error(angles: str, t_max: float) -> float:
    """`"float64"`: posenc's goal `ROPE_ANGLE_GOAL` at any position; `"float32"`: the policy's float32 angle
    term `2 eps32 t_max` (a float32 product `p * inv_freq` errs by <= 1.5 eps32 t); `"table"`: 0 (posenc
    built the tables)."""
    if angles == "float64":
        return ROPE_ANGLE_GOAL
    if angles == "float32":
        return 2.0 * EPS32 * t_max
    if angles == "table":
        return 0.0
    raise ValueError(f"angles={angles!r} is not one of 'float64', 'float32', 'table'")


def rounding_bound(desired, dtype, x, rot: Rotation) -> float:
    """The largest error of applying the spec's tables in `dtype` the way transformers does.

    In a dtype of unit roundoff u, `y_a = a c - b d` (and `y_b = a d + b c`) is formed from rounded
    `c~ = c (1 + e1)`, `d~`, two rounded products and a rounded sum, so
    `|y~_a - y_a| <= (2u + u^2)(1 + u)(|a c| + |b d|) + u |y_a|` (docs/tolerances.md derives it); this is
    the largest of these bounds over the elements. float64: the policy's 1e-12 x scale.
    """
    name = dtype_name(dtype)
    desired = np.asarray(desired, np.float64)
    if name == "float64":
        return 1e-12 * (float(np.abs(desired).max()) if desired.size else 1.0)
    x = np.asarray(x, np.float64)
    a, b = x[..., rot.first], x[..., rot.second]
    u = UNIT_ROUNDOFF[name]
    k = (2 * u + u * u) * (1 + u)
    bound_a = k * (np.abs(a * rot.c) + np.abs(b * rot.d)) + u * np.abs(desired[..., rot.first])
    bound_b = k * (np.abs(a * rot.d) + np.abs(b * rot.c)) + u * np.abs(desired[..., rot.second])
    return float(max(bound_a.max(), bound_b.max())) if bound_a.size else 0.0


def class_tolerance(angles, desired, dtype, x, positions, kwargs, *, angle_factor: float = 1.0,
                    rot: Rotation | None = None) -> Tolerance:
    """The tolerance of an `apply_rope` record of an implementation of precision class `angles`.

    `atol = angle error x max pair norm + rounding_bound + 8 float32 ulps x scale`: an angle error of e
    radians moves a rotated pair of norm N by at most e N; the rounding bound covers tables applied in the
    inputs' dtype (bfloat16 / float16: cos, sin, two products and a sum rounded); the slack is the policy's.
    `angle_factor` multiplies the angle error (the diagnosis's looser float32 bound); `rot` is the spec's
    rotation of this case when the caller has it already.
    """
    name = dtype_name(dtype)
    desired = np.asarray(desired, np.float64)
    scale = float(np.abs(desired).max()) if desired.size else 1.0
    rot = spec_rotation(np.shape(x), positions, kwargs) if rot is None else rot
    pair_norm = float(np.hypot(desired[..., rot.first], desired[..., rot.second]).max()) if rot.c.size else 0.0
    t_max = max_angle(positions, kwargs, np.shape(x))
    angle = angle_factor * class_angle_error(angles, t_max)
    rounding = rounding_bound(desired, dtype, x, rot)
    slack = 0.0 if name == "float64" else 8 * EPS32 * scale
    why = (f"{angles} angles: {angle:.3g} rad x pair norm {pair_norm:.3g}"
           + (f" (t_max {t_max:.3g})" if angles == "float32" else "")
           + (f" + tables applied in {name}: cos, sin, 2 products, a sum rounded (u=2^{int(math.log2(UNIT_ROUNDOFF[name]))}"
              f"): {rounding:.3g}" if name != "float64" else f" + float64 {rounding:.3g}")
           + (f" + float32 8 ulp x scale {scale:.3g}" if slack else ""))
    return Tolerance(angle * pair_norm + rounding + slack, why)


@dataclass(frozen=True)
class AngleError:
    """The worst angle error of an output against the spec: radians, the element's index (the pair's first
    channel last), and the position that pair turned by."""

    radians: float
    index: tuple
    position: int


def angle_error(actual, desired, x_shape, positions, kwargs, *, rot: Rotation | None = None) -> AngleError | None:
    """The largest |angle(actual pair) - angle(spec pair)| (wrapped to [0, pi]) over the pairs whose spec
    norm is at least `ANGLE_PAIR_FLOOR` of the largest; None when no such pair has finite outputs.

    Each rotated pair `(y_a, y_b)` is read as the complex number `y_a + i y_b`; the angle between the
    implementation's and the spec's is `arg(y * conj(y_spec))`. The attention scale cancels. `rot`: the
    spec's rotation of this case when the caller has it already.
    """
    rot = spec_rotation(x_shape, positions, kwargs) if rot is None else rot
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
