"""posenc_mlx vs MLX's own RoPE code: `mx.fast.rope` and mlx-lm's `initialize_rope` classes.

References, installed and run: mlx 0.32.4 (`mx.fast.rope`, `mlx/fast.cpp`: angle = (arange(T) + offset)
* scale * inv_j with inv_j = base ** (-2j / dims), or 1 / freqs[j] when `freqs` (periods) is given;
`traditional=True` rotates interleaved pairs) and mlx-lm 0.32.2 `mlx_lm/models/rope_utils.py`
(`initialize_rope`, `Llama3RoPE`, `YarnRoPE`, `SuScaledRoPE`, `DynamicNTKScalingRoPE`,
`ProportionalRoPE`), loaded by file path: `import mlx_lm` would import huggingface_hub, the file itself
imports only mlx. Both form the angle `p * inv_freq` in float32, so they are held to the float32 angle
term of the tolerance policy (`posenc_np.testing.tolerance(max_angle=...)`), while posenc_mlx reduces
angles in float64 (~1e-7 rad). On the CPU device mlx's kernel also rounds cos/sin to x's dtype (three
roundings in bfloat16, docs/api.md §10), so the comparisons run in float32.

Where mlx-lm computes something other than Hugging Face (YaRN's `truncate` and `attention_factor` not
read, LongRoPE's long factors at every length, `mrope` as plain 1-D RoPE), the spec has runtime
variants (`mlx-yarn`, `mlx-longrope`) and `posenc spec --runtime mlx` reads a config the way mlx-lm
does: the tests below show mlx-lm equal to the variant and different from the HF type, beyond tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from posenc_np.rope import rope_plan
from posenc_np.testing import compare, tolerance

mx = pytest.importorskip("mlx.core")
posenc_mlx = pytest.importorskip("posenc_mlx")


def _rope_utils():
    from posenc.impl import ImplementationUnavailable
    from posenc.impl.builtin.mlx_lm import rope_utils as load  # the --impl mlx-lm adapter's loader

    try:
        return load()
    except ImplementationUnavailable as error:
        pytest.skip(f"{error} (requirements-nodeps.txt)")


rope_utils = _rope_utils()

B, H, T, D = 2, 3, 8, 64


def _x(seed=0, shape=(B, H, T, D)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _tol(x, positions, rotary_dim, *, base, scaling=None, attention_scale=1.0):
    """float32 angle term at the largest angle any of the compared computations forms."""
    plan = rope_plan(rotary_dim, base=base, scaling=scaling)
    top = int(np.max(positions)) + 1
    max_angle = float(np.max(positions)) * float(np.max(plan.turns_at(top))) * 2 * np.pi
    return tolerance("float32", max_angle=max_angle, scale=float(np.abs(x).max()) * max(attention_scale, 1.0))


def _posenc(x, positions, **kwargs):
    return np.asarray(posenc_mlx.apply_rope(mx.array(x), mx.array(positions), **kwargs))


def _assert_equal(got, want, tol, what):
    result = compare(got, want, tol)
    assert result.passed, (what, result)


def _assert_differ(got, want, tol, what):
    """The two computations are different functions: their gap is far outside the float32 tolerance."""
    result = compare(got, want, tol)
    assert result.err_in_tol > 10, (what, result)


# --- mx.fast.rope ------------------------------------------------------------------------------------

@pytest.mark.parametrize("traditional, layout", [(False, "half"), (True, "interleaved")])
@pytest.mark.parametrize("dims", [D, D // 2])
@pytest.mark.parametrize("offset", [0, 4099, 70000])
@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_fast_rope_equals_apply_rope(traditional, layout, dims, offset, base):
    """`traditional` is the layout, `dims` the rotary dim (the rest passes through), `offset` the first position."""
    x = _x()
    positions = np.arange(T) + offset
    got = _posenc(x, positions, base=base, layout=layout, rotary_dim=dims)
    ref = np.asarray(mx.fast.rope(mx.array(x), dims, traditional=traditional, base=base, scale=1.0, offset=offset))
    tol = _tol(x, positions, dims, base=base)
    _assert_equal(got, ref, tol, "posenc_mlx vs mx.fast.rope")
    np.testing.assert_array_equal(got[..., dims:], x[..., dims:])
    # posenc_mlx itself is at the spec's float64 angle (the float32 term above is mx.fast.rope's own error)
    want = pn.apply_rope(x.astype(np.float64), positions, base=base, layout=layout, rotary_dim=dims)
    _assert_equal(got, want, tolerance("float32", angle_error=1e-6, scale=float(np.abs(x).max())), "posenc_mlx vs spec")


def test_fast_rope_offset_vector_is_a_position_per_batch_row():
    """An int `[B]` offset starts each batch row at its own position: positions `[B, 1, T]` in posenc."""
    x = _x(1)
    offsets = np.array([3, 1000], np.int32)
    positions = offsets[:, None, None] + np.arange(T)[None, None, :]
    ref = np.asarray(mx.fast.rope(mx.array(x), D, traditional=False, base=10000.0, scale=1.0,
                                  offset=mx.array(offsets)))
    _assert_equal(_posenc(x, positions), ref, _tol(x, positions, D, base=10000.0), "offset vector")


def test_fast_rope_scale_is_linear_scaling():
    """`scale` multiplies positions: `scale = 1/factor` is HF's `linear` (position interpolation)."""
    x = _x(2)
    positions = np.arange(T) + 50
    scaling = {"rope_type": "linear", "factor": 4.0}
    ref = np.asarray(mx.fast.rope(mx.array(x), D, traditional=False, base=10000.0, scale=0.25, offset=50))
    _assert_equal(_posenc(x, positions, scaling=scaling), ref, _tol(x, positions, D, base=10000.0, scaling=scaling),
                  "scale")


