"""A case's inputs and the spec's answer: the same seed, inputs and float64 result for every backend and
implementation compared on it."""

from __future__ import annotations

import zlib

import numpy as np

import posenc_np

from ..impl.judge import Expected, as_float64, float64_inputs
from .registry import Case

__all__ = ["case_rng", "spec_call", "expected_for", "is_plain_rope"]


def case_rng(seed: int, case: Case, dtype: str) -> np.random.Generator:
    """The case's random inputs depend on the run's seed, the case and the dtype only."""
    return np.random.default_rng([seed, zlib.crc32(f"{case.id}|{dtype}".encode())])


def spec_call(case: Case, args, kwargs):
    """The float64 spec's output for the case's inputs."""
    args64, kwargs64 = float64_inputs(args, kwargs)
    if case.fn is not None:
        return case.fn(posenc_np, *args64, **kwargs64)
    return getattr(posenc_np, case.encoding)(*args64, **kwargs64)


def is_plain_rope(case: Case) -> bool:
    """A single `apply_rope(x, positions, **kwargs)` call (possibly inside a context, a `fn` marked
    `plain_rope`: the autocast case): judged pair by pair, with the angle error."""
    return case.encoding == "apply_rope" and (case.fn is None or getattr(case.fn, "plain_rope", False))


def expected_for(case: Case, seed: int, dtype: str) -> Expected:
    """The case's inputs in `dtype` and the spec's answer, with the case's tolerance."""
    args, kwargs = case.make(case_rng(seed, case, dtype), dtype)
    desired = spec_call(case, args, kwargs)
    spec_fn = getattr(posenc_np, case.encoding, None) if case.fn is None else None
    return Expected(case.encoding, args, kwargs, desired, case.tol(as_float64(desired), dtype, args),
                    rope=is_plain_rope(case), spec_fn=spec_fn, composite=case.fn)
