"""T5 buckets and bias: spec against HF transformers' `T5Attention` (bucketing and `compute_bias`) at every
distance in +-4 max_distance, both directions; backends and modules against the spec, exactly."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from posenc_np._dtypes import numpy_dtype
from posenc_np.t5 import t5_bucket_thresholds
from posenc_np.testing import compare, tolerance

torch = pytest.importorskip("torch")
T5Attention = pytest.importorskip("transformers.models.t5.modeling_t5").T5Attention

# (num_buckets, max_distance): the T5 default, other published sizes, and (18, 128), where a float64
# log would put distances 8, 16 and 64 into different buckets than HF's float32 arithmetic.
CONFIGS = [(32, 128), (32, 256), (64, 256), (128, 128), (16, 64), (8, 16), (18, 128), (4, 3)]
EXACT = tolerance("float32", exact=True)


def _assert_close(actual, desired, tol):
    result = compare(actual, desired, tol)
    assert result.passed, f"max abs err {result.max_abs_err:.3g} at {result.worst_index} > {tol}: {result.message}"


def _hf_bucket(relative, bidirectional, num_buckets, max_distance):
    return T5Attention._relative_position_bucket(torch.from_numpy(np.asarray(relative, np.int64)),
                                                 bidirectional=bidirectional, num_buckets=num_buckets,
                                                 max_distance=max_distance).numpy()


# --- spec -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
@pytest.mark.parametrize("num_buckets, max_distance", CONFIGS)
def test_bucket_matches_hf_everywhere(num_buckets, max_distance, bidirectional):
    relative = np.arange(-4 * max_distance, 4 * max_distance + 1)
    ours = pn.t5_bucket(relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert ours.dtype == np.int32
    np.testing.assert_array_equal(ours, _hf_bucket(relative, bidirectional, num_buckets, max_distance))


@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
def test_bucket_log_boundaries_default(bidirectional):
    # For (32, 128) the real-valued log term is exactly 2, 4, 6 at n = 16, 32, 64: the float32 rounding decides.
    distance = np.array([7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000])
    for relative in (distance, -distance):
        np.testing.assert_array_equal(pn.t5_bucket(relative, bidirectional=bidirectional),
                                      _hf_bucket(relative, bidirectional, 32, 128))


def test_bucket_float32_not_float64():
    """Where float64 and HF's float32 disagree (18 buckets, 128), the spec follows float32."""
    distance = np.array([8, 16, 64])
    per_direction, max_exact = 9, 4
    scaled = np.log(distance / max_exact) / np.log(128 / max_exact) * (per_direction - max_exact)
    float64 = max_exact + scaled.astype(int)
    hf = _hf_bucket(-distance, True, 18, 128)
    assert not np.array_equal(float64, hf)
    np.testing.assert_array_equal(pn.t5_bucket(-distance, num_buckets=18, max_distance=128), hf)


def test_bucket_golden_and_semantics():
    relative = np.array([-200, -128, -127, -16, -8, -7, -1, 0, 1, 7, 8, 16, 127, 128, 200])
    np.testing.assert_array_equal(pn.t5_bucket(relative), [15, 15, 15, 10, 8, 7, 1, 0, 17, 23, 24, 26, 31, 31, 31])
    # decoder: every future key (relative > 0) shares bucket 0 with the current position
    assert set(pn.t5_bucket(np.arange(0, 300), bidirectional=False).tolist()) == {0}