def test_fast_rope_freqs_are_periods():
    """`freqs` holds periods `1 / inv_freq` (the kernel takes their reciprocal): llama3's frequencies passed
    as periods give posenc's llama3 rotation; passed as inverse frequencies they give another rotation."""
    x = _x(3)
    positions = np.arange(T) + 300
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}
    inv_freq, _ = pn.rope_frequencies(D, base=10000.0, scaling=scaling)
    tol = _tol(x, positions, D, base=10000.0, scaling=scaling)
    got = _posenc(x, positions, scaling=scaling)
    for freqs, check in ((1.0 / inv_freq, _assert_equal), (inv_freq, _assert_differ)):
        ref = np.asarray(mx.fast.rope(mx.array(x), D, traditional=False, base=None, scale=1.0, offset=300,
                                      freqs=mx.array(freqs.astype(np.float32))))
        check(got, ref, tol, "freqs convention")


# --- mlx-lm initialize_rope ---------------------------------------------------------------------------

#: (name, initialize_rope's scaling_config, max_position_embeddings, posenc's scaling dict for the same rotation)
MLX_LM_SAME_AS_HF = [
    ("default", None, 4096, None),
    ("linear", {"rope_type": "linear", "factor": 2.0}, 4096, {"rope_type": "linear", "factor": 2.0}),
    ("llama3", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 256}, 2048,
     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 256}),
    ("yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}, 1024,
     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}),
    ("yarn-betas", {"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 128, "beta_fast": 16,
                    "beta_slow": 2}, 1024,
     {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 128, "beta_fast": 16.0,
      "beta_slow": 2.0}),
    ("proportional", {"rope_type": "proportional", "factor": 1.0}, 4096, {"rope_type": "proportional"}),
]


@pytest.mark.parametrize("traditional, layout", [(False, "half"), (True, "interleaved")])
@pytest.mark.parametrize("name, config, max_pos, scaling", MLX_LM_SAME_AS_HF, ids=[c[0] for c in MLX_LM_SAME_AS_HF])
@pytest.mark.parametrize("offset", [0, 2000])
def test_initialize_rope_equals_the_hf_scaling(name, config, max_pos, scaling, traditional, layout, offset):
    """Where mlx-lm implements the HF type as HF does, posenc_mlx's HF type is mlx-lm's rotation."""
    x = _x(4)
    positions = np.arange(T) + offset
    rope = rope_utils.initialize_rope(D, 10000.0, traditional, scaling_config=config, max_position_embeddings=max_pos)
    ref = np.asarray(rope(mx.array(x), offset=offset))
    scale = rope_plan(D, base=10000.0, scaling=scaling).attention_scale
    got = _posenc(x, positions, scaling=scaling, layout=layout)
    _assert_equal(got, ref, _tol(x, positions, D, base=10000.0, scaling=scaling, attention_scale=scale), name)


