"""`posenc spec` on the training stacks' config dialects (torchtitan, Megatron, NeMo, MaxText) against the HF
config they came from: exit 0 the same encoding, 1 a difference named, 2 bad input. The stack files are
written in the form each stack ships them: torchtitan's job-config dump (JSON, and the same tables as
TOML), a Megatron-Bridge-style YAML of TransformerConfig keys, NeMo 2's `context/model.yaml` (a `_target_`
class whose defaults fill what is not written) and NeMo 1's flat `model_config.yaml`, a MaxText model YAML.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from posenc.cli import main
from posenc.modelspec import read_source
from posenc.port.stack_config import target_config

HF = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
      "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 100,
      "rms_norm_eps": 1e-5, "max_position_embeddings": 131072, "rope_theta": 500000.0,
      "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192}}

TORCHTITAN_TOML = """
[model_spec]
name = "llama3"
flavor = "debugmodel"
{layers}
[training]
seq_len = 2048
"""
LAYER_TOML = """
[[model_spec.model.layers]]
[model_spec.model.layers.attention]
n_heads = 4
n_kv_heads = 2
head_dim = 16
[model_spec.model.layers.attention.rope]
dim = 16
max_seq_len = 131072
theta = {theta}
scaling = "llama"
scaling_factor = 32.0
low_freq_factor = 1.0
high_freq_factor = 4.0
original_max_position_embeddings = 8192
"""

NEMO2 = """
_target_: nemo.collections.llm.gpt.model.llama.LlamaModel
config:
  _target_: nemo.collections.llm.gpt.model.llama.Llama32Config1B
  num_layers: 2
  hidden_size: 64
  ffn_hidden_size: 128
  num_attention_heads: 4
  num_query_groups: 2
  seq_length: 131072
optim:
  _target_: nemo.lightning.pytorch.optim.megatron.MegatronOptimizerModule
