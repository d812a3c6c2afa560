"""Regression tests for the bugs the fuzz tests found (docs/reliability.md lists each: bug, where, fix).

Each is the failing example the property test shrank to, written as a plain test so it runs in every
profile and keeps failing if the bug comes back.
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from harness import make_module as _make
from helpers import assert_close
from posenc_np.testing import tolerance


def _framework(backend):
    if backend.name not in ("torch", "tf", "jax"):
        pytest.skip(f"{backend.name} has no package of contract functions")
    return backend


def test_sinusoidal_module_cache_does_not_truncate_fractional_positions(backend):
    """SinusoidalEncoding(max_len=8) gathered its integer cache rows for float positions (torch, TF: 3.5
    read row 3, error 0.38; JAX: a raw indexing TypeError). Fractional positions are computed."""
    backend = _framework(backend)
    positions = np.array([3.5, 1.0, 13.5])
    out = backend.to_numpy(_make(backend, backend.module.SinusoidalEncoding, (4,), {"max_len": 8})(backend.from_numpy(positions)))
    assert_close(out, pn.sinusoidal(positions, 4), tolerance("float32", max_angle=13.5))
