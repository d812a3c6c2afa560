"""Spec of packed sequences and context parallelism (posenc_np.packing). NumPy only.

Three kinds of evidence:
* the codebases cited: Transformer Engine's thd partition (`thd_partition_src_index` in
  transformer_engine/common/fused_attn/context_parallel.cu and the per-sequence slicing loop of
  `get_batch_on_this_cp_rank`, TE v2.18) and `_get_freqs_on_this_cp_rank` (rope.py), transcribed here
  as the loops those files run, independent of the vectorised spec;
* properties: every token on exactly one rank, shard -> encode -> reassemble = encode the whole
  sequence for every strategy and position-independent RoPE scaling, packed rows included, biases
  sharded by query rows, `rerotate` = RoPE at the shifted position;
* planted bugs (zigzag chunks reversed, positions not restarted per document) that the properties
  must catch.
"""

from __future__ import annotations

import numpy as np
import pytest

from posenc_np import alibi_bias, apply_rope, t5_bias
from posenc_np.packing import (
    CP_STRATEGIES,
    cp_indices,
    cp_positions,
    cp_shard,
    cp_unshard,
    document_bias,
    document_ids,
    document_mask,
    positions_from_cu_seqlens,
    rerotate,
)

CU = np.array([0, 8, 8, 24, 32])
STATIC_SCALINGS = [None, {"rope_type": "linear", "factor": 4.0}, {"rope_type": "ntk", "factor": 2.0},
                   {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16},
                   {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 16},
                   {"rope_type": "keras-hub-dynamic", "factor": 4.0},
                   {"rope_type": "keras-hub-yarn", "factor": 8.0, "original_max_position_embeddings": 16}]


# --- the codebases cited, as loops ------------------------------------------------------------------------

