"""The research encodings' modules in every backend (DynamicPositionEncoding, KERPLEBias, FIREBias, CoPE)
against the spec with the module's own parameters, and each framework's idiom: torch state_dict names,
Keras `.keras` save/load without custom_objects, Flax NNX under nnx.jit. The functions' values on every
backend x dtype x mode are the registry's cases (posenc/check/cases_research.py)."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from helpers import assert_close, fire_layers, keras_bias_round_trip, keras_round_trip
from posenc.adapters import adapter
from posenc_np.testing import tolerance

X = np.random.default_rng(0).normal(size=(2, 6, 8)).astype(np.float32)


def _array(backend, value):
    return np.asarray(backend.weight(value), np.float64)


def test_dynamic_module_matches_the_spec(backend):
    module = backend.make_module("DynamicPositionEncoding", 8)
    out = backend.to_numpy(module(backend.from_numpy(X)))
    weight, bias = backend.linear(module.proj)
    desired = pn.dynamic_position_encoding(X.astype(np.float64), weight, bias)
    assert out.dtype == np.float32
    assert_close(out, desired, tolerance("float32", scale=float(np.abs(desired).max()), slack_ulps=16))


def test_torch_dynamic_module_state_dict(require_backend):
    module = require_backend("torch").DynamicPositionEncoding(8)
    assert set(module.state_dict()) == {"proj.weight", "proj.bias"}
    assert tuple(module.proj.weight.shape) == (8, 8)


def test_keras_dynamic_module_round_trip(require_backend, tmp_path):
    module = require_backend("tf").DynamicPositionEncoding(8)
    import keras

    inputs = keras.Input(shape=(6, 8), batch_size=2)
    model = keras.Model(inputs, module(inputs))
    loaded = keras_round_trip(model, tmp_path / "dynamic.keras")
    np.testing.assert_array_equal(np.asarray(loaded(X)), np.asarray(model(X)))
    assert loaded.layers[-1].get_config()["dim"] == 8


def test_nnx_dynamic_module_under_jit(require_backend):
    require_backend("jax")
    from flax import nnx

    module = adapter("jax").make_module("DynamicPositionEncoding", 8)
    eager = np.asarray(module(X))
    np.testing.assert_array_equal(np.asarray(nnx.jit(lambda m, x: m(x))(module, X)), eager)


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_kerple_module_clamps_like_kerple_and_matches_the_spec(backend, kernel, tmp_path):
    module = backend.make_module("KERPLEBias", 3, kernel=kernel)
    q = np.arange(5)
    out = backend.to_numpy(module(q, q))
    r1, r2 = _array(backend, module.r1), _array(backend, module.r2)
    r1, r2 = np.maximum(r1, 0.01), np.clip(r2, 0.01, 2.0 if kernel == "power" else np.inf)
    desired = pn.kerple_bias(r1, r2, q, q, kernel=kernel)
    assert_close(out, desired, tolerance("float32", scale=float(np.abs(desired).max()), slack_ulps=16))


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_keras_kerple_round_trip(require_backend, kernel, tmp_path):
    module = require_backend("tf").KERPLEBias(3, kernel=kernel)
    before, after, layer = keras_bias_round_trip(module, 5, tmp_path / "kerple.keras")
    np.testing.assert_array_equal(before, after)
    assert layer.get_config()["kernel"] == kernel


def test_fire_module_matches_the_spec(backend):
    module = backend.make_module("FIREBias", 3, mlp_width=4, init_L=4.0)
    q = np.arange(7)
    out = backend.to_numpy(module(q, q))
    (w1, b1), (w2, b2) = (backend.linear(layer) for layer in fire_layers(module))
    c, mult = _array(backend, module.c), _array(backend, module.L_multiplier)
    desired = pn.fire_bias(c, mult * 4.0, w1, b1, w2, b2, q, q)
    magnitude = pn.fire_bias(c, mult * 4.0, np.abs(w1), np.abs(b1), np.abs(w2), np.abs(b2), q, q)
    assert_close(out, desired, tolerance("float32", scale=float(np.abs(magnitude).max()), slack_ulps=32))


def test_keras_fire_round_trip(require_backend, tmp_path):
    module = require_backend("tf").FIREBias(3, mlp_width=4, init_L=4.0)
    before, after, _ = keras_bias_round_trip(module, 7, tmp_path / "fire.keras")
    np.testing.assert_array_equal(before, after)


def test_cope_module_is_zero_at_init_and_matches_the_spec_after_an_update(backend):
    module = backend.make_module("CoPE", 4, 5)
    rng = np.random.default_rng(1)
    query = rng.normal(size=(6, 4)).astype(np.float32)
    logits = np.where(np.tril(np.ones((6, 6), bool)), rng.normal(size=(6, 6)), -1e4).astype(np.float32)
    np.testing.assert_array_equal(backend.to_numpy(module(query, logits)), np.zeros((6, 6), np.float32))
    table = rng.normal(size=(5, 4)).astype(np.float32)
    backend.set_weight(module.pos_emb, table)
    desired = pn.cope(query.astype(np.float64), logits.astype(np.float64), table.astype(np.float64))
    bound = float((np.abs(query) @ np.abs(table).T).max())
    assert_close(backend.to_numpy(module(query, logits)), desired, tolerance("float32", scale=bound, slack_ulps=32))


def test_randomized_sampler_gives_sorted_unique_positions(backend):
    positions = backend.to_numpy(backend.module.sample_randomized_positions(10, 40, seed=3, batch_shape=(5,)))
    assert positions.shape == (5, 10) and positions.dtype == np.int32
    assert np.all(np.diff(positions, axis=-1) > 0) and positions.min() >= 0 and positions.max() < 40
