"""Suite cases for packed sequences and context parallelism (`posenc check --encoding packing`).

Two kinds of comparison, both against the float64 spec on the same inputs:
* the index functions themselves (positions per document, masks, the per-rank shards of every
  strategy, contiguous/striped/zigzag, whole sequences and packed rows): integers and gathers, exact;
* the property that makes context parallelism correct, run through each backend: shard the
  sequence, encode every shard with its rank's positions, reassemble (`cp_unshard`), and get the
  whole-sequence encoding. The spec satisfies it exactly (tests/spec/test_packing.py), so comparing a
  backend's sharded result with the spec's is comparing it with the unsharded encoding. RoPE runs for
  every position-independent scaling; ALiBi and T5 shard the query rows of their bias; attention with
  `document_bias` checks that biases respect document boundaries.

The shapes are small (32 tokens, 4 ranks): the suite checks the index maths, not the speed. Under jit
run the cases whose inputs are tensors the graph must not read (cu_seqlens, a rank tensor): one
compile per case and backend.
"""

from __future__ import annotations

import math

import numpy as np

from posenc_np.alibi import alibi_bias
from posenc_np.attention import attention_tolerance
from posenc_np.backend import numpy_dtype
from posenc_np.packing import CP_STRATEGIES, positions_from_cu_seqlens
from posenc_np.rope import rope_plan
from posenc_np.testing import tolerance

from .registry import Case, register

WORLD = 4
SEQ = 32
#: four documents, one empty, each a multiple of 2 * WORLD (Transformer Engine's cu_seqlens_padded)
CU = np.array([0, 8, 8, 24, 32])
HEADS, HEAD_DIM = 2, 8
ONE_DTYPE = ("float32",)  # integer results do not depend on the float dtype: one run is enough
JIT = ("eager", "jit")

#: RoPE scalings whose frequencies do not depend on the positions (the ones context parallelism may
#: shard freely; dynamic and longrope read max(positions) + 1, a global quantity).
STATIC_SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "ntk": {"rope_type": "ntk", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16},
}


def _exact(desired, dtype, args):
    return tolerance(dtype, exact=True)


# --- packed rows -----------------------------------------------------------------------------------------

def _positions(m, cu, *, offset):
    return m.positions_from_cu_seqlens(cu, offset=offset, total=SEQ)


for _tag, _offset, _what in (("packed", 0, "restart at 0 per document"),
                             ("roberta", 2, "restart at 2 per document (RoBERTa/fairseq, padding_idx + 1)")):
    register(Case("positions_from_cu_seqlens", _tag, "cu-seqlens", lambda rng, dtype, o=_offset: ((CU,), {"offset": o}),
                  _exact, fn=_positions, dtypes=ONE_DTYPE, modes=JIT,
                  description=f"cu_seqlens {CU.tolist()}: positions {_what}"))


def _mask(m, cu):
    return m.document_mask(cu, causal=True, total=SEQ)


register(Case("document_mask", "causal", "cu-seqlens", lambda rng, dtype: ((CU,), {}), _exact, fn=_mask,
              dtypes=ONE_DTYPE, modes=JIT, description=f"block-diagonal causal mask of cu_seqlens {CU.tolist()}"))


# --- context-parallel shards -------------------------------------------------------------------------------

def _shards(m, x, *cu, strategy):
    """Every rank's shard, stacked: `[WORLD, ..., SEQ / WORLD, dim]`."""
    kw = {"cu_seqlens": cu[0]} if cu else {}
    return [m.cp_shard(x, world_size=WORLD, rank=r, strategy=strategy, axis=-2, **kw) for r in range(WORLD)]


def _traced_rank(m, x, ranks, *, strategy):
    """cp_positions with the rank as an integer tensor (one graph serves every rank), used as positions."""
    return [m.apply_rope(x, m.cp_positions(SEQ, world_size=WORLD, rank=ranks[r], strategy=strategy))
            for r in range(WORLD)]


for _strategy in CP_STRATEGIES:
    register(Case("cp_shard", _strategy, "whole", lambda rng, dtype: ((_qkv_like(rng, dtype, (2, SEQ, 4)),), {}),
                  _exact, fn=lambda m, x, s=_strategy: _shards(m, x, strategy=s), dtypes=ONE_DTYPE,
                  modes=("eager",), description=f"{_strategy} shards of 32 tokens over {WORLD} ranks"))
    register(Case("cp_shard", _strategy, "packed",
                  lambda rng, dtype: ((_qkv_like(rng, dtype, (2, SEQ, 4)), CU), {}),
                  _exact, fn=lambda m, x, cu, s=_strategy: _shards(m, x, cu, strategy=s), dtypes=ONE_DTYPE,
                  modes=JIT if _strategy == "zigzag" else ("eager",),  # jit budget: as the sharded RoPE below
                  description=f"{_strategy} per document of cu_seqlens {CU.tolist()} over {WORLD} ranks"))


