"""Suite cases for what RoPE kernels get wrong silently: the edge set (convention "edge").

Positions past a table, negative positions, per-row (tensor) offsets past a table, a single decode token
past it, non-contiguous inputs, batch rows at different offsets. posenc's own backends have no table and
must equal the spec on every one. For another implementation (`posenc check --impl`) refusing any of
them (raising) is correct, a result must equal the spec, and rows returned unrotated or non-finite
values are failures (diagnosis `unrotated`, `non-finite`). "Past the table" means past
`EDGE_TABLE_ROWS`: an implementation that reads a cos/sin cache declares its length
(`Implementation(max_positions=...)`); built-ins whose cache length is theirs to choose build it with
`EDGE_TABLE_ROWS` rows.
"""

from __future__ import annotations

import numpy as np

from posenc_np._dtypes import numpy_dtype
from posenc_np.testing import ROPE_ANGLE_GOAL, tolerance

from ..impl.implementation import TABLE_ROWS
from .registry import Case, register

__all__ = ["EDGE_CONVENTION", "EDGE_TABLE_ROWS", "is_edge_case", "NON_CONTIGUOUS_WIDTH"]

EDGE_CONVENTION = "edge"
#: The table length the edge set's "past the table" positions go past.
EDGE_TABLE_ROWS = TABLE_ROWS
#: The non-contiguous case's `x` is `wide[..., :16]` of an array this many times wider, the rest NaN: an
#: implementation that reads past the view's row returns non-finite values.
NON_CONTIGUOUS_WIDTH = 3
HEAD_DIM = 16

_T = EDGE_TABLE_ROWS
#: case set -> (x shape, positions, description)
EDGE_SETS = {
    "negative-positions": ((2, 2, 8, HEAD_DIM), np.arange(-4, 4), "positions -4..3"),
    "past-table": ((2, 2, 8, HEAD_DIM), np.arange(_T - 4, _T + 4), f"positions {_T - 4}..{_T + 3}, past a "
                                                                 f"{_T}-row table"),
    "offset-past-table": ((2, 2, 8, HEAD_DIM), np.stack([np.arange(_T + 4, _T + 12), np.arange(10, 18)])[:, None, :],
                          f"per-row offsets {_T + 4} (past a {_T}-row table) and 10"),
    "decode-past-table": ((2, 2, 1, HEAD_DIM), np.array([_T + 100, 5])[:, None, None],
                          f"one decode token per row at offsets {_T + 100} (past the table) and 5"),
    "row-offsets": ((2, 2, 8, HEAD_DIM), np.stack([np.arange(0, 8), np.arange(3000, 3008)])[:, None, :],
                    "batch rows at offsets 0 and 3000"),
    "non-contiguous": ((2, 2, 8, HEAD_DIM), np.arange(100, 108),
                       f"x a view [..., :{HEAD_DIM}] of a {NON_CONTIGUOUS_WIDTH}x wider array (NaN beyond the view)"),
}


def is_edge_case(case: Case) -> bool:
    """Whether `case` belongs to the edge set (where an implementation may refuse by raising)."""
    return case.convention == EDGE_CONVENTION


def _edge_case(case_set, layout):
    shape, positions, words = EDGE_SETS[case_set]

    def make(rng, dtype):
        x = rng.standard_normal(shape).astype(numpy_dtype(dtype))
        if case_set == "non-contiguous":
            wide = np.full(shape[:-1] + (NON_CONTIGUOUS_WIDTH * shape[-1],), np.nan, dtype=x.dtype)
            wide[..., : shape[-1]] = x
            x = wide[..., : shape[-1]]
        return (x, positions.astype(np.int64)), {"layout": layout}

    def tol(desired, dtype, args):
        return tolerance(dtype, angle_error=ROPE_ANGLE_GOAL, scale=float(np.abs(desired.astype(np.float64)).max()))

    suffix = "" if layout == "half" else "-interleaved"
    register(Case("apply_rope", EDGE_CONVENTION, case_set + suffix, make, tol, modes=("eager",),
                  description=f"{layout}: {words}"))


for _layout in ("half", "interleaved"):
    for _set in EDGE_SETS:
        _edge_case(_set, _layout)
