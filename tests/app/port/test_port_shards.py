"""Sharded checkpoints: HF index/directory in, save_pretrained-style shards out, Meta model-parallel
shards merged; each against an external reference (transformers' save_pretrained / from_pretrained,
Meta's split axes as convert_llama_weights_to_hf.py concatenates them) and the failure paths."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

from helpers import cli
from posenc.formats import open_reader

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

DIM, LAYERS, HEADS, KV_HEADS, VOCAB, FFN, THETA = 32, 2, 4, 2, 40, 48, 500000.0


def meta_state(rng):
    """A Meta-layout Llama state dict (llama/model.py names), float32."""
    hd = DIM // HEADS
    shapes = {"tok_embeddings.weight": (VOCAB, DIM), "norm.weight": (DIM,), "output.weight": (VOCAB, DIM)}
    for i in range(LAYERS):
        p = f"layers.{i}."
        shapes.update({p + "attention.wq.weight": (HEADS * hd, DIM), p + "attention.wk.weight": (KV_HEADS * hd, DIM),
                       p + "attention.wv.weight": (KV_HEADS * hd, DIM), p + "attention.wo.weight": (DIM, HEADS * hd),
                       p + "feed_forward.w1.weight": (FFN, DIM), p + "feed_forward.w3.weight": (FFN, DIM),
                       p + "feed_forward.w2.weight": (DIM, FFN), p + "attention_norm.weight": (DIM,),
                       p + "ffn_norm.weight": (DIM,)})
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


AXES = {"wq": 0, "wk": 0, "wv": 0, "wo": 1, "w1": 0, "w3": 0, "w2": 1, "output": 0, "tok_embeddings": 1}


def write_meta_shards(directory, state, *, tamper=None):
    """Two consolidated.NN.pth shards split as Meta's model-parallel layers (Llama 2 embedding: dim 1)."""
    for shard in range(2):
        part = {}
        for name, value in state.items():
            axis = next((a for key, a in AXES.items() if f"{key}." in name), None)
            if axis is not None:
                value = np.split(value, 2, axis=axis)[shard]
            elif name == tamper:
                value = value + shard
            part[name] = torch.from_numpy(np.ascontiguousarray(value))
        torch.save(part, directory / f"consolidated.{shard:02d}.pth")


def save_safetensors(path, state):
    from safetensors.numpy import save_file

    save_file(state, str(path))



@pytest.fixture(scope="module")
def hf_sharded(tmp_path_factory):
    directory = tmp_path_factory.mktemp("hf") / "llama"
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(directory, max_shard_size="20KB")
    return directory, model


def test_directory_and_index_sources_and_save_pretrained_shards(hf_sharded, tmp_path):
    source, model = hf_sharded
    index = json.loads((source / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    # the directory and its index read the same tensors as the model's state dict
    for src in (source, source / "model.safetensors.index.json"):
        reader = open_reader(src)
        assert set(reader.names()) == set(index["weight_map"])
        np.testing.assert_array_equal(reader.get("model.layers.1.mlp.up_proj.weight"),
                                      model.state_dict()["model.layers.1.mlp.up_proj.weight"].numpy())
    # out as a directory: huggingface_hub's split (what save_pretrained calls) of the tensors in our order
    # gives the same files and weight map (save_pretrained's own order is the module order, which the
    # shard files do not record)
    from huggingface_hub import split_torch_state_dict_into_shards

    saved = os.umask(0o022)
    try:
        assert cli("port", source, f"{tmp_path / 'copy'}/", "--max-shard-size", "20KB") == 0
    finally:
        os.umask(saved)
    ours = json.loads((tmp_path / "copy" / "model.safetensors.index.json").read_text())
    reader = open_reader(source)
    ordered = {n: torch.from_numpy(np.array(reader.get(n))) for n in reader.names()}
    split = split_torch_state_dict_into_shards(ordered, filename_pattern="model{suffix}.safetensors",
                                               max_shard_size="20KB")
    assert ours["weight_map"] == split.tensor_to_filename
    assert ours["metadata"]["total_size"] == split.metadata["total_size"]
    assert stat.S_IMODE((tmp_path / "copy").stat().st_mode) == 0o755
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in (tmp_path / "copy").iterdir())
    (tmp_path / "copy" / "config.json").write_text((source / "config.json").read_text())
    reloaded = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "copy").eval()
    tokens = torch.arange(10)[None]
    with torch.no_grad():
        np.testing.assert_array_equal(reloaded(tokens).logits.numpy(), model(tokens).logits.numpy())
    # a .safetensors TARGET above the limit: NAME-0000i-of-0000n shards and NAME.safetensors.index.json beside it
    assert cli("port", source, tmp_path / "flat" / "model.safetensors", "--max-shard-size", "20KB") == 2  # no dir
    (tmp_path / "flat").mkdir()
    assert cli("port", source, tmp_path / "flat" / "model.safetensors", "--max-shard-size", "20KB") == 0
    names = sorted(os.listdir(tmp_path / "flat"))
    assert names == sorted(list(set(index["weight_map"].values())) + ["model.safetensors.index.json"])
    # under the limit it stays one file
    assert cli("port", source, tmp_path / "one.safetensors", "--max-shard-size", "5GB") == 0
    assert set(open_reader(tmp_path / "one.safetensors").names()) == set(index["weight_map"])
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".posenc-")]


