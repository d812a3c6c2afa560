"""The tolerance policy: how far a backend may be from the float64 spec, and why.

A backend computes in float32 (angles, tables) and rounds once more to its output dtype. The error
budget of one comparison is therefore

    atol = scale * (compute + final)

* `compute`, float32 arithmetic. An angle t = p * w is formed from a float32 position and a float32
  frequency, each within half an ulp, and the product is rounded again: |dt| <= 1.5 * eps32 * |t|
  (eps32 = 2**-23). sin/cos have slope <= 1, so the table moves by as much; we allow 2 * eps32 * t_max
  plus 8 ulps of fixed slack for the few float32 operations after the angle (sin/cos, one multiply-add,
  weighted sums). At position 8192 on the fastest channel this is 2.0e-3 (measured error of a plain
  float32 table there: about 5e-4). Backends that reduce the angle modulo 2*pi in float64 (RoPE's
  cached tables) stay at a few 1e-7 whatever the position; they are held to the same, looser, bound
  here unless the case passes `angle_error`: then the documented bound on the angle error (RoPE's
  `ROPE_ANGLE_GOAL`, 1e-6 rad at any position) replaces 2 * eps32 * t_max, so a backend or an exported
  graph that forms `p * inv_freq` in float32 (error ~ eps32 * p * w, 4e-3 rad at 65536) fails the check.
* `final`, the rounding of the result to its dtype: half an ulp relative, 2**-9 for bfloat16 (8 bits
  of mantissa), 2**-12 for float16, 0 for float32/float64. With `scale` = max |desired| this bounds
  the absolute rounding error of every element. We double it (2**-8, 2**-11), because a backend that
  rounds an intermediate (cos and sin before the multiply) rounds twice.
* float64 backends: 1e-12 * scale (pow vs exp*log differ by ulps).
* exact (gathers, bucket indices, a table returned unchanged): 0, compared with array_equal semantics.

The rtol is 0 everywhere: atol already scales with the magnitude of the data, and a relative
tolerance near zero crossings of sin/cos would be meaningless. See docs/tolerances.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._dtypes import UNIT_ROUNDOFF, dtype_name
from .rope import rope_plan

__all__ = ["Tolerance", "tolerance", "compare", "Comparison", "EPS32", "ROPE_ANGLE_GOAL", "attention_tolerance",
           "rope_angle_error"]

EPS32 = 2.0**-23
#: The angle precision every RoPE path promises at any position (radians): angles reduced modulo a turn in
#: float64 (torch, TF, ONNX caches from the spec) or double-float32 arithmetic (JAX without x64).
ROPE_ANGLE_GOAL = 1e-6
_FINAL = {"float64": 0.0, "float32": 0.0, "float16": UNIT_ROUNDOFF["float16"], "bfloat16": UNIT_ROUNDOFF["bfloat16"]}


@dataclass(frozen=True)
class Tolerance:
    atol: float
    why: str

    def __str__(self):
        return f"{self.atol:.2e} ({self.why})"


def tolerance(dtype, *, max_angle: float = 0.0, scale: float = 1.0, exact: bool = False,
              slack_ulps: float = 8.0, angle_error: float | None = None) -> Tolerance:
    """The allowed max abs error for a backend result of `dtype` against the float64 spec.

    Args:
        dtype: the backend's output dtype (a name, NumPy or framework dtype).
        max_angle: the largest |angle| (radians) the computation forms, 0 when no angle is involved.
        scale: the magnitude of the result (max |desired|), 1 for unit sinusoids.
        exact: the result is a gather, an index, or otherwise computed without rounding.
        slack_ulps: float32 ulps of fixed slack for the operations after the angle.
        angle_error: the computation's own bound on its angle error (radians), for paths that reduce
            angles in more than float32 (`ROPE_ANGLE_GOAL`); replaces the 2*eps32*angle term.

    Returns:
        `Tolerance(atol, why)`; `why` says which terms made the bound.
    """
    name = dtype_name(dtype)
    if exact:
        return Tolerance(0.0, "exact: a gather or an integer result")
    scale = float(max(scale, np.finfo(np.float64).tiny))
    if name == "float64":
        return Tolerance(1e-12 * scale, "float64: ulp-level differences in pow/exp/log")
    final = _FINAL[name]
    parts = [f"float32 compute {slack_ulps:g} ulp"]
    if angle_error is not None:
        compute = slack_ulps * EPS32 + float(angle_error)
        parts.append(f"+ angle error {angle_error:.3g} rad")
    else:
        compute = slack_ulps * EPS32 + 2.0 * EPS32 * float(max_angle)
        if max_angle:
            parts.append(f"+ 2*eps32*angle {max_angle:.3g}")
    if final:
        parts.append(f"+ {name} rounding 2^{int(np.log2(final))}")
    if scale != 1.0:
        parts.append(f"x scale {scale:.3g}")
    return Tolerance(scale * (compute + final), ", ".join(parts))


@dataclass(frozen=True)
class Comparison:
    max_abs_err: float
    err_in_tol: float  # max_abs_err / atol (inf when atol == 0 and the error is not 0)
    worst_index: tuple
    atol: float
    tol_why: str
    passed: bool
    message: str = ""


def compare(actual, desired, tol: Tolerance) -> Comparison:
    """Compare a backend result (converted to NumPy) with the float64 spec under `tol`.

    NaNs must sit in the same places in both (the documented NaN rows of a traced out-of-range
    gather are compared this way); shapes must match exactly, no broadcasting.
    """
    actual = np.asarray(actual)
    desired = np.asarray(desired)
    if actual.shape != desired.shape:
        return Comparison(float("inf"), float("inf"), (), tol.atol, tol.why, False,
                          f"shape {actual.shape} != spec shape {desired.shape}")
    a64, d64 = actual.astype(np.float64), desired.astype(np.float64)  # integers and bools too: exact below 2**53
    nan_a, nan_d = np.isnan(a64), np.isnan(d64)
    if np.any(nan_a != nan_d):
        where = np.argwhere(nan_a != nan_d)[0]
        return Comparison(float("inf"), float("inf"), tuple(int(i) for i in where), tol.atol, tol.why, False,
                          "NaN where the spec has a number (or the reverse)")
    err = np.where(nan_d, 0.0, np.abs(a64 - d64))
    if err.size == 0:
        return Comparison(0.0, 0.0, (), tol.atol, tol.why, True)
    flat = int(np.argmax(err))
    worst = tuple(int(i) for i in np.unravel_index(flat, err.shape))
    max_err = float(err.flat[flat])
    if tol.atol > 0:
        ratio = max_err / tol.atol
    else:
        ratio = 0.0 if max_err == 0 else float("inf")
    return Comparison(max_err, ratio, worst, tol.atol, tol.why, bool(max_err <= tol.atol))


# --- measures for particular encodings (tests, `posenc check` cases, benchmarks) ----------------------

def attention_tolerance(q, k, v, *, bias=None, scale=None, dtype="float32") -> tuple[Tolerance, Tolerance]:
    """`(tol_out, tol_weights)` for a backend's attention against `attention` on the same inputs.

    A backend forms each logit in float32 within about 1.5 eps32 * |logit| (product, sum, bias add).
    softmax moves each weight, and each output element in units of max |v|, by at most 2 * max
    |d logit|; so the logit magnitude plays the role of the angle in `posenc_np.testing.tolerance`:
    max_angle = 2 * max |logit| (the policy's 2 * eps32 * angle then covers 4 eps32 |logit|). Large
    ALiBi biases at long positions (|bias| ~ m * 8192) are what make this term matter.
    """
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    logits = np.abs(scale * np.einsum("...qd,...kd->...qk", q, k))
    if bias is not None:
        finite = np.where(np.isfinite(bias), np.abs(np.asarray(bias, np.float64)), 0.0)
        logits = logits + finite
    max_logit = float(logits.max()) if logits.size else 0.0
    return (tolerance(dtype, max_angle=2 * max_logit, scale=float(np.abs(v).max())),
            tolerance(dtype, max_angle=2 * max_logit))


def rope_angle_error(cos, sin, positions, rotary_dim, *, base=10000.0, scaling=None) -> float:
    """Max |angle error| (radians) of half-size cos/sin tables `[..., r/2]` against float64 angles.

    The angle is read back as `atan2(sin, cos)` (the attention scale cancels) and compared modulo
    2pi with `p * inv_freq` formed and reduced in float64. Used by the precision tests and
    benchmarks/rope_precision.py.
    """
    positions = np.asarray(positions)
    plan = rope_plan(rotary_dim, base=base, scaling=scaling)
    turns = positions.astype(np.float64)[..., None] * plan.turns_at(int(positions.max()) + 1)
    exact = (turns - np.round(turns)) * 2 * np.pi
    got = np.arctan2(np.asarray(sin, np.float64), np.asarray(cos, np.float64))
    return float(np.abs(np.angle(np.exp(1j * (got - exact)))).max())
