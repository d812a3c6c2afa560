"""The stacks' own rotary code, built from the configs `posenc.port.stack_config` writes, computes the
frequencies posenc's reading says: megatron-core 0.16.1's `RotaryEmbedding` / `YarnRotaryEmbedding` built as
`GPTModel.__init__` builds them (models/gpt/gpt_model.py l.159-190) and MLA's softmax mscale
(`_yarn_get_mscale`, multi_latent_attention.py l.125-126); torchtitan 0.3.0's `ComplexRoPE` cache and
`_yarn_inv_freq`; transformers' rotary module for the HF config written on the way back.

Tolerance: the libraries compute in float32 (inv_freq by a float32 power, llama3's smoothing and YaRN's ramp
in float32), posenc in float64: relative 4e-6 (~32 float32 ulps) holds a handful of rounded float32
operations; a translation error moves some band by far more (the smallest, linear factor 1.0001, by 1e-4).
megatron-core is imported with Transformer Engine hidden (the Python-only TE wheel here raises on import;
megatron then takes its non-TE branches, as `posenc/impl/builtin/megatron_core.py` does).
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from posenc.modelspec.compare import softmax_multiplier
from posenc.modelspec.readers import read_hf_config, read_megatron, read_torchtitan
from posenc.port.stack_config import source_hf_config, target_config

torch = pytest.importorskip("torch")

RTOL = 4e-6
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 131072,
         "rope_theta": 500000.0}
SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192},
    "yarn-mscale": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192, "mscale": 0.7,
                    "mscale_all_dim": 0.3},
}


def _hf(scaling, **extra):
    return {**LLAMA, **extra, **({"rope_scaling": dict(scaling)} if scaling else {})}


def _inv_freq(spec):
    plan = spec.layers[0].plan()
    return plan.turns * 2 * math.pi, plan.attention_scale


@pytest.fixture
def megatron(monkeypatch):
    """megatron-core's rotary modules, imported with Transformer Engine hidden; torch.cuda kept off."""
    if "transformer_engine" not in sys.modules:
        monkeypatch.setitem(sys.modules, "transformer_engine", None)
    try:
        from megatron.core.models.common.embeddings import rotary_pos_embedding, yarn_rotary_pos_embedding
    except ImportError as error:
        pytest.skip(f"megatron-core does not import: {error}")
    # YarnRotaryEmbedding moves its tables to torch.cuda.current_device() on first use
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    return rotary_pos_embedding, yarn_rotary_pos_embedding


def _megatron_module(mods, mc):
    """The rotary module GPTModel builds for this config (gpt_model.py l.159-190)."""
    rotary, yarn = mods
    common = dict(kv_channels=mc["kv_channels"], rotary_percent=mc["rotary_percent"],
                  rotary_interleaved=mc["rotary_interleaved"],
                  seq_len_interpolation_factor=mc.get("seq_len_interpolation_factor"),
                  rotary_base=mc["rotary_base"], use_cpu_initialization=True)
    if mc["position_embedding_type"] == "rope":
        return rotary.RotaryEmbedding(rope_scaling=mc.get("rope_scaling", False),
                                      rope_scaling_factor=mc.get("rope_scaling_factor", 8.0), **common)
    return yarn.YarnRotaryEmbedding(scaling_factor=mc["yarn_rotary_scaling_factor"],
                                    original_max_position_embeddings=mc["yarn_original_max_position_embeddings"],
                                    beta_fast=mc["yarn_beta_fast"], beta_slow=mc["yarn_beta_slow"],
                                    mscale=mc["yarn_mscale"], mscale_all_dim=mc["yarn_mscale_all_dim"],
                                    correction_range_round_to_int=mc["yarn_correction_range_round_to_int"], **common)


# yarn with partial rotary is refused (YarnRotaryEmbedding rotates the whole head): not a case here
@pytest.mark.parametrize("scaling, partial", [(s, 1.0) for s in sorted(SCALINGS)]
                         + [(s, 0.5) for s in sorted(SCALINGS) if not s.startswith("yarn")])
