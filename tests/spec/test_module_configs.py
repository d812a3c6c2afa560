"""The module configs of `posenc_np._modules`: the one place a module's constructor arguments are checked.

* A bad argument raises what the spec function given the same argument raises: same type, same message
  (the message is written once; a config that phrased it again would fail here).
* `as_dict()` round-trips: `type(c)(**c.as_dict()) == c` (what Keras `from_config(get_config())` relies
  on), with the keys the constructor takes, JSON-shaped values (RoPE's `mrope_section` as a list,
  `rotary_dim` as given, None with `rotary_pct`).
* Normalised, frozen, hashable (Flax NNX keeps a config as static graph data, RoPE's scaling dict too).
* The spec-derived caches equal the spec functions' rows.

NumPy only, like the spec.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import posenc_np as pe
from posenc_np import _modules as M

P = np.arange(3)

#: (config call, spec call with the same bad argument): both must raise the same exception.
SAME_ERROR = {
    "sinusoidal-odd-dim": (lambda: M.SinusoidalConfig(7), lambda: pe.sinusoidal(P, 7)),
    "sinusoidal-layout": (lambda: M.SinusoidalConfig(8, layout="zigzag"), lambda: pe.sinusoidal(P, 8, layout="zigzag")),
    "sinusoidal-base": (lambda: M.SinusoidalConfig(8, base=-1.0), lambda: pe.sinusoidal(P, 8, base=-1.0)),
    "sinusoidal-half-1": (lambda: M.SinusoidalConfig(2, denominator="half-1"),
                          lambda: pe.sinusoidal(P, 2, denominator="half-1")),
    "dynamic-denominator": (lambda: M.DynamicConfig(8, denominator="x"),
                            lambda: pe.dynamic_position_encoding(np.zeros((3, 8)), np.zeros((8, 8)), np.zeros(8),
                                                                 denominator="x")),
    "alibi-form": (lambda: M.ALiBiConfig(4, form="sideways"), lambda: pe.alibi_bias(4, P, P, form="sideways")),
    "alibi-heads": (lambda: M.ALiBiConfig(0), lambda: pe.alibi_bias(0, P, P)),
    "alibi-heads-float": (lambda: M.ALiBiConfig(4.0), lambda: pe.alibi_bias(4.0, P, P)),
    "t5-bidirectional": (lambda: M.T5BiasConfig(4, bidirectional="yes"),
                         lambda: pe.t5_bucket(P, bidirectional="yes")),
    "t5-odd-buckets": (lambda: M.T5BiasConfig(4, num_buckets=31), lambda: pe.t5_bucket(P, num_buckets=31)),
    "t5-max-distance": (lambda: M.T5BiasConfig(4, max_distance=0), lambda: pe.t5_bucket(P, max_distance=0)),
    "relative-sign": (lambda: M.RelativeConfig(2, 4, sign="up"),
                      lambda: pe.relative_embeddings(np.zeros((5, 4)), P, P, max_distance=2, sign="up")),
    "relative-max-distance": (lambda: M.RelativeConfig(-1, 4),
                              lambda: pe.relative_embeddings(np.zeros((5, 4)), P, P, max_distance=-1)),
    "kerple-kernel": (lambda: M.KERPLEConfig(2, kernel="gauss"),
                      lambda: pe.kerple_bias(np.ones(2), np.ones(2), P, P, kernel="gauss")),
    "fire-eps": (lambda: M.FIREConfig(2, eps=-1.0),
                 lambda: pe.fire_bias(0.1, 512.0, np.ones((4, 1)), np.ones(4), np.ones((2, 4)), np.ones(2), P, P,
                                      eps=-1.0)),
    "rope-odd-dim": (lambda: M.RotaryConfig(7), lambda: pe.rope_cos_sin(P, 7)),
    "rope-layout": (lambda: M.RotaryConfig(8, layout="zigzag"), lambda: pe.apply_rope(np.zeros((3, 8)), P, layout="zigzag")),
    "rope-pct-and-dim": (lambda: M.RotaryConfig(8, rotary_pct=0.5, head_dim=16),
                         lambda: pe.rope_cos_sin(P, 8, rotary_pct=0.5, head_dim=16)),
    "rope-pct-range": (lambda: M.RotaryConfig(rotary_pct=1.5, head_dim=16),
                       lambda: pe.rope_cos_sin(P, rotary_pct=1.5, head_dim=16)),
    "rope-scaling": (lambda: M.RotaryConfig(8, scaling={"rope_type": "linear"}),
                     lambda: pe.rope_cos_sin(P, 8, scaling={"rope_type": "linear"})),
    "rope-mrope-section": (lambda: M.RotaryConfig(16, mrope_section=[2, 3, 4]),
                           lambda: pe.rope_cos_sin(np.zeros((3, 3), int), 16, mrope_section=[2, 3, 4])),
    "rope-mrope-without-section": (lambda: M.RotaryConfig(16, mrope_interleaved=True),
                                   lambda: pe.rope_cos_sin(P, 16, mrope_interleaved=True)),
}


@pytest.mark.parametrize("config_call, spec_call", list(SAME_ERROR.values()), ids=list(SAME_ERROR))
def test_a_bad_argument_gets_the_spec_functions_error(config_call, spec_call):
    with pytest.raises((TypeError, ValueError)) as from_spec:
        spec_call()
    with pytest.raises(from_spec.type) as from_config:
        config_call()
    assert str(from_config.value) == str(from_spec.value)


@pytest.mark.parametrize("call, error, message", [
    (lambda: M.SinusoidalConfig(8, max_len=0), ValueError, "max_len=0 must be >= 1"),
    (lambda: M.SinusoidalConfig(8, max_len=16.0), TypeError, "max_len=16.0 must be an integer"),
    (lambda: M.LearnedConfig(0, 8), ValueError, "max_len=0 must be >= 1"),
    (lambda: M.LearnedConfig(4, 2.5), TypeError, "dim=2.5 must be an integer"),
    (lambda: M.T5BiasConfig(True), TypeError, "num_heads=True must be an integer"),
    (lambda: M.RelativeConfig(2, 0), ValueError, "dim=0 must be >= 1"),
    (lambda: M.KERPLEConfig(0), ValueError, "num_heads=0 must be >= 1"),
    (lambda: M.KERPLEConfig(2, eps=0.0), ValueError, "eps=0.0 must be > 0"),
    (lambda: M.FIREConfig(2, mlp_width=0), ValueError, "mlp_width=0 must be >= 1"),
    (lambda: M.FIREConfig(2, init_L=float("inf")), ValueError, "init_L=inf must be a finite real number"),
    (lambda: M.FIREConfig(2, init_c=0.0), ValueError, "init_c=0.0 must be > 0"),
    (lambda: M.CoPEConfig(8, 0), ValueError, "max_pos=0 must be >= 1"),
    (lambda: M.RotaryConfig(8, head_dim=0), ValueError, "head_dim=0 must be >= 1"),
    (lambda: M.RotaryConfig(16, head_dim=8), ValueError, "rotary_dim=16 is larger than the head dim 8"),
    (lambda: M.RotaryConfig(8, max_len=-3), ValueError, "max_len=-3 must be >= 1"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_module_only_arguments_name_argument_and_value(call, error, message):
    """Arguments no spec function takes (table sizes, cache rows, init values): `_validate`'s messages."""
    with pytest.raises(error) as caught:
        call()
    assert str(caught.value) == message


