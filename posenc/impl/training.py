"""What a training step needs from a RoPE implementation, stated by the float64 spec: the backward pass
(the transposed rotation), the gradients of the tables a kernel is fed, and the diagnoses of a backward
that is wrong (docs/impl.md, "Training-time semantics").

RoPE is linear in `x`: per rotated pair `y_a = a c - b d`, `y_b = a d + b c` with `c = s cos t`,
`d = s sin t` (s the attention factor), so the gradient of `<y, w>` is the rotation by `-t`:
`g_a = w_a c + w_b d`, `g_b = -w_a d + w_b c`, and the pass-through channels get `w` unchanged. A kernel
with transformers' signature `y = x cos + rotate(x) sin` (tables `[batch, seq, r]` broadcast over heads)
has table gradients `d<y, w>/dcos = sum_heads w x` and `d<y, w>/dsin = sum_heads w rotate(x)`; a kernel fed
per-channel angles `F` (Transformer Engine's and Megatron's `freqs [s, 1, 1, r]`: `y = x cos F + rotate(x) sin F`)
has `d<y, w>/dF = sum_(batch, heads) w (rotate(x) cos F - x sin F)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posenc_np.testing import Tolerance, compare

from .precision import Rotation, rope_kwargs, spec_rotation

__all__ = ["rope_backward", "rotate_table_half", "table_gradients", "angle_gradients", "diagnose_backward", "BACKWARD_DIAGNOSES",
           "TRAINING_DIAGNOSES", "BackwardDiagnosis"]

#: what a wrong backward can be named, besides the forward's names
BACKWARD_DIAGNOSES = ("offset", "direction", "layout", "unrotated", "pass-through", "cotangent-layout")
#: what the aliasing and table-gradient cases name
TRAINING_DIAGNOSES = ("in-place-unversioned", "in-place-undeclared", "cotangent-mutated",
                      "upstream-gradient-corrupted", "no-gradient")


@dataclass(frozen=True)
class BackwardDiagnosis:
    name: str
    sentence: str


def rope_backward(cotangent, x_shape, positions, kwargs, *, rot: Rotation | None = None) -> np.ndarray:
    """float64 gradient of `<apply_rope(x, positions, **kwargs), cotangent>` with respect to `x`."""
    w = np.asarray(cotangent, np.float64)
    rot = spec_rotation(x_shape, positions, kwargs) if rot is None else rot
    grad = w.copy()  # the pass-through channels
    wa, wb = w[..., rot.first], w[..., rot.second]
    grad[..., rot.first] = wa * rot.c + wb * rot.d
    grad[..., rot.second] = -wa * rot.d + wb * rot.c
    return grad


def _forward_rotation(w, rot: Rotation) -> np.ndarray:
    out = np.asarray(w, np.float64).copy()
    wa, wb = out[..., rot.first], out[..., rot.second]
    out[..., rot.first] = wa * rot.c - wb * rot.d
    out[..., rot.second] = wa * rot.d + wb * rot.c
    return out


def rotate_table_half(x, layout: str) -> np.ndarray:
    """transformers' `rotate_half` (`layout="half"`: `[-x2, x1]`) or `rotate_every_two` (interleaved:
    `(-x_{2j+1}, x_{2j})`) of the last axis."""
    x = np.asarray(x, np.float64)
    if layout == "half":
        half = x.shape[-1] // 2
        return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    return out


def table_gradients(pairs, layout: str, heads_axis: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 `(d/dcos, d/dsin)` of `sum <x cos + rotate(x) sin, w>` over `pairs` of `(x, w)` (q and k),
    the tables `[batch, seq, r]` broadcast over `heads_axis` of x."""
    dcos = sum(np.sum(np.asarray(w, np.float64) * np.asarray(x, np.float64), axis=heads_axis) for x, w in pairs)
    dsin = sum(np.sum(np.asarray(w, np.float64) * rotate_table_half(x, layout), axis=heads_axis) for x, w in pairs)
    return dcos, dsin


def angle_gradients(x, w, freqs, layout: str) -> np.ndarray:
    """float64 `d/dF` of `<x cos F + rotate(x) sin F, w>` for `x`, `w` `[s, b, h, r]` and per-channel angles
    `freqs [s, 1, 1, r]` broadcast over batch and heads (the gradient has the table's shape)."""
    x, w, f = (np.asarray(a, np.float64) for a in (x, w, freqs))
    per_element = w * (rotate_table_half(x, layout) * np.cos(f) - x * np.sin(f))
    return per_element.sum(axis=(1, 2), keepdims=True)


def _backward_variants(w, x_shape, positions, kwargs, rot: Rotation):
    kw = rope_kwargs(kwargs)
    p = np.asarray(positions)
    for delta in (1, -1):
        yield ("offset", f"your gradient equals the spec's backward with positions {delta:+d}",
               lambda delta=delta: rope_backward(w, x_shape, p + delta, kw))
    if p.ndim >= 1 and p.shape[-1] > 1 and np.any(p.min(axis=-1) != 0):
        yield ("offset", "your gradient equals the spec's backward with every row starting at position 0 "
                         "(the backward ignores the offsets)",
               lambda: rope_backward(w, x_shape, p - p.min(axis=-1, keepdims=True), kw))
    yield ("direction", "your gradient equals the forward rotation of the cotangent (by +theta, not -theta)",
           lambda: _forward_rotation(w, rot))
    other = "interleaved" if kw.get("layout", "half") == "half" else "half"
    yield ("layout", f"your gradient equals the spec's backward with layout={other!r}",
           lambda: rope_backward(w, x_shape, p, {**kw, "layout": other}))
    # an in-place kernel with no autograd formula: autograd sees the copy before it, not the rotation
    yield ("unrotated", "your gradient equals the cotangent unrotated: the rotation is invisible to autograd "
                        "(an in-place kernel without a backward)", lambda: np.asarray(w, np.float64).copy())


def diagnose_backward(grad, desired, tol: Tolerance, *, cotangent, x_shape, positions, kwargs,
                      rot: Rotation) -> BackwardDiagnosis:
    """The known mismatch a failing gradient matches: positions off or offsets ignored, the rotation's
    direction, the layout, or the pass-through channels written (the rotated ones right)."""
    grad = np.asarray(grad, np.float64)
    for name, sentence, build in _backward_variants(cotangent, x_shape, positions, kwargs, rot):
        variant = build()
        if variant.shape == grad.shape and compare(grad, variant, tol).passed:
            return BackwardDiagnosis(name, sentence)
    rotated = np.zeros(grad.shape[-1], bool)
    rotated[rot.first], rotated[rot.second] = True, True
    if (~rotated).any() and compare(grad[..., rotated], desired[..., rotated], tol).passed:
        return BackwardDiagnosis("pass-through", "your gradient is right in the rotated channels and wrong in the "
                                                 "pass-through channels (they must receive the cotangent as it is)")
    return BackwardDiagnosis("unknown", "your gradient matches none of the known mismatches")
