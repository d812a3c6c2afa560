"""Relative position embeddings, spec: Shaw's formula (key - query, clipped), HF BERT's `relative_key`
indexing (query - key, re-typed), the row-reversal identity between the signs, shapes, validation.

NumPy and ml_dtypes only. HF Wav2Vec2-BERT's own `relative_key` code: tests/reference/test_relative_reference.py;
backends against the spec: the registry's relative cases (tests/backends/test_conformance.py); modules:
tests/backends/test_bias_modules.py."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from posenc_np._dtypes import numpy_dtype
from posenc_np.conventions import conventions


def _table(rows, dim=4, dtype="float64", seed=0):
    return np.random.default_rng(seed).normal(size=(rows, dim)).astype(numpy_dtype(dtype))


# --- spec -------------------------------------------------------------------------------------------

def test_shaw_formula_golden():
    table = np.arange(7.0)[:, None]  # row r holds r
    out = pn.relative_embeddings(table, np.arange(6), np.arange(6), max_distance=3)[..., 0]
    expected = np.clip(np.arange(6)[None, :] - np.arange(6)[:, None], -3, 3) + 3
    np.testing.assert_array_equal(out, expected)


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
