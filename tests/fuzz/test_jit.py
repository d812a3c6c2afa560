"""Fuzz draws under each framework's jit (torch.compile fullgraph on aot_eager, tf.function(jit_compile=True),
jax.jit): the documented behaviour when values cannot be read (docs/api.md §1, §10).

Shapes are fixed so each (name, backend) compiles once and the drawn positions are data (a recompile per
draw would be a bug of its own): `apply_rope` at any position (negative, beyond the 4096-row table, up to
2**24) equals the spec; `learned` at out-of-range positions gives NaN rows there (eager raises instead) and
the table's rows elsewhere.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import posenc_np as pn
from conftest import TALLY
from posenc_np.testing import compare, tolerance

JIT_EXAMPLES = 3
TABLE = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
X = np.random.default_rng(1).normal(size=(2, 5, 8)).astype(np.float32)


def test_learned_under_jit_gives_nan_rows_out_of_range(backend, jit_cache, aot_eager):

    @settings(max_examples=JIT_EXAMPLES)
    @given(st.lists(st.integers(-3, 9), min_size=4, max_size=4))
    def run(values):
        positions = np.array(values, np.int32)
        out = backend.call("learned", (TABLE, positions), {}, mode="jit", cache=jit_cache, key="fuzz-learned",
                           compile_backend=aot_eager)
        inside = (positions >= 0) & (positions < len(TABLE))
        desired = np.full((4, 4), np.nan)
        desired[inside] = pn.learned(TABLE.astype(np.float64), positions[inside])
        result = compare(out, desired, tolerance("float32", exact=True))
        assert result.passed, (values, result)
        TALLY[backend.name + "-jit", "learned"]["documented-nan-rows" if not inside.all() else "equal"] += 1

    run()


def test_apply_rope_under_jit_equals_the_spec_at_any_position(backend, jit_cache, aot_eager):

    @settings(max_examples=JIT_EXAMPLES)
    @given(st.lists(st.integers(-5, 2**24), min_size=5, max_size=5))
    def run(values):
        positions = np.array(values, np.int32)
        out = backend.call("apply_rope", (X, positions), {}, mode="jit", cache=jit_cache, key="fuzz-rope",
                           compile_backend=aot_eager)
        desired = pn.apply_rope(X.astype(np.float64), positions)
        tol = tolerance("float32", max_angle=float(np.abs(positions).max()), scale=float(np.abs(X).max()) * 1.5)
        result = compare(out, desired, tol)
        assert result.passed, (values, result)
        TALLY[backend.name + "-jit", "apply_rope"]["equal"] += 1

    run()
