"""Rotary position embedding (RoPE): the specification (float64 NumPy).

Shapes: `x` is `[..., seq, dim]` (queries or keys, heads and batch leading); `positions` broadcasts
against `x.shape[:-1]`; `r` = `rotary_dim` (the first `r` channels rotate, the rest pass through).

Backends import the validation (`resolve_rotary_dim`, `check_rope_shapes`) and the parameter-only
numbers (`rope_plan`: inverse frequencies in turns, attention scale, the pieces that sequence-length
dependent scalings need in-graph) from here and implement only the position-dependent math.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ._dtypes import spec_output_dtype
from ._validate import (
    check_choice,
    check_even_dim,
    check_float_dtype,
    check_heads_divide,
    check_integer_positions,
    check_positive_float,
    check_rope_input,
)
from .mrope import (
    MROPE_FREQUENCIES,
    check_mrope_positions,
    mrope_axis_of_pair,
    mrope_frequency_order,
    resolve_mrope_axes,
    resolve_mrope_section,
)
from .scaling import SCALING_TYPES, dynamic_growth, resolve_scaling

__all__ = [
    "ROPE_LAYOUTS",
    "RopePlan",
    "rope_plan",
    "resolve_rotary_dim",
    "check_rope_shapes",
    "rope_frequencies",
    "rope_cos_sin",
    "apply_rope",
    "rope_permutation",
    "permute_qk_rows",
    "scaling_from_hf_config",
    "load_hf_config",
]

ROPE_LAYOUTS = ("half", "interleaved")


def resolve_rotary_dim(head_dim, rotary_dim=None, rotary_pct=None) -> int:
    """The rotated width: `rotary_dim`, or `int(head_dim * rotary_pct)` (GPT-NeoX), or all of `head_dim`.

    Raises:
        ValueError: both given, odd result, `rotary_dim > head_dim`, `rotary_pct` outside (0, 1].
    """
    if rotary_dim is not None and rotary_pct is not None:
        raise ValueError(f"rotary_dim={rotary_dim!r} and rotary_pct={rotary_pct!r} are mutually exclusive")
    if rotary_pct is not None:
        pct = check_positive_float("rotary_pct", rotary_pct)
        if pct > 1:
            raise ValueError(f"rotary_pct={rotary_pct!r} must be in (0, 1]")
        if head_dim is None:
            raise ValueError("rotary_pct needs the head dim (head_dim=, or x's last axis)")
        rotary_dim = int(head_dim * pct)
        if rotary_dim < 2 or rotary_dim % 2:
            raise ValueError(f"rotary_pct={rotary_pct!r} gives rotary_dim = int({head_dim} * {rotary_pct}) = "
                             f"{rotary_dim}, which must be even and >= 2")
    if rotary_dim is None:
        if head_dim is None:
            raise ValueError("rotary_dim is required")
        rotary_dim = head_dim
    rotary_dim = check_even_dim("rotary_dim", rotary_dim)
    if head_dim is not None:
        check_rope_input(head_dim, rotary_dim)
    return rotary_dim


def check_rope_shapes(x_shape, positions_shape) -> None:
    """`positions` must broadcast against `x.shape[:-1]` without growing it."""
    lead = tuple(x_shape[:-1])
    try:
        shape = np.broadcast_shapes(tuple(positions_shape), lead)
    except ValueError:
        shape = None
    if shape != lead:
        raise ValueError(f"positions of shape {tuple(positions_shape)} do not broadcast against x.shape[:-1] = "
                         f"{lead} (pass [batch, seq, 1] for [batch, seq, heads, dim] inputs)")


@dataclass(frozen=True)
class RopePlan:
    """Everything about RoPE that does not depend on positions, computed once in float64.

    Frequencies are stored in turns (`inv_freq / 2pi`): a backend forms `t = p * turns`, keeps its
    fractional part (exact in float64; double-float in JAX) and only then multiplies by 2pi, so the
    angle fed to cos/sin is accurate to ~1e-7 rad whatever the position.

    Attributes:
        rotary_dim, layout: as given.
        attention_scale: multiplies cos and sin (YaRN, LongRoPE), 1.0 otherwise.
        kind: "static" (frequencies fixed), or the name of a sequence-length dependent scaling type
            (`ScalingType.seq_dependent`: "dynamic", "longrope"); see `seq_dependent`.
        turns: float64 `[r/2]`, the frequencies at `seq_len=None` (dynamic unscaled, longrope short).
        turns_long: longrope's long-factor frequencies (`seq_len > original`), else None.
        original: `original_max_position_embeddings` for dynamic/longrope, else None.
        factor: dynamic NTK's factor, else None.
        dynamic_exponent: float64 `[r/2]`, `-2j / (r - 2)`: dynamic NTK frequencies are
            `turns * g ** dynamic_exponent` with `g = dynamic_growth(seq_len, factor, original)`.
        axis_of_pair: multi-axis RoPE (`mrope_section`): int64 `[r/2]`, the position axis pair `j` takes
            its angle from (`posenc_np.mrope`); `turns`, `turns_long` and `dynamic_exponent` are then in
            pair order already (shared, per-axis or strided frequencies). None for 1-D RoPE.
        mrope_section: the resolved pairs per axis (a tuple), None for 1-D RoPE.
    """

    rotary_dim: int
    layout: str
    attention_scale: float
    kind: str
    turns: np.ndarray
    turns_long: np.ndarray | None = None
    original: int | None = None
    factor: float | None = None
    dynamic_exponent: np.ndarray | None = None
    axis_of_pair: np.ndarray | None = None
    mrope_section: tuple | None = None

    @property
    def num_axes(self) -> int | None:
        """The size of the positions' leading axis for multi-axis RoPE, None for 1-D RoPE."""
        return None if self.mrope_section is None else len(self.mrope_section)

    @property
    def seq_dependent(self) -> bool:
        """The frequencies depend on `seq_len = max(positions) + 1` (backends compute them in-graph)."""
        return self.kind != "static"

    def turns_at(self, seq_len) -> np.ndarray:
        """The frequencies (in turns) for a sequence of `seq_len` positions (float64, NumPy)."""
        if self.kind == "longrope" and seq_len is not None and seq_len > self.original:
            return self.turns_long
        if self.kind == "dynamic" and seq_len is not None:
            return self.turns * dynamic_growth(seq_len, self.factor, self.original) ** self.dynamic_exponent
        return self.turns


