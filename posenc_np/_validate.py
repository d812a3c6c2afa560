"""Validation rules and error messages, written once for every backend.

Backends call these on their Python-level arguments (dims, layouts, methods, configs) before building
any graph, so a bad argument gets the same message in NumPy, PyTorch, TensorFlow and JAX.
Array *values* (positions) are checked here for NumPy and for eager backends; under a tracer the
backends document what they do instead (see each backend's docstring).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ._dtypes import FLOAT_DTYPES

__all__ = [
    "check_choice",
    "check_positive_int",
    "check_even_dim",
    "check_positive_float",
    "check_integer_positions",
    "check_positions_in_table",
    "check_table",
    "check_real_positions",
    "check_position_axes",
    "check_traced_integer",
    "check_position_pair",
    "check_integer_dtype",
    "check_rope_input",
    "check_heads_divide",
    "check_float_dtype",
    "check_nonnegative_positions",
    "check_finite",
    "check_cu_seqlens_shape",
]


def check_choice(name: str, value, choices) -> str:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {sorted(choices)}")
    return value


def check_positive_int(name: str, value, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}={value!r} must be an integer")
    if value < minimum:
        raise ValueError(f"{name}={value!r} must be >= {minimum}")
    return int(value)


def check_even_dim(name: str, value) -> int:
    value = check_positive_int(name, value)
    if value % 2:
        raise ValueError(f"{name}={value} must be even: the encoding works on (sin, cos) pairs")
    return value


def check_positive_float(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name}={value!r} must be a finite real number")
    if value <= 0:
        raise ValueError(f"{name}={value!r} must be > 0")
    return float(value)


def check_integer_positions(name: str, positions) -> np.ndarray:
    """Positions that index something (tables, buckets) must hold integers; floats equal to integers pass."""
    positions = np.asarray(positions)
    if positions.dtype.kind in "iu":
        return positions
    if positions.dtype.kind == "b" or positions.dtype.kind not in "f":
        raise TypeError(f"{name} must be an integer array, got dtype {positions.dtype}")
    as_float = positions.astype(np.float64)
    if not np.all(np.isfinite(as_float)) or np.any(as_float != np.round(as_float)):
        bad = as_float[~(np.isfinite(as_float) & (as_float == np.round(as_float)))].ravel()[:3]
        raise ValueError(f"{name} must hold integers, got non-integer values such as {bad.tolist()}")
    return as_float.astype(np.int64)


def check_positions_in_table(name: str, positions: np.ndarray, num_rows: int) -> None:
    if positions.size and (positions.min() < 0 or positions.max() >= num_rows):
        bad = positions[(positions < 0) | (positions >= num_rows)].ravel()[:3]
        raise ValueError(
            f"{name} out of range for a table of {num_rows} rows: valid positions are 0..{num_rows - 1}, "
            f"got {bad.tolist()}"
        )


def check_table(name: str, shape, *, rows: int | None = None, cols: int | None = None) -> None:
    """A 2-D table `[rows, cols]`; `rows`/`cols` pin the expected sizes when the caller knows them."""
    shape = tuple(shape)
    if len(shape) != 2:
        raise ValueError(f"{name} must be 2-D, got shape {shape}")
    if rows is not None and shape[0] != rows:
        raise ValueError(f"{name} must have {rows} rows, got shape {shape}")
    if cols is not None and shape[1] != cols:
        raise ValueError(f"{name} must have {cols} columns, got shape {shape}")


def check_real_positions(name: str, positions) -> np.ndarray:
    """ALiBi positions may be integers or floats (interpolated positions), never bool or complex."""
    positions = np.asarray(positions)
    check_position_axes(name, positions.ndim, positions.dtype,
                        is_real=positions.dtype.kind in "iuf" or positions.dtype.name == "bfloat16")
    return positions


def check_position_axes(name: str, ndim, dtype, *, is_real: bool) -> None:
    """Positions `[..., seq]` of any array library: a real dtype (`is_real`: not bool, not complex, as
    the caller's library tells) and at least one axis (`ndim=None`: a rank not known yet passes)."""
    if not is_real:
        raise TypeError(f"{name} must be a real (integer or float) array, got dtype {dtype}")
    if ndim is not None and ndim < 1:
        raise ValueError(f"{name} must have at least one axis [..., seq], got a scalar")


def check_traced_integer(name: str, dtype, *, is_floating: bool, where: str) -> None:
    """Positions that index something, met inside a trace (`where`: "under torch.compile", "inside
    tf.function", "under jit"): their values cannot be read there, so a floating dtype is a TypeError
    (eagerly, `check_integer_positions` accepts floats holding integers)."""
    if is_floating:
        raise TypeError(f"{name} must be an integer array {where} (values cannot be checked there), got dtype {dtype}")


def check_position_pair(q_shape, k_shape) -> tuple:
    """The leading (batch) axes of `[..., q]` and `[..., k]` positions must broadcast; returns them."""
    try:
        return np.broadcast_shapes(tuple(q_shape)[:-1], tuple(k_shape)[:-1])
    except ValueError:
        raise ValueError(f"q_positions {tuple(q_shape)} and k_positions {tuple(k_shape)}: leading axes "
                         f"{tuple(q_shape)[:-1]} and {tuple(k_shape)[:-1]} do not broadcast") from None


def check_integer_dtype(name: str, dtype, is_integer: bool) -> None:
    """A backend tensor that indexes or counts (positions) must have an integer dtype: its values may
    not be readable (traced), so the dtype is what can be checked. A float dtype is a ValueError (the
    spec's class for float positions that are not integers); bool or complex a TypeError, as in the spec
    (`check_integer_positions`)."""
    if not is_integer:
        floating = any(word in str(dtype) for word in ("float", "half", "double"))
        raise (ValueError if floating else TypeError)(f"{name} must be an integer array, got dtype {dtype}")


def check_rope_input(x_dim: int, rotary_dim: int, head_dim: int | None = None) -> None:
    """`x`'s last axis against a RoPE module's `head_dim` (when it was built with one) and `rotary_dim`."""
    if head_dim is not None and x_dim != head_dim:
        raise ValueError(f"x has {x_dim} channels, this RotaryEmbedding was built for head_dim={head_dim}")
    if rotary_dim > x_dim:
        raise ValueError(f"rotary_dim={rotary_dim} is larger than the head dim {x_dim}")


def check_heads_divide(num_heads, rows: int) -> int:
    """`num_heads` must divide a `[num_heads * head_dim, ...]` weight's first axis; returns `head_dim`."""
    if isinstance(num_heads, bool) or not isinstance(num_heads, numbers.Integral) or num_heads < 1 \
            or rows % num_heads:
        raise ValueError(f"num_heads={num_heads} does not divide the weight's first axis {rows}")
    return rows // int(num_heads)


def check_float_dtype(name: str, dtype, is_floating: bool | None = None) -> None:
    """An array that is rotated, scaled or added to (`x`, `q`, `k`, `query`...) must have a float dtype.

    An integer or bool one is a TypeError everywhere: the spec would compute in float64 and return
    floats, a backend would round its float32 result back to the integer dtype, and the two cannot agree,
    so neither guesses (docs/api.md §1). `is_floating`: the backend's own test of its dtype (a framework
    dtype is checked, not values, so eager and jit agree); None: NumPy's, one of `FLOAT_DTYPES`."""
    if is_floating is None:
        is_floating = np.dtype(dtype).name in FLOAT_DTYPES
    if not is_floating:
        raise TypeError(f"{name} must be a float array ({', '.join(FLOAT_DTYPES)}), got dtype {dtype}")


def check_nonnegative_positions(name: str, positions) -> None:
    """Positions that count tokens from the start (a position is never negative there); eager values only."""
    positions = np.asarray(positions)
    if positions.size and positions.min() < 0:
        raise ValueError(f"{name} must be >= 0, got negative values such as {positions[positions < 0].ravel()[:3].tolist()}")


def check_finite(name: str, values) -> None:
    """A float array whose NaN/inf would have no defined meaning (e.g. random noise that is sorted)."""
    values = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name} must be finite, got values such as {values[~np.isfinite(values)].ravel()[:3].tolist()}")


def check_cu_seqlens_shape(shape, name: str = "cu_seqlens") -> None:
    """`cu_seqlens` is `[num_docs + 1]` cumulative lengths, one axis of at least 2 entries, in every package
    (a shape, so backends check it under jit too; the dtype is checked before it, the values after)."""
    shape = tuple(shape)
    if len(shape) != 1 or (shape[0] is not None and shape[0] < 2):
        raise ValueError(f"{name} must be a 1-D array [0, n1, n1+n2, ..., total] with at least 2 entries, "
                         f"got shape {shape}")
