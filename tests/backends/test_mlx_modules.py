"""posenc_mlx's modules in MLX's own idiom: `mlx.nn.Module` parameters, `mx.compile`, weights files, gradients.

Each property is MLX's documented module contract (mlx.nn.Module: `parameters()` / `trainable_parameters()`
hold array attributes whose names do not start with an underscore; `save_weights` / `load_weights` write and
read those; `nn.value_and_grad(model, fn)` differentiates with respect to `trainable_parameters()`), held
against posenc's rules: trainable tables are parameters named `table`, caches never are, positions are
data under `mx.compile`, and a module returns what its function (the float64 spec) returns.
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from posenc_np.testing import compare, tolerance

mx = pytest.importorskip("mlx.core")
nn = pytest.importorskip("mlx.nn")
pm = pytest.importorskip("posenc_mlx")
from mlx.utils import tree_flatten, tree_map  # noqa: E402


def _names(tree):
    return sorted(name for name, _ in tree_flatten(tree))


#: module -> the parameter names MLX must report (trainable and all): tables as `table`, never a cache
MODULES = {
    "LearnedEncoding": (lambda: pm.LearnedEncoding(12, 4, key=mx.random.key(0)), ["table"]),
    "T5RelativeBias": (lambda: pm.T5RelativeBias(3, num_buckets=8, max_distance=16, key=mx.random.key(1)), ["table"]),
    "RelativePositionEmbedding": (lambda: pm.RelativePositionEmbedding(4, 6, key=mx.random.key(2)), ["table"]),
    "RotaryEmbedding": (lambda: pm.RotaryEmbedding(8, max_len=32, scaling={"rope_type": "linear", "factor": 2.0}), []),
    "RotaryEmbedding-mrope": (lambda: pm.RotaryEmbedding(8, mrope_section=[1, 1, 2]), []),
    "SinusoidalEncoding": (lambda: pm.SinusoidalEncoding(8, max_len=16), []),
    "ALiBi": (lambda: pm.ALiBi(4), []),
    "CoPE": (lambda: pm.CoPE(8, 6), ["pos_emb"]),
    "KERPLEBias": (lambda: pm.KERPLEBias(3, key=mx.random.key(3)), ["r1", "r2"]),
    "FIREBias": (lambda: pm.FIREBias(2, mlp_width=4), ["L_multiplier", "c", "mlp_in.bias", "mlp_in.weight",
                                                        "mlp_out.bias", "mlp_out.weight"]),
    "DynamicPositionEncoding": (lambda: pm.DynamicPositionEncoding(8), ["proj.bias", "proj.weight"]),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_parameters_hold_the_weights_and_never_a_cache_or_setting(name):
    make, expected = MODULES[name]
    module = make()
    assert _names(module.parameters()) == expected
    assert _names(module.trainable_parameters()) == expected
    if "table" in expected:
        assert module.table is module.parameters()["table"]  # the contract's `table` attribute is the parameter
    module.freeze()
    assert _names(module.trainable_parameters()) == []


def test_cached_modules_keep_their_cache_out_of_the_weights():
    """The cos/sin and sinusoid caches exist (float32, spec rows) but are module state, not parameters."""
    rope = pm.RotaryEmbedding(8, max_len=32)
    cos, sin = pn.rope_cos_sin(np.arange(32), 8)
    np.testing.assert_allclose(np.array(rope.cache[0]), cos[:, :4], atol=1e-7)
    np.testing.assert_allclose(np.array(rope.cache[1]), sin[:, :4], atol=1e-7)
    sinusoidal = pm.SinusoidalEncoding(8, max_len=16)
    np.testing.assert_allclose(np.array(sinusoidal.cache), pn.sinusoidal(np.arange(16), 8), atol=1e-7)
    assert rope.parameters() == {} and sinusoidal.parameters() == {}


@pytest.mark.parametrize("name", ["LearnedEncoding", "T5RelativeBias", "KERPLEBias", "FIREBias",
                                  "DynamicPositionEncoding"])
def test_save_weights_and_load_weights_round_trip(name, tmp_path):
    """`save_weights` writes exactly `parameters()` (safetensors); a fresh module loading it computes the same."""
    make, expected = MODULES[name]
    module, fresh = make(), make()
    fresh.update(tree_map(lambda a: a + 1.0, fresh.parameters()))  # weights the file must replace
    path = tmp_path / "weights.safetensors"
    module.save_weights(str(path))
    assert sorted(mx.load(str(path))) == expected
    fresh.load_weights(str(path))
    args = _call_args(name)
    np.testing.assert_array_equal(np.array(fresh(*args)), np.array(module(*args)))


def _call_args(name):
    if name == "DynamicPositionEncoding":
        return (mx.array(np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)),)
    if name == "LearnedEncoding":
        return (mx.array([0, 3, 11]),)
    return (mx.arange(4), mx.arange(6))


def _count_traces(fn):
    """`mx.compile(fn)` and the number of times it has been traced (a Python side effect runs once per trace)."""
    traces = []

    def counted(*args):
        traces.append(1)
        return fn(*args)

    mx.eval(mx.array(0) + 1)  # a process's first compiled call retraces once when nothing was evaluated before
    return mx.compile(counted), traces


@pytest.mark.parametrize("scaling", [None, {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8},
                                     {"rope_type": "longrope", "original_max_position_embeddings": 8, "factor": 2.0,
                                      "short_factor": [1.0, 1.5], "long_factor": [2.0, 3.0]}],
                         ids=["default", "dynamic", "longrope"])
def test_compiled_rotary_module_never_retraces_for_new_positions(scaling):
    """Positions are data: the same shapes with other values (inside the cache, past it, past the original
    length of dynamic/longrope) run the one compiled graph, and each result is the spec's."""
    rope = pm.RotaryEmbedding(4, max_len=16, scaling=scaling)
    compiled, traces = _count_traces(lambda x, p: rope(x, p))
    x = np.random.default_rng(0).standard_normal((2, 6, 4)).astype(np.float32)
    for start in (0, 10, 4000, 70000):
        positions = np.arange(6) + start
        got = np.array(compiled(mx.array(x), mx.array(positions)))
        want = pn.apply_rope(x.astype(np.float64), positions, scaling=scaling)
        assert compare(got, want, tolerance("float32", angle_error=1e-6, scale=float(np.abs(x).max()))).passed, start
    assert len(traces) == 1


