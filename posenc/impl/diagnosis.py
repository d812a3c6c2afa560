"""Naming the known mismatch a failing output matches (docs/impl.md, "Diagnosis").

Each candidate re-runs the float64 spec with one variant of the case (another layout, positions off by
one, another base, the scaling dropped, ...) and asks whether the implementation's output equals that
within the record's own tolerance. The first candidate that matches names the failure; `unrotated`,
`non-finite` and `out-of-table` are read from the output itself (any row returned as its input, any
non-finite value where the spec has a number, rows wrong only at positions outside the table), and
`angle-precision` from the output passing under a float32-angle bound.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from posenc_np.testing import Tolerance, compare

from .angle_diagnosis import ANGLE_PRECISION_FACTOR, angles_in_dtype, sinusoid_angles_in_float32
from .family_diagnosis import family_variants
from .precision import class_tolerance, spec_rotation
from .rope_diagnosis import OTHER_BASES, apply_spec_rope, rope_variants

__all__ = ["Diagnosis", "diagnose", "spec_variants", "DIAGNOSES"]

#: Every diagnosis a record can carry: the contract's list, and `wrapped` (positions outside a declared
#: table read rows modulo its length, as Python / torch indexing does for negative indices).
DIAGNOSES = ("positions-rounded", "layout", "offset", "base", "scaling-ignored", "longrope-factors",
             "attention-factor", "angle-precision", "partial-vs-proportional", "mrope-axes", "mrope-layout",
             "imrope-fourth-stream", "unrotated", "direction", "non-finite", "wrapped", "out-of-table", "unknown",
             # the other families' (`_family_variants`)
             "sinusoid-layout", "denominator", "slopes", "alibi-form", "antialias", "resize-grid", "align-corners",
             "cubic-a", "border", "kernel-table", "t5-direction", "transposed", "autocast", "compute-dtype",
             # the training cases' (posenc.impl.training): a backward's and the aliasing and table probes'
             "pass-through", "cotangent-layout", "in-place-unversioned", "in-place-undeclared", "cotangent-mutated",
             "upstream-gradient-corrupted", "no-gradient")


@dataclass(frozen=True)
class Diagnosis:
    name: str
    sentence: str


def _outputs(actual):
    return list(actual) if isinstance(actual, (tuple, list)) else [actual]


def _equals(actual, variant, tol: Tolerance) -> bool:
    return all(compare(np.asarray(a, np.float64), variant, tol).passed for a in _outputs(actual))


def _nonfinite(actual, desired) -> str | None:
    for a in _outputs(actual):
        a = np.asarray(a, np.float64)
        if a.shape != desired.shape:
            continue
        bad = ~np.isfinite(a) & np.isfinite(desired)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            return (f"your outputs hold {int(bad.sum())} non-finite values where the spec has numbers "
                    f"(first at index {where})")
    return None


def _unrotated_rows(actual, desired, x, tol: Tolerance, rot) -> str | None:
    """Rows (the last axis) returned equal to the input where the spec turns them (some pair's angle has
    |sin| > 1e-3: a row at angle 0 that only lacks the attention scale is not "unrotated")."""
    x = np.asarray(x, np.float64)
    turned = np.any(np.abs(rot.d) > 1e-3 * max(rot.attention_scale, 1e-300), axis=-1)
    for a in _outputs(actual):
        a = np.asarray(a, np.float64)
        if a.shape != x.shape:
            continue
        same = np.all(np.abs(a - x) <= tol.atol, axis=-1)
        moved = np.any(np.abs(desired - x) > tol.atol, axis=-1) & turned
        rows = same & moved
        if rows.any():
            first = tuple(int(i) for i in np.argwhere(rows)[0])
            return (f"your outputs return {int(rows.sum())} of {rows.size} rows unrotated (equal to the input "
                    f"where the spec rotates them; first at index {first})")
    return None


def _out_of_table_rows(actual, desired, tol: Tolerance, rot, table_rows) -> str | None:
    """Rows wrong only where the position lies outside the table (below 0, or at or past a declared
    `table_rows`), every other row right: a kernel that indexes its cos/sin table unchecked reads whatever
    memory lies there (finite garbage; `wrapped`, `unrotated` and `non-finite` name the other outcomes)."""
    row_positions = rot.positions[..., 0]
    outside = (row_positions < 0) | (row_positions >= table_rows if table_rows else False)
    if not outside.any():
        return None
    for a in _outputs(actual):
        a = np.asarray(a, np.float64)
        if a.shape != desired.shape:
            continue
        wrong = np.any(~(np.abs(a - desired) <= tol.atol), axis=-1)
        if wrong.any() and not (wrong & ~outside).any():
            where = "below 0" + (f" or at or past row {table_rows}" if table_rows else "")
            first = int(row_positions[wrong].flat[0])
            return (f"your outputs are wrong only at the {int(wrong.sum())} rows whose positions lie outside the "
                    f"table ({where}; first at position {first}), and right everywhere else: the rows read "
                    "memory outside the cos/sin table (neither wrapped nor unrotated)")
    return None


def _positions_index(args):
    """The index of a case's positions among its arguments: the first integer array, else the first float
    array of a function whose first argument is positions (a float sinusoid's timesteps)."""
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray) and a.dtype.kind in "iu":
            return i
    return 0 if args and isinstance(args[0], np.ndarray) and args[0].ndim <= 2 else None