def te_thd_partition(cu_seqlens, world_size, rank):
    """Transformer Engine's thd_partition_src_index, token by token (context_parallel.cu, v2.18)."""
    local = [c // world_size for c in cu_seqlens]
    out = []
    for token in range(cu_seqlens[-1] // world_size):
        seq = max(i for i in range(len(local) - 1) if local[i] <= token)  # binary_search: last start <= token
        seq_len = local[seq + 1] - local[seq]
        index = token - local[seq]
        offset = rank if index < seq_len // 2 else (world_size - 1) * 2 - rank
        out.append(index + local[seq] * world_size + seq_len // 2 * offset)
    return out


def te_get_batch_slices(cu_seqlens, world_size, rank):
    """Transformer Engine's get_batch_on_this_cp_rank (thd): two slices per sequence (context_parallel.py)."""
    out = []
    for start, end in zip(cu_seqlens[:-1], cu_seqlens[1:], strict=True):
        size = (end - start) // (2 * world_size)
        out += list(range(start + rank * size, start + (rank + 1) * size))
        out += list(range(start + (2 * world_size - rank - 1) * size, start + (2 * world_size - rank) * size))
    return out


def te_freqs_on_cp_rank(seqlen_local, cp_size, cp_rank):
    """`_get_freqs_on_this_cp_rank` (rope.py): the rows of the full freqs table a rank uses."""
    seg = seqlen_local // 2
    full = cp_size * seqlen_local
    return list(range(cp_rank * seg, (cp_rank + 1) * seg)) + list(range(full - (cp_rank + 1) * seg,
                                                                        full - cp_rank * seg))


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_zigzag_matches_transformer_engine(world_size):
    cu = [0, 8, 8, 24, 32] if world_size < 4 else [0, 8, 8, 32, 48]
    for rank in range(world_size):
        mine = cp_indices(cu, world_size=world_size, rank=rank, strategy="zigzag").tolist()
        assert mine == te_thd_partition(cu, world_size, rank) == te_get_batch_slices(cu, world_size, rank)
        assert cp_positions(48, world_size=world_size, rank=rank, strategy="zigzag").tolist() == \
            te_freqs_on_cp_rank(48 // world_size, world_size, rank)


def test_packed_context_parallel_positions_megatron_example():
    """Megatron-LM PR #5243: one 8-token document over 2 ranks: rank 0's positions are [0, 1, 6, 7]; a second
    document restarts at 0 (a version that reused the first document's chunks gave wrong positions)."""
    cu = [0, 8, 16]
    positions = positions_from_cu_seqlens(cu)
    assert positions[cp_indices(cu, world_size=2, rank=0)].tolist() == [0, 1, 6, 7, 0, 1, 6, 7]
    assert positions[cp_indices(cu, world_size=2, rank=1)].tolist() == [2, 3, 4, 5, 2, 3, 4, 5]


def test_striped_and_contiguous():
    assert cp_positions(8, world_size=4, rank=1, strategy="striped").tolist() == [1, 5]
    assert cp_positions(8, world_size=4, rank=1, strategy="contiguous").tolist() == [2, 3]
    assert cp_indices([0, 4, 12], world_size=2, rank=1, strategy="striped").tolist() == [1, 3, 5, 7, 9, 11]


@pytest.mark.parametrize("strategy", CP_STRATEGIES)
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_cp_indices_split_every_document_on_its_own(strategy, world_size):
    """The vectorised rule (`cp_packed_index`: a document lookup on `cu_seqlens // W`, which the backends
    also run in their graphs) equals its definition: each document's share by `cp_positions`, offset by
    the document's start, documents in order (the empty document 1 of CU included)."""
    for rank in range(world_size):
        expected = [start + p for start, end in zip(CU[:-1], CU[1:], strict=True)
                    for p in cp_positions(int(end - start), world_size=world_size, rank=rank, strategy=strategy)]
        assert cp_indices(CU, world_size=world_size, rank=rank, strategy=strategy).tolist() == expected


# --- packed rows ------------------------------------------------------------------------------------------

def test_positions_restart_per_document():
    assert positions_from_cu_seqlens(CU).tolist() == list(range(8)) + list(range(16)) + list(range(8))
    assert positions_from_cu_seqlens(CU, offset=2).tolist() == [p + 2 for p in positions_from_cu_seqlens(CU)]
    assert document_ids(CU).tolist() == [0] * 8 + [2] * 16 + [3] * 8  # document 1 is empty


def test_document_mask_and_bias():
    mask = document_mask(CU, causal=True)
    doc = document_ids(CU)
    i, j = np.meshgrid(np.arange(32), np.arange(32), indexing="ij")
    assert np.array_equal(mask, (doc[i] == doc[j]) & (j <= i))
    bias = alibi_bias(4, np.arange(32), np.arange(32))
    masked = document_bias(bias, CU, causal=True)
    assert np.array_equal(np.isfinite(masked), np.broadcast_to(mask, masked.shape))
    assert np.array_equal(masked[:, mask], bias[:, mask])
    # ALiBi within a document is the same whether positions restart or not
    restart = positions_from_cu_seqlens(CU)
    assert np.array_equal(document_bias(alibi_bias(4, restart, restart), CU), document_bias(bias, CU))


def test_document_bias_under_context_parallelism_uses_global_indices():
    bias = alibi_bias(2, np.arange(32), np.arange(32))
    full = document_bias(bias, CU, causal=True)
    for rank in range(4):
        index = cp_indices(CU, world_size=4, rank=rank)
        rows = document_bias(bias[:, index], CU, q_index=index, causal=True)
        assert np.array_equal(rows, full[:, index])


# --- shard -> encode -> reassemble ------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", CP_STRATEGIES)
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_every_token_on_exactly_one_rank(strategy, world_size):
    whole = np.sort(np.concatenate([cp_positions(32, world_size=world_size, rank=r, strategy=strategy)
                                    for r in range(world_size)]))
    packed = np.sort(np.concatenate([cp_indices(CU, world_size=world_size, rank=r, strategy=strategy)
                                     for r in range(world_size)]))
    assert whole.tolist() == packed.tolist() == list(range(32))
    x = np.arange(64).reshape(2, 32)
    assert np.array_equal(cp_unshard([cp_shard(x, world_size=world_size, rank=r, strategy=strategy, axis=1)
                                      for r in range(world_size)], strategy=strategy, axis=1), x)


def sharded_rope(x, strategy, world_size, scaling, cu_seqlens=None, *, positions_fn=positions_from_cu_seqlens,
                 shard_positions=cp_positions):
    """shard -> apply_rope with each rank's positions -> cp_unshard (the functions are parameters so a
    planted bug can replace one)."""
    seq = x.shape[-2]
    outs = []
    for r in range(world_size):
        if cu_seqlens is None:
            p = shard_positions(seq, world_size=world_size, rank=r, strategy=strategy)
            shard = cp_shard(x, world_size=world_size, rank=r, strategy=strategy)
        else:
            p = positions_fn(cu_seqlens)[cp_indices(cu_seqlens, world_size=world_size, rank=r, strategy=strategy)]
            shard = cp_shard(x, world_size=world_size, rank=r, strategy=strategy, cu_seqlens=cu_seqlens)
        outs.append(apply_rope(shard, p, scaling=scaling))
    return cp_unshard(outs, strategy=strategy, cu_seqlens=cu_seqlens)


@pytest.mark.parametrize("scaling", STATIC_SCALINGS, ids=lambda s: (s or {}).get("rope_type", "default"))
@pytest.mark.parametrize("strategy", CP_STRATEGIES)
def test_sharded_rope_equals_whole(strategy, scaling):
    x = np.random.default_rng(0).standard_normal((2, 2, 32, 16))
    assert np.array_equal(sharded_rope(x, strategy, 4, scaling), apply_rope(x, np.arange(32), scaling=scaling))
    packed = apply_rope(x, positions_from_cu_seqlens(CU), scaling=scaling)
    assert np.array_equal(sharded_rope(x, strategy, 4, scaling, CU), packed)


@pytest.mark.parametrize("strategy", CP_STRATEGIES)
def test_sharded_bias_rows_equal_whole(strategy):
    positions = positions_from_cu_seqlens(CU)
    table = np.random.default_rng(1).standard_normal((32, 2))
    for whole, rows_of in ((alibi_bias(2, positions, positions), lambda q: alibi_bias(2, q, positions)),
                           (t5_bias(table, positions, positions), lambda q: t5_bias(table, q, positions))):
        rows = [rows_of(cp_shard(positions, world_size=4, rank=r, strategy=strategy, axis=0, cu_seqlens=CU))
                for r in range(4)]
        assert np.array_equal(cp_unshard(rows, strategy=strategy, axis=-2, cu_seqlens=CU), whole)


def test_planted_bugs_are_caught():
    """Bugs reported upstream, planted: the shard -> encode -> reassemble property fails for each."""
    x = np.random.default_rng(2).standard_normal((1, 1, 32, 8))

    def reversed_zigzag(seq_len, *, world_size, rank, strategy):  # chunk order swapped on every rank
        p = cp_positions(seq_len, world_size=world_size, rank=rank, strategy=strategy)
        return np.concatenate(np.split(p, 2)[::-1])

    def no_restart(cu_seqlens):  # a flattening collator's global 0..total-1 positions (transformers #47496)
        return np.arange(int(np.asarray(cu_seqlens)[-1]))

    whole = apply_rope(x, np.arange(32))
    assert not np.allclose(sharded_rope(x, "zigzag", 4, None, shard_positions=reversed_zigzag), whole)
    packed = apply_rope(x, positions_from_cu_seqlens(CU))
    assert not np.allclose(sharded_rope(x, "zigzag", 4, None, CU, positions_fn=no_restart), packed)
    # and the correct functions pass the same comparisons
    assert np.array_equal(sharded_rope(x, "zigzag", 4, None), whole)
    assert np.array_equal(sharded_rope(x, "zigzag", 4, None, CU), packed)


# --- rerotate -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("scaling", STATIC_SCALINGS, ids=lambda s: (s or {}).get("rope_type", "default"))
def test_rerotate_equals_rope_at_shifted_positions(scaling, layout):
    k = np.random.default_rng(3).standard_normal((2, 2, 6, 16))
    p = np.arange(100, 106)
    for delta in (7, -60, np.array([[[1]], [[-5]]])):  # scalar, negative, per batch row
        got = rerotate(apply_rope(k, p, scaling=scaling, layout=layout), delta, scaling=scaling, layout=layout)
        np.testing.assert_allclose(got, apply_rope(k, p + delta, scaling=scaling, layout=layout), rtol=0, atol=1e-12)
    partial = rerotate(apply_rope(k, p, rotary_dim=8), 3, rotary_dim=8)
    np.testing.assert_allclose(partial, apply_rope(k, p + 3, rotary_dim=8), rtol=0, atol=1e-12)


def test_rerotate_does_not_apply_the_attention_factor_twice():
    yarn = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16}
    k = np.random.default_rng(4).standard_normal((1, 4, 16))
    rotated = apply_rope(k, np.arange(4), scaling=yarn)
    naive = apply_rope(rotated, np.full(4, 5), scaling=yarn)  # the forward RoPE re-used: factor squared
    assert not np.allclose(naive, apply_rope(k, np.arange(4) + 5, scaling=yarn))
    np.testing.assert_allclose(rerotate(rotated, 5, scaling=yarn), apply_rope(k, np.arange(4) + 5, scaling=yarn),
                               atol=1e-12)


@pytest.mark.parametrize("kwargs, match", [
    (dict(scaling={"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16}), "dynamic"),
    (dict(scaling={"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8, "factor": 4.0,
                   "original_max_position_embeddings": 16}), "longrope"),
    (dict(mrope_section=[2, 3, 3]), "mrope_section"),
])
def test_rerotate_refuses_position_dependent_frequencies(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rerotate(np.zeros((4, 16)), 1, **kwargs)


# --- validation -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, match", [
    (lambda: positions_from_cu_seqlens([1, 4]), ValueError, r"cu_seqlens must start at 0"),
    (lambda: positions_from_cu_seqlens([0, 4, 2]), ValueError, r"must not decrease"),
    (lambda: positions_from_cu_seqlens([[0, 4]]), ValueError, r"1-D"),
    (lambda: positions_from_cu_seqlens([0.5, 4]), ValueError, r"integers"),
    (lambda: positions_from_cu_seqlens([0, 4], total=5), ValueError, r"total=5 does not match cu_seqlens\[-1\]=4"),
    (lambda: positions_from_cu_seqlens([0, 4], offset=1.5), TypeError, r"offset"),
    (lambda: cp_positions(10, world_size=2, rank=0, strategy="zigzag"), ValueError,
     r"seq_len=10 is not divisible by 2\*world_size=4"),
    (lambda: cp_positions(9, world_size=2, rank=0), ValueError, r"seq_len=9 is not divisible by world_size=2"),
    (lambda: cp_positions(8, world_size=2, rank=2), ValueError, r"rank=2 must be < world_size=2"),
    (lambda: cp_positions(8, world_size=2, rank=0, strategy="ring"), ValueError, r"strategy='ring'"),
    (lambda: cp_indices([0, 7, 15], world_size=2, rank=0), ValueError, r"document 0 length=7"),
    (lambda: cp_shard(np.zeros((2, 9)), world_size=2, rank=0, axis=1, cu_seqlens=[0, 8]), ValueError,
     r"x has 9 tokens"),
    (lambda: cp_unshard([np.zeros(2), np.zeros(3)], axis=0), ValueError, r"same shape"),
    (lambda: document_bias(np.zeros((3, 3)), [0, 2, 3], q_index=[0, 1, 5]), ValueError, r"q_index must lie in"),
])
def test_bad_inputs_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
