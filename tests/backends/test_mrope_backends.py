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


def test_module_takes_the_new_parameters(backend):
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


def test_torch_module_keeps_no_state_and_shows_the_sections(require_backend):
    module = require_backend("torch").RotaryEmbedding(128, **conventions["qwen3-vl"].params)
    assert module.state_dict() == {} and "mrope_section" in repr(module)


def test_keras_module_config_round_trip(require_backend):
    module = require_backend("tf").RotaryEmbedding(128, **conventions["qwen3-vl"].params)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 2, 7, 128)).astype(np.float32)
    positions = rng.integers(0, 5000, size=(3, 2, 1, 7))
    config = module.get_config()
    assert config["mrope_section"] == [24, 20, 20] and config["mrope_interleaved"] is True
    again = type(module).from_config(config)
    np.testing.assert_array_equal(np.asarray(again(x, positions)), np.asarray(module(x, positions)))


def test_new_positions_never_recompile(backend):
    """One compile, three sets of multi-axis ids (dynamic NTK: the sequence length is traced too)."""
    scaling = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 64}
    package = backend.module

    def fn(x, positions):
        return package.apply_rope(x, positions, mrope_section=[2, 3, 3], mrope_interleaved=True, scaling=scaling)

    compiled, traces = backend.jit_counting_traces(fn)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 8, 16)).astype(np.float32)
    for high in (10, 1000, 100000):
        positions = rng.integers(0, high, size=(3, 8))
        got = backend.to_numpy(compiled(backend.from_numpy(x), backend.from_numpy(positions)))
        want = pn.apply_rope(x.astype(np.float64), positions, mrope_section=[2, 3, 3], mrope_interleaved=True,
                             scaling=scaling)
        np.testing.assert_allclose(got, want, atol=1e-4)
    assert traces() == 1
