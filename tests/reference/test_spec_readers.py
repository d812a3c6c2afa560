"""posenc.modelspec readers against files written by the real tools, and runtime variants against their sources.

* HF: transformers' own `save_pretrained` (v5 `rope_parameters`) and the v4 dict of the same model read as
  one spec, whose frequencies are those of transformers' `LlamaRotaryEmbedding` (float32: rtol 1e-6).
* GGUF: files written by gguf-py's `GGUFWriter` (the metadata keys and rope tensors llama.cpp's converter
  writes) read as the spec of their HF source.
* keras-hub (installed 0.32.0, `pip install --no-deps keras-hub`): a `LlamaBackbone`'s `get_config()` reads
  as its HF source; `RotaryEmbedding`'s own inverse frequencies equal the spec's for keras-hub's YaRN.
* Meta params.json and MaxText keys: the published defaults (llama-models `apply_scaling`, MaxText
  `LLaMARotaryEmbedding`) read as the HF Llama 3.1 settings.
* Runtime variants that are not installed (vLLM, mlx-lm, llama.cpp): numbers published in
  landscape research and the formulas of their source files (cited in posenc_np/scaling.py).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from posenc.modelspec import compare_specs, read_source, runtime_spec
from posenc.modelspec.compare import probe_positions
from posenc_np.rope import rope_frequencies

LLAMA31 = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
           "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 131072,
           "vocab_size": 128, "rope_theta": 500000.0,
           "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192, "rope_type": "llama3"}}


def _inv_freq(spec, layer=0):
    return spec.layers[layer].plan().turns * 2 * math.pi


def test_hf_v4_dict_and_transformers_save_read_as_one_spec(tmp_path):
    transformers = pytest.importorskip("transformers")
    import torch
    config = transformers.LlamaConfig(**{k: v for k, v in LLAMA31.items() if k != "model_type"})
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "rope_parameters" in saved and "rope_scaling" not in saved  # the v5 form, written by transformers
    v5 = read_source(str(tmp_path / "config.json"))
    v4 = read_source(dict(LLAMA31))
    result = compare_specs(v4, v5)
    assert result.same and not result.differences, result.as_dict()
    rotary = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding(config)
    np.testing.assert_allclose(_inv_freq(v5), rotary.inv_freq.to(torch.float64).numpy(), rtol=1e-6)


def test_hf_per_layer_config_reads_each_layer_type():
    cfg = {"model_type": "gemma3_text", "num_hidden_layers": 6, "head_dim": 16, "hidden_size": 64,
           "num_attention_heads": 4, "sliding_window_pattern": 3, "max_position_embeddings": 32768,
           "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                               "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}}
    spec = read_source(cfg)
    assert [layer.base for layer in spec.layers] == [1e4, 1e4, 1e6, 1e4, 1e4, 1e6]
    assert spec.layers[2].scaling == {"rope_type": "linear", "factor": 8.0}
    # dropping the global layers' scaling is a difference on layers 2 and 5 only
    flat = {**cfg, "rope_parameters": {**cfg["rope_parameters"],
                                       "full_attention": {"rope_type": "default", "rope_theta": 1e6}}}
    result = compare_specs(spec, read_source(flat))
    assert not result.same and result.differences == ["layers 2,5: scaling: 'linear' vs 'default'"]


def _write_gguf(path, arch, fields, tensors):
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), arch)
    for key, (kind, value) in fields.items():
        getattr(writer, f"add_{kind}")(key, value)
    for name, array in tensors.items():
        writer.add_tensor(name, np.asarray(array, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_gguf_written_with_gguf_writer_matches_its_hf_source(tmp_path):
    """llama3 as convert_hf_to_gguf.py writes it: NORM rope on Meta-ordered rows, rope_freqs factors (F32)."""
    default, _ = rope_frequencies(16, base=500000.0)
    scaled, _ = rope_frequencies(16, base=500000.0, scaling=dict(LLAMA31["rope_scaling"]))
    fields = {"llama.block_count": ("uint32", 2), "llama.context_length": ("uint32", 131072),
              "llama.embedding_length": ("uint32", 64), "llama.attention.head_count": ("uint32", 4),
              "llama.attention.head_count_kv": ("uint32", 2), "llama.rope.dimension_count": ("uint32", 16),
              "llama.rope.freq_base": ("float32", 500000.0)}
    _write_gguf(tmp_path / "m.gguf", "llama", fields, {"rope_freqs.weight": default / scaled})
    from_gguf = read_source(str(tmp_path / "m.gguf"))
    assert from_gguf.row_order == "meta" and from_gguf.layers[0].layout == "interleaved"
    result = compare_specs(read_source(dict(LLAMA31)), from_gguf)
    assert result.same, result.as_dict()
    # the same file without rope_freqs is an unscaled model: llama.cpp would run it unscaled
    _write_gguf(tmp_path / "plain.gguf", "llama", fields, {})
    result = compare_specs(read_source(dict(LLAMA31)), read_source(str(tmp_path / "plain.gguf")))
    assert not result.same and result.horizon is not None


def test_gguf_yarn_neox_matches_hf_yarn_with_truncation(tmp_path):
    fields = {"qwen2.block_count": ("uint32", 1), "qwen2.context_length": ("uint32", 131072),
              "qwen2.embedding_length": ("uint32", 128), "qwen2.attention.head_count": ("uint32", 2),
              "qwen2.rope.freq_base": ("float32", 1000000.0), "qwen2.rope.scaling.type": ("string", "yarn"),
              "qwen2.rope.scaling.factor": ("float32", 4.0),
              "qwen2.rope.scaling.original_context_length": ("uint32", 32768)}
    _write_gguf(tmp_path / "q.gguf", "qwen2", fields, {})
    hf = {"model_type": "qwen2", "num_hidden_layers": 1, "hidden_size": 128, "num_attention_heads": 2,
          "max_position_embeddings": 131072, "rope_theta": 1000000.0,
          "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    gguf_spec = read_source(str(tmp_path / "q.gguf"))
    assert gguf_spec.layers[0].layout == "half" and gguf_spec.row_order == "hf"
    assert compare_specs(read_source(hf), gguf_spec).same
    # gpt-oss style truncate=False: llama.cpp's floor/ceil gives other frequencies, found by the horizon
    loose = {**hf, "rope_scaling": {**hf["rope_scaling"], "truncate": False}}
    assert not compare_specs(read_source(loose), gguf_spec).same


def test_gguf_reader_refuses_unknown_architecture(tmp_path):
    _write_gguf(tmp_path / "x.gguf", "not-an-arch", {"not-an-arch.block_count": ("uint32", 1)}, {})
    with pytest.raises(ValueError, match="llama_model_rope_type"):
        read_source(str(tmp_path / "x.gguf"))


def test_gguf_reader_has_the_port_readers_error_policy(tmp_path):
    """`posenc spec` opens a GGUF through posenc.formats, as `posenc port` does: a file cut inside its rope
    tensor is refused with the port's one message (not read as shorter factors), as ValueError."""
    fields = {"llama.block_count": ("uint32", 1), "llama.attention.head_count": ("uint32", 2),
              "llama.embedding_length": ("uint32", 16), "llama.rope.freq_base": ("float32", 5e5)}
    path = tmp_path / "cut.gguf"
    _write_gguf(path, "llama", fields, {"rope_freqs.weight": np.ones(4)})
    import gguf

    (tensor,) = gguf.GGUFReader(str(path)).tensors
    end = int(tensor.data_offset) + int(tensor.n_bytes)
    path.write_bytes(path.read_bytes()[:end - 4])
    with pytest.raises(ValueError, match=r"cut\.gguf' is not a readable GGUF \(truncated or corrupt\)"):
        read_source(str(path))
    with pytest.raises(ValueError, match="does not exist"):
        read_source(str(tmp_path / "absent.gguf"))


