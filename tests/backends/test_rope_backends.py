"""RoPE backends beyond the suite cases: precision goal, modules, compilation behaviour, errors.

Function-level agreement with the spec for every layout x scaling x case set runs in
tests/test_conformance.py (the registered cases of posenc_np/suite/cases_rope.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc_np as pn
from posenc_np.rope import rope_plan
from posenc_np.testing import compare, rope_angle_error, tolerance

PRECISION_POSITIONS = (10_000, 100_000, 1_000_000, 16_000_000)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
DYNAMIC = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 64}
LONGROPE = {"rope_type": "longrope", "short_factor": [1.0, 1.2, 1.5, 2.0], "long_factor": [1.0, 2.0, 4.0, 8.0],
            "factor": 8.0, "original_max_position_embeddings": 64}


@pytest.fixture(autouse=True, scope="module")
def _aot_eager(aot_eager):
    yield


def _half(table, rotary_dim):
    return np.asarray(table, np.float64)[..., : rotary_dim // 2]


@pytest.mark.parametrize("scaling", [None, {**DYNAMIC, "original_max_position_embeddings": 4096}],
                         ids=["default", "dynamic"])
@pytest.mark.parametrize("start", PRECISION_POSITIONS)
def test_angle_error_goal(backend, start, scaling):
    """docs/rope-precision.md: every backend's angle is within 1e-6 rad of float64 up to 1.6e7.

    Dynamic NTK forms its frequencies in-graph from the traced sequence length (double-float in JAX).
    """
    positions = start + np.arange(64)
    cos, sin = backend.call("rope_cos_sin", (positions, 128), {"base": 500000.0, "scaling": scaling})
    error = rope_angle_error(_half(cos, 128), _half(sin, 128), positions, 128, base=500000.0, scaling=scaling)
    assert error <= 1e-6, f"{backend.name}: {error:.2e} rad at position {start}"


def test_angle_error_goal_under_jit(backend, jit_cache):
    positions = 16_000_000 + np.arange(64)
    cos, sin = backend.call("rope_cos_sin", (positions, 128), {}, mode="jit", cache=jit_cache, key="rope-precision")
    assert rope_angle_error(_half(cos, 128), _half(sin, 128), positions, 128) <= 1e-6


def test_plain_float32_angles_miss_the_goal():
    """The baseline the reduction fixes: float32 p * inv_freq is off by ~0.06 rad at 1e6."""
    positions = 1_000_000 + np.arange(64)
    inv = rope_plan(128).turns.astype(np.float64) * 2 * math.pi
    angle = positions.astype(np.float32)[:, None] * inv.astype(np.float32)
    assert rope_angle_error(np.cos(angle), np.sin(angle), positions, 128) > 1e-2


@pytest.mark.parametrize("scaling", [None, LLAMA3, DYNAMIC, LONGROPE], ids=["default", "llama3", "dynamic", "longrope"])
def test_frequencies_match_spec(backend, scaling):
    for seq_len in (None, 1000):
        inv, scale = backend.call(lambda mod, n=seq_len: mod.rope_frequencies(8, scaling=scaling, seq_len=n), (), {})
        desired, desired_scale = pn.rope_frequencies(8, scaling=scaling, seq_len=seq_len)
        result = compare(np.asarray(inv, np.float64) / desired, np.ones(4), tolerance("float32"))
        assert result.passed, result
        assert scale == desired_scale


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_cos_sin_match_spec(backend, layout):
    positions = np.array([[0, 3, 70000], [5, 1, 2]])
    cos, sin = backend.call("rope_cos_sin", (positions, 8), {"layout": layout, "scaling": LLAMA3})
    desired = pn.rope_cos_sin(positions, 8, layout=layout, scaling=LLAMA3)
    max_angle = 70000.0
    for got, want in zip((cos, sin), desired, strict=True):
        assert got.shape == want.shape
        assert compare(got, want, tolerance("float32", max_angle=max_angle)).passed


@pytest.mark.parametrize("call, match", [
    (lambda mod, x, p: mod.apply_rope(x, p[:0]), "do not broadcast"),
    (lambda mod, x, p: mod.apply_rope(x, p, rotary_dim=10), "rotary_dim=10 is larger than the head dim 8"),
    (lambda mod, x, p: mod.apply_rope(x, p, rotary_dim=5), "rotary_dim=5 must be even"),
    (lambda mod, x, p: mod.apply_rope(x, p, scaling={"rope_type": "yarn"}), "missing required keys"),
    (lambda mod, x, p: mod.apply_rope(x, p[:2]), "do not broadcast"),
    (lambda mod, x, p: mod.RotaryEmbedding(8, scaling={"rope_type": "linear", "factor": 0})(x, p), "must be > 0"),
])
def test_bad_arguments_raise(backend, call, match):
    x = np.ones((2, 3, 8), np.float32)
    with pytest.raises(ValueError, match=match):
        backend.call(call, (x, np.arange(3)), {})


@pytest.mark.parametrize("function", ["apply_rope", "RotaryEmbedding"])
def test_float_positions_raise(backend, function):
    x = np.ones((2, 3, 8), np.float32)
    call = (lambda mod, x, p: mod.apply_rope(x, p)) if function == "apply_rope" else (
        lambda mod, x, p: mod.RotaryEmbedding(8, max_len=4)(x, p))
    with pytest.raises(ValueError, match="positions must be an integer"):
        backend.call(call, (x, np.arange(3, dtype=np.float32)), {})


def test_permutation_matches_spec(backend):
    w = np.random.default_rng(0).standard_normal((2 * 16, 6)).astype(np.float32)
    perm = backend.call(lambda mod: mod.rope_permutation(16, source="interleaved", target="half", rotary_dim=8), (), {})
    assert np.array_equal(perm, pn.rope_permutation(16, source="interleaved", target="half", rotary_dim=8))
    out = backend.call(lambda mod, w: mod.permute_qk_rows(w, 2, source="half", target="interleaved"), (w,), {})
    assert np.array_equal(out, pn.permute_qk_rows(w, 2, source="half", target="interleaved"))


# --- modules -----------------------------------------------------------------------------------------

MODULE_KWARGS = {
    "cached": dict(rotary_dim=16, layout="half", max_len=64, scaling={"rope_type": "linear", "factor": 2.0}),
    "partial-interleaved": dict(rotary_pct=0.5, head_dim=16, layout="interleaved", max_len=64),
    "dynamic": dict(rotary_dim=16, scaling=DYNAMIC, max_len=64),
}


def _module_desired(kwargs, x, positions):
    spec = {k: v for k, v in kwargs.items() if k not in ("max_len", "head_dim")}
    return pn.apply_rope(x.astype(np.float64), positions, **spec)


@pytest.mark.parametrize("name", list(MODULE_KWARGS))
def test_module_matches_spec_inside_and_beyond_its_cache(backend, name, mode, jit_cache):
    """One compiled call serves positions in the cache, beyond it, with KV offsets and per-row ids."""
    kwargs = MODULE_KWARGS[name]
    module = backend.module.RotaryEmbedding(**kwargs)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 2, 8, 16)).astype(np.float32)
    for positions in (np.arange(8), np.arange(8) + 60, np.arange(8) + 100_000):
        positions = np.stack([positions, positions[::-1] + 3])[:, None, :]  # per-row ids, broadcast over heads
        out = backend.call(lambda mod, x, p: module(x, p), (x, positions), {}, mode=mode, cache=jit_cache,
                           key=("rope-module", backend.name, name, id(module)))
        desired = _module_desired(kwargs, x, positions)
        plan = rope_plan(16 if "rotary_dim" in kwargs else 8, scaling=kwargs.get("scaling"))
        max_angle = positions.max() * plan.turns_at(positions.max() + 1).max() * 2 * math.pi
        result = compare(out, desired, tolerance("float32", max_angle=max_angle, scale=np.abs(desired).max()))
        assert result.passed, (positions.max(), result)


def test_module_follows_x_dtype(backend):
    import ml_dtypes

    module = backend.module.RotaryEmbedding(8, max_len=16)
    x = np.random.default_rng(6).standard_normal((3, 8)).astype(ml_dtypes.bfloat16)
    out = backend.call(lambda mod, x, p: module(x, p), (x, np.array([0, 5, 20])), {})
    assert out.dtype == x.dtype
    desired = pn.apply_rope(x.astype(np.float64), np.array([0, 5, 20]))
    assert compare(out, desired, tolerance("bfloat16", max_angle=20, scale=np.abs(desired).max())).passed


# --- PyTorch specifics -------------------------------------------------------------------------------

def test_torch_module_state_and_casting():
    torch = pytest.importorskip("torch")
    import posenc_torch as pt

    module = pt.RotaryEmbedding(16, max_len=32, scaling=LONGROPE | {"short_factor": [1.0] * 8, "long_factor": [2.0] * 8})
    assert module.state_dict() == {} and list(module.parameters()) == []
    module = pt.RotaryEmbedding(16, max_len=32).to(torch.bfloat16)
    assert module.turns.dtype == torch.float64 and module.cos_cache.dtype == torch.float32
    x = torch.randn(2, 8, 16, dtype=torch.bfloat16)
    positions = torch.arange(8) + 1000
    out = module(x, positions)
    assert out.dtype == torch.bfloat16
    desired = pn.apply_rope(x.float().numpy().astype(np.float64), positions.numpy())
    assert compare(out.float().numpy(), desired, tolerance("bfloat16", max_angle=1008, scale=np.abs(desired).max())).passed


@pytest.mark.parametrize("kwargs", [dict(max_len=32), dict(scaling=DYNAMIC), dict(scaling=LONGROPE, rotary_dim=8)],
                         ids=["cached", "dynamic", "longrope"])
def test_torch_compile_fullgraph_never_recompiles_for_new_positions(kwargs):
    torch = pytest.importorskip("torch")
    from torch._dynamo.testing import CompileCounter

    import posenc_torch as pt

    kwargs = {"rotary_dim": 16, **kwargs}
    module = pt.RotaryEmbedding(**kwargs)
    counter = CompileCounter()
    compiled = torch.compile(module, backend=counter, fullgraph=True, dynamic=False)
    x = torch.randn(2, 8, 16)
    for start in (0, 20, 60, 5000, 10):  # inside the cache, across its end, beyond it, the scaled regime
        positions = torch.arange(8) + start
        out = compiled(x, positions)
        desired = pn.apply_rope(x.numpy().astype(np.float64), positions.numpy(),
                                **{k: v for k, v in kwargs.items() if k != "max_len"})
        assert compare(out.numpy(), desired, tolerance("float32", max_angle=5008, scale=4 * np.abs(desired).max())
                       ).passed
    assert counter.frame_count == 1


# --- the fast paths (docs/performance.md): spec tables, out=, decode ------------------------------------

@pytest.mark.parametrize("layout, rotary_dim", [("half", None), ("interleaved", 8)], ids=["half", "partial-interleaved"])
def test_apply_rope_across_the_table_end(backend, mode, jit_cache, layout, rotary_dim):
    """Positions straddling row 4096 of the cos/sin table, and far beyond it, in one call signature."""
    x = np.random.default_rng(9).standard_normal((2, 3, 6, 16)).astype(np.float32)
    for positions in (np.arange(4092, 4098), np.arange(6) + 3, np.arange(6) + 16_000_000):
        out = backend.call("apply_rope", (x, positions), {"layout": layout, "rotary_dim": rotary_dim}, mode=mode,
                           cache=jit_cache, key=("rope-table-end", layout))
        desired = pn.apply_rope(x.astype(np.float64), positions, layout=layout, rotary_dim=rotary_dim)
        result = compare(out, desired, tolerance("float32", max_angle=float(positions.max()),
                                                 scale=np.abs(desired).max()))
        assert result.passed, (positions.max(), result)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("layout, rotary_dim", [("half", None), ("interleaved", 8)], ids=["half", "partial-interleaved"])
@pytest.mark.parametrize("target", ["out", "in-place", "new"])
@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "chunked"])
def test_torch_apply_rope_out(monkeypatch, dtype, layout, rotary_dim, target, chunked):
    """`out=` writes the result into the given tensor and returns it; `out=x` rotates in place.

    `chunked` shrinks the eager path's chunk size so these small tensors take the chunk loop that
    large ones take.
    """
    torch = pytest.importorskip("torch")
    import posenc_torch as pt
    from posenc_torch import rope as rope_module

    if chunked:
        monkeypatch.setattr(rope_module, "_CHUNK", 64)

    x = torch.randn(2, 3, 6, 16, generator=torch.Generator().manual_seed(10)).to(getattr(torch, dtype))
    positions = torch.tensor([0, 7, 4095, 4096, 70_000, 2])
    kwargs = dict(layout=layout, rotary_dim=rotary_dim)
    desired = pn.apply_rope(x.double().numpy(), positions.numpy(), **kwargs)
    expected = pt.apply_rope(x, positions, **kwargs)
    if target == "new":
        out = pt.apply_rope(x, positions, **kwargs)
    else:
        out = x.clone() if target == "in-place" else torch.empty_like(x)
        result = pt.apply_rope(out if target == "in-place" else x, positions, out=out, **kwargs)
        assert result is out
    if target != "in-place":
        assert torch.equal(out, expected)  # the same kernels as the allocating call
    check = compare(out.double().numpy(), desired, tolerance(dtype, max_angle=70_000, scale=np.abs(desired).max()))
    assert check.passed, check


def test_torch_apply_rope_out_errors():
    torch = pytest.importorskip("torch")
    import posenc_torch as pt

    x = torch.randn(2, 6, 16)
    for bad in (torch.empty(2, 6, 8), torch.empty(2, 6, 16, dtype=torch.float64), x[:, :, :]):
        with pytest.raises(ValueError, match="out"):
            pt.apply_rope(x, torch.arange(6), out=bad)


def test_torch_apply_rope_differentiable():
    torch = pytest.importorskip("torch")
    import posenc_torch as pt

    x = torch.randn(2, 6, 16, dtype=torch.float64, requires_grad=True)
    positions = torch.arange(6) + 4090
    assert torch.autograd.gradcheck(lambda x: pt.apply_rope(x.float(), positions).double(), (x,), eps=1e-3,
                                     atol=1e-3)


def test_torch_decode_step_compiles_once_and_reuses_the_table(monkeypatch):
    """One token per step at a growing KV-cache offset: one graph, no spec-table build per call."""
    torch = pytest.importorskip("torch")
    from torch._dynamo.testing import CompileCounter

    import posenc_torch as pt
    from posenc_torch import rope as rope_module

    counter = CompileCounter()
    step = torch.compile(lambda q, offset: pt.apply_rope(q, offset + torch.arange(1)), backend=counter,
                         fullgraph=True, dynamic=False)
    q = torch.randn(2, 4, 1, 16)
    step(q, torch.tensor(4094))
    builds = []
    monkeypatch.setattr(rope_module, "spec_rope_cos_sin", lambda *a, **k: builds.append(a) or pn.rope_cos_sin(*a, **k))
    for offset in (4095, 4096, 4097, 100_000, 3):  # inside the table, past its end, back
        out = step(q, torch.tensor(offset))
        desired = pn.apply_rope(q.double().numpy(), np.array([offset]))
        assert compare(out.numpy(), desired, tolerance("float32", max_angle=offset, scale=np.abs(desired).max())).passed
    assert counter.frame_count == 1 and builds == []


def test_jax_and_tf_decode_steps_trace_once():
    """Under jax.jit and tf.function(jit_compile=True) the KV-cache offset is data: one trace for
    offsets inside the 4096-row table, past its end and far beyond it."""
    jax = pytest.importorskip("jax")
    tf = pytest.importorskip("tensorflow")
    import posenc_jax as pj
    import posenc_tf as ptf

    traces = []
    q = np.random.default_rng(11).standard_normal((2, 4, 1, 16)).astype(np.float32)

    def jax_step(q, offset):
        traces.append("jax")
        return pj.apply_rope(q, offset + jax.numpy.arange(1))

    jax_step = jax.jit(jax_step)
    tf_step = tf.function(lambda q, offset: ptf.apply_rope(q, offset + tf.range(1)), jit_compile=True)
    for offset in (4095, 4096, 100_000, 3):
        desired = pn.apply_rope(q.astype(np.float64), np.array([offset]))
        tol = tolerance("float32", max_angle=offset, scale=np.abs(desired).max())
        for out in (jax_step(q, np.int32(offset)), tf_step(q, tf.constant(offset, tf.int32))):
            assert compare(np.asarray(out), desired, tol).passed
    assert traces == ["jax"] and tf_step.experimental_get_tracing_count() == 1


# --- Keras specifics ---------------------------------------------------------------------------------

def test_keras_layer_config_roundtrip_and_bf16_policy(tmp_path):
    pytest.importorskip("tensorflow")
    import keras

    import posenc_tf as ptf

    layer = ptf.RotaryEmbedding(rotary_pct=0.5, head_dim=16, layout="interleaved", max_len=64, scaling=LLAMA3)
    config = layer.get_config()
    for key, value in dict(rotary_dim=None, base=10000.0, layout="interleaved", scaling=LLAMA3, max_len=64,
                           rotary_pct=0.5, head_dim=16).items():
        assert config[key] == value
    assert layer.weights == []
    q = keras.Input((2, 8, 16))
    p = keras.Input((1, 8), dtype="int32")
    model = keras.Model([q, p], layer(q, p))
    path = tmp_path / "rope.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    x = np.random.default_rng(7).standard_normal((2, 2, 8, 16)).astype(np.float32)
    positions = np.stack([np.arange(8), np.arange(8) + 70])[:, None, :]
    desired = pn.apply_rope(x.astype(np.float64), positions, layout="interleaved", rotary_dim=8, scaling=LLAMA3)
    for out in (model([x, positions]), loaded([x, positions])):
        assert compare(np.asarray(out), desired, tolerance("float32", max_angle=80, scale=np.abs(desired).max())).passed

    import tensorflow as tf

    mixed = ptf.RotaryEmbedding(16, max_len=8, dtype="mixed_bfloat16")
    x16 = tf.cast(x, tf.bfloat16)
    out = mixed(x16, np.arange(8) + 100_000)  # beyond the cache, positions far past bf16's 256 integers
    assert out.dtype.name == "bfloat16"
    desired = pn.apply_rope(tf.cast(x16, tf.float64).numpy(), np.arange(8) + 100_000)
    assert compare(tf.cast(out, tf.float32).numpy(), desired,
                   tolerance("bfloat16", max_angle=1e5, scale=np.abs(desired).max())).passed


# --- Flax NNX specifics ------------------------------------------------------------------------------

def test_nnx_module_jit_and_state():
    pytest.importorskip("jax")
    from flax import nnx

    import posenc_jax as pj

    module = pj.RotaryEmbedding(16, max_len=32, scaling=LLAMA3)
    assert not nnx.state(module, nnx.Param)
    step = nnx.jit(lambda m, x, p: m(x, p))
    x = np.random.default_rng(8).standard_normal((2, 8, 16)).astype(np.float32)
    for start in (0, 30, 4000):
        positions = np.arange(8) + start
        desired = pn.apply_rope(x.astype(np.float64), positions, scaling=LLAMA3)
        out = np.asarray(step(module, x, positions))
        assert compare(out, desired, tolerance("float32", max_angle=start + 8, scale=np.abs(desired).max())).passed
