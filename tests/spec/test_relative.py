"""Relative position embeddings: spec against HF's Wav2Vec2-BERT `relative_key` code (Shaw's key - query,
clipped), HF BERT's `relative_key` indexing (query - key), the row-reversal identity; backends exact."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import posenc_np as pn
from posenc_np._dtypes import numpy_dtype
from posenc_np.conventions import conventions
from posenc_np.testing import compare, tolerance

EXACT = tolerance("float32", exact=True)


def _assert_close(actual, desired, tol):
    result = compare(actual, desired, tol)
    assert result.passed, f"max abs err {result.max_abs_err:.3g} at {result.worst_index} > {tol}: {result.message}"


def _table(rows, dim=4, dtype="float64", seed=0):
    return np.random.default_rng(seed).normal(size=(rows, dim)).astype(numpy_dtype(dtype))


# --- spec -------------------------------------------------------------------------------------------

def test_shaw_formula_golden():
    table = np.arange(7.0)[:, None]  # row r holds r
    out = pn.relative_embeddings(table, np.arange(6), np.arange(6), max_distance=3)[..., 0]
    expected = np.clip(np.arange(6)[None, :] - np.arange(6)[:, None], -3, 3) + 3
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("q_len, k_len, max_distance", [(5, 5, 2), (4, 9, 3), (7, 3, 8)])
def test_shaw_matches_hf_wav2vec2_bert_relative_key(q_len, k_len, max_distance):
    torch = pytest.importorskip("torch")
    w2v = pytest.importorskip("transformers.models.wav2vec2_bert.modeling_wav2vec2_bert")
    table = _table(2 * max_distance + 1, 8, "float32")
    embedding = torch.nn.Embedding.from_pretrained(torch.from_numpy(table))
    module = SimpleNamespace(left_max_position_embeddings=max_distance, right_max_position_embeddings=max_distance,
                             distance_embedding=embedding, scaling=1.0)
    query = np.random.default_rng(1).normal(size=(1, 2, q_len, 8)).astype(np.float32)
    key = np.zeros((1, 2, k_len, 8), np.float32)
    _, hf = w2v._apply_relative_key_position_encoding(module, torch.from_numpy(query), torch.from_numpy(key))
    rel = pn.relative_embeddings(table, np.arange(q_len), np.arange(k_len), max_distance=max_distance)
    ours = np.einsum("bhld,lrd->bhlr", query.astype(np.float64), rel.astype(np.float64))
    _assert_close(hf.numpy(), ours, tolerance("float32", scale=np.abs(ours).max()))


def test_hf_bert_relative_key_indexing():
    """HF BERT `relative_key`: distance = l - r, row distance + max_pos - 1 of 2*max_pos - 1 rows, no clip."""
    max_pos = 6
    params = dict(conventions["hf-bert-relative-key"].params)
    table = _table(2 * max_pos - 1)
    l, r = np.arange(max_pos)[:, None], np.arange(max_pos)[None, :]
    hf = table[l - r + max_pos - 1]
    ours = pn.relative_embeddings(table, np.arange(max_pos), np.arange(max_pos), max_distance=max_pos - 1, **params)
    np.testing.assert_array_equal(ours, hf)


@pytest.mark.parametrize("positions", ["square", "kv-offset", "beyond-clip"])
def test_reversing_rows_converts_signs(positions):
    q, k = {"square": (np.arange(5), np.arange(5)), "kv-offset": (np.arange(8, 11), np.arange(11)),
            "beyond-clip": (np.arange(20), np.arange(0, 40, 3))}[positions]
    table = _table(9)
    np.testing.assert_array_equal(pn.relative_embeddings(table, q, k, max_distance=4, sign="query-key"),
                                  pn.relative_embeddings(table[::-1], q, k, max_distance=4, sign="key-query"))


def test_shapes_and_dtype():
    table = _table(5, 3, "float16")
    out = pn.relative_embeddings(table, np.arange(4), np.arange(6), max_distance=2)
    assert out.shape == (4, 6, 3) and out.dtype == np.float16
    batched = pn.relative_embeddings(table, np.array([[0, 1], [5, 6]]), np.arange(6), max_distance=2)
    assert batched.shape == (2, 2, 6, 3)
    single = pn.relative_embeddings(table, np.array([5, 6]), np.arange(6), max_distance=2)
    np.testing.assert_array_equal(batched[1], single)


@pytest.mark.parametrize("call, error, match", [
    (lambda: pn.relative_embeddings(np.zeros((6, 4)), np.arange(3), np.arange(3), max_distance=2), ValueError,
     "table must have 5 rows"),
    (lambda: pn.relative_embeddings(np.zeros(5), np.arange(3), np.arange(3), max_distance=2), ValueError, "table"),
    (lambda: pn.relative_embeddings(np.zeros((5, 4)), np.array([0.5]), np.arange(3), max_distance=2), ValueError,
     "q_positions"),
    (lambda: pn.relative_embeddings(np.zeros((5, 4)), np.arange(3), np.arange(3), max_distance=2, sign="abs"),
     ValueError, "sign"),
    (lambda: pn.relative_embeddings(np.zeros((5, 4)), np.arange(3), np.arange(3), max_distance=-1), ValueError,
     "max_distance"),
    (lambda: pn.relative_embeddings(np.zeros((5, 4)), np.arange(3), np.arange(3), max_distance=2.0), TypeError,
     "max_distance"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


# --- backends ---------------------------------------------------------------------------------------

POSITION_SETS = {
    "short": (np.arange(6), np.arange(6)),
    "kv-offset": (np.arange(60, 64), np.arange(64)),
    "left-pad": (np.array([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]), np.array([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])),
}


@pytest.mark.parametrize("sign", ["key-query", "query-key"])
@pytest.mark.parametrize("positions", list(POSITION_SETS))
def test_backend_relative_embeddings(backend, dtype, mode, positions, sign, jit_cache):
    if mode == "jit" and backend.name == "torch" and (dtype != "float32" or positions != "kv-offset"):
        pytest.skip("torch.compile budget: torch jit runs float32 on the representative case only")
    table = _table(9, 4, dtype)
    q, k = POSITION_SETS[positions]
    kwargs = {"max_distance": 4, "sign": sign}
    actual = backend.call("relative_embeddings", (table, q, k), kwargs, mode=mode, cache=jit_cache)
    assert actual.dtype == numpy_dtype(dtype)
    _assert_close(actual, pn.relative_embeddings(table, q, k, **kwargs), EXACT)


def test_backend_bad_input(backend):
    module = backend.module
    table = backend.from_numpy(np.zeros((5, 4), np.float32))
    with pytest.raises(ValueError, match="table must have 5 rows"):
        module.relative_embeddings(backend.from_numpy(np.zeros((6, 4), np.float32)), np.arange(3), np.arange(3),
                                   max_distance=2)
    with pytest.raises(ValueError, match="k_positions"):
        module.relative_embeddings(table, np.arange(3), backend.from_numpy(np.array([0.0, 0.5], np.float32)),
                                   max_distance=2)
    with pytest.raises(ValueError, match="sign"):
        module.relative_embeddings(table, np.arange(3), np.arange(3), max_distance=2, sign="abs")


def test_module(backend):
    if backend.name == "jax":
        from flax import nnx

        layer = backend.module.RelativePositionEmbedding(3, 5, sign="query-key", rngs=nnx.Rngs(0))
        table = np.asarray(layer.table[...])
    else:
        layer = backend.module.RelativePositionEmbedding(3, 5, sign="query-key")
        table = backend.to_numpy(layer.table if backend.name == "torch" else layer.table.value)
    assert table.shape == (7, 5)
    q, k = np.arange(2, 6), np.arange(8)
    actual = backend.to_numpy(layer(backend.from_numpy(q), backend.from_numpy(k)))
    _assert_close(actual, pn.relative_embeddings(table, q, k, max_distance=3, sign="query-key"), EXACT)


def test_keras_layer_roundtrip(tmp_path):
    pytest.importorskip("keras")
    import posenc_tf

    layer = posenc_tf.RelativePositionEmbedding(2, 3, sign="query-key")
    assert {k: layer.get_config()[k] for k in ("max_distance", "dim", "sign")} == \
        {"max_distance": 2, "dim": 3, "sign": "query-key"}
    from conftest import keras_bias_round_trip

    original, loaded, _ = keras_bias_round_trip(layer, 4, tmp_path / "rel.keras")
    np.testing.assert_array_equal(loaded, original)


def test_backend_float_positions_under_jit(backend):
    """Under a tracer values cannot be checked: floating positions are refused by dtype (torch.compile
    reports the TypeError wrapped in torch._dynamo's `Unsupported`)."""
    error = TypeError
    if backend.name == "torch":
        import torch

        error = (TypeError, torch._dynamo.exc.Unsupported)
    table = np.zeros((5, 2), np.float32)
    with pytest.raises(error, match="k_positions must be an integer"):
        backend.call("relative_embeddings", (table, np.arange(3), np.arange(3.0)), {"max_distance": 2}, mode="jit")