CONFIGS = [
    M.SinusoidalConfig(16, base=500, layout="concat", denominator="half-1", max_len=12),
    M.SinusoidalConfig(8),
    M.LearnedConfig(32, 8),
    M.ALiBiConfig(12, form="bloom"),
    M.T5BiasConfig(np.int64(4), bidirectional=False, num_buckets=np.int32(16), max_distance=64),
    M.RelativeConfig(0, 4, sign="query-key"),
    M.DynamicConfig(8, base=100.0, layout="concat"),
    M.KERPLEConfig(3, kernel="power", eps=0.05),
    M.FIREConfig(2, mlp_width=8, init_c=0.5, init_L=64, eps=0),
    M.CoPEConfig(16, 5),
    M.RotaryConfig(32, base=500000, layout="interleaved", max_len=16,
                   scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192}),
    M.RotaryConfig(rotary_pct=0.25, head_dim=64, max_len=8),
    M.RotaryConfig(16, mrope_section=(2, 3, 3), mrope_interleaved=True),
    M.RotaryConfig(16, mrope_section=3, mrope_frequencies="per-axis"),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: type(c).__name__)
def test_as_dict_round_trips_through_the_constructor_and_json(config):
    as_dict = config.as_dict()
    assert list(as_dict) == [field.name for field in dataclasses.fields(config)]  # the constructor's names
    assert type(config)(**as_dict) == config
    reloaded = json.loads(json.dumps(as_dict))  # what a `.keras` file stores: plain JSON values
    assert reloaded == as_dict and type(config)(**reloaded) == config
    assert hash(type(config)(**reloaded)) == hash(config)
    assert config.repr_args() == ", ".join(f"{k}={getattr(config, k)!r}" for k in as_dict)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: type(c).__name__)