def _rope_tol(desired, dtype, args):
    return tolerance(dtype, max_angle=float(SEQ), scale=float(np.abs(desired).max()))


def _sharded_rope(m, x, *cu, strategy, scaling):
    """shard -> apply_rope with the rank's positions -> cp_unshard: equals apply_rope on the whole row."""
    if cu:
        positions = m.positions_from_cu_seqlens(cu[0], total=SEQ)
        shards = [m.apply_rope(m.cp_shard(x, world_size=WORLD, rank=r, strategy=strategy, cu_seqlens=cu[0]),
                               m.cp_shard(positions, world_size=WORLD, rank=r, strategy=strategy, axis=0,
                                          cu_seqlens=cu[0]), scaling=scaling)
                  for r in range(WORLD)]
        return m.cp_unshard(shards, strategy=strategy, cu_seqlens=cu[0])
    shards = [m.apply_rope(m.cp_shard(x, world_size=WORLD, rank=r, strategy=strategy),
                           m.cp_positions(SEQ, world_size=WORLD, rank=r, strategy=strategy), scaling=scaling)
              for r in range(WORLD)]
    return m.cp_unshard(shards, strategy=strategy)


def _qkv_like(rng, dtype, shape):
    return rng.standard_normal(shape).astype(numpy_dtype(dtype))