def test_keras_hub_llama_backbone_get_config_reads_as_its_hf_source():
    pytest.importorskip("keras_hub")
    import keras_hub
    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=16, num_layers=2, num_query_heads=4, hidden_dim=64, intermediate_dim=32,
        num_key_value_heads=2, rope_max_wavelength=500000, rope_frequency_adjustment_factor=8.0,
        rope_low_freq_factor=1.0, rope_high_freq_factor=4.0, rope_pretraining_sequence_length=8192)
    preset = {"module": "keras_hub.src.models.llama.llama_backbone", "class_name": "LlamaBackbone",
              "config": backbone.get_config()}
    spec = read_source(preset, dialect="keras-hub")
    assert compare_specs(read_source(dict(LLAMA31)), spec).same
    layer = backbone.transformer_layers[0]._self_attention_layer.rotary_embedding_layer
    keras_inv = np.asarray(layer._get_inverse_freq(16), dtype=np.float64)
    np.testing.assert_allclose(_inv_freq(spec), keras_inv, rtol=2e-6)  # keras-hub computes in float32


@pytest.mark.parametrize("truncate", [True, False])
def test_keras_hub_032_yarn_frequencies_are_hf_yarn(truncate):
    keras_hub = pytest.importorskip("keras_hub")
    if not keras_hub.__version__.startswith("0.32"):
        pytest.skip("keras-hub 0.32 semantics")
    layer = keras_hub.layers.RotaryEmbedding(max_wavelength=10000, scaling_factor=8.0, rope_type="yarn",
                                             original_max_position_embeddings=64, truncate=truncate)
    keras_inv = np.asarray(layer._get_inverse_freq(32), dtype=np.float64)
    hf_inv, scale = rope_frequencies(32, scaling={"rope_type": "yarn", "factor": 8.0, "truncate": truncate,
                                                  "original_max_position_embeddings": 64})
    np.testing.assert_allclose(hf_inv, keras_inv, rtol=2e-6)
    old_inv, _ = rope_frequencies(32, scaling={"rope_type": "keras-hub-yarn", "factor": 8.0,
                                               "original_max_position_embeddings": 64})
    # keras-hub <= 0.31 defaulted to truncate=False: its default differs from 0.32's (truncate=True) default
    assert not truncate or not np.allclose(old_inv, hf_inv)


