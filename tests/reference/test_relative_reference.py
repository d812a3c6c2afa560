"""Shaw relative embeddings (key - query, clipped) against HF transformers' own Wav2Vec2-BERT
`_apply_relative_key_position_encoding` (5.x, models/wav2vec2_bert/modeling_wav2vec2_bert.py), float32
tolerance on the logits q . a_ij."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import posenc_np as pn
from helpers import assert_close
from posenc_np._dtypes import numpy_dtype
from posenc_np.testing import tolerance


def _table(rows, dim=4, dtype="float64", seed=0):
    return np.random.default_rng(seed).normal(size=(rows, dim)).astype(numpy_dtype(dtype))


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
    assert_close(hf.numpy(), ours, tolerance("float32", scale=np.abs(ours).max()))
