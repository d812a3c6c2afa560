"""Suite cases for what RoPE kernels get wrong silently: the edge set (convention "edge").

Positions past a table, negative positions, per-row (tensor) offsets past a table, a single decode token
past it, non-contiguous inputs, batch rows at different offsets. posenc's own backends have no table and
must equal the spec on every one: any exception from them is an error. An implementation
(`posenc check --impl`) or backend that declares a table (`Implementation(max_positions=...)`,
`Adapter.may_refuse`: ONNX Runtime's cos/sin cache) may refuse them by raising one of `EDGE_REFUSALS`
(the declared refusals, as PyTorch OpInfo's `ErrorInput` pins an error type); any other exception is
an error naming it, and `NotSupported` stays what it is everywhere, a skip with its reason. A result must equal the spec; rows returned unrotated or non-finite values are
failures (diagnosis `unrotated`, `non-finite`). "Past the table" means past `EDGE_TABLE_ROWS`
(`posenc.impl.implementation.TABLE_ROWS`); built-ins whose cache length is theirs to choose build it
with that many rows. The non-contiguous input reaches every backend and implementation as a view
(`Adapter.from_numpy_keeping_views`) in frameworks that have views.
"""

from __future__ import annotations

import numpy as np

from posenc_np.backend import numpy_dtype
from posenc_np.testing import ROPE_ANGLE_GOAL, tolerance

from ..impl.implementation import TABLE_ROWS
from .registry import Case, register

__all__ = ["EDGE_CONVENTION", "EDGE_TABLE_ROWS", "EDGE_REFUSALS", "NON_CONTIGUOUS_WIDTH"]

EDGE_CONVENTION = "edge"
#: The table length the edge set's "past the table" positions go past.
EDGE_TABLE_ROWS = TABLE_ROWS
#: The correct refusals of a position outside a table: an index error (torch and NumPy indexing) or a
#: ValueError naming the argument (posenc's policy).
EDGE_REFUSALS = (IndexError, ValueError)
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
                  description=f"{layout}: {words}", refusals=EDGE_REFUSALS))


for _layout in ("half", "interleaved"):
    for _set in EDGE_SETS:
        _edge_case(_set, _layout)
