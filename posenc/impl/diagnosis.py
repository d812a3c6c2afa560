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
from .precision import class_tolerance, rope_kwargs, spec_rotation

__all__ = ["Diagnosis", "diagnose", "spec_variants", "DIAGNOSES"]

#: Every diagnosis a record can carry: the contract's list, and `wrapped` (positions outside a declared
#: table read rows modulo its length, as Python / torch indexing does for negative indices).
DIAGNOSES = ("positions-rounded", "layout", "offset", "base", "scaling-ignored", "longrope-factors",
             "attention-factor", "angle-precision", "partial-vs-proportional", "mrope-axes", "mrope-layout", "imrope-fourth-stream", "unrotated", "direction", "non-finite",
             "wrapped", "out-of-table", "unknown",
             # the other families' (`_family_variants`)
             "sinusoid-layout", "denominator", "slopes", "alibi-form", "antialias", "resize-grid", "align-corners",
             "cubic-a", "border", "kernel-table", "t5-direction", "transposed", "autocast", "compute-dtype",
             # the training cases' (posenc.impl.training): a backward's and the aliasing and table probes'
             "pass-through", "cotangent-layout", "in-place-unversioned", "in-place-undeclared", "cotangent-mutated",
             "upstream-gradient-corrupted", "no-gradient")
#: Bases tried for `base` besides the case's own: the common defaults.
OTHER_BASES = (10000.0, 500000.0, 1000000.0, 100000.0)


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


def _apply(x, positions, kwargs):
    import posenc_np

    return posenc_np.apply_rope(np.asarray(x, np.float64), positions, **rope_kwargs(kwargs))


def _rope_variants(x, positions, kwargs, table_rows=None, rot=None):
    """`(name, sentence, spec output)` for every applicable RoPE variant, in diagnosis order."""
    kw = rope_kwargs(kwargs)
    p = np.asarray(positions)
    if table_rows is not None and p.size and (p.min() < 0 or p.max() >= table_rows):
        yield ("wrapped", f"your outputs equal the spec at positions modulo your {table_rows}-row table "
                          "(a negative or too large index read another row)",
               lambda: _apply(x, np.mod(p, table_rows), kw))
    layout = kw.get("layout", "half")
    other = "interleaved" if layout == "half" else "half"
    yield "layout", f"your outputs equal the spec with layout={other!r}", lambda: _apply(x, positions,
                                                                                         {**kw, "layout": other})
    for delta in (1, -1):
        yield ("offset", f"your outputs equal the spec with positions {delta:+d}",
               lambda delta=delta: _apply(x, np.asarray(positions) + delta, kw))
    base = float(kw.get("base", 10000.0))
    for other_base in OTHER_BASES:
        if other_base != base:
            yield ("base", f"your outputs equal the spec with base={other_base:g} (the case's base is {base:g})",
                   lambda b=other_base: _apply(x, positions, {**kw, "base": b}))
    if kw.get("scaling") is not None:
        yield ("scaling-ignored", "your outputs equal the spec without the scaling (scaling=None)",
               lambda: _apply(x, positions, {**kw, "scaling": None}))
    yield from _longrope_variants(x, positions, kw, other)
    rot = spec_rotation(np.shape(x), positions, kw) if rot is None else rot
    s = rot.attention_scale
    if s != 1.0:
        r = 2 * len(rot.first)
        for word, factor in (("dropped", 1 / s), ("applied twice", s)):
            def scaled(factor=factor):
                out = _apply(x, positions, kw)
                out[..., :r] *= factor
                return out
            yield ("attention-factor", f"your outputs equal the spec with the attention factor {s:.6g} {word}",
                   scaled)
    dim = np.shape(x)[-1]
    r = 2 * len(rot.first)
    if r < dim:
        yield ("partial-vs-proportional",
               f"your outputs equal the spec with frequencies base^(-2j/{dim}) (the head dim) instead of "
               f"base^(-2j/{r}) (the rotary dim)",
               lambda: _apply(x, positions, {**kw, "base": base ** (r / dim)}))
    if kw.get("mrope_section") is not None:
        positions_ = np.asarray(positions)
        for axis in range(positions_.shape[0]):
            yield ("mrope-axes", f"your outputs equal the spec with position axis {axis} used for every axis",
                   lambda a=axis: _apply(x, np.broadcast_to(positions_[a], positions_.shape).copy(), kw))
        interleaved = bool(kw.get("mrope_interleaved", False))
        if interleaved:
            yield from _imrope_fourth_stream(x, positions, kw, rot)
        yield ("mrope-layout",
               f"your outputs equal the spec with mrope_interleaved={not interleaved} "
               f"({'contiguous' if interleaved else 'interleaved'} sections)",
               lambda: _apply(x, positions, {**kw, "mrope_interleaved": not interleaved}))

    def backwards():
        x64 = np.asarray(x, np.float64)
        out = x64.copy()
        a, b = x64[..., rot.first], x64[..., rot.second]
        out[..., rot.first] = a * rot.c + b * rot.d
        out[..., rot.second] = -a * rot.d + b * rot.c
        return out

    yield "direction", "your outputs equal the spec rotated by -theta (the opposite direction)", backwards


