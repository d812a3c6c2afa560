"""Error against position: the per-position worst error of a RoPE comparison, for the report's figure."""

from __future__ import annotations

import numpy as np

__all__ = ["error_by_position"]


def error_by_position(case, args, outputs, desired) -> list | None:
    """`[[position, max |out - desired|], ...]` over the sequence axis of a rotary case of the `long` set
    whose positions are one `[seq]` vector; None for every other case (no profile is drawn for them).

    `outputs` is one float64 array or several (a kernel's q and k): the worst of them at each position.
    """
    if case.family != "rope" or case.case_set != "long" or len(args) < 2:
        return None
    positions = np.asarray(args[1])
    desired = np.asarray(desired, np.float64)
    if positions.ndim != 1 or desired.ndim < 2 or desired.shape[-2] != positions.shape[0]:
        return None
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    worst = np.zeros(positions.shape[0])
    for out in outputs:
        out = np.asarray(out, np.float64)
        if out.shape != desired.shape:
            return None
        err = np.abs(out - desired).reshape(-1, desired.shape[-2], desired.shape[-1])
        worst = np.maximum(worst, np.nan_to_num(err, nan=np.inf).max(axis=(0, 2)))
    return [[int(p), float(e)] for p, e in zip(positions, worst, strict=True)]
