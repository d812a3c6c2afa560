"""Schedules, MLA and Llama 4 temperature in every backend against the spec, eager and jitted.

Float32 backends are held to the float32 tolerance of `posenc_np.testing` (angles up to position 40).
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from posenc_np.testing import compare, tolerance

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "mscale": 0.707,
        "mscale_all_dim": 1.0}


GEMMA = {"model_type": "gemma3_text", "num_hidden_layers": 4, "head_dim": 8, "sliding_window_pattern": 2,
         "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                             "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}}


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_llama4_attn_scale_matches_spec(backend, mode, jit_cache):
    positions = np.array([0, 2, 3, 4, 7, 8, 100, 8191, 8192, 10 ** 6], dtype=np.int32)
    got = backend.call("llama4_attn_scale", (positions,), {"floor_scale": 4, "attn_scale": 0.3}, mode=mode,
                       cache=jit_cache)
    want = pn.llama4_attn_scale(positions, floor_scale=4, attn_scale=0.3)
    assert compare(got, want, tolerance("float32")).passed


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_apply_mla_rope_matches_spec(backend, layout, mode, jit_cache):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 3, 40, 14)).astype(np.float32)
    k_pe = rng.standard_normal((1, 1, 40, 8)).astype(np.float32)
    positions = np.arange(40)
    kwargs = dict(qk_nope_head_dim=6, rotary_dim=8, layout=layout, scaling=YARN)
    got = backend.call("apply_mla_rope", (q, k_pe, positions), kwargs, mode=mode, cache=jit_cache)
    want = pn.apply_mla_rope(q.astype(np.float64), k_pe.astype(np.float64), positions, **kwargs)
    for g, w in zip(got, want, strict=True):
        assert compare(g, w, tolerance("float32", max_angle=40.0)).passed
    np.testing.assert_array_equal(got[0][..., :6], q[..., :6])  # the nope slice is untouched


def test_rope_modules_from_schedule(backend):
    schedule = pn.rope_schedule_from_hf_config({**GEMMA, "model_type": "llama4_text", "no_rope_layers": [1, 1, 1, 0],
                                                "sliding_window_pattern": 2})
    modules = backend.module.rope_modules_from_schedule(schedule)
    assert modules[3] is None and modules[0] is modules[2] and modules[1] is not modules[0]
    x = np.random.default_rng(1).standard_normal((1, 2, 5, 8)).astype(np.float32)
    positions = np.arange(5)
    for entry, module in zip(schedule, modules, strict=True):
        if entry is None:
            continue
        got = backend.to_numpy(module(backend.from_numpy(x), backend.from_numpy(positions)))
        assert compare(got, pn.apply_rope(x.astype(np.float64), positions, **entry), tolerance("float32")).passed
