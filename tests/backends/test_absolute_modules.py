"""The absolute encodings' modules in each framework's idiom, and their jit behaviour."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from posenc_np.testing import compare, tolerance

POSITIONS = np.array([[0, 1, 2, 300], [5, 6, 7, 8]])


def _check(actual, desired, dtype="float32", max_angle=0.0, exact=False):
    result = compare(np.asarray(actual, np.float64), np.asarray(desired, np.float64),
                     tolerance(dtype, max_angle=max_angle, exact=exact))
    assert result.passed, result


@pytest.mark.parametrize("max_len", [None, 4, 512])
def test_sinusoidal_module_matches_spec(backend, max_len):
    mod = backend.module
    layer = mod.SinusoidalEncoding(16, layout="concat", denominator="half-1", max_len=max_len)
    out = backend.to_numpy(layer(backend.from_numpy(POSITIONS)))
    _check(out, pn.sinusoidal(POSITIONS, 16, layout="concat", denominator="half-1"), max_angle=300)


def test_learned_module_gathers_its_table_and_rejects_out_of_range(backend):
    layer = backend.make_module("LearnedEncoding", 10, 4)
    table = backend.weight(layer.table)
    out = backend.to_numpy(layer(backend.from_numpy(np.array([[9, 0, 3]]))))
    np.testing.assert_array_equal(out, table[[[9, 0, 3]]])
    with pytest.raises(ValueError, match="positions out of range"):
        layer(backend.from_numpy(np.array([10])))


def test_learned_under_jit_gives_nan_rows_for_out_of_range(backend):
    """Documented: jitted gathers cannot raise, and XLA/JAX would clamp; posenc returns NaN rows."""
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    out = backend.call("learned", (table, np.array([0, 5, 6, -1])), {}, mode="jit")
    np.testing.assert_array_equal(out[:2], table[[0, 5]])
    assert np.isnan(out[2:]).all()


def test_resize_table_is_differentiable_and_matches_spec(backend):
    table = np.random.default_rng(0).normal(size=(12, 3)).astype(np.float32)
    out = backend.call("resize_table", (table, 20), {"method": "cubic"})
    _check(out, pn.resize_table(table.astype(np.float64), 20, method="cubic"))


# --- PyTorch ---------------------------------------------------------------------------------------

def test_torch_state_dict_holds_only_trainable_tables():
    torch = pytest.importorskip("torch")
    import posenc_torch as pt

    assert list(pt.SinusoidalEncoding(8, max_len=16).state_dict()) == []
    assert list(pt.LearnedEncoding(16, 8).state_dict()) == ["table"]
    module = pt.SinusoidalEncoding(8, max_len=16).to(torch.bfloat16)
    out = module(torch.tensor([257]))
    assert out.dtype == torch.bfloat16
    # position 257 is not a bf16 integer; the angle must still be 257 (rounded once at the output)
    np.testing.assert_allclose(out.float().numpy(), pn.sinusoidal(np.array([257]), 8), atol=2**-8)


def test_sinusoidal_cache_never_grows(backend):
    """One cache policy in every backend: `max_len` rows from the spec, positions beyond computed, and a
    call never changes the module (no growth in a forward pass)."""
    module = backend.module.SinusoidalEncoding(8, max_len=4)
    rows = _cache_rows(backend, module)
    positions = np.array([2, 100], np.int32)
    out = backend.to_numpy(module(backend.from_numpy(positions)))
    np.testing.assert_allclose(out, pn.sinusoidal(positions, 8), atol=tolerance("float32", max_angle=100).atol)
    assert rows == _cache_rows(backend, module) == 4


def _cache_rows(backend, module) -> int:
    """Rows of a SinusoidalEncoding's cache: a framework buffer or variable `cache`, or (Keras, where a
    variable would be saved with the model) the NumPy constant `_cache`."""
    cache = backend.weight(module.cache) if hasattr(module, "cache") else module._cache
    return cache.shape[0]


# --- Keras ------------------------------------------------------------------------------------------

def test_keras_layers_config_and_keras_file_round_trip(tmp_path):
    pytest.importorskip("tensorflow")
    import keras

    import posenc_tf as ptf

    layer = ptf.SinusoidalEncoding(8, base=500.0, layout="concat", denominator="half-1", max_len=6)
    config = layer.get_config()
    assert {k: config[k] for k in ("dim", "base", "layout", "denominator", "max_len")} == dict(
        dim=8, base=500.0, layout="concat", denominator="half-1", max_len=6)
    assert ptf.SinusoidalEncoding.from_config(config).get_config() == config
    inputs = keras.Input((5,), dtype="int32")
    outputs = ptf.LearnedEncoding(10, 8)(inputs) + layer(inputs)
    model = keras.Model(inputs, outputs)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)  # no custom_objects: the layers are registered
    x = np.array([[0, 1, 2, 3, 9]])
    np.testing.assert_array_equal(np.asarray(model(x)), np.asarray(loaded(x)))
    assert [w.name for w in loaded.layers[1].weights] == ["table"]


def test_keras_mixed_precision_keeps_positions_exact():
    pytest.importorskip("tensorflow")
    import tensorflow as tf

    import posenc_tf as ptf

    layer = ptf.SinusoidalEncoding(8, dtype="mixed_bfloat16")
    out = layer(tf.constant([257, 4097]))
    assert out.dtype == tf.bfloat16
    np.testing.assert_allclose(tf.cast(out, tf.float32).numpy(), pn.sinusoidal(np.array([257, 4097]), 8),
                               atol=2**-8 + 1e-5)


# --- Flax NNX ---------------------------------------------------------------------------------------

def test_flax_modules_under_nnx_jit():
    pytest.importorskip("jax")
    import jax.numpy as jnp
    from flax import nnx

    import posenc_jax as pj

    learned = pj.LearnedEncoding(8, 4, rngs=nnx.Rngs(0))
    assert set(nnx.state(learned, nnx.Param).keys()) == {"table"}
    sinus = pj.SinusoidalEncoding(4, max_len=8)
    f = nnx.jit(lambda m, s, p: m(p) + s(p))
    p = jnp.asarray([0, 3, 9])
    out = np.asarray(f(learned, sinus, p))
    table = np.asarray(learned.table[...])
    np.testing.assert_allclose(out[:2], table[[0, 3]] + pn.sinusoidal(np.array([0, 3]), 4), atol=1e-6)
    assert np.isnan(out[2]).all()  # row 9 is outside the learned table: NaN under jit, never clamped