def _rounded_positions_variant(compute, positions, dtype):
    """`positions-rounded`: the spec at the positions rounded to the compute dtype (bfloat16 keeps 8 significant
    bits: 257 becomes 256; float16 11: 2049 becomes 2048), as an implementation that casts its positions or
    timesteps to the model's dtype before forming angles computes."""
    from posenc_np.backend import dtype_name, numpy_dtype

    name = dtype_name(dtype)
    p = np.asarray(positions)
    if name not in ("bfloat16", "float16") or not p.size:
        return
    rounded = p.astype(np.float64).astype(numpy_dtype(name)).astype(np.float64)
    if np.array_equal(rounded, p.astype(np.float64)):
        return
    rounded = rounded.astype(p.dtype) if p.dtype.kind in "iu" else rounded
    yield ("positions-rounded", f"your outputs equal the spec at the positions rounded to {name} (largest "
                                f"position {float(np.abs(p).max()):g}; {name} spaces integers "
                                f"{'2 apart past 256' if name == 'bfloat16' else '2 apart past 2048'})",
           lambda: compute(rounded))


def _all_positions_rounded(args, index, rounded, dtype):
    """`args` with `rounded` at `index` and every other integer position array (ALiBi's and T5's key positions)
    rounded to `dtype` as well: an implementation that casts positions casts both."""
    from posenc_np.backend import numpy_dtype

    out = list(args)
    for i, a in enumerate(args):
        if i == index:
            out[i] = rounded
        elif isinstance(a, np.ndarray) and a.dtype.kind in "iu" and a.size:
            out[i] = a.astype(np.float64).astype(numpy_dtype(dtype)).astype(np.float64).astype(a.dtype)
    return out


def _generic_variants(fn, args, kwargs):
    """Variants for non-RoPE encodings: positions off by one (the first integer array), another base, layout."""
    index = next((i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind in "iu"), None)
    if index is not None:
        for delta in (1, -1):
            def shifted(delta=delta):
                moved = list(args)
                moved[index] = args[index] + delta
                return fn(*moved, **kwargs)
            yield "offset", f"your outputs equal the spec with positions {delta:+d}", shifted
    if "base" in kwargs:
        for other_base in OTHER_BASES:
            if other_base != kwargs["base"]:
                yield ("base", f"your outputs equal the spec with base={other_base:g}",
                       lambda b=other_base: fn(*args, **{**kwargs, "base": b}))