@pytest.mark.parametrize("offset", [0, 20, 300])
def test_dynamic_ntk_equals_hf_dynamic_at_the_same_length(offset):
    """`DynamicNTKScalingRoPE` sets its base from `max(T + offset, max_position_embeddings)`: HF's dynamic NTK
    at `seq_len = max(positions) + 1`, below the original length (unscaled) and above it."""
    x = _x(5)
    positions = np.arange(T) + offset
    rope = rope_utils.initialize_rope(D, 10000.0, False, scaling_config={"rope_type": "dynamic", "factor": 4.0},
                                      max_position_embeddings=64)
    scaling = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 64}
    ref = np.asarray(rope(mx.array(x), offset=offset))
    _assert_equal(_posenc(x, positions, scaling=scaling), ref, _tol(x, positions, D, base=10000.0, scaling=scaling),
                  "dynamic")


def _yarn_gpt_oss():
    return {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
            "beta_slow": 1.0, "truncate": False}


def _mlx_yarn(config):
    """The spec's `mlx-yarn` dict that `posenc spec --runtime mlx` writes for an HF yarn dict."""
    return {"rope_type": "mlx-yarn", "factor": config["factor"],
            "original_max_position_embeddings": config["original_max_position_embeddings"],
            "beta_fast": float(config.get("beta_fast", 32)), "beta_slow": float(config.get("beta_slow", 1)),
            "mscale": float(config.get("mscale", 1)), "mscale_all_dim": float(config.get("mscale_all_dim", 0))}


@pytest.mark.parametrize("config", [_yarn_gpt_oss(), {"rope_type": "yarn", "factor": 4.0,
                                                      "original_max_position_embeddings": 32768,
                                                      "attention_factor": 1.5}],
                         ids=["truncate-false", "attention-factor"])
def test_yarn_is_mlx_yarn_not_hf_yarn(config):
    """`YarnRoPE` always floors and ceils the correction range and never reads `attention_factor`: equal to
    the spec's `mlx-yarn` variant, and at long positions far from HF's yarn for the same dict."""
    x = _x(6)
    offset = 100_000
    positions = np.arange(T) + offset
    rope = rope_utils.initialize_rope(D, 150000.0, False, scaling_config=config, max_position_embeddings=131072)
    ref = np.asarray(rope(mx.array(x), offset=offset))
    variant = _mlx_yarn(config)
    scale = rope_plan(D, base=150000.0, scaling=variant).attention_scale
    tol = _tol(x, positions, D, base=150000.0, scaling=variant, attention_scale=scale)
    _assert_equal(_posenc(x, positions, base=150000.0, scaling=variant), ref, tol, "mlx-yarn")
    hf = pn.apply_rope(x.astype(np.float64), positions, base=150000.0, scaling=config)
    _assert_differ(hf, ref, tol, "HF yarn vs mlx-lm YarnRoPE")