def test_compiled_learned_module_gives_nan_rows_out_of_range_without_retracing():
    """Under mx.compile an out-of-range position cannot raise: its row is NaN (never a clamped row)."""
    module = pm.LearnedEncoding(5, 3, key=mx.random.key(0))
    compiled, traces = _count_traces(lambda p: module(p))
    table = np.array(module.table)
    for positions in ([0, 4, 2], [1, 5, -1]):
        got = np.array(compiled(mx.array(positions)))
        want = np.stack([table[p] if 0 <= p < 5 else np.full(3, np.nan, np.float32) for p in positions])
        np.testing.assert_array_equal(got, want)
    assert len(traces) == 1
    with pytest.raises(ValueError, match="positions"):
        module(mx.array([5]))  # eagerly the spec's error


def test_value_and_grad_of_a_learned_table_is_the_scatter_of_the_cotangent():
    """`nn.value_and_grad` differentiates the `table` parameter: d sum(w * table[p]) / d table = scatter-add of w."""
    module = pm.LearnedEncoding(6, 3, key=mx.random.key(0))
    positions = np.array([0, 2, 2, 5])
    w = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)

    def loss(model, p):
        return mx.sum(model(p) * mx.array(w))

    value, grads = nn.value_and_grad(module, loss)(module, mx.array(positions))
    want = np.zeros((6, 3))
    np.add.at(want, positions, w)
    assert _names(grads) == ["table"]
    np.testing.assert_allclose(np.array(grads["table"]), want, atol=1e-6)
    np.testing.assert_allclose(float(value), float(np.sum(np.array(module.table)[positions] * w)), rtol=1e-5)


def test_value_and_grad_of_the_t5_table_sums_the_cotangent_per_bucket():
    """d sum(c * t5_bias) / d table[b, h] = sum of c[h, q, k] over the (q, k) whose bucket is b (spec buckets)."""
    module = pm.T5RelativeBias(2, num_buckets=8, max_distance=16, key=mx.random.key(0))
    q, k = np.arange(5), np.arange(7)
    c = np.random.default_rng(2).standard_normal((2, 5, 7)).astype(np.float32)
    _, grads = nn.value_and_grad(module, lambda model: mx.sum(model(mx.array(q), mx.array(k)) * mx.array(c)))(module)
    buckets = pn.t5_bucket(k[None, :] - q[:, None], num_buckets=8, max_distance=16)
    want = np.zeros((8, 2))
    for h in range(2):
        np.add.at(want[:, h], buckets, c[h])
    np.testing.assert_allclose(np.array(grads["table"]), want, atol=1e-5)


def test_half_precision_modules_follow_their_table_and_x():
    """Trainable modules return their table's dtype; RotaryEmbedding returns x's, rotated in float32."""
    learned = pm.LearnedEncoding(4, 2, dtype=mx.bfloat16, key=mx.random.key(0))
    assert learned(mx.array([1, 2])).dtype == mx.bfloat16
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float16)
    out = pm.RotaryEmbedding(8)(mx.array(x), mx.arange(3))
    assert out.dtype == mx.float16
    want = pn.apply_rope(x, np.arange(3))
    assert compare(np.array(out), want, tolerance("float16", scale=float(np.abs(want).max()))).passed
