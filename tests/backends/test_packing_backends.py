"""Packing and context parallelism in the backends, beyond the registry cases (test_conformance runs those).

* planted bugs turn the `posenc check --encoding packing` cases red in every backend: zigzag chunks in
  reversed order, positions not restarted per document;
* under jit the packed row length must be given (`total=`): the output shape cannot depend on data,
  and the message says so; new cu_seqlens values reuse the compiled function (they are data).
"""

from __future__ import annotations

import numpy as np
import pytest

from posenc.check.registry import all_cases
from posenc.check.run import run

CASES = {c.id: c for c in all_cases() if c.family == "packing"}


def _status(backend, case_id, mode="eager"):
    (record,) = run([CASES[case_id]], backends=[backend.name], dtypes=["float32"], modes=[mode], seed=0,
                    require=[backend.name])
    return record.status


def test_planted_reversed_zigzag_is_caught(backend, monkeypatch):
    module = backend.module
    correct = module.cp_positions

    def reversed_chunks(seq_len, *, world_size, rank, strategy="contiguous", **kw):
        p = correct(seq_len, world_size=world_size, rank=rank, strategy=strategy, **kw)
        half = p.shape[0] // 2
        return module.cp_unshard([p[half:], p[:half]], strategy="contiguous", axis=0) if strategy == "zigzag" else p

    assert _status(backend, "packing/rope-default-zigzag/whole") == "pass"
    monkeypatch.setattr(module, "cp_positions", reversed_chunks)
    assert _status(backend, "packing/rope-default-zigzag/whole") == "fail"
    assert _status(backend, "packing/rope-zigzag/rank-tensor") == "fail"


def test_planted_positions_not_restarted_is_caught(backend, monkeypatch):
    module = backend.module
    correct = module.positions_from_cu_seqlens

    def global_positions(cu_seqlens, *, offset=0, total=None):  # transformers #47496's flattening collator
        n = int(correct(cu_seqlens, offset=offset, total=total).shape[0])
        return correct(np.array([0, n], dtype=np.int32), offset=offset, total=n)  # offset .. offset + n - 1

    assert _status(backend, "packing/roberta/cu-seqlens") == "pass"
    monkeypatch.setattr(module, "positions_from_cu_seqlens", global_positions)
    for case_id in ("packing/roberta/cu-seqlens", "packing/packed/cu-seqlens", "packing/rope-default-zigzag/packed",
                    "packing/alibi-zigzag/packed"):
        assert _status(backend, case_id) == "fail", case_id


def test_total_is_required_under_jit(backend):
    cu = np.array([0, 3, 8], dtype=np.int32)
    with pytest.raises(Exception, match="total="):
        backend.call(lambda m, c: m.positions_from_cu_seqlens(c), (cu,), {}, mode="jit")


def test_new_cu_seqlens_values_reuse_the_compiled_function(backend):
    cache = {}
    outs = [backend.call(lambda m, c: m.positions_from_cu_seqlens(c, total=8), (np.array(cu, dtype=np.int32),), {},
                         mode="jit", cache=cache, key="packing-recompile")
            for cu in ([0, 3, 8], [0, 5, 8])]
    assert len(cache) == 1
    assert np.asarray(outs[0]).tolist() == [0, 1, 2, 0, 1, 2, 3, 4]
    assert np.asarray(outs[1]).tolist() == [0, 1, 2, 3, 4, 0, 1, 2]  # the new boundaries, same graph