"""
NEMO1 = """
encoder_seq_length: 131072
max_position_embeddings: 131072
num_layers: 2
hidden_size: 64
ffn_hidden_size: 128
num_attention_heads: 4
num_query_groups: 2
position_embedding_type: rope
rotary_percentage: 1.0
rotary_base: 500000
seq_len_interpolation_factor: null
scale_positional_embedding: {scaled}
"""
HF_LLAMA31_8 = {**HF, "rope_scaling": {**HF["rope_scaling"], "factor": 8.0}}


def _write(path, text):
    path.write_text(text)
    return str(path)


@pytest.fixture
def files(tmp_path):
    out = {"hf": _write(tmp_path / "config.json", json.dumps(HF)),
           "hf8": _write(tmp_path / "config8.json", json.dumps(HF_LLAMA31_8))}
    dump = {**target_config("torchtitan", HF), "training": {"seq_len": 2048}, "parallelism": {}}
    out["torchtitan-json"] = _write(tmp_path / "job_config.json", json.dumps(dump, indent=2))
    layers = "".join(LAYER_TOML.format(theta=500000.0) for _ in range(2))
    toml = TORCHTITAN_TOML.format(layers=layers).replace('[training]', '[model_spec.model]\ndim = 64\n\n[training]')
    out["torchtitan-toml"] = _write(tmp_path / "job_config.toml", toml)
    bridge = {"model": {"_target_": "megatron.bridge.models.llama.llama_provider.LlamaModelProvider",
                        **target_config("megatron", HF_LLAMA31_8)}}
    out["megatron"] = _write(tmp_path / "run_config.yaml", yaml.safe_dump(bridge))
    out["nemo2"] = _write(tmp_path / "model.yaml", NEMO2)
    out["nemo1"] = _write(tmp_path / "model_config.yaml", NEMO1.format(scaled="true"))
    out["maxtext"] = _write(tmp_path / "llama3.1-tiny.yml", yaml.safe_dump(target_config("maxtext", HF_LLAMA31_8)))
    return out


#: (stack file, HF config it came from, dialect posenc detects)
PAIRS = [("torchtitan-json", "hf", "torchtitan"), ("torchtitan-toml", "hf", "torchtitan"),
         ("megatron", "hf8", "megatron"), ("nemo2", "hf", "nemo"), ("nemo1", "hf8", "nemo"),
         ("maxtext", "hf8", "maxtext")]


@pytest.mark.parametrize("stack, hf, dialect", PAIRS)
def test_stack_config_and_its_hf_config_are_the_same_encoding(files, stack, hf, dialect, capsys):
    assert read_source(files[stack]).dialect == dialect
    assert main(["spec", files[hf], files[stack]]) == 0
    out = capsys.readouterr().out
    assert f"({dialect};" in out and "SAME encoding" in out
    assert main(["spec", files[stack], files[hf]]) == 0


@pytest.mark.parametrize("stack, hf, edit, named", [
    ("torchtitan-toml", "hf", ("theta = 500000.0", "theta = 10000.0"), "base"),
    ("torchtitan-json", "hf8", None, "scaling"),
    ("megatron", "hf8", ("rope_scaling_factor: 8", "rope_scaling_factor: 16"), "scaling"),
    ("megatron", "hf8", ("rotary_interleaved: false", "rotary_interleaved: true"), "layout"),
    ("nemo2", "hf8", None, "scaling"),
    ("nemo1", "hf8", ("scale_positional_embedding: true", "scale_positional_embedding: false"), "scaling"),
    ("maxtext", "hf8", ("rope_max_timescale: 500000", "rope_max_timescale: 10000"), "base"),
])
def test_a_difference_is_named_with_exit_1(files, stack, hf, edit, named, capsys):
    path = files[stack]
    if edit is not None:
        with open(path) as handle:
            text = handle.read()
        assert edit[0] in text
        _write(Path(path), text.replace(edit[0], edit[1]))
    assert main(["spec", files[hf], path]) == 1
    out = capsys.readouterr().out
    assert "DIFFERENT encoding" in out
    assert any(named in line for line in out.splitlines() if line.startswith("  layers")), out


def test_one_stack_source_prints_its_per_layer_spec(files, capsys):
    assert main(["spec", files["nemo2"]]) == 0
    out = capsys.readouterr().out
    assert "(nemo;" in out and "llama3(factor=32.0" in out and "0-1" in out


@pytest.mark.parametrize("text, name, message", [
    ("num_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\nposition_embedding_type: learned_absolute\n"
     "rotary_base: 10000\n", "m.yaml", "learned_absolute"),
    ("num_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\nposition_embedding_type: rope\nrotary_base: 10000\n"
     "rope_theta_typo: 3\n", "m.yaml", "rope_theta_typo"),
    ('[model_spec]\nname = "llama3"\n[[model_spec.model.layers]]\n', "j.toml", "model.dim"),
    ('[model_spec\nname = "llama3"\n', "j.toml", "not valid TOML"),
])
def test_bad_stack_config_exits_2_naming_it(tmp_path, text, name, message, capsys):
    path = _write(tmp_path / name, text)
    assert main(["spec", path]) == 2
    assert message in capsys.readouterr().err


def test_dialect_can_be_forced(tmp_path, capsys):
    path = _write(tmp_path / "megatron.json", json.dumps(target_config("megatron", HF_LLAMA31_8)))
    assert main(["spec", "--dialect", "megatron", path, "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["dialect"] == "megatron"


HF_LLAMA32_1B = {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8,
                 "num_hidden_layers": 16, "head_dim": 64, "max_position_embeddings": 131072, "rope_theta": 500000.0,
                 "tie_word_embeddings": True,
                 "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}


def test_torchtitans_own_flavour_dumps(tmp_path, capsys):
    """The dumps torchtitan 0.3.0 itself writes (`model_registry(flavor).model.to_dict()`, as Trainer.Config.to_dict
    nests it): its "8B" is HF's Llama 3.1 8B; its "1B" keeps RoPE.Config's scaling_factor 8 where Llama 3.2 1B
    has 32 (a finding: the logits differ from position 1050 on)."""
    llama3 = pytest.importorskip("torchtitan.models.llama3")

    def dump(flavor):
        spec = llama3.model_registry(flavor)
        data = {"model_spec": {"name": spec.name, "flavor": spec.flavor, "model": spec.model.to_dict()}}
        return _write(tmp_path / f"{flavor}.json", json.dumps(data))

    hf8 = _write(tmp_path / "llama31-8b.json", json.dumps({**HF_LLAMA31_8, "hidden_size": 4096, "num_hidden_layers": 32,
                                                          "num_attention_heads": 32, "num_key_value_heads": 8}))
    assert main(["spec", hf8, dump("8B")]) == 0
    hf1 = _write(tmp_path / "llama32-1b.json", json.dumps(HF_LLAMA32_1B))
    assert main(["spec", hf1, dump("1B")]) == 1
    out = capsys.readouterr().out
    assert "layers 0-15: scaling['factor']: 32.0 vs 8.0" in out and "detection horizon: position 1050" in out


def test_checkpoint_directories_are_read_by_their_config_file(files, tmp_path, capsys):
    """A stack checkpoint directory: NeMo 2's `context/model.yaml`, the job_config.json / maxtext.yml /
    transformer_config.json `posenc port` writes beside the tensors."""
    nemo = tmp_path / "nemo_ckpt"
    (nemo / "context").mkdir(parents=True)
    (nemo / "weights").mkdir()
    (nemo / "context" / "model.yaml").write_text(NEMO2)
    titan = tmp_path / "step-10"
    titan.mkdir()
    (titan / "job_config.json").write_text(Path(files["torchtitan-json"]).read_text())
    megatron = tmp_path / "iter_0000010"
    megatron.mkdir()
    (megatron / "transformer_config.json").write_text(json.dumps(target_config("megatron", HF_LLAMA31_8)))
    maxtext = tmp_path / "maxtext" / "0" / "items"
    maxtext.mkdir(parents=True)
    (maxtext / "maxtext.yml").write_text(Path(files["maxtext"]).read_text())
    for directory, hf, dialect in ((nemo, "hf", "nemo"), (titan, "hf", "torchtitan"), (megatron, "hf8", "megatron"),
                                   (maxtext, "hf8", "maxtext")):
        assert read_source(str(directory)).dialect == dialect
        assert main(["spec", files[hf], str(directory)]) == 0, directory
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["spec", str(empty)]) == 2
    assert "context/model.yaml" in capsys.readouterr().err
