"""The one judge of an implementation's output: tolerance, comparison, worst angle and diagnosis.

`Expected` holds the spec's answer to one case input, computed once per (case, dtype) and shared by every
implementation judged on it; for RoPE it also holds the spec's per-pair rotation (`precision.Rotation`),
computed once and handed to the precision class's tolerance, the angle error and the diagnosis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from posenc_np.backend import is_float
from posenc_np.testing import Tolerance, compare

from .composite import composite_variants
from .diagnosis import diagnose
from .precision import Rotation, angle_error, class_tolerance, spec_rotation

__all__ = ["Expected", "judge", "as_float64", "float64_inputs", "outputs_for"]


def as_float64(out) -> np.ndarray:
    """An output as one float64 array (a tuple of outputs flattened and concatenated)."""
    if isinstance(out, (tuple, list)):
        return np.concatenate([np.asarray(o, np.float64).ravel() for o in out])
    return np.asarray(out, np.float64)


def float64_inputs(args, kwargs) -> tuple[tuple, dict]:
    """A case's inputs as the spec takes them: float arrays upcast to float64, no `dtype=` keyword."""
    args64 = tuple(a.astype(np.float64) if isinstance(a, np.ndarray) and is_float(a) else a for a in args)
    return args64, {k: (None if k == "dtype" else v) for k, v in kwargs.items()}


def outputs_for(out, desired) -> list[np.ndarray]:
    """The implementation's outputs, each to be compared with the spec's: a tuple of arrays shaped like a
    single-array spec result (a rotary kernel's q and k) is compared array by array."""
    if isinstance(out, (tuple, list)) and not isinstance(desired, (tuple, list)):
        return [np.asarray(o, np.float64) for o in out]
    return [as_float64(out)]


@dataclass
class Expected:
    """The spec's answer to one case input (float inputs in the case's dtype).

    Attributes:
        encoding: the contract function the case checks ("apply_rope", ...).
        rope: whether the case is a plain `apply_rope(x, positions, **kwargs)` call, judged pair by pair.
        spec_fn: `(*args64, **kwargs64) -> float64 array`, the spec function the non-RoPE diagnosis
            re-runs with variants; None when the case is not a single contract call.
        composite: the case's own function `(module, *args, **kwargs)` when it is built of several calls,
            which the diagnosis re-runs with one call's variant in place (`posenc.impl.composite`).
    """

    encoding: str
    args: tuple
    kwargs: dict
    desired: object
    tol: Tolerance
    rope: bool = False
    spec_fn: Callable | None = None
    composite: Callable | None = None
    _rotation: Rotation | None = field(default=None, repr=False)

    @property
    def desired64(self) -> np.ndarray:
        return as_float64(self.desired)

    @property
    def rotation(self) -> Rotation:
        """The spec's rotation of the case's `x` (RoPE cases), computed on first use."""
        if self._rotation is None:
            self._rotation = spec_rotation(np.shape(self.args[0]), self.args[1], self.kwargs)
        return self._rotation


def judge(impl, expected: Expected, out, *, dtype: str) -> dict:
    """The record fields of `impl`'s output `out` for `expected` in `dtype`: status, error, tolerance and,
    for RoPE, the worst angle error; a failure's diagnosis.

    Raises:
        TypeError, ValueError: `out` is not an array of numbers shaped like the spec's output (the caller
            records that as the implementation's error).
    """
    desired64 = expected.desired64
    args, kwargs = expected.args, expected.kwargs
    tol = (class_tolerance(impl.angles, desired64, dtype, args[0], args[1], kwargs, rot=expected.rotation)
           if expected.rope else expected.tol)
    outputs = outputs_for(out, expected.desired)
    results = [compare(o, desired64, tol) for o in outputs]
    result = max(results, key=lambda r: (not r.passed, r.err_in_tol))
    fields = dict(max_abs_err=result.max_abs_err, err_in_tol=result.err_in_tol, worst_index=list(result.worst_index),
                  tol=result.atol, tol_why=result.tol_why, message=result.message)
    if expected.rope:
        angles = [e for e in (angle_error(o, desired64, np.shape(args[0]), args[1], kwargs, rot=expected.rotation)
                              for o in outputs if o.shape == desired64.shape) if e is not None]
        if angles:
            worst = max(angles, key=lambda e: e.radians)
            fields.update(worst_angle_err=worst.radians, worst_angle_position=worst.position,
                          worst_angle_index=list(worst.index))
    passed = all(r.passed for r in results)
    fields["status"] = "pass" if passed else "fail"
    if not passed:
        found = _diagnose(expected, outputs, desired64, tol, dtype, impl.max_positions)
        fields.update(diagnosis=found.name, diagnosis_detail=found.sentence)
    return fields


def _diagnose(expected: Expected, outputs, desired64, tol, dtype, table_rows):
    if expected.rope:
        return diagnose(outputs, desired64, tol, encoding="apply_rope", args=expected.args, kwargs=expected.kwargs,
                        dtype=dtype, table_rows=table_rows, rotation=expected.rotation)
    args64, kwargs64 = float64_inputs(expected.args, expected.kwargs)
    spec_fn = expected.spec_fn
    composite = (None if spec_fn is not None or expected.composite is None
                 else composite_variants(expected.composite, args64, kwargs64, dtype))
    return diagnose(outputs, desired64, tol, encoding=expected.encoding, args=args64, kwargs=kwargs64, dtype=dtype,
                    spec_fn=None if spec_fn is None else (lambda *a, **k: as_float64(spec_fn(*a, **k))),
                    composite=composite)
