"""The contract's `apply_rope(x, positions, ...)` inputs recast as the forms library kernels take.

The contract gives `x [..., dim]` and integer `positions` broadcasting against `x.shape[:-1]` (a leading
axis of one position per axis for multi-axis RoPE). Kernels take fewer forms: a sequence axis with one
start offset per row (MLX `offset`, flash-attn `seqlen_offsets`, Transformer Engine `start_positions`),
one position per token (ggml's `b`, vLLM's flattened `positions`), or a cos/sin table the caller builds.
Each helper returns the form or raises `NotSupported` naming what the kernel cannot express, so the case
is a skip with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...adapters import NotSupported

__all__ = ["OffsetRows", "offset_rows", "token_positions", "rotary_width", "frequencies", "angle_table",
           "needs_axes", "ROPE_DEFAULTS"]

#: the contract's `apply_rope` keyword defaults (posenc_np.apply_rope)
ROPE_DEFAULTS = dict(base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None)


def rotary_width(dim: int, rotary_dim=None, rotary_pct=None) -> int:
    """The rotated width `r` of the contract (posenc_np.rope.resolve_rotary_dim: its errors)."""
    from posenc_np.rope import resolve_rotary_dim

    return resolve_rotary_dim(dim, rotary_dim, rotary_pct)


def token_positions(x_shape, positions, *, axes: int | None = None) -> np.ndarray:
    """Positions broadcast to one per token: `x_shape[:-1]`, or `[axes, *x_shape[:-1]]` for multi-axis RoPE."""
    from posenc_np._validate import check_integer_positions

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


def needs_axes(positions_shape, mrope_section) -> int | None:
    """The number of position axes of a multi-axis case (None for 1-D RoPE)."""
    if mrope_section is None:
        return None
    return int(mrope_section) if np.isscalar(mrope_section) else len(mrope_section)


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


def frequencies(rotary_dim: int, *, base, scaling, positions) -> tuple[np.ndarray, float]:
    """`(inv_freq [r/2] float64, attention_scale)` of the spec at the case's `seq_len = max(positions) + 1`
    (posenc_np.apply_rope's rule for `dynamic` / `longrope`): what a caller building a table computes."""
    from posenc_np import rope_frequencies

    positions = np.asarray(positions)
    seq_len = int(positions.max()) + 1 if positions.size else None
    return rope_frequencies(rotary_dim, base=base, scaling=scaling, seq_len=seq_len)


def angle_table(rows: int, inv_freq: np.ndarray) -> np.ndarray:
    """float64 `[rows, r/2]` angles `p * inv_j` for positions `0 .. rows - 1`."""
    return np.arange(rows, dtype=np.float64)[:, None] * np.asarray(inv_freq, dtype=np.float64)[None, :]


def package_dir(package: str, *, missing: str):
    """The directory of installed top-level `package`, found without importing it (an `__init__` that needs
    a CUDA extension or a heavy dependency is never run); ImplementationUnavailable(`missing`) if absent."""
    import importlib.util
    from pathlib import Path

    from ..implementation import ImplementationUnavailable

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImplementationUnavailable(missing)
    return Path(list(spec.submodule_search_locations)[0])


def load_file(path, name: str):
    """Execute the Python file `path` as a module called `name` (not entered in `sys.modules`)."""
    import importlib.util

    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module