@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
@pytest.mark.parametrize("num_buckets, max_distance", CONFIGS)
def test_thresholds_reproduce_buckets(num_buckets, max_distance, bidirectional):
    """What the backends compute: min(n, max_exact) + count(thresholds <= n), integers only."""
    thresholds = t5_bucket_thresholds(bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert np.all(np.diff(thresholds) >= 0)  # equal thresholds: one distance step that skips a bucket
    distance = np.arange(0, 5 * max_distance)
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    counted = np.minimum(distance, per_direction // 2) + np.searchsorted(thresholds, distance, side="right")
    np.testing.assert_array_equal(counted, pn.t5_bucket(-distance, bidirectional=bidirectional,
                                                         num_buckets=num_buckets, max_distance=max_distance))


@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
@pytest.mark.parametrize("past", [0, 37], ids=["prefill", "kv-offset"])
def test_bias_matches_hf_compute_bias(bidirectional, past):
    from transformers import T5Config

    config = T5Config(num_heads=4, d_model=32, d_kv=8, relative_attention_num_buckets=32,
                      relative_attention_max_distance=128, is_decoder=not bidirectional)
    layer = T5Attention(config, has_relative_attention_bias=True).eval()
    table = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    with torch.no_grad():
        layer.relative_attention_bias.weight.copy_(torch.from_numpy(table))
        q_len, k_len = 6, past + 6
        hf = layer.compute_bias(q_len, k_len, past_seen_tokens=past)[0].numpy()  # [heads, q, k]
    ours = pn.t5_bias(table, np.arange(past, past + q_len), np.arange(k_len), bidirectional=bidirectional)
    assert ours.dtype == np.float32
    _assert_close(ours, hf, EXACT)


def test_bias_shapes():
    table = np.arange(64.0).reshape(32, 2)
    assert pn.t5_bias(table, np.arange(3), np.arange(5)).shape == (2, 3, 5)
    batched = pn.t5_bias(table, np.array([[0, 1, 2], [4, 5, 6]]), np.arange(7))
    assert batched.shape == (2, 2, 3, 7)
    np.testing.assert_array_equal(batched[1], pn.t5_bias(table, np.arange(4, 7), np.arange(7)))


@pytest.mark.parametrize("call, match", [
    (lambda: pn.t5_bucket(np.arange(3), num_buckets=31), "num_buckets=31 must be even"),
    (lambda: pn.t5_bucket(np.arange(3), max_distance=8), "max_distance=8 must be larger"),
    (lambda: pn.t5_bucket(np.arange(3), num_buckets=16, max_distance=4), "max_distance=4"),
    (lambda: pn.t5_bucket(np.arange(3), num_buckets=2), "num_buckets=2"),
    (lambda: pn.t5_bucket(np.array([0.5, 1.0])), "relative_position"),
    (lambda: pn.t5_bias(np.zeros((16, 4)), np.arange(3), np.arange(3)), "table must have 32 rows"),
    (lambda: pn.t5_bias(np.zeros(32), np.arange(3), np.arange(3)), "table must be 2-D"),
    (lambda: pn.t5_bias(np.zeros((32, 4)), np.array([0.0, 1.5]), np.arange(3)), "q_positions"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- backends ---------------------------------------------------------------------------------------

def skip_costly_torch_jit(backend, dtype, mode, representative=True):
    """torch.compile costs ~20 s a graph on CPU: torch's jit mode runs the representative float32 cases."""
    if mode == "jit" and backend.name == "torch" and (dtype != "float32" or not representative):
        pytest.skip("torch.compile budget: torch jit runs float32 on the representative case only")


@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (18, 128)])
def test_backend_bucket_exact(backend, mode, num_buckets, max_distance, bidirectional, jit_cache):
    skip_costly_torch_jit(backend, "float32", mode, (num_buckets, bidirectional) == (32, True))
    relative = np.arange(-4 * max_distance, 4 * max_distance + 1)
    kwargs = dict(bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    actual = backend.call("t5_bucket", (relative,), kwargs, mode=mode, cache=jit_cache)
    assert actual.dtype == np.int32
    _assert_close(actual, pn.t5_bucket(relative, **kwargs), EXACT)


POSITION_SETS = {
    "short": (np.arange(8), np.arange(8)),
    "kv-offset": (np.arange(1020, 1024), np.arange(0, 1024, 31)),
    "left-pad": (np.array([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]), np.array([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])),
}


@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
@pytest.mark.parametrize("positions", list(POSITION_SETS))
def test_backend_bias(backend, dtype, mode, positions, bidirectional, jit_cache):
    skip_costly_torch_jit(backend, dtype, mode, positions == "kv-offset" and bidirectional)
    table = np.random.default_rng(1).normal(size=(32, 6)).astype(numpy_dtype(dtype))
    q, k = POSITION_SETS[positions]
    actual = backend.call("t5_bias", (table, q, k), {"bidirectional": bidirectional}, mode=mode, cache=jit_cache)
    assert actual.dtype == numpy_dtype(dtype)
    _assert_close(actual, pn.t5_bias(table, q, k, bidirectional=bidirectional), EXACT)


def test_backend_bad_input(backend):
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


def test_backend_float_positions_under_jit(backend):
    """Under a tracer values cannot be checked, so floating positions are refused by dtype.

    torch.compile(fullgraph=True) reports the TypeError wrapped in torch._dynamo's `Unsupported`.
    """
    table = np.zeros((32, 2), np.float32)
    error = TypeError if backend.name != "torch" else (TypeError, torch._dynamo.exc.Unsupported)
    with pytest.raises(error, match="q_positions must be an integer"):
        backend.call("t5_bias", (table, np.arange(3.0), np.arange(3)), {}, mode="jit")
    with pytest.raises(error, match="relative_position must be an integer"):
        backend.call("t5_bucket", (np.arange(3.0),), {}, mode="jit")


def _t5_module(backend, **kwargs):
    if backend.name == "jax":
        from flax import nnx

        return backend.module.T5RelativeBias(4, rngs=nnx.Rngs(0), **kwargs)
    return backend.module.T5RelativeBias(4, **kwargs)


def test_module(backend):
    layer = _t5_module(backend, bidirectional=False, num_buckets=16, max_distance=64)
    table = backend.to_numpy(layer.table if backend.name != "jax" else layer.table[...])
    assert table.shape == (16, 4)
    q, k = np.arange(40, 45), np.arange(45)
    actual = backend.to_numpy(layer(backend.from_numpy(q), backend.from_numpy(k)))
    desired = pn.t5_bias(table, q, k, bidirectional=False, num_buckets=16, max_distance=64)
    _assert_close(actual, desired, EXACT)


def test_torch_module_state_dict_is_the_table():
    import posenc_torch

    layer = posenc_torch.T5RelativeBias(8)
    assert list(layer.state_dict()) == ["table"] and layer.table.shape == (32, 8)


def test_keras_layer_roundtrip(tmp_path):
    pytest.importorskip("keras")
    import posenc_tf

    layer = posenc_tf.T5RelativeBias(3, bidirectional=False, num_buckets=16, max_distance=32)
    config = layer.get_config()
    assert {k: config[k] for k in ("num_heads", "bidirectional", "num_buckets", "max_distance")} == \
        {"num_heads": 3, "bidirectional": False, "num_buckets": 16, "max_distance": 32}
    from conftest import keras_bias_round_trip

    original, loaded, loaded_layer = keras_bias_round_trip(layer, 6, tmp_path / "t5.keras")
    np.testing.assert_array_equal(loaded, original)
    np.testing.assert_array_equal(loaded_layer.table.numpy(), layer.table.numpy())


def test_nnx_module_under_jit_and_grad():
    nnx = pytest.importorskip("flax.nnx")
    import jax.numpy as jnp

    import posenc_jax

    layer = posenc_jax.T5RelativeBias(2, num_buckets=8, max_distance=16, rngs=nnx.Rngs(0))
    q, k = jnp.arange(3, 7), jnp.arange(7)
    out = nnx.jit(lambda m, q, k: m(q, k))(layer, q, k)
    _assert_close(np.asarray(out), pn.t5_bias(np.asarray(layer.table[...]), np.arange(3, 7), np.arange(7),
                                              num_buckets=8, max_distance=16), EXACT)
    grads = nnx.grad(lambda m: jnp.sum(m(q, k)))(layer)
    counts = np.bincount(pn.t5_bucket(np.arange(7)[None, :] - np.arange(3, 7)[:, None], num_buckets=8,
                                      max_distance=16).ravel(), minlength=8)
    expected = np.repeat(counts[:, None], 2, axis=1).astype(np.float32)  # d sum / d table = bucket counts
    np.testing.assert_array_equal(np.asarray(grads.table[...]), expected)