def test_meta_params_json_reads_as_hf_llama31():
    params = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 128, "rope_theta": 500000.0,
              "use_scaled_rope": True, "max_seq_len": 131072, "norm_eps": 1e-5}
    spec = read_source(params, dialect="meta")
    assert spec.row_order == "meta" and spec.layers[0].layout == "interleaved"
    assert compare_specs(read_source(dict(LLAMA31)), spec).same
    no_theta = read_source({k: v for k, v in params.items() if k != "rope_theta"}, dialect="meta")
    assert [f.key for f in no_theta.lint_findings] == ["rope_theta", "rope_scaling_factor"]


def test_maxtext_llama31_keys_read_as_hf_llama31():
    spec = read_source({"rope_type": "llama3.1", "rope_max_timescale": 500000, "rope_min_timescale": 1,
                        "rope_use_scale": True, "head_dim": 16, "base_num_decoder_layers": 2}, dialect="maxtext")
    assert compare_specs(read_source(dict(LLAMA31)), spec).same
    assert spec.lint_findings == []  # every value it needs is set (local/nope defaults are notes)
    defaults = read_source({"head_dim": 16, "base_num_decoder_layers": 2}, dialect="maxtext")
    assert "rope_max_timescale" in [f.key for f in defaults.lint_findings]


def test_runtime_variants_against_their_sources():
    # vLLM ntk vs static NTK at j = 0: 1 / 4 ** (2 / 128) = 0.9786 (landscape report 1.7, verified there)
    vllm = rope_frequencies(128, scaling={"rope_type": "vllm-ntk", "factor": 4.0})[0]
    static = rope_frequencies(128, scaling={"rope_type": "ntk", "factor": 4.0})[0]
    assert vllm[0] / static[0] == pytest.approx(0.9786, abs=1e-4)
    # mlx-lm YarnRoPE always truncates: gpt-oss (truncate False) ramps over (8, 18) there instead of (8.09, 17.40)
    gpt_oss = {"factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}
    mlx_inv, mlx_scale = rope_frequencies(64, base=150000.0, scaling={"rope_type": "mlx-yarn", **gpt_oss})
    hf_trunc, hf_scale = rope_frequencies(64, base=150000.0, scaling={"rope_type": "yarn", "truncate": True, **gpt_oss})
    hf_loose, _ = rope_frequencies(64, base=150000.0, scaling={"rope_type": "yarn", "truncate": False, **gpt_oss})
    np.testing.assert_allclose(mlx_inv, hf_trunc, rtol=1e-15)
    assert mlx_scale == pytest.approx(hf_scale)
    assert np.max(np.abs(mlx_inv / hf_loose - 1)) > 0.3  # "up to 43 %" in the report
    # mlx-lm's mscale without mscale_all_dim changes the scale (HF ignores a lone mscale)
    assert rope_frequencies(64, scaling={"rope_type": "mlx-yarn", **gpt_oss, "mscale": 0.707})[1] != pytest.approx(
        rope_frequencies(64, scaling={"rope_type": "yarn", **gpt_oss, "mscale": 0.707})[1])


def test_runtime_specs_name_what_each_runtime_computes():
    phi3 = {"model_type": "phi3", "num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4,
            "max_position_embeddings": 131072, "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
            "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}}
    hf = read_source(dict(phi3))
    vllm = runtime_spec(dict(phi3), "vllm")
    mlx = runtime_spec(dict(phi3), "mlx")
    assert vllm.layers[0].scaling["rope_type"] == "vllm-longrope"
    assert mlx.layers[0].scaling["rope_type"] == "mlx-longrope"
    # HF switches per sequence (short factors for short prompts); vLLM and MLX use the long ones at once, so
    # the logits differ at the first position that is rotated at all (position 1; position 0 is not)
    assert compare_specs(hf, vllm).horizon == 1
    assert compare_specs(vllm, mlx).same
    short_server = runtime_spec(dict(phi3), "vllm", max_model_len=4096)
    assert short_server.layers[0].plan().turns.tolist() == pytest.approx(hf.layers[0].plan().turns.tolist())
    dyn = {**LLAMA31, "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}, "max_position_embeddings": 4096}
    assert runtime_spec(dict(dyn), "vllm").layers[0].scaling is None  # vLLM's dynamic leaves the base unchanged
    assert runtime_spec(dict(dyn), "keras-hub").layers[0].scaling["rope_type"] == "keras-hub-dynamic"
    with pytest.raises(ValueError, match="Transformer Engine"):
        runtime_spec(dict(dyn), "transformer-engine")


def test_probe_positions_cover_every_band_up_to_the_context():
    spec = read_source(dict(LLAMA31))
    positions = probe_positions(spec)
    assert positions[:8].tolist() == list(range(8)) and positions[-1] == 131071
    assert 8191 in positions and 8192 in positions
    turns = spec.layers[0].plan().turns
    half_turns = np.round(0.5 / turns)
    assert np.isin(half_turns[half_turns < 131072], positions).mean() > 0.5