def _variant_tolerance(name, tol: Tolerance, desired, table_rows) -> Tolerance:
    """`tol`, and for `wrapped` also the float32 angle term of the table's last row (the rows read are
    there, not at the case's positions)."""
    if name != "wrapped" or not table_rows:
        return tol
    scale = float(np.abs(desired).max()) if np.size(desired) else 1.0
    return Tolerance(tol.atol + 2 * 2.0**-23 * table_rows * scale * np.sqrt(2), tol.why + " + float32 angles at the table's end")


def spec_variants(spec_fn, encoding, args, kwargs, dtype):
    """`(name, sentence, build)` of every variant of one non-RoPE contract call `spec_fn(*args, **kwargs)`:
    its positions rounded to `dtype`, the family's named variants, positions off by one, another base."""
    plain = {k: v for k, v in kwargs.items() if k != "dtype"}
    index = _positions_index(args)
    rounded = () if index is None else _rounded_positions_variant(
        lambda p: spec_fn(*_all_positions_rounded(args, index, p, dtype), **plain), args[index], dtype)
    return itertools.chain(rounded, family_variants(encoding, spec_fn, args, plain, dtype=dtype),
                           _generic_variants(spec_fn, args, plain))


def diagnose(actual, desired, tol: Tolerance, *, encoding, args, kwargs, dtype, spec_fn=None,
             table_rows: int | None = None, rotation=None, composite=None) -> Diagnosis:
    """The known mismatch a failing output matches (see the module docstring), or `unknown`.

    Args:
        actual: the implementation's output (an array, or a tuple of arrays each meant to equal the spec).
        desired: the spec's float64 output; `tol` the record's tolerance.
        encoding: the case's contract function; `args`, `kwargs` its inputs (float inputs in `dtype`).
        spec_fn: `(*args, **kwargs) -> array`, the spec function, for the non-RoPE variants.
        table_rows: the implementation's declared table length (`max_positions`), for `wrapped`.
        rotation: the spec's `precision.Rotation` of a RoPE case when the caller has it already.
        composite: the variants of a case built of several calls (`posenc.impl.composite`), tried when
            there is no `spec_fn`.
    """
    desired = np.asarray(desired, np.float64)
    text = _nonfinite(actual, desired)
    if text:
        return Diagnosis("non-finite", text)
    rope = encoding == "apply_rope"
    if rope:
        x, positions = args[0], args[1]
        rotation = spec_rotation(np.shape(x), positions, kwargs) if rotation is None else rotation
        text = _unrotated_rows(actual, desired, x, tol, rotation)
        if text:
            return Diagnosis("unrotated", text)
        rounded = _rounded_positions_variant(lambda p: apply_spec_rope(x, p, kwargs), positions, dtype)
        variants = itertools.chain(rounded, rope_variants(x, positions, kwargs, table_rows, rotation))
    elif spec_fn is not None:
        variants = spec_variants(spec_fn, encoding, args, kwargs, dtype)
    else:
        variants = composite or ()
    for name, sentence, build in variants:
        try:
            variant = np.asarray(build(), np.float64)
        except (ValueError, TypeError):  # the variant is not a valid case (e.g. a negative position)
            continue
        if variant.shape == desired.shape and _equals(actual, variant, _variant_tolerance(name, tol, desired,
                                                                                        table_rows)):
            return Diagnosis(name, sentence)
    if rope:
        text = _out_of_table_rows(actual, desired, tol, rotation, table_rows)
        if text:
            return Diagnosis("out-of-table", text)
        loose = class_tolerance("float32", desired, dtype, args[0], args[1], kwargs,
                                angle_factor=ANGLE_PRECISION_FACTOR, rot=rotation)
        if loose.atol > tol.atol and _equals(actual, desired, loose):
            return Diagnosis("angle-precision", "your outputs are within a float32-angle bound "
                                                f"({loose.atol:.3g}) of the spec: angles formed in a lower "
                                                "precision, the error grows with the position")
    found = (angles_in_dtype(actual, desired, tol, encoding=encoding, args=args, kwargs=kwargs, dtype=dtype)
             or sinusoid_angles_in_float32(actual, desired, tol, encoding=encoding, args=args))
    return Diagnosis(*found) if found else Diagnosis("unknown", "your outputs match none of the known mismatches")