def test_longrope_is_mlx_longrope_not_hf_longrope():
    """`SuScaledRoPE` rotates with the long factors at every length and scales x by
    sqrt(1 + ln(max_pos / original) / ln(original)): the spec's `mlx-longrope`; HF uses the short factors
    while the sequence is within the original length."""
    x = _x(7)
    rng = np.random.default_rng(0)
    short, long = (1 + rng.random(D // 2)).tolist(), (2 + 6 * rng.random(D // 2)).tolist()
    config = {"rope_type": "longrope", "short_factor": short, "long_factor": long,
              "original_max_position_embeddings": 4096}
    rope = rope_utils.initialize_rope(D, 10000.0, False, scaling_config=config, max_position_embeddings=131072)
    positions = np.arange(T) + 10
    ref = np.asarray(rope(mx.array(x), offset=10))
    variant = {"rope_type": "mlx-longrope", "long_factor": long, "short_factor": short,
               "original_max_position_embeddings": 4096, "factor": 131072 / 4096}
    scale = rope_plan(D, base=10000.0, scaling=variant).attention_scale
    tol = _tol(x, positions, D, base=10000.0, scaling=variant, attention_scale=scale)
    _assert_equal(_posenc(x, positions, scaling=variant), ref, tol, "mlx-longrope")
    hf = pn.apply_rope(x.astype(np.float64), positions, scaling={**config, "factor": 131072 / 4096})
    _assert_differ(hf, ref, tol, "HF longrope vs mlx-lm SuScaledRoPE")


def test_mrope_is_one_dimensional_rope_in_mlx_lm():
    """`initialize_rope` builds plain `nn.RoPE` for `mrope`: the temporal positions' 1-D rotation, not
    Qwen2-VL's multi-axis rotation, whose height/width pairs differ for image tokens."""
    x = _x(8, (1, H, T, D))
    section = [8, 12, 12]
    config = {"type": "mrope", "mrope_section": section}
    rope = rope_utils.initialize_rope(D, 1000000.0, False, scaling_config=config, max_position_embeddings=32768)
    ref = np.asarray(rope(mx.array(x), offset=0))
    temporal = np.arange(T)
    tol = _tol(x, temporal, D, base=1000000.0)
    _assert_equal(_posenc(x, temporal, base=1000000.0), ref, tol, "1-D")
    axes = np.stack([temporal, temporal // 2, temporal % 2 + 3])[:, None, None, :]  # [3, batch, 1, seq]
    multi = _posenc(x, axes, base=1000000.0, mrope_section=section)
    _assert_differ(multi, ref, tol, "M-RoPE vs mlx-lm's 1-D")


# --- posenc spec --runtime mlx reads a config as mlx-lm does -------------------------------------------

RUNTIME_CONFIGS = {
    "llama3": {"model_type": "llama", "head_dim": D, "hidden_size": 4 * D, "num_attention_heads": 4, "num_hidden_layers": 2,
               "rope_theta": 500000.0, "max_position_embeddings": 131072,
               "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192}},
    "yarn-truncate-false": {"model_type": "llama", "head_dim": D, "hidden_size": 4 * D, "num_attention_heads": 4, "num_hidden_layers": 2,
                            "rope_theta": 150000.0, "max_position_embeddings": 131072,
                            "rope_scaling": _yarn_gpt_oss()},
    "interleaved": {"model_type": "llama", "head_dim": D, "hidden_size": 4 * D, "num_attention_heads": 4, "num_hidden_layers": 2,
                    "rope_theta": 10000.0, "max_position_embeddings": 4096, "rope_traditional": True},
}


@pytest.mark.parametrize("name", sorted(RUNTIME_CONFIGS))
def test_runtime_spec_mlx_is_what_mlx_lm_rotates(name):
    """`posenc spec --runtime mlx`'s reading of a config, applied by posenc_mlx, equals the rope mlx-lm's
    `models/llama.py` builds from the same config (`initialize_rope(head_dim, rope_theta, rope_traditional,
    rope_scaling, max_position_embeddings)`)."""
    from posenc.modelspec.runtimes import runtime_spec

    config = RUNTIME_CONFIGS[name]
    layers = [layer for layer in runtime_spec(config, "mlx").layers if layer.rope]
    layer = layers[0]
    assert all(other == layer for other in layers), layers
    rope = rope_utils.initialize_rope(config["head_dim"], config["rope_theta"], config.get("rope_traditional", False),
                                      config.get("rope_scaling"), config["max_position_embeddings"])
    x = _x(9)
    offset = 60_000
    positions = np.arange(T) + offset
    ref = np.asarray(rope(mx.array(x), offset=offset))
    kwargs = dict(base=layer.base, scaling=layer.scaling, layout=layer.layout, rotary_dim=layer.rotary_dim)
    scale = rope_plan(layer.rotary_dim, base=layer.base, scaling=layer.scaling).attention_scale
    tol = _tol(x, positions, layer.rotary_dim, base=layer.base, scaling=layer.scaling, attention_scale=scale)
    _assert_equal(_posenc(x, positions, **kwargs), ref, tol, name)
