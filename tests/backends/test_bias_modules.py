"""Bias functions and modules of every backend beyond the numbers: validation messages (written once in
posenc_np and raised by every backend), floating positions refused under jit, the modules (ALiBi,
T5RelativeBias, RelativePositionEmbedding) against the spec, and each framework's idiom: torch state_dict
and dtype casts, Keras `.keras` save/load without custom_objects, Flax NNX jit and grad.

The functions' values on every backend x dtype x mode are the registry's alibi/t5/relative cases
(tests/backends/test_conformance.py); this module does not repeat them.
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from helpers import EXACT, assert_close, keras_bias_round_trip
from posenc_np.testing import tolerance

# --- ALiBi --------------------------------------------------------------------------------------------

def test_alibi_slopes(backend):
    actual = backend.to_numpy(backend.module.alibi_slopes(12))
    assert_close(actual, pn.alibi_slopes(12), tolerance("float32"))


def test_alibi_bad_input(backend):
    module = backend.module
    with pytest.raises(ValueError, match="num_heads"):
        module.alibi_bias(0, np.arange(3), np.arange(3))
    with pytest.raises(ValueError, match="form"):
        module.alibi_bias(2, np.arange(3), np.arange(3), form="linear")
    with pytest.raises(ValueError, match="do not broadcast"):
        module.alibi_bias(2, np.zeros((3, 4)), np.zeros((2, 4)))


def test_alibi_module(backend):
    q, k = np.arange(3, 8), np.arange(8)
    layer = backend.module.ALiBi(6, form="causal")
    actual = backend.to_numpy(layer(backend.from_numpy(q), backend.from_numpy(k)))
    desired = pn.alibi_bias(6, q, k, form="causal")
    assert_close(actual, desired, tolerance("float32", scale=np.abs(desired).max()))


def test_torch_alibi_has_no_state_and_survives_cast(require_backend):
    posenc_torch = require_backend("torch")
    import torch

    layer = posenc_torch.ALiBi(4, form="symmetric").to(torch.bfloat16)
    assert layer.state_dict() == {}
    out = layer(torch.arange(300), torch.arange(300))
    assert out.dtype == torch.float32  # the constructor's dtype; the cast has no slopes to round
    desired = pn.alibi_bias(4, np.arange(300), np.arange(300))
    assert_close(out.numpy(), desired, tolerance("float32", scale=np.abs(desired).max()))


def test_keras_alibi_round_trip(require_backend, tmp_path):
    posenc_tf = require_backend("tf")

    layer = posenc_tf.ALiBi(4, form="bloom", dtype="mixed_bfloat16")
    assert layer.get_config()["num_heads"] == 4 and layer.get_config()["form"] == "bloom"
    original, loaded, _ = keras_bias_round_trip(layer, 5, tmp_path / "alibi.keras")
    np.testing.assert_array_equal(loaded, original)
    positions = np.arange(5)[None]
    desired = pn.alibi_bias(4, positions, positions, form="bloom")
    assert_close(original.astype(np.float64), desired, tolerance("bfloat16", scale=np.abs(desired).max()))


# --- T5 -----------------------------------------------------------------------------------------------

def test_t5_bad_input(backend):
    module = backend.module
    with pytest.raises(ValueError, match="num_buckets=31"):
        module.t5_bucket(np.arange(3), num_buckets=31)
    with pytest.raises(ValueError, match="max_distance=8"):
        module.t5_bucket(np.arange(3), max_distance=8)
    with pytest.raises(ValueError, match="relative_position"):
        module.t5_bucket(backend.from_numpy(np.array([0.5, 1.0], np.float32)))
    with pytest.raises(ValueError, match="table must have 32 rows"):
        module.t5_bias(backend.from_numpy(np.zeros((16, 4), np.float32)), np.arange(3), np.arange(3))
    with pytest.raises(ValueError, match="q_positions"):
        module.t5_bias(backend.from_numpy(np.zeros((32, 4), np.float32)),
                       backend.from_numpy(np.array([0.0, 1.5], np.float32)), np.arange(3))


def test_t5_float_positions_refused_under_jit(backend):
    table = np.zeros((32, 2), np.float32)
    with pytest.raises(backend.jit_errors(TypeError), match="q_positions must be an integer"):
        backend.call("t5_bias", (table, np.arange(3.0), np.arange(3)), {}, mode="jit")
    with pytest.raises(backend.jit_errors(TypeError), match="relative_position must be an integer"):
        backend.call("t5_bucket", (np.arange(3.0),), {}, mode="jit")


def test_t5_module(backend):
    layer = backend.make_module("T5RelativeBias", 4, bidirectional=False, num_buckets=16, max_distance=64)
    table = backend.weight(layer.table)
    assert table.shape == (16, 4)
    q, k = np.arange(40, 45), np.arange(45)
    actual = backend.to_numpy(layer(backend.from_numpy(q), backend.from_numpy(k)))
    desired = pn.t5_bias(table, q, k, bidirectional=False, num_buckets=16, max_distance=64)
    assert_close(actual, desired, EXACT)


def test_torch_t5_state_dict_is_the_table(require_backend):
    posenc_torch = require_backend("torch")

    layer = posenc_torch.T5RelativeBias(8)
    assert list(layer.state_dict()) == ["table"] and layer.table.shape == (32, 8)


def test_keras_t5_round_trip(require_backend, tmp_path):
    posenc_tf = require_backend("tf")

    layer = posenc_tf.T5RelativeBias(3, bidirectional=False, num_buckets=16, max_distance=32)
    config = layer.get_config()
    assert {k: config[k] for k in ("num_heads", "bidirectional", "num_buckets", "max_distance")} == \
        {"num_heads": 3, "bidirectional": False, "num_buckets": 16, "max_distance": 32}
    original, loaded, loaded_layer = keras_bias_round_trip(layer, 6, tmp_path / "t5.keras")
    np.testing.assert_array_equal(loaded, original)
    np.testing.assert_array_equal(loaded_layer.table.numpy(), layer.table.numpy())


def test_nnx_t5_under_jit_and_grad(require_backend):
    posenc_jax = require_backend("jax")
    import jax.numpy as jnp
    from flax import nnx

    layer = posenc_jax.T5RelativeBias(2, num_buckets=8, max_distance=16, rngs=nnx.Rngs(0))
    q, k = jnp.arange(3, 7), jnp.arange(7)
    out = nnx.jit(lambda m, q, k: m(q, k))(layer, q, k)
    assert_close(np.asarray(out), pn.t5_bias(np.asarray(layer.table[...]), np.arange(3, 7), np.arange(7),
                                             num_buckets=8, max_distance=16), EXACT)
    grads = nnx.grad(lambda m: jnp.sum(m(q, k)))(layer)
    counts = np.bincount(pn.t5_bucket(np.arange(7)[None, :] - np.arange(3, 7)[:, None], num_buckets=8,
                                      max_distance=16).ravel(), minlength=8)
    expected = np.repeat(counts[:, None], 2, axis=1).astype(np.float32)  # d sum / d table = bucket counts
    np.testing.assert_array_equal(np.asarray(grads.table[...]), expected)


# --- relative embeddings ------------------------------------------------------------------------------

def test_relative_bad_input(backend):
    module = backend.module
    table = backend.from_numpy(np.zeros((5, 4), np.float32))
    with pytest.raises(ValueError, match="table must have 5 rows"):
        module.relative_embeddings(backend.from_numpy(np.zeros((6, 4), np.float32)), np.arange(3), np.arange(3),
                                   max_distance=2)
    with pytest.raises(ValueError, match="k_positions"):
        module.relative_embeddings(table, np.arange(3), backend.from_numpy(np.array([0.0, 0.5], np.float32)),
                                   max_distance=2)
    with pytest.raises(ValueError, match="sign"):
        module.relative_embeddings(table, np.arange(3), np.arange(3), max_distance=2, sign="abs")


def test_relative_float_positions_refused_under_jit(backend):
    table = np.zeros((5, 2), np.float32)
    with pytest.raises(backend.jit_errors(TypeError), match="k_positions must be an integer"):
        backend.call("relative_embeddings", (table, np.arange(3), np.arange(3.0)), {"max_distance": 2}, mode="jit")


def test_relative_module(backend):
    layer = backend.make_module("RelativePositionEmbedding", 3, 5, sign="query-key")
    table = backend.weight(layer.table)
    assert table.shape == (7, 5)
    q, k = np.arange(2, 6), np.arange(8)
    actual = backend.to_numpy(layer(backend.from_numpy(q), backend.from_numpy(k)))
    assert_close(actual, pn.relative_embeddings(table, q, k, max_distance=3, sign="query-key"), EXACT)


def test_keras_relative_round_trip(require_backend, tmp_path):
    posenc_tf = require_backend("tf")

    layer = posenc_tf.RelativePositionEmbedding(2, 3, sign="query-key")
    assert {k: layer.get_config()[k] for k in ("max_distance", "dim", "sign")} == \
        {"max_distance": 2, "dim": 3, "sign": "query-key"}
    original, loaded, _ = keras_bias_round_trip(layer, 4, tmp_path / "rel.keras")
    np.testing.assert_array_equal(loaded, original)
