"""The research encodings' modules in every backend (DynamicPositionEncoding, KERPLEBias, FIREBias, CoPE)
against the spec with the module's own parameters, and each framework's idiom: torch state_dict names,
Keras `.keras` save/load without custom_objects, Flax NNX under nnx.jit. The functions' values on every
backend x dtype x mode are the registry's cases (posenc/check/cases_research.py)."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from helpers import assert_close, keras_bias_round_trip, keras_round_trip, make_module
from posenc_np.testing import tolerance

X = np.random.default_rng(0).normal(size=(2, 6, 8)).astype(np.float32)


@pytest.fixture(autouse=True)
def _framework_backends_only(request):
    """Modules are framework classes (nn.Module, Keras layer, NNX module); a graph-runtime backend such as
    ONNX Runtime has none to construct."""
    backend = request.getfixturevalue("backend")
    if backend.name not in ("torch", "tf", "jax"):
        pytest.skip(f"{backend.name} runs exported graphs, it has no module classes")


def _array(backend, value):
    if backend.name == "jax":
        value = value[...]
    elif backend.name == "tf":
        value = value.value if hasattr(value, "value") else value
    return np.asarray(backend.to_numpy(value), np.float64)


def _linear(backend, module, name):
    """(weight [out, in], bias) of a module's linear layer `name`, in the torch orientation."""
    layer = getattr(module, name)
    if backend.name == "torch":
        return _array(backend, layer.weight), _array(backend, layer.bias)
    return _array(backend, layer.kernel).T, _array(backend, layer.bias)


def test_dynamic_module_matches_the_spec(backend):
    module = make_module(backend, "DynamicPositionEncoding", 8)
    out = backend.to_numpy(module(backend.from_numpy(X)))
    weight, bias = _linear(backend, module, "proj")
    desired = pn.dynamic_position_encoding(X.astype(np.float64), weight, bias)
    assert out.dtype == np.float32
    assert_close(out, desired, tolerance("float32", scale=float(np.abs(desired).max()), slack_ulps=16))


def test_dynamic_module_idioms(backend, tmp_path):
    module = make_module(backend, "DynamicPositionEncoding", 8)
    if backend.name == "torch":
        assert set(module.state_dict()) == {"proj.weight", "proj.bias"}
        assert tuple(module.proj.weight.shape) == (8, 8)
    elif backend.name == "tf":
        import keras

        inputs = keras.Input(shape=(6, 8), batch_size=2)
        model = keras.Model(inputs, module(inputs))
        loaded = keras_round_trip(model, tmp_path / "dynamic.keras")
        np.testing.assert_array_equal(np.asarray(loaded(X)), np.asarray(model(X)))
        assert loaded.layers[-1].get_config()["dim"] == 8
    else:
        from flax import nnx

        eager = np.asarray(module(X))
        np.testing.assert_array_equal(np.asarray(nnx.jit(lambda m, x: m(x))(module, X)), eager)


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_kerple_module_clamps_like_kerple_and_matches_the_spec(backend, kernel, tmp_path):
    module = make_module(backend, "KERPLEBias", 3, kernel=kernel)
    q = np.arange(5)
    out = backend.to_numpy(module(q, q))
    r1, r2 = _array(backend, module.r1), _array(backend, module.r2)
    r1, r2 = np.maximum(r1, 0.01), np.clip(r2, 0.01, 2.0 if kernel == "power" else np.inf)
    desired = pn.kerple_bias(r1, r2, q, q, kernel=kernel)
    assert_close(out, desired, tolerance("float32", scale=float(np.abs(desired).max()), slack_ulps=16))
    if backend.name == "tf":
        before, after, layer = keras_bias_round_trip(module, 5, tmp_path / "kerple.keras")
        np.testing.assert_array_equal(before, after)
        assert layer.get_config()["kernel"] == kernel


def test_fire_module_matches_the_spec(backend, tmp_path):
    module = make_module(backend, "FIREBias", 3, mlp_width=4, init_L=4.0)
    q = np.arange(7)
    out = backend.to_numpy(module(q, q))
    if backend.name == "torch":
        w1, b1 = _array(backend, module.mlp[0].weight), _array(backend, module.mlp[0].bias)
        w2, b2 = _array(backend, module.mlp[2].weight), _array(backend, module.mlp[2].bias)
    else:
        (w1, b1), (w2, b2) = _linear(backend, module, "mlp_in"), _linear(backend, module, "mlp_out")
    c, mult = _array(backend, module.c), _array(backend, module.L_multiplier)
    desired = pn.fire_bias(c, mult * 4.0, w1, b1, w2, b2, q, q)
    magnitude = pn.fire_bias(c, mult * 4.0, np.abs(w1), np.abs(b1), np.abs(w2), np.abs(b2), q, q)
    assert_close(out, desired, tolerance("float32", scale=float(np.abs(magnitude).max()), slack_ulps=32))
    if backend.name == "tf":
        before, after, _ = keras_bias_round_trip(module, 7, tmp_path / "fire.keras")
        np.testing.assert_array_equal(before, after)


def test_cope_module_is_zero_at_init_and_matches_the_spec_after_an_update(backend):
    module = make_module(backend, "CoPE", 4, 5)
    rng = np.random.default_rng(1)
    query = rng.normal(size=(6, 4)).astype(np.float32)
    logits = np.where(np.tril(np.ones((6, 6), bool)), rng.normal(size=(6, 6)), -1e4).astype(np.float32)
    np.testing.assert_array_equal(backend.to_numpy(module(query, logits)), np.zeros((6, 6), np.float32))
    table = rng.normal(size=(5, 4)).astype(np.float32)
    if backend.name == "torch":
        import torch

        with torch.no_grad():
            module.pos_emb.copy_(torch.from_numpy(table))
    elif backend.name == "tf":
        module.pos_emb.assign(table)
    else:
        module.pos_emb[...] = table
    desired = pn.cope(query.astype(np.float64), logits.astype(np.float64), table.astype(np.float64))
    bound = float((np.abs(query) @ np.abs(table).T).max())
    assert_close(backend.to_numpy(module(query, logits)), desired, tolerance("float32", scale=bound, slack_ulps=32))


def test_randomized_sampler_gives_sorted_unique_positions(backend):
    positions = backend.to_numpy(backend.module.sample_randomized_positions(10, 40, seed=3, batch_shape=(5,)))
    assert positions.shape == (5, 10) and positions.dtype == np.int32
    assert np.all(np.diff(positions, axis=-1) > 0) and positions.min() >= 0 and positions.max() < 40
