"""`angle-precision` read from the output itself, for the sinusoids and RoPE (docs/impl.md, "Diagnosis"): the
output within a bound of angles formed in float32 with more rounding, or formed in the case's half-precision
dtype, when no variant of the spec matched it."""

from __future__ import annotations

import numpy as np

from posenc_np.testing import Tolerance, compare

__all__ = ["sinusoid_angles_in_float32", "angles_in_dtype", "float32_frequency_variant", "ANGLE_PRECISION_FACTOR"]

#: The float32 angle bound times this still counts as `angle-precision` (an iterative or exp/log angle
#: formation is a few times a single product's error; a wrong frequency is orders of magnitude off).
ANGLE_PRECISION_FACTOR = 16.0


def _equals(actual, variant, tol: Tolerance) -> bool:
    outputs = list(actual) if isinstance(actual, (tuple, list)) else [actual]
    return all(compare(np.asarray(a, np.float64), variant, tol).passed for a in outputs)


def _float32_exp_log_sinusoid(positions, dim, *, base=10000.0, layout="interleaved", denominator="dim"):
    """The sinusoid with its frequencies formed in float32 as an exp of a log and its angles as a float32
    product, sin and cos then exact: `half-1` as mlx 0.32 `nn.SinusoidalPositionalEncoding` does
    (nn/layers/positional_encoding.py: `exp((1 - i/(h-1)) (ln max - ln min) + ln min)`, min = 1/base, max = 1),
    `dim` as fairseq / tensor2tensor do (`exp(i * -(ln base * 2/dim))`), every step rounded to float32."""
    f32 = np.float32
    half = int(dim) // 2
    i = np.arange(half, dtype=f32)
    if denominator == "half-1":
        one_zero = (f32(1) - i / f32(max(half - 1, 1))) if half > 1 else np.ones(1, f32)
        low = f32(np.log(1.0 / float(base)))
        frequency = np.exp((one_zero * (f32(0) - low) + low).astype(f32)).astype(f32)
    else:
        frequency = np.exp((i * f32(-np.log(float(base)) * 2.0 / float(dim))).astype(f32)).astype(f32)
    angle = (np.asarray(positions, f32)[..., None] * frequency).astype(f32).astype(np.float64)
    sin, cos = np.sin(angle), np.cos(angle)
    if layout == "interleaved":
        return np.stack([sin, cos], -1).reshape(*angle.shape[:-1], 2 * half)
    return np.concatenate([sin, cos] if layout == "concat" else [cos, sin], -1)


def float32_frequency_variant(encoding, args, kwargs):
    """`angle-precision` as a variant of a 1-D sinusoid: `_float32_exp_log_sinusoid`, judged within the record's
    own tolerance (float32 exps differ by an ulp between libraries: 2^-24 x 2^20 = 0.06 rad at the longest
    positions, inside the 0.25 the case allows, where the spec's float64 frequencies are 0.27 off)."""
    if encoding != "sinusoidal" or len(args) != 2 or not np.size(args[0]):
        return
    kw = {k: v for k, v in kwargs.items() if k in ("base", "layout", "denominator")}
    yield ("angle-precision", "your outputs equal the spec with the frequencies formed in float32 as an exp of a "
                              "log and the angles as a float32 product (mlx's SinusoidalPositionalEncoding, "
                              "fairseq): the error grows with the position",
           lambda: _float32_exp_log_sinusoid(args[0], args[1], **kw))


def sinusoid_angles_in_float32(actual, desired, tol, *, encoding, args) -> tuple | None:
    """`(name, sentence)` of `angle-precision` for a sinusoid whose float32 frequencies carry an exp/log's
    rounding: within k x the float32 angle term `2 u t_max`, k = 2, 4, then `ANGLE_PRECISION_FACTOR`, each
    tried only while its allowance stays under 1 rad (past it any bounded output would match): the largest
    positions (2^20) are named at k = 2 and no looser."""
    if encoding not in ("sinusoidal", "sinusoidal_2d") or not np.size(args[0]):
        return None
    t_max = float(np.abs(np.asarray(args[0], np.float64)).max())  # the highest frequency is 1 rad per position
    scale = float(np.abs(desired).max()) if desired.size else 1.0
    for factor in (2.0, 4.0, ANGLE_PRECISION_FACTOR):
        allowance = factor * 2 * 2.0**-24 * t_max
        if not 0 < allowance < 1.0:
            return None
        loose = Tolerance(tol.atol + allowance * scale, f"float32 angles x {factor:g}")
        if _equals(actual, desired, loose):
            return ("angle-precision", f"your outputs are within {loose.atol:.3g} of the spec, {factor:g} times "
                                       "the float32 angle bound: frequencies formed with more rounding (an exp "
                                       "of a log, a linspace), the error growing with the position")
    return None


def angles_in_dtype(actual, desired, tol, *, encoding, args, kwargs, dtype) -> tuple | None:
    """`(name, sentence)` of `angle-precision` for angles formed in a half-precision dtype: the output is within
    `scale (4 u t_max + 2 u)` of the spec (position, frequency and product each rounded, then the result),
    judged only while that angle allowance `4 u t_max` stays under 1 rad (past it any bounded output would
    match)."""
    from posenc_np.backend import dtype_name

    from .precision import UNIT_ROUNDOFF, max_angle

    name = dtype_name(dtype)
    if name not in ("bfloat16", "float16") or encoding not in ("apply_rope", "sinusoidal"):
        return None
    positions = np.asarray(args[1] if encoding == "apply_rope" else args[0], np.float64)
    t_max = (max_angle(positions, kwargs, np.shape(args[0])) if encoding == "apply_rope"
             else float(np.abs(positions).max()) if positions.size else 0.0)  # sinusoid: w_0 = 1
    u = UNIT_ROUNDOFF[name]
    if not 0 < 4 * u * t_max <= 1.0:
        return None
    scale = float(np.abs(desired).max()) if desired.size else 1.0
    loose = Tolerance(scale * (4 * u * t_max + 2 * u), f"angles formed in {name}")
    if loose.atol > tol.atol and _equals(actual, desired, loose):
        return ("angle-precision", f"your outputs are within {loose.atol:.3g} of the spec, the bound of "
                                            f"angles formed in {name} (u=2^{int(np.log2(u))}, largest angle "
                                            f"{t_max:.3g} rad): the positions or angles are rounded to {name}")
    return None