def _imrope_fourth_stream(x, positions, kw, rot):
    """`imrope-fourth-stream`: ggml's IMROPE takes axis `a` for pair `j` only while `j % 3 == a` and
    `j < 3 s_a`; every other pair reads a 4th position stream, which llama.cpp sets to 0 for text, so those
    pairs keep their input (times the attention factor) where HF's Qwen3-VL turns them by the temporal id."""
    sections = kw["mrope_section"]
    if np.isscalar(sections) or len(sections) != 3:
        return
    j = np.arange(len(rot.first))
    fall = np.zeros(j.shape, bool)
    for axis, size in enumerate(sections):
        fall |= (j % 3 == axis) & (j >= 3 * int(size))
    if not fall.any():
        return

    def unturned():
        out, x64 = _apply(x, positions, kw), np.asarray(x, np.float64)
        for channels in (rot.first[fall], rot.second[fall]):
            out[..., channels] = rot.attention_scale * x64[..., channels]
        return out

    pairs = f"pair{'s' if fall.sum() > 1 else ''} {', '.join(map(str, j[fall]))}"
    yield ("imrope-fourth-stream", f"your outputs equal the spec with {pairs} unturned: a 4th position stream of "
                                   "0 (ggml's IMROPE), where HF turns them by the temporal id", unturned)


def _longrope_variants(x, positions, kw, other_layout):
    """`longrope-factors`: LongRoPE's long factors at every position, where HF reads the short ones up to
    `original_max_position_embeddings` (mlx-lm's `SuScaledRoPE`, vLLM when `max_model_len` exceeds it): the
    spec's `mlx-longrope` rule; alone, and with the other layout too (SuScaledRoPE also drops `traditional`)."""
    scaling = kw.get("scaling")
    if not isinstance(scaling, dict) or scaling.get("rope_type", scaling.get("type")) != "longrope":
        return
    keys = ("long_factor", "short_factor", "factor", "original_max_position_embeddings")
    always_long = {"rope_type": "mlx-longrope", **{k: scaling[k] for k in keys if k in scaling}}
    sentence = ("your outputs equal the spec with LongRoPE's long factors at every position, where HF reads the short "
                "ones up to original_max_position_embeddings (scaling 'mlx-longrope')")
    yield "longrope-factors", sentence, lambda: _apply(x, positions, {**kw, "scaling": always_long})
    yield ("longrope-factors", f"{sentence} and layout={other_layout!r}",
           lambda: _apply(x, positions, {**kw, "scaling": always_long, "layout": other_layout}))


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
        variants = itertools.chain(_rounded_positions_variant(lambda p: _apply(x, p, kwargs), positions, dtype),
                                   _rope_variants(x, positions, kwargs, table_rows, rotation))
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