def rope_plan(rotary_dim, *, base=10000.0, scaling=None, layout="half", mrope_section=None,
              mrope_interleaved=False, mrope_frequencies="shared", mrope_axes=None) -> RopePlan:
    """Validate RoPE parameters and compute the position-independent numbers (see `RopePlan`).

    With `mrope_section`, the pair -> axis map and the pair -> frequency map of `posenc_np.mrope`
    are folded in: `turns` is permuted (`"strided"`) or assembled from one 1-D plan of width `2 * s_a`
    per axis (`"per-axis"`, whose scaled kind, original length, factor and attention scale must agree).
    `mrope_axes` (an explicit pair -> axis table, `posenc_np.mrope.resolve_mrope_axes`) replaces the section:
    shared 1-D frequencies, `mrope_section` of the plan the pairs per axis (`num_axes = max(mrope_axes) + 1`).
    """
    if mrope_axes is not None:
        if mrope_section is not None or mrope_interleaved or mrope_frequencies != "shared":
            raise ValueError(f"mrope_axes is an explicit pair -> axis table: it replaces mrope_section={mrope_section!r}"
                             f" / mrope_interleaved={mrope_interleaved!r} and turns every pair with its 1-D frequency "
                             f"(mrope_frequencies='shared', got {mrope_frequencies!r})")
        plan = rope_plan(rotary_dim, base=base, scaling=scaling, layout=layout)
        axis = resolve_mrope_axes(mrope_axes, plan.rotary_dim)
        return dataclasses.replace(plan, axis_of_pair=axis, mrope_section=tuple(np.bincount(axis).tolist()))
    if mrope_section is not None:
        return _multi_axis_plan(rotary_dim, base=base, scaling=scaling, layout=layout, mrope_section=mrope_section,
                                mrope_interleaved=mrope_interleaved, mrope_frequencies=mrope_frequencies)
    if mrope_frequencies != "shared" or mrope_interleaved:
        check_choice("mrope_frequencies", mrope_frequencies, MROPE_FREQUENCIES)
        raise ValueError(f"mrope_interleaved={mrope_interleaved!r}, mrope_frequencies={mrope_frequencies!r} "
                         "need mrope_section (the pairs per position axis)")
    rotary_dim = check_even_dim("rotary_dim", rotary_dim)
    base = check_positive_float("base", base)
    check_choice("layout", layout, ROPE_LAYOUTS)
    kind, params = resolve_scaling(scaling, rotary_dim=rotary_dim, base=base)
    inv_freq, scale = kind.inv_freq(rotary_dim, base, params, None)
    fields = dict(rotary_dim=rotary_dim, layout=layout, attention_scale=float(scale),
                  kind=kind.name if kind.seq_dependent else "static", turns=inv_freq / (2 * math.pi))
    if kind.name == "longrope":
        original = params["original_max_position_embeddings"]
        long, _ = kind.inv_freq(rotary_dim, base, params, original + 1)
        fields.update(kind="longrope", turns_long=long / (2 * math.pi), original=original)
    elif kind.name == "dynamic":
        fields.update(kind="dynamic", original=params["original_max_position_embeddings"], factor=params["factor"],
                      dynamic_exponent=-np.arange(0, rotary_dim, 2, dtype=np.float64) / (rotary_dim - 2))
    return RopePlan(**fields)


