"""The RoPE variants `diagnose` tries (docs/impl.md, "Diagnosis"): each re-runs the float64 spec with one
change to the case (another layout, positions off by one, another base, the scaling dropped, LongRoPE's long
factors, ggml's IMROPE fourth stream, ...)."""

from __future__ import annotations

import numpy as np

from .precision import rope_kwargs, spec_rotation

__all__ = ["OTHER_BASES", "apply_spec_rope", "rope_variants"]

#: Bases tried for `base` besides the case's own: the common defaults.
OTHER_BASES = (10000.0, 500000.0, 1000000.0, 100000.0)


def apply_spec_rope(x, positions, kwargs):
    """The float64 spec's `apply_rope(x, positions, **kwargs)` (the RoPE keywords of `kwargs` only)."""
    import posenc_np

    return posenc_np.apply_rope(np.asarray(x, np.float64), positions, **rope_kwargs(kwargs))


def rope_variants(x, positions, kwargs, table_rows=None, rot=None):
    """`(name, sentence, spec output)` for every applicable RoPE variant, in diagnosis order."""
    kw = rope_kwargs(kwargs)
    p = np.asarray(positions)
    if table_rows is not None and p.size and (p.min() < 0 or p.max() >= table_rows):
        yield ("wrapped", f"your outputs equal the spec at positions modulo your {table_rows}-row table "
                          "(a negative or too large index read another row)",
               lambda: apply_spec_rope(x, np.mod(p, table_rows), kw))
    layout = kw.get("layout", "half")
    other = "interleaved" if layout == "half" else "half"
    yield ("layout", f"your outputs equal the spec with layout={other!r}",
           lambda: apply_spec_rope(x, positions, {**kw, "layout": other}))
    for delta in (1, -1):
        yield ("offset", f"your outputs equal the spec with positions {delta:+d}",
               lambda delta=delta: apply_spec_rope(x, np.asarray(positions) + delta, kw))
    base = float(kw.get("base", 10000.0))
    for other_base in OTHER_BASES:
        if other_base != base:
            yield ("base", f"your outputs equal the spec with base={other_base:g} (the case's base is {base:g})",
                   lambda b=other_base: apply_spec_rope(x, positions, {**kw, "base": b}))
    if kw.get("scaling") is not None:
        yield ("scaling-ignored", "your outputs equal the spec without the scaling (scaling=None)",
               lambda: apply_spec_rope(x, positions, {**kw, "scaling": None}))
    yield from _longrope_variants(x, positions, kw, other)
    rot = spec_rotation(np.shape(x), positions, kw) if rot is None else rot
    s = rot.attention_scale
    if s != 1.0:
        r = 2 * len(rot.first)
        for word, factor in (("dropped", 1 / s), ("applied twice", s)):
            def scaled(factor=factor):
                out = apply_spec_rope(x, positions, kw)
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
               lambda: apply_spec_rope(x, positions, {**kw, "base": base ** (r / dim)}))
    if kw.get("mrope_section") is not None:
        positions_ = np.asarray(positions)
        for axis in range(positions_.shape[0]):
            yield ("mrope-axes", f"your outputs equal the spec with position axis {axis} used for every axis",
                   lambda a=axis: apply_spec_rope(x, np.broadcast_to(positions_[a], positions_.shape).copy(), kw))
        interleaved = bool(kw.get("mrope_interleaved", False))
        if interleaved:
            yield from _imrope_fourth_stream(x, positions, kw, rot)
        yield ("mrope-layout",
               f"your outputs equal the spec with mrope_interleaved={not interleaved} "
               f"({'contiguous' if interleaved else 'interleaved'} sections)",
               lambda: apply_spec_rope(x, positions, {**kw, "mrope_interleaved": not interleaved}))

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
        out, x64 = apply_spec_rope(x, positions, kw), np.asarray(x, np.float64)
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
    yield "longrope-factors", sentence, lambda: apply_spec_rope(x, positions, {**kw, "scaling": always_long})
    yield ("longrope-factors", f"{sentence} and layout={other_layout!r}",
           lambda: apply_spec_rope(x, positions, {**kw, "scaling": always_long, "layout": other_layout}))
