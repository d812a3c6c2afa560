"""positions_from_cu_seqlens(offset=2) against transformers' RoBERTa positions, per document.

RoBERTa numbers positions from `padding_idx + 1 = 2` (fairseq `make_positions`); a collator that
flattens documents into one row must restart them at 2 per document (transformers issue #47496, fixed
by PR #47525). The reference is the installed transformers' own
`RobertaEmbeddings.create_position_ids_from_input_ids`, run on each document as its own sequence.
"""

from __future__ import annotations

import numpy as np
import pytest

from posenc_np.packing import cp_indices, positions_from_cu_seqlens

torch = pytest.importorskip("torch")
roberta = pytest.importorskip("transformers.models.roberta.modeling_roberta")

PADDING_IDX = 1


@pytest.mark.parametrize("lengths", [[5, 1, 9], [16, 0, 7, 3], [1]])
def test_offset_2_is_roberta_per_document(lengths):
    rng = np.random.default_rng(len(lengths))
    cu = np.concatenate([[0], np.cumsum(lengths)])
    packed = positions_from_cu_seqlens(cu, offset=2)
    for start, end in zip(cu[:-1], cu[1:], strict=True):
        if end == start:
            continue
        ids = torch.as_tensor(rng.integers(PADDING_IDX + 1, 50000, size=(1, end - start)))  # no padding token
        hf = roberta.RobertaEmbeddings.create_position_ids_from_input_ids(ids, PADDING_IDX)[0].numpy()
        assert packed[start:end].tolist() == hf.tolist()


def test_roberta_positions_under_zigzag_context_parallelism():
    """Each rank's RoBERTa positions are HF's positions of the tokens it holds."""
    cu = np.array([0, 8, 24])
    ids = torch.arange(2, 26)[None]
    hf = np.concatenate([roberta.RobertaEmbeddings.create_position_ids_from_input_ids(ids[:, s:e], PADDING_IDX)[0]
                         for s, e in ((0, 8), (8, 24))])
    for rank in range(2):
        index = cp_indices(cu, world_size=2, rank=rank)
        assert positions_from_cu_seqlens(cu, offset=2)[index].tolist() == hf[index].tolist()