def _multi_axis_plan(rotary_dim, *, base, scaling, layout, mrope_section, mrope_interleaved, mrope_frequencies):
    rotary_dim = check_even_dim("rotary_dim", rotary_dim)
    if not isinstance(mrope_interleaved, (bool, np.bool_)):
        raise TypeError(f"mrope_interleaved={mrope_interleaved!r} must be a bool")
    section = resolve_mrope_section(mrope_section, rotary_dim)
    axis = mrope_axis_of_pair(section, bool(mrope_interleaved))
    order = mrope_frequency_order(section, axis, mrope_frequencies)
    if mrope_frequencies != "per-axis":
        plan = rope_plan(rotary_dim, base=base, scaling=scaling, layout=layout)
        perm = np.arange(rotary_dim // 2) if order is None else order
        pick = (lambda v: None if v is None else v[perm])
        return RopePlan(rotary_dim=rotary_dim, layout=layout, attention_scale=plan.attention_scale, kind=plan.kind,
                        turns=plan.turns[perm], turns_long=pick(plan.turns_long), original=plan.original,
                        factor=plan.factor, dynamic_exponent=pick(plan.dynamic_exponent), axis_of_pair=axis,
                        mrope_section=section)
    if np.bincount(axis, minlength=len(section)).tolist() != list(section):
        raise ValueError(f"mrope_frequencies='per-axis' needs every axis to get its mrope_section={list(section)} "
                         f"pairs; the interleaved map gives {np.bincount(axis, minlength=len(section)).tolist()}")
    plans = [rope_plan(2 * s, base=base, scaling=scaling, layout=layout) for s in section]
    first = plans[0]
    for p in plans[1:]:
        if (p.kind, p.original, p.factor, p.attention_scale) != (first.kind, first.original, first.factor,
                                                                  first.attention_scale):
            raise ValueError(f"scaling={scaling!r} gives the axes of mrope_section={list(section)} different "
                             "attention scales: not supported with mrope_frequencies='per-axis'")

    def assemble(field):
        values = [getattr(p, field) for p in plans]
        if values[0] is None:
            return None
        out = np.empty(rotary_dim // 2, dtype=np.float64)
        for a, v in enumerate(values):
            out[axis == a] = v  # the k-th pair of axis a turns with that axis's k-th frequency
        return out

    return RopePlan(rotary_dim=rotary_dim, layout=layout, attention_scale=first.attention_scale, kind=first.kind,
                    turns=assemble("turns"), turns_long=assemble("turns_long"), original=first.original,
                    factor=first.factor, dynamic_exponent=assemble("dynamic_exponent"), axis_of_pair=axis,
                    mrope_section=section)


def rope_frequencies(rotary_dim, *, base=10000.0, scaling=None, seq_len=None):
    """Inverse frequencies and attention scale of (scaled) RoPE, float64.

    Formula: `inv_j = base ** (-2j / r)`, j = 0 .. r/2 - 1, then the scaling type's rule
    (`posenc_np.scaling`: linear, ntk, dynamic, yarn, llama3, longrope, keras-hub variants).

    Args:
        rotary_dim: even number of rotated channels `r`.
        base: `rope_theta`.
        scaling: None or an HF `rope_scaling`/`rope_parameters` dict (`rope_type` or `type`).
        seq_len: sequence length for `dynamic`/`longrope`; None is the state at initialisation
            (dynamic unscaled, longrope short factors).

    Returns:
        `(inv_freq [r/2] float64, attention_scale float)`; `attention_scale` multiplies cos and sin.

    Raises:
        ValueError: odd `rotary_dim`, `base <= 0`, unknown type, missing/unknown keys, bad values.

    Reference:
        Su et al., "RoFormer", 2021, arXiv:2104.09864; transformers/modeling_rope_utils.py
        `ROPE_INIT_FUNCTIONS` (same numbers for the same dict).

    Examples:
        >>> rope_frequencies(4)[0].tolist()
        [1.0, 0.01]
    """
    rotary_dim = check_even_dim("rotary_dim", rotary_dim)
    base = check_positive_float("base", base)
    kind, params = resolve_scaling(scaling, rotary_dim=rotary_dim, base=base)
    if seq_len is not None:
        seq_len = int(check_integer_positions("seq_len", seq_len))
    return kind.inv_freq(rotary_dim, base, params, seq_len)


def _angles(positions, plan: RopePlan) -> np.ndarray:
    """`[*positions.shape, r/2]` float64 angles, with `seq_len = max(positions) + 1`.

    Multi-axis plans take `positions [A, ...]` and return `[..., r/2]`: pair `j` reads axis
    `axis_of_pair[j]` (the sequence length is the largest position over every axis, as HF's
    `dynamic_rope_update` takes `max(position_ids)` over all three streams).
    """
    seq_len = int(positions.max()) + 1 if positions.size else None
    inv_freq = plan.turns_at(seq_len) * (2 * math.pi)
    if plan.axis_of_pair is not None:
        per_pair = np.moveaxis(positions, 0, -1)[..., plan.axis_of_pair]
        return per_pair.astype(np.float64) * inv_freq
    return positions.astype(np.float64)[..., None] * inv_freq


def _expand(half, layout):
    """`[..., r/2]` per-pair values to `[..., r]` channels of the layout."""
    if layout == "half":
        return np.concatenate([half, half], axis=-1)
    return np.repeat(half, 2, axis=-1)


def rope_cos_sin(positions, rotary_dim=None, *, base=10000.0, scaling=None, layout="half", rotary_pct=None,
                 head_dim=None, dtype=None, mrope_section=None, mrope_interleaved=False, mrope_frequencies="shared",
                 mrope_axes=None):
    """The cos and sin tables of RoPE, attention scale folded in (as Hugging Face transformers does).

    Formula: `t_j = p * inv_j(seq_len)`, `cos = a * cos(t)`, `sin = a * sin(t)` (a = attention_scale),
    laid out per channel: `layout="half"`: `[t_0 .. t_{r/2-1}, t_0 .. t_{r/2-1}]` (HF `cat(freqs,
    freqs)`); `layout="interleaved"`: `[t_0, t_0, t_1, t_1, ...]` (GPT-J `repeat_interleave`).

    Args:
        positions: integer array of any shape (floats equal to integers accepted).
        rotary_dim: even rotated width; or give `rotary_pct` with `head_dim` instead (GPT-NeoX).
        base, scaling: see `rope_frequencies`; `seq_len = max(positions) + 1`.
        layout: "half" or "interleaved".
        dtype: output dtype (float64 when None).
        mrope_section, mrope_interleaved, mrope_frequencies, mrope_axes: multi-axis RoPE, as in `apply_rope`;
            the positions' leading axis (one per axis of the section) is consumed.

    Returns:
        `(cos, sin)`, each `[*positions.shape, rotary_dim]`; with `mrope_section`,
        `[*positions.shape[1:], rotary_dim]` (HF Qwen2-VL: `position_ids [3, batch, seq]` ->
        `[batch, seq, head_dim]`).

    Raises:
        ValueError: as `rope_frequencies`; non-integer positions; bad `rotary_dim`/`rotary_pct`; a bad
            `mrope_section` or positions without its leading axis.

    Examples:
        >>> cos, sin = rope_cos_sin(np.zeros((3, 2, 5), int), 8, mrope_section=[2, 1, 1]); cos.shape
        (2, 5, 8)
    """
    rotary_dim = resolve_rotary_dim(head_dim, rotary_dim, rotary_pct)
    plan = rope_plan(rotary_dim, base=base, scaling=scaling, layout=layout, mrope_section=mrope_section,
                     mrope_interleaved=mrope_interleaved, mrope_frequencies=mrope_frequencies, mrope_axes=mrope_axes)
    positions = check_integer_positions("positions", positions)
    if plan.num_axes is not None:
        check_mrope_positions(positions.shape, plan.num_axes)
    angles = _angles(positions, plan)
    out = spec_output_dtype(dtype)
    scale = plan.attention_scale
    return (_expand(scale * np.cos(angles), layout).astype(out), _expand(scale * np.sin(angles), layout).astype(out))


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None,
               mrope_section=None, mrope_interleaved=False, mrope_frequencies="shared", mrope_axes=None):
    """Rotate the first `rotary_dim` channels of `x` by position-dependent angles.

    Formula: each pair `(a, b)` is rotated by `t_j = p * inv_j`:
    `(a, b) -> s * (a cos t - b sin t, a sin t + b cos t)`, s = attention_scale;
    `layout="half"` pairs channel `j` with `j + r/2` (GPT-NeoX, HF Llama `rotate_half`: conventions
    "hf-llama", "gpt-neox"); `layout="interleaved"` pairs `2j` with `2j+1` (Meta Llama complex form,
    GPT-J, RoFormer: "meta-llama", "gptj"). Channels `r..dim` pass through unchanged.

    Multi-axis RoPE (`mrope_section`; `posenc_np.mrope` has the maps): positions carry a leading axis
    with one position per axis, `positions [A, ...]` (HF `position_ids [3, batch, seq]`: temporal,
    height, width), and pair `j` turns by `t_j = positions[a(j)] * inv(j)`: the axis `a(j)` from the
    section (contiguous blocks, Qwen2-VL / Qwen2.5-VL; `mrope_interleaved=True`: Qwen3-VL's stride-A
    interleave), the frequency `inv(j)` its 1-D one (`mrope_frequencies="shared"`, M-RoPE), the 1-D
    frequencies of each axis's own width (`"per-axis"`: Qwen2-VL vision tower, FLUX) or the 1-D
    frequencies `a, a + A, ...` (`"strided"`: Pixtral). Equal positions on every axis with shared
    frequencies give plain 1-D RoPE. Conventions "qwen2-vl-vision", "pixtral", "flux".

    Args:
        x: `[..., dim]` float array (float16 / bfloat16 accepted: computed in float64, returned in
            the input dtype).
        positions: integer array broadcasting against `x.shape[:-1]` (`[seq]` serves
            `[batch, heads, seq, dim]`; `[batch, seq, 1]` serves `[batch, seq, heads, dim]`); explicit
            ids cover KV-cache offsets and left padding. `seq_len = max(positions) + 1` selects the
            frequencies of `dynamic` and `longrope` scaling.
        base, scaling: see `rope_frequencies`.
        layout: "half" or "interleaved".
        rotary_dim: rotated width (default: all of `dim`); exclusive with `rotary_pct`
            (`rotary_dim = int(dim * rotary_pct)`, GPT-NeoX's `rotary_pct`).
        mrope_section: None (1-D RoPE), the pairs per position axis summing to `rotary_dim // 2` (the HF
            config key, e.g. `[16, 24, 24]`), or a number of axes sharing the pairs evenly (vision towers).
            `positions` is then `[A, ...]` and `positions[0]` broadcasts against `x.shape[:-1]`.
        mrope_interleaved: Qwen3-VL's interleaved pair -> axis map instead of contiguous blocks.
        mrope_frequencies: "shared", "per-axis" or "strided" (see above).
        mrope_axes: instead of `mrope_section`, an explicit table of `rotary_dim // 2` axis indices: pair `j`
            turns by `positions[mrope_axes[j]]` with its 1-D frequency (`positions [max(mrope_axes) + 1, ...]`;
            ERNIE-4.5-VL: `[1, 2] * 22 + [0] * 20`).

    Returns:
        Array like `x` (shape and dtype).

    Raises:
        ValueError: odd or too large `rotary_dim`, unknown layout or scaling, bad scaling keys,
            non-integer positions, positions that do not broadcast, a section that does not sum to
            `rotary_dim // 2`, multi-axis positions without the leading axis of the section's size.

    Reference:
        Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021,
        arXiv:2104.09864; transformers/models/llama/modeling_llama.py `apply_rotary_pos_emb`;
        meta-llama/llama llama/model.py `apply_rotary_emb`; transformers/models/gptj/modeling_gptj.py.

    Examples:
        >>> apply_rope(np.array([[1.0, 0.0]]), np.array([1])).round(4).tolist()
        [[0.5403, 0.8415]]
        >>> apply_rope(np.ones((1, 4)), np.array([[3], [0]]), mrope_section=[1, 1]).round(4).tolist()
        [[-1.1311, 1.0, -0.8489, 1.0]]
    """
    x = np.asarray(x)
    out_dtype = x.dtype
    positions = check_integer_positions("positions", positions)
    rotary_dim = resolve_rotary_dim(x.shape[-1], rotary_dim, rotary_pct)
    plan = rope_plan(rotary_dim, base=base, scaling=scaling, layout=layout, mrope_section=mrope_section,
                     mrope_interleaved=mrope_interleaved, mrope_frequencies=mrope_frequencies, mrope_axes=mrope_axes)
    check_float_dtype("x", out_dtype)  # after the parameters, as a RotaryEmbedding built from them
    if plan.num_axes is not None:
        check_mrope_positions(positions.shape, plan.num_axes)
        check_rope_shapes(x.shape, positions.shape[1:])
    else:
        check_rope_shapes(x.shape, positions.shape)
    angles = _angles(positions, plan)
    cos, sin = np.cos(angles) * plan.attention_scale, np.sin(angles) * plan.attention_scale
    x64 = x.astype(np.float64)
    rot, rest = x64[..., :rotary_dim], x64[..., rotary_dim:]
    if layout == "half":
        a, b = rot[..., : rotary_dim // 2], rot[..., rotary_dim // 2:]
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
    a2, b2 = a * cos - b * sin, a * sin + b * cos
    rotated = np.concatenate([a2, b2], -1) if layout == "half" else np.stack([a2, b2], -1).reshape(rot.shape)
    return np.concatenate([rotated, rest], axis=-1).astype(out_dtype)


def rope_permutation(head_dim, *, source, target, rotary_dim=None) -> np.ndarray:
    """Row permutation of one head's q/k projection that converts between RoPE layouts.

    `W_target = W_source[perm]` (rows of a torch-oriented `[heads * head_dim, hidden]` weight, per
    head) keeps attention logits `q . k` unchanged when the source model used RoPE layout `source` and
    the target uses `target`. interleaved -> half (Meta -> HF Llama): new row `j * r/2 + i` <- old row
    `2i + j` (i < r/2, j in {0, 1}), which is `convert_llama_weights_to_hf.py`'s `permute`; half ->
    interleaved is its inverse. Rows `r..head_dim` (not rotated) keep their place.

    To convert a whole weight, apply it per head: `W.reshape(heads, head_dim, -1)[:, perm].reshape(W.shape)`
    (what `permute_qk_rows` does). For grouped-query attention, q uses `num_attention_heads` and k uses
    `num_key_value_heads`; v and o are never permuted.

    Returns:
        int64 `[head_dim]`.

    Examples:
        >>> rope_permutation(8, source="interleaved", target="half")  # Meta -> HF rows of one head
        array([0, 2, 4, 6, 1, 3, 5, 7])
    """
    head_dim = check_even_dim("head_dim", head_dim)
    r = resolve_rotary_dim(head_dim, rotary_dim)
    check_choice("source", source, ROPE_LAYOUTS)
    check_choice("target", target, ROPE_LAYOUTS)
    perm = np.arange(head_dim, dtype=np.int64)
    if source == "interleaved" and target == "half":
        perm[:r] = np.arange(r).reshape(r // 2, 2).T.ravel()
    elif source == "half" and target == "interleaved":
        perm[:r] = np.arange(r).reshape(2, r // 2).T.ravel()
    return perm


def permute_qk_rows(weight, num_heads, *, source, target, rotary_dim=None):
    """Apply `rope_permutation` to every head of a `[num_heads * head_dim, ...]` q or k weight (or bias).

    `num_heads` is the number of heads this projection has (`num_key_value_heads` for k under GQA).
    """
    weight = np.asarray(weight)
    head_dim = check_heads_divide(num_heads, weight.shape[0])
    num_heads = int(num_heads)
    perm = rope_permutation(head_dim, source=source, target=target, rotary_dim=rotary_dim)
    return weight.reshape(num_heads, head_dim, *weight.shape[1:])[:, perm].reshape(weight.shape)


def load_hf_config(config) -> dict:
    """An HF model config as a fresh dict: from a config.json path, a transformers config or a mapping.

    A path is read as JSON (the file as the checkpoint ships it); a transformers `PretrainedConfig` gives
    its `to_dict()` plus the `head_dim` / `layer_types` that some config classes expose only as properties
    (JetMoe, Zamba2); a mapping is deep-copied, so the caller's dict is never changed.

    Raises:
        ValueError: a path that cannot be read or is not JSON (naming the path).
        TypeError: anything else than a path, a config or a mapping.

    Examples:
        >>> load_hf_config({"model_type": "llama", "rope_theta": 5e5})
        {'model_type': 'llama', 'rope_theta': 500000.0}
    """
    if isinstance(config, (str, os.PathLike)):
        try:
            with open(config) as handle:
                return json.load(handle)
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"config={str(config)!r} is not a readable config.json: {error}") from error
    if hasattr(config, "to_dict"):  # a transformers PretrainedConfig
        out = config.to_dict()
        for key in ("head_dim", "layer_types"):  # properties of some config classes (JetMoe, Zamba2)
            if out.get(key) is None and getattr(config, key, None) is not None:
                out[key] = getattr(config, key)
        return out
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict, a transformers config or a config.json path, "
                        f"got {type(config).__name__}")
    return copy.deepcopy(dict(config))


def scaling_from_hf_config(config) -> dict:
    """`dict(base=..., rotary_dim=..., scaling=...)` for `apply_rope` from a Hugging Face model config.

    Reads `rope_parameters` (transformers v5) or `rope_scaling` (older; key `type` or `rope_type`),
    `rope_theta` (also inside `rope_parameters`; GPT-NeoX `rotary_emb_base`), `head_dim` (else
    `hidden_size // num_attention_heads`), `partial_rotary_factor` / GPT-NeoX `rotary_pct` / GPT-J
    `rotary_dim`, and `max_position_embeddings`. Like transformers, it moves the original context
    length into the dict: `dynamic` gets `original_max_position_embeddings = max_position_embeddings`
    (HF's dynamic NTK reads only the top-level value); `yarn`/`llama3`/`longrope` take the top-level
    `original_max_position_embeddings` first (Phi-3), then the dict's, then `max_position_embeddings`;
    a missing `factor` of `yarn`/`longrope` becomes `max_position_embeddings / original`.

    Multi-axis (vision-language) configs: a config whose RoPE keys live in `text_config` (Qwen2-VL,
    Qwen2.5-VL, Qwen3-VL) is read there; `mrope_section` and `mrope_interleaved` are returned as keys of
    their own (the old `"type": "mrope"` means `default`). When the config omits the section, the
    defaults of the model code apply (transformers 5.24: `[16, 24, 24]` for `qwen2_vl` / `qwen2_5_vl`,
    `[24, 20, 20]` for `qwen3_vl`), and `qwen3_vl*` always interleaves: its rotary embedding never reads
    `mrope_interleaved`.

    Raises:
        ValueError: unreadable file, missing head sizes, per-layer (nested) RoPE parameters.
    """
    config = load_hf_config(config)
    if isinstance(config.get("text_config"), dict) and not (config.get("rope_parameters") or config.get("rope_scaling")):
        config = {**config["text_config"], "model_type": config["text_config"].get("model_type") or
                  config.get("model_type")}
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    params = dict(params)
    mrope = _mrope_from_config(config, params)
    if params and all(isinstance(v, dict) or v is None for v in params.values()):
        raise ValueError(f"per-layer rope_parameters ({sorted(params)}) are not supported: pass one layer "
                         "type's dict to apply_rope")
    base = params.pop("rope_theta", None) or config.get("rope_theta") or config.get("rotary_emb_base") or 10000.0
    head_dim = config.get("head_dim")
    if head_dim is None:
        if not config.get("hidden_size") or not config.get("num_attention_heads"):
            raise ValueError("config has neither head_dim nor hidden_size and num_attention_heads")
        head_dim = config["hidden_size"] // config["num_attention_heads"]
    fraction = params.pop("partial_rotary_factor", None) or config.get("partial_rotary_factor") or config.get(
        "rotary_pct")
    if config.get("rotary_dim") and fraction is None:
        rotary_dim = int(config["rotary_dim"])
    else:
        rotary_dim = int(head_dim * (fraction or 1.0))
    kind = params.pop("type", None) or params.pop("rope_type", None) or "default"
    params.pop("type", None)
    if kind == "mrope":  # transformers v4 configs of Qwen2-VL: M-RoPE over default frequencies
        kind = "default"
    max_pos = config.get("max_position_embeddings")
    if kind == "dynamic":  # HF ignores any dict value here and reads the top-level length
        params["original_max_position_embeddings"] = max_pos
    if kind in ("yarn", "llama3", "longrope"):
        original = config.get("original_max_position_embeddings") or params.get(
            "original_max_position_embeddings") or max_pos
        params["original_max_position_embeddings"] = original
        if kind in ("yarn", "longrope") and params.get("factor") is None and max_pos and original:
            params["factor"] = max_pos / original
    scaling = None if kind == "default" and not params else {"rope_type": kind, **params}
    if scaling is not None and kind in SCALING_TYPES:
        resolve_scaling(scaling, rotary_dim=rotary_dim, base=float(base))  # fail here, not at first use
    return dict(base=float(base), rotary_dim=rotary_dim, scaling=scaling, **mrope)


#: model_type prefix -> (mrope_section when the config omits it, always interleaved): what each family's
#: rotary module fills in (transformers 5.24 `models/<family>/modeling_<family>.py`, `config.rope_parameters
#: .get("mrope_section", default)`; "always interleaved": its `recomposition_frequencies` takes the stride-3
#: Qwen3-VL map whatever the config says; the GLM families pair their contiguous sections interleaved).
_MROPE_MODEL_DEFAULTS = {"qwen2_vl": ([16, 24, 24], False), "qwen2_5_vl": ([16, 24, 24], False),
                         "qwen3_vl": ([24, 20, 20], True), "qwen3_5": ([11, 11, 10], True),
                         "qwen4_exp": ([11, 11, 10], True), "cosmos3_edge": ([24, 20, 20], True),
                         "hy_v4_vl": ([24, 20, 20], True), "paddleocr_vl": ([16, 24, 24], False),
                         "glm4v": ([8, 12, 12], False), "glm_ocr": ([8, 12, 12], False),
                         "glm_image": ([8, 12, 12], False), "cohere_compass": ([24, 20, 20], True)}


#: model_type prefix -> the default mrope_section of families whose pair -> axis map no section setting gives,
#: read as an explicit `mrope_axes` table: ERNIE-4.5-VL pairs height and width alternately over the first
#: `s_h + s_w` pairs (pre-rotated frequencies: pair j keeps its 1-D frequency) and time after them
#: (transformers 5.24 `ernie4_5_vl_moe/modeling_ernie4_5_vl_moe.py` compute_default_rope_parameters,
#: recomposition_frequencies).
_MROPE_AXES_DEFAULTS = {"ernie4_5_vl_moe": [22, 22, 20]}


def ernie_mrope_axes(section) -> list:
    """ERNIE-4.5-VL's pair -> axis table for `mrope_section = [s_h, s_w, s_t]` (`s_h == s_w`): height on the even
    and width on the odd pairs below `s_h + s_w`, time above (axes 1, 2, 0 of `position_ids [3, ...]`)."""
    s_h, s_w, s_t = (int(v) for v in section)
    if s_h != s_w:
        raise ValueError(f"mrope_section={list(section)}: ERNIE-4.5-VL alternates height and width pairs, so its "
                         "first two sections must be equal")
    return [1, 2] * s_h + [0] * s_t


def _mrope_from_config(config, params) -> dict:
    """Pop `mrope_section` / `mrope_interleaved` out of the RoPE dict into keys of their own."""
    section = params.pop("mrope_section", None)
    interleaved = params.pop("mrope_interleaved", None)
    model_type = str(config.get("model_type") or "")
    axes_default = next((v for k, v in _MROPE_AXES_DEFAULTS.items() if model_type.startswith(k)), None)
    if axes_default is not None:
        return dict(mrope_axes=ernie_mrope_axes(axes_default if section is None else section))
    default = next((v for k, v in _MROPE_MODEL_DEFAULTS.items() if model_type.startswith(k)), None)
    if section is None and default is not None:
        section = default[0]
    if section is None:
        if interleaved:
            raise ValueError("config sets mrope_interleaved but has no mrope_section")
        return {}
    forced = default is not None and default[1]
    return dict(mrope_section=[int(s) for s in section], mrope_interleaved=bool(interleaved) or forced)