def test_meta_model_parallel_shards_are_merged(tmp_path):
    """Two model-parallel shards split as fairscale's Column/RowParallelLinear and ParallelEmbedding
    (Llama 2: embedding split along dim 1) port to what the unsplit checkpoint ports to."""
    state = meta_state(np.random.default_rng(0))
    whole, split = tmp_path / "whole", tmp_path / "split"
    whole.mkdir()
    split.mkdir()
    params = json.dumps(dict(dim=DIM, n_layers=LAYERS, n_heads=HEADS, n_kv_heads=KV_HEADS, rope_theta=THETA))
    for d in (whole, split):
        (d / "params.json").write_text(params)
    save_safetensors(whole / "consolidated.safetensors", state)
    write_meta_shards(split, state)
    assert cli("port", whole / "consolidated.safetensors", tmp_path / "a.safetensors",
               "--preset", "meta-llama-to-hf") == 0
    assert cli("port", split, tmp_path / "b.safetensors", "--preset", "meta-llama-to-hf") == 0
    assert cli("port", split / "consolidated.00.pth", tmp_path / "c.safetensors", "--preset", "meta-llama-to-hf") == 0
    a, b, c = (open_reader(tmp_path / f"{x}.safetensors") for x in "abc")
    for name in a.names():
        np.testing.assert_array_equal(b.get(name), a.get(name), err_msg=name)
        np.testing.assert_array_equal(c.get(name), a.get(name), err_msg=name)


def test_shard_failures_exit_2(hf_sharded, tmp_path, capsys):
    source, _ = hf_sharded
    broken = tmp_path / "broken"
    broken.mkdir()
    index = json.loads((source / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    for name in files[1:]:
        (broken / name).write_bytes((source / name).read_bytes())
    (broken / "model.safetensors.index.json").write_text(json.dumps(index))
    lying = tmp_path / "lying"
    lying.mkdir()
    for name in files:
        (lying / name).write_bytes((source / name).read_bytes())
    index_extra = {**index, "weight_map": {**index["weight_map"], "ghost.weight": files[0]}}
    (lying / "model.safetensors.index.json").write_text(json.dumps(index_extra))
    (tmp_path / "bad.index.json").write_text("{not json")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    state = meta_state(np.random.default_rng(1))
    meta = tmp_path / "meta"
    meta.mkdir()
    (meta / "params.json").write_text(json.dumps(dict(dim=DIM, n_layers=LAYERS, n_heads=HEADS, n_kv_heads=KV_HEADS)))
    write_meta_shards(meta, state, tamper="norm.weight")
    cases = [
        (["port", broken, tmp_path / "o.safetensors"], f"do not exist: {files[0]}"),
        (["port", lying, tmp_path / "o.safetensors"], "lacks tensor(s) the index gives it: ghost.weight"),
        (["port", tmp_path / "bad.index.json", tmp_path / "o.safetensors"], "cannot read index"),
        (["port", source, f"{tmp_path / 'full'}/"], "not empty"),
        (["port", source, tmp_path / "o.safetensors", "--max-shard-size", "lots"], "--max-shard-size"),
        (["port", source, tmp_path / "o.index.json"], "the index is written with the shards"),
        (["port", meta, tmp_path / "o.safetensors", "--preset", "meta-llama-to-hf"], "replicated tensor 'norm.weight'"),
        (["port", tmp_path, tmp_path / "o.safetensors"], "neither model.safetensors.index.json"),
    ]
    before = sorted(os.listdir(tmp_path))
    for argv, needle in cases:
        assert cli(*argv) == 2, argv
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert sorted(os.listdir(tmp_path)) == before