def test_bind_sets_each_field_as_an_attribute_and_the_config_is_frozen(config):
    class Module:
        pass

    module = Module()
    config.bind(module)
    assert module.config is config
    for field in dataclasses.fields(config):
        assert getattr(module, field.name) == getattr(config, field.name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.dim = 4


def test_values_are_normalised_to_python_types():
    t5 = M.T5BiasConfig(np.int64(4), num_buckets=np.int32(16), bidirectional=np.True_)
    assert [type(v) for v in (t5.num_heads, t5.num_buckets, t5.bidirectional)] == [int, int, bool]
    assert M.SinusoidalConfig(8, base=500).base == 500.0 and type(M.SinusoidalConfig(8, base=500).base) is float
    assert M.FIREConfig(2, init_L=64, eps=0).as_dict()["init_L"] == 64.0
    rope = M.RotaryConfig(rotary_pct=0.25, head_dim=64)
    assert rope.rotary_dim == 16 and rope.as_dict()["rotary_dim"] is None  # resolved, given back as given
    mrope = M.RotaryConfig(16, mrope_section=[2, 3, 3])
    assert mrope.mrope_section == (2, 3, 3) and mrope.as_dict()["mrope_section"] == [2, 3, 3]
    assert M.RotaryConfig(16, mrope_section=3).mrope_section == 3  # a number of axes stays one


def test_sinusoidal_cache_rows_are_the_spec_rows():
    config = M.SinusoidalConfig(8, base=100.0, layout="concat", max_len=5)
    np.testing.assert_array_equal(config.cache_table(), pe.sinusoidal(np.arange(5), 8, base=100.0, layout="concat"))
    assert config.cache_table().dtype == np.float64
    assert M.SinusoidalConfig(8).cache_table().shape == (0, 8)  # no max_len: an empty cache, always computed


def test_rope_cache_rows_where_a_table_applies():
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
    config = M.RotaryConfig(16, max_len=6, scaling=scaling)
    cos, sin = config.cache_cos_sin()
    ref_cos, ref_sin = pe.rope_cos_sin(np.arange(6), 16, scaling=scaling)
    np.testing.assert_array_equal(cos, ref_cos[:, :8])
    np.testing.assert_array_equal(sin, ref_sin[:, :8])
    assert config.plan.kind == "static" and config.plan.rotary_dim == 16
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4}
    assert M.RotaryConfig(16, max_len=6, scaling=dynamic).cache_rows == 0  # depends on the sequence length
    assert M.RotaryConfig(16, max_len=6, mrope_section=[2, 3, 3]).cache_rows == 0  # multi-axis: computed
    assert M.RotaryConfig(16).cache_cos_sin()[0].shape == (0, 8)
