"""The contract's `apply_rope(x, positions, ...)` inputs recast as the forms library kernels take.

The contract gives `x [..., dim]` and integer `positions` broadcasting against `x.shape[:-1]` (a leading
axis of one position per axis for multi-axis RoPE). Kernels take fewer forms: a sequence axis with one
start offset per row (MLX `offset`, flash-attn `seqlen_offsets`, Transformer Engine `start_positions`),
one position per token (ggml's `b`, vLLM's flattened `positions`), or a cos/sin table the caller builds.
Each helper returns the form or raises `NotSupported` naming what the kernel cannot express, so the case
is a skip with that reason. One table builder (`spec_table`) serves every kernel fed a cos/sin or angle
table: float64 angles of the spec's frequencies, reduced in float64 turns as the spec reduces them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from posenc_np.backend import check_integer_positions
from posenc_np.rope import resolve_rotary_dim, rope_plan
from posenc_np.scaling import resolve_scaling

from ...adapters import NotSupported

__all__ = ["OffsetRows", "offset_rows", "token_positions", "rotary_width", "frequencies", "spec_table", "scaling_type",
           "rotate_partial", "require_shared_three_axes", "zigzag_shard", "sequence_rows", "token_angles"]


def rotary_width(dim: int, rotary_dim=None, rotary_pct=None) -> int:
    """The rotated width `r` of the contract (posenc_np.rope.resolve_rotary_dim: its errors)."""
    return resolve_rotary_dim(dim, rotary_dim, rotary_pct)


def scaling_type(scaling, *, rotary_dim: int, base: float) -> tuple[str, dict]:
    """`(rope_type, parameters with the spec's defaults filled)` of a scaling dict, read by the spec's own
    resolver (`rope_type` or the older `type`; its errors for unknown types and keys)."""
    kind, params = resolve_scaling(scaling, rotary_dim=rotary_dim, base=base)
    return kind.name, {k: v for k, v in params.items() if k not in ("rope_type", "type")}


def frequencies(rotary_dim: int, *, base, scaling, positions) -> tuple[np.ndarray, float]:
    """`(inv_freq [r/2] float64, attention_scale)` of the spec at the case's `seq_len = max(positions) + 1`
    (posenc_np.apply_rope's rule for `dynamic` / `longrope`): for a kernel that takes frequencies, not a table."""
    from posenc_np import rope_frequencies

    positions = np.asarray(positions)
    seq_len = int(positions.max()) + 1 if positions.size else None
    return rope_frequencies(rotary_dim, base=base, scaling=scaling, seq_len=seq_len)


def spec_table(rotary_dim: int, rows: int, *, base, scaling, positions, layout="half") -> tuple[np.ndarray, float]:
    """`(angles [rows, rotary_dim / 2] float64, attention_scale)`: the spec's angles of positions 0 .. rows - 1
    at the case's `seq_len = max(positions) + 1` (posenc_np.apply_rope's rule for `dynamic` / `longrope`),
    reduced to [-pi, pi] in float64 turns (`t - round(t)`, as the spec reduces them), so a kernel's table
    differs from the spec only by what the kernel does with it."""
    return token_angles(rotary_dim, np.arange(rows), base=base, scaling=scaling, layout=layout,
                        seq_len_of=positions)


def token_angles(rotary_dim: int, positions, *, base, scaling, layout="half",
                 seq_len_of=None) -> tuple[np.ndarray, float]:
    """`(angles [*positions.shape, rotary_dim / 2] float64, attention_scale)`: the spec's angles at `positions`
    (negative ones included), reduced to [-pi, pi] in float64 turns as the spec reduces them, at the sequence
    length `max(seq_len_of) + 1` (`seq_len_of` defaults to `positions`: the case's, for `dynamic` / `longrope`)."""
    plan = rope_plan(rotary_dim, base=base, scaling=scaling, layout=layout)
    positions = np.asarray(positions)
    case = positions if seq_len_of is None else np.asarray(seq_len_of)
    seq_len = int(case.max()) + 1 if case.size else None
    turns = positions[..., None].astype(np.float64) * plan.turns_at(seq_len)
    return (turns - np.round(turns)) * 2 * math.pi, plan.attention_scale


def rotate_partial(rotate, x, rotary_dim: int, concatenate):
    """`rotate(x[..., :r])` with the channels past `r` passed through (`concatenate([a, b])` along the last
    axis, in `x`'s framework): partial rotary as a model slices before a kernel that rotates all it is given."""
    if rotary_dim == x.shape[-1]:
        return rotate(x)
    return concatenate([rotate(x[..., :rotary_dim]), x[..., rotary_dim:]])


def require_shared_three_axes(what: str, mrope_section, mrope_frequencies="shared") -> None:
    """NotSupported unless the multi-axis settings are the 3-axis section with shared frequencies (Qwen2-VL's
    text M-RoPE), the one form `what` computes."""
    if np.isscalar(mrope_section) or len(mrope_section) != 3 or mrope_frequencies != "shared":
        raise NotSupported(f"{what} takes a 3-axis mrope_section with shared frequencies; got "
                           f"mrope_section={mrope_section!r}, mrope_frequencies={mrope_frequencies!r}")


def token_positions(x_shape, positions, *, axes: int | None = None) -> np.ndarray:
    """Positions broadcast to one per token: `x_shape[:-1]`, or `[axes, *x_shape[:-1]]` for multi-axis RoPE."""
    positions = check_integer_positions("positions", np.asarray(positions)).astype(np.int64)
    lead = tuple(x_shape[:-1])
    try:
        if axes is None:
            return np.broadcast_to(positions, lead)
        if positions.ndim == 0 or positions.shape[0] != axes:
            raise ValueError(f"positions of shape {list(positions.shape)} need a leading axis of {axes}")
        return np.stack([np.broadcast_to(p, lead) for p in positions])
    except ValueError:
        raise ValueError(f"positions of shape {list(positions.shape)} do not broadcast against x "
                         f"{list(x_shape)}") from None


@dataclass(frozen=True)
class OffsetRows:
    """`x` seen as rows of consecutive positions: move `seq_axis` of x to -2, then every row of the
    leading axes is `offsets[row] + arange(seq)`.

    Attributes:
        seq_axis: the axis of `x` (negative) that runs along the sequence.
        offsets: int64 `[*lead]`, the first position of each row (`lead` = x's shape without the
            sequence and channel axes, in order).
    """

    seq_axis: int
    offsets: np.ndarray

    @property
    def uniform(self) -> bool:
        """Whether every row starts at the same position (one scalar offset serves the batch)."""
        return bool(self.offsets.size == 0 or (self.offsets == self.offsets.flat[0]).all())


def offset_rows(x_shape, positions, *, what: str) -> OffsetRows:
    """`positions` as start offsets of rows along a sequence axis of `x` (-2, else -3); NotSupported when
    they are not consecutive along either (`what` names the kernel in the reason)."""
    full = token_positions(x_shape, positions)
    for seq_axis in (-2, -3):
        if len(x_shape) < -seq_axis:
            continue
        moved = np.moveaxis(full, seq_axis + 1, -1)
        seq = moved.shape[-1]
        if (moved - moved[..., :1] == np.arange(seq)).all():
            return OffsetRows(seq_axis, np.ascontiguousarray(moved[..., 0]))
    raise NotSupported(f"{what} takes a start offset per row; positions {list(np.shape(positions))} are not "
                       f"consecutive along a sequence axis of x {list(x_shape)}")


def zigzag_shard(row_positions, *, what: str) -> tuple[int, int]:
    """`(cp_size, cp_rank)` when every row of `row_positions [rows, seq]` is the zigzag context-parallel shard
    of rank `cp_rank` of a sequence of `seq * cp_size` tokens from 0 (`posenc_np.cp_positions(..., "zigzag")`,
    the split Megatron's and Transformer Engine's `thd` paths undo); `(1, 0)` for rows `0 .. seq - 1`.
    NotSupported otherwise (`what` names the kernel)."""
    from posenc_np import cp_positions

    rows = np.asarray(row_positions)
    seq = rows.shape[-1]
    if (rows == np.arange(seq)).all():
        return 1, 0
    for world in (2, 4, 8) if seq % 2 == 0 else ():
        for rank in range(world):
            if (rows == cp_positions(seq * world, world_size=world, rank=rank, strategy="zigzag")).all():
                return world, rank
    raise NotSupported(f"{what} restarts every sequence at position 0 (or takes a zigzag context-parallel shard "
                       f"of one); these rows start at {sorted(set(rows[:, 0].tolist()))[:4]}")


def sequence_rows(x_shape, positions, *, what: str) -> tuple[int, np.ndarray]:
    """`(seq_axis, row_positions [rows, seq])`: the positions of x's tokens as rows along its sequence axis
    (`offset_rows`' axis where rows are consecutive, else -2), for kernels that take packed sequences."""
    try:
        seq_axis = offset_rows(x_shape, positions, what=what).seq_axis
    except NotSupported:
        seq_axis = -2
    moved = np.moveaxis(token_positions(x_shape, positions), seq_axis + 1, -1)
    return seq_axis, moved.reshape(-1, moved.shape[-1])