def test_megatron_core_rotary_module_from_the_written_config(megatron, scaling, partial):
    extra = {} if partial == 1.0 else {"partial_rotary_factor": partial}
    hf = _hf(SCALINGS[scaling], **extra)
    mc = target_config("megatron", hf)
    want, attention = _inv_freq(read_hf_config(hf))
    module = _megatron_module(megatron, mc)
    if mc["position_embedding_type"] == "rope":
        got = module.get_freqs_non_repeated(2)[1].double().numpy()  # position 1: the effective inv_freq
        got_attention = 1.0
    else:
        emb, got_attention = module.get_emb(2)
        got = emb[1, 0, 0, : emb.shape[-1] // 2].double().numpy()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=0)
    assert math.isclose(got_attention, attention, rel_tol=1e-12)  # a Python float in both


def test_megatron_mla_softmax_mscale_is_what_the_reader_says(megatron):
    _, yarn = megatron
    for factor, all_dim, kind in ((40.0, 1.0, "yarn"), (40.0, 1.0, "rope"), (1.0, 1.0, "rope")):
        mc = {"num_layers": 2, "num_attention_heads": 4, "multi_latent_attention": True, "rope_type": kind,
              "rotary_scaling_factor": factor, "mscale": 1.0, "mscale_all_dim": all_dim, "qk_pos_emb_head_dim": 64}
        want = yarn._yarn_get_mscale(factor, all_dim) ** 2  # multi_latent_attention.py l.125-126
        assert math.isclose(softmax_multiplier(read_megatron(mc)), want, rel_tol=1e-12), (factor, kind)


@pytest.fixture
def torchtitan_rope():
    return pytest.importorskip("torchtitan.models.common.rope")


@pytest.mark.parametrize("scaling", ["default", "llama3", "llama3.2"])
def test_torchtitan_complex_rope_cache_from_the_written_config(torchtitan_rope, scaling):
    cases = {**SCALINGS, "llama3.2": {**SCALINGS["llama3"], "factor": 32.0, "low_freq_factor": 2.0}}
    hf = _hf(cases[scaling])
    tt = target_config("torchtitan", hf)
    rope = {**tt["model_spec"]["model"]["layers"][0]["attention"]["rope"], "max_seq_len": 4}
    cache = torchtitan_rope.ComplexRoPE(torchtitan_rope.ComplexRoPE.Config(**rope)).cache
    got = torch.angle(cache[1]).double().numpy()  # position 1: inv_freq (all below pi)
    want, _ = _inv_freq(read_torchtitan(tt))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=0)
    np.testing.assert_allclose(want, _inv_freq(read_hf_config(hf))[0], rtol=1e-12, atol=0)


def test_torchtitan_yarn_inv_freq_from_the_written_config(torchtitan_rope):
    hf = _hf({**SCALINGS["yarn"], "attention_factor": 1.0})  # torchtitan's llama3 rope applies no attention factor
    rope = target_config("torchtitan", hf)["model_spec"]["model"]["layers"][0]["attention"]["rope"]
    got = torchtitan_rope._yarn_inv_freq(rope["dim"], rope["theta"], rope["rope_factor"], rope["beta_fast"],
                                         rope["beta_slow"], rope["original_seq_len"], rope["truncate"])
    np.testing.assert_allclose(got.double().numpy(), _inv_freq(read_hf_config(hf))[0], rtol=RTOL, atol=0)


@pytest.mark.parametrize("dialect", ["megatron", "nemo", "torchtitan"])
def test_transformers_computes_the_written_hf_config_as_posenc_reads_it(dialect):
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    scaling = SCALINGS["llama3"] if dialect != "megatron" else SCALINGS["linear"]
    back = source_hf_config(dialect, target_config(dialect, _hf(scaling)))
    assert back["rope_scaling"]["rope_type"] == scaling["rope_type"]
    config = transformers.LlamaConfig(**{k: v for k, v in back.items() if k not in ("model_type", "architectures")})
    module = LlamaRotaryEmbedding(config)
    want, attention = _inv_freq(read_hf_config(back))
    np.testing.assert_allclose(module.inv_freq.double().numpy(), want, rtol=RTOL, atol=0)
    assert math.isclose(module.attention_scaling, attention, rel_tol=1e-12)


def test_the_megatron_keys_and_defaults_are_megatron_cores(megatron):
    """Every key the reader uses is a megatron-core 0.16.1 TransformerConfig / MLATransformerConfig field, a
    GPTModel argument or a yarn_* attribute GPTModel reads with getattr, except the two length names
    Megatron-Bridge and NeMo add (seq_length, max_position_embeddings); MLA_DEFAULTS are the class defaults."""
    import dataclasses
    import inspect

    from megatron.core.models.gpt import gpt_model
    from megatron.core.transformer.transformer_config import MLATransformerConfig

    from posenc.modelspec.readers.megatron import _GPT_DEFAULTS, MEGATRON_KEYS, MLA_DEFAULTS
    fields = {f.name: f for f in dataclasses.fields(MLATransformerConfig)}
    arguments = inspect.signature(gpt_model.GPTModel.__init__).parameters
    source = inspect.getsource(gpt_model)
    getattrs = {k for k in MEGATRON_KEYS if k.startswith("yarn_") and f'"{k}"' in source}
    assert MEGATRON_KEYS - set(fields) - set(arguments) - getattrs == {"seq_length", "max_position_embeddings"}
    for key, value in MLA_DEFAULTS.items():
        assert fields[key].default == value, key
    for key in ("rotary_percent", "rotary_base", "rope_scaling", "rope_scaling_factor", "seq_len_interpolation_factor"):
        assert arguments[key].default == _GPT_DEFAULTS[key], key
    yarn = inspect.signature(megatron[1].YarnRotaryEmbedding.__init__).parameters
    for key in ("original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                "correction_range_round_to_int"):
        assert yarn[key].default == _GPT_DEFAULTS[f"yarn_{key}"], key


def test_the_torchtitan_rope_keys_and_defaults_are_rope_configs(torchtitan_rope):
    import dataclasses

    from posenc.modelspec.readers.torchtitan import _ROPE_KEYS, TORCHTITAN_ROPE_DEFAULTS
    fields = {f.name: f for f in dataclasses.fields(torchtitan_rope.ComplexRoPE.Config)}
    assert set(fields) == _ROPE_KEYS
    for key, value in TORCHTITAN_ROPE_DEFAULTS.items():
        assert fields[key].default == value, key
