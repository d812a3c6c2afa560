"""Multi-axis RoPE in the backends, beyond the conformance matrix (posenc/check/cases_mrope.py): the long-position
precision rule per axis, the RotaryEmbedding modules with the new parameters, and no recompilation for new
multi-axis positions under each framework's jit."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from posenc_np.conventions import conventions

LONG = np.array([[0, 4095, 65537, 300001, 2**20 - 1, 2**22 + 5],
                 [2**22 + 5, 0, 4095, 65537, 300001, 2**20 - 1],
                 [2**20 - 1, 2**22 + 5, 0, 4095, 65537, 300001]])


@pytest.mark.parametrize("name", ["qwen2-vl", "qwen3-vl", "flux", "pixtral"])
def test_angles_stay_within_1e_6_rad_on_every_axis(backend, name):
    """The 1-D path's rule (docs/rope-precision.md) per axis: each axis carries positions up to 2**22 somewhere."""
    params = dict(conventions[name].params)
    positions = LONG if name != "pixtral" else LONG[:2]
    dim = conventions[name].extra.get("head_dim", 64)
    cos, sin = (backend.to_numpy(t) for t in backend.module.rope_cos_sin(backend.from_numpy(positions), dim, **params))
    want_cos, want_sin = pn.rope_cos_sin(positions, dim, **params)
    error = np.angle(np.exp(1j * (np.arctan2(sin, cos) - np.arctan2(want_sin, want_cos))))
    assert np.abs(error).max() <= 1e-6, np.abs(error).max()


def test_module_takes_the_new_parameters(backend, tmp_path):
    params = dict(conventions["qwen3-vl"].params)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 2, 7, 128)).astype(np.float32)
    positions = rng.integers(0, 5000, size=(3, 2, 1, 7))
    module = backend.module.RotaryEmbedding(128, **params)
    got = backend.to_numpy(module(backend.from_numpy(x), backend.from_numpy(positions)))
    want = backend.to_numpy(backend.module.apply_rope(backend.from_numpy(x), backend.from_numpy(positions), **params))
    np.testing.assert_allclose(got, want, atol=2e-6)  # JAX: the module runs unjitted, the function jitted (ulps)
    np.testing.assert_allclose(got, pn.apply_rope(x.astype(np.float64), positions, **params), atol=2e-5)
    with pytest.raises(ValueError, match="leading axis of size 3"):
        module(backend.from_numpy(x), backend.from_numpy(positions[0]))
    if backend.name == "torch":
        assert module.state_dict() == {} and "mrope_section" in repr(module)
    if backend.name == "tf":
        config = module.get_config()
        assert config["mrope_section"] == [24, 20, 20] and config["mrope_interleaved"] is True
        again = type(module).from_config(config)
        np.testing.assert_array_equal(backend.to_numpy(again(x, positions)), got)


def test_new_positions_never_recompile(backend):
    """One compile, three sets of multi-axis ids (dynamic NTK: the sequence length is traced too)."""
    scaling = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 64}
    traces, package = [], backend.module

    def fn(x, positions):
        if backend.name != "torch":  # a Python side effect runs once per trace (Dynamo would replay it)
            traces.append(1)
        return package.apply_rope(x, positions, mrope_section=[2, 3, 3], mrope_interleaved=True, scaling=scaling)

    if backend.name == "torch":
        import torch._dynamo

        torch._dynamo.reset()
        # the counter is process-wide and reset() leaves it alone: count this test's graphs only
        graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    compiled = backend.jit(fn)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 8, 16)).astype(np.float32)
    for high in (10, 1000, 100000):
        positions = rng.integers(0, high, size=(3, 8))
        got = backend.to_numpy(compiled(backend.from_numpy(x), backend.from_numpy(positions)))
        want = pn.apply_rope(x.astype(np.float64), positions, mrope_section=[2, 3, 3], mrope_interleaved=True,
                             scaling=scaling)
        np.testing.assert_allclose(got, want, atol=1e-4)
    if backend.name == "torch":
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before == 1
    else:
        assert len(traces) == 1