for _strategy in CP_STRATEGIES:
    for _name, _scaling in STATIC_SCALINGS.items():
        register(Case("cp_unshard", f"rope-{_name}-{_strategy}", "whole",
                      lambda rng, dtype: ((_qkv_like(rng, dtype, (2, HEADS, SEQ, HEAD_DIM)),), {}),
                      _rope_tol, fn=lambda m, x, s=_strategy, sc=_scaling: _sharded_rope(m, x, strategy=s, scaling=sc),
                      modes=JIT if (_name, _strategy) == ("default", "zigzag") else ("eager",),
                      description=f"apply_rope ({_name}) per {_strategy} shard, reassembled = whole sequence"))
    # jit for one strategy (zigzag: two chunks per rank, the most index arithmetic); the shard index
    # arithmetic of every strategy is traced by its rank-tensor case below (the check's jit budget)
    register(Case("cp_unshard", f"rope-default-{_strategy}", "packed",
                  lambda rng, dtype: ((_qkv_like(rng, dtype, (2, HEADS, SEQ, HEAD_DIM)), CU), {}),
                  _rope_tol, fn=lambda m, x, cu, s=_strategy: _sharded_rope(m, x, cu, strategy=s, scaling=None),
                  modes=JIT if _strategy == "zigzag" else ("eager",), description=f"packed row: apply_rope per {_strategy} shard of every document, "
                                         "reassembled = whole row"))
    register(Case("cp_positions", f"rope-{_strategy}", "rank-tensor",
                  lambda rng, dtype: ((_qkv_like(rng, dtype, (2, HEADS, SEQ // WORLD, HEAD_DIM)),
                                       np.arange(WORLD)), {}),
                  _rope_tol, fn=lambda m, x, ranks, s=_strategy: _traced_rank(m, x, ranks, strategy=s),
                  modes=JIT, description=f"cp_positions ({_strategy}) with the rank as a tensor, as apply_rope positions"))


def _sharded_bias(m, cu, *table, strategy):
    """Each rank's query rows of the bias (ALiBi, or T5 when a table is given) against all keys, reassembled
    along the query axis."""
    k_positions = m.positions_from_cu_seqlens(cu, total=SEQ)
    rows = []
    for r in range(WORLD):
        q_positions = m.cp_shard(k_positions, world_size=WORLD, rank=r, strategy=strategy, axis=0, cu_seqlens=cu)
        if table:
            rows.append(m.t5_bias(table[0], q_positions, k_positions))
        else:
            rows.append(m.alibi_bias(HEADS, q_positions, k_positions, form="symmetric"))
    return m.cp_unshard(rows, strategy=strategy, axis=-2, cu_seqlens=cu)


for _strategy in CP_STRATEGIES:
    register(Case("cp_unshard", f"alibi-{_strategy}", "packed", lambda rng, dtype: ((CU,), {}),
                  lambda desired, dtype, args: tolerance(dtype, scale=float(np.abs(desired).max())),
                  fn=lambda m, cu, s=_strategy: _sharded_bias(m, cu, strategy=s),
                  dtypes=ONE_DTYPE, modes=("eager",),
                  description=f"ALiBi query rows per {_strategy} rank (packed positions), reassembled"))
    register(Case("cp_unshard", f"t5-{_strategy}", "packed",
                  lambda rng, dtype: ((CU, rng.standard_normal((32, HEADS)).astype(numpy_dtype(dtype))), {}),
                  _exact, fn=lambda m, cu, table, s=_strategy: _sharded_bias(m, cu, table, strategy=s),
                  modes=("eager",), description=f"T5 bias query rows per {_strategy} rank (packed), reassembled"))


# --- biases that respect document boundaries -------------------------------------------------------------

def _document_attention(m, q, k, v, cu):
    positions = m.positions_from_cu_seqlens(cu, total=SEQ)
    bias = m.document_bias(m.alibi_bias(HEADS, positions, positions, form="symmetric"), cu, causal=True)
    return m.attention(q, k, v, bias=bias)


def _document_attention_tol(desired, dtype, args):
    q, k, v, cu = args
    positions = positions_from_cu_seqlens(cu)
    tols = attention_tolerance(q, k, v, bias=alibi_bias(HEADS, positions, positions), dtype=dtype)
    return max(tols, key=lambda t: t.atol)


register(Case("document_bias", "alibi-causal", "cu-seqlens",
              lambda rng, dtype: (tuple(_qkv_like(rng, dtype, (1, HEADS, SEQ, HEAD_DIM)) for _ in range(3)) + (CU,), {}),
              _document_attention_tol, fn=_document_attention, modes=JIT,
              description="attention with document_bias(alibi) over a packed row: no weight crosses a document"))


def _document_attention_sharded(m, q, k, v, cu):
    """Zigzag context parallelism with a packed row: rank r's queries against all keys (after the
    all-gather of K/V), document_bias on global indices; rows reassembled."""
    positions = m.positions_from_cu_seqlens(cu, total=SEQ)
    bias = m.alibi_bias(HEADS, positions, positions, form="symmetric")
    outs, weights = [], []
    for r in range(WORLD):
        index = m.cp_indices(cu, world_size=WORLD, rank=r, strategy="zigzag", total=SEQ)
        q_r = m.cp_shard(q, world_size=WORLD, rank=r, strategy="zigzag", cu_seqlens=cu)
        rows = m.cp_shard(bias, world_size=WORLD, rank=r, strategy="zigzag", cu_seqlens=cu)
        out, w = m.attention(q_r, k, v, bias=m.document_bias(rows, cu, q_index=index, causal=True))
        outs.append(out)
        weights.append(w)
    return (m.cp_unshard(outs, strategy="zigzag", cu_seqlens=cu),
            m.cp_unshard(weights, strategy="zigzag", cu_seqlens=cu))


register(Case("document_bias", "alibi-causal-zigzag", "cu-seqlens",
              lambda rng, dtype: (tuple(_qkv_like(rng, dtype, (1, HEADS, SEQ, HEAD_DIM)) for _ in range(3)) + (CU,), {}),
              _document_attention_tol, fn=_document_attention_sharded, modes=("eager",),
              description="zigzag CP attention, packed: per-rank queries, document_bias on global indices"))


# --- KV-cache context shift ------------------------------------------------------------------------------

def _rerotate(m, k, positions, delta, *, scaling):
    return m.rerotate(m.apply_rope(k, positions, scaling=scaling), delta, scaling=scaling)


for _name in ("default", "yarn", "llama3"):
    _sc = STATIC_SCALINGS[_name]
    _p = np.arange(100, 100 + SEQ)

    def _make(rng, dtype, p=_p):
        return (_qkv_like(rng, dtype, (2, HEADS, SEQ, HEAD_DIM)), p, np.array(-60)), {}

    def _tol(desired, dtype, args, sc=_sc):
        # Two rotations in float32 (apply_rope, then the shift): twice the compute budget of one. The
        # cached key is rounded to `dtype` between them, like a real KV cache, and the shift mixes the
        # rounding errors of a channel pair: three half-ulps of final rounding where the policy allows
        # two, hence scale * 1.5.
        turns = rope_plan(HEAD_DIM, scaling=sc).turns.max()
        angle = float(np.abs(args[1]).max() * turns * 2 * math.pi)
        return tolerance(dtype, max_angle=2 * angle, scale=1.5 * float(np.abs(desired).max()), slack_ulps=16)

    register(Case("rerotate", _name, "shift-60", _make, _tol, fn=lambda m, k, p, d, sc=_sc: _rerotate(m, k, p, d,
                                                                                                        scaling=sc),
                  modes=JIT if _name == "default" else ("eager",),
                  description=f"keys rotated at 100..131 ({_name}) shifted by -60"))
