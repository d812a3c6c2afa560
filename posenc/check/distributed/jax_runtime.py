"""The JAX sharded-runtime checks: a 1-D `Mesh` over `JAX_DEVICES` host CPU devices.

Imported only in the process `posenc.check.distributed.main` starts with
`XLA_FLAGS=--xla_force_host_platform_device_count=8` (the flag must precede JAX's start). Each check is
one function returning its records; `checks()` runs them in order on one `Setup`.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import posenc_jax as pj
import posenc_np
from posenc_np.testing import tolerance

from .common import (
    JAX_DEVICES,
    MROPE_CONVENTIONS,
    STRATEGIES,
    collectives,
    mrope_ids,
    mrope_params,
    record,
)

try:
    from jax import shard_map
except ImportError:  # older JAX
    from jax.experimental.shard_map import shard_map

__all__ = ["checks", "Setup"]

SEQ_AXIS = P(None, None, "sp", None)


@dataclass
class Setup:
    """The mesh and the one batch every check starts from: x `[2, heads, seq, dim]`, its unsharded RoPE."""

    mesh: Mesh
    rng: np.random.Generator
    x: np.ndarray
    positions: np.ndarray
    whole: np.ndarray
    tol: float
    seq: int = 64
    heads: int = 2
    dim: int = 16

    @property
    def seq_spec(self):
        return NamedSharding(self.mesh, SEQ_AXIS)

    def put(self, array, *spec):
        return jax.device_put(array, NamedSharding(self.mesh, P(*spec)))


def _err(a, b):
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def _rank_order(x, strategy, axis=-2, **cp):
    """The ranks' shards of `x` in rank order: how a data loader lays out a context-parallel batch."""
    return np.concatenate([posenc_np.cp_shard(x, world_size=JAX_DEVICES, rank=r, strategy=strategy, axis=axis, **cp)
                           for r in range(JAX_DEVICES)], axis=axis)


def setup(seed: int) -> Setup:
    mesh = Mesh(np.array(jax.devices()), ("sp",))
    rng = np.random.default_rng(seed)
    seq, heads, dim = 64, 2, 16
    x = rng.standard_normal((2, heads, seq, dim)).astype(np.float32)
    positions = np.arange(seq, dtype=np.int32)
    whole = np.asarray(pj.apply_rope(x, positions))  # unsharded, one device
    tol = tolerance("float32", max_angle=float(seq), scale=float(np.abs(whole).max())).atol
    return Setup(mesh, rng, x, positions, whole, tol, seq, heads, dim)


def rope_namedsharding(s: Setup) -> list:
    """NamedSharding + jit: positions replicated, and positions sharded like the tokens."""
    rope = jax.jit(lambda a, p: pj.apply_rope(a, p))
    xs = jax.device_put(s.x, s.seq_spec)
    records = []
    for how, pspec in (("positions-replicated", ()), ("positions-sharded", ("sp",))):
        ps = s.put(s.positions, *pspec)
        out = rope(xs, ps)
        coll = collectives(rope.lower(xs, ps).compile().as_text())
        moved = {op: n for op, n in coll["counts"].items() if n and op != "all-reduce"}
        # A sharded position array makes the table-range predicate of apply_rope's fast path (are all
        # positions inside the 4096-row table?) one pred[] all-reduce; no sequence data moves. It cannot be
        # dropped cheaply: a per-element select computes the angles for every call (~20x slower, measured).
        scalar_reduces = all(shape.endswith("[]") for shape in coll["all_reduce_shapes"])
        ok_coll = not moved and (coll["counts"]["all-reduce"] == 0 if how == "positions-replicated" else scalar_reduces)
        e = _err(out, s.whole)
        records.append(record(f"rope-namedsharding-{how}", "jax", e <= s.tol and out.sharding.is_equivalent_to(
            s.seq_spec, s.x.ndim) and ok_coll, max_abs_err=e, tol=s.tol, sharding=str(out.sharding.spec),
            collectives=coll["counts"], all_reduce_shapes=coll["all_reduce_shapes"]))
    return records


def rope_shard_map(s: Setup) -> list:
    """shard_map per-rank form: each device holds its strategy's shard and computes its positions."""
    records = []
    for strategy in STRATEGIES:
        def per_rank(local, strategy=strategy):
            rank = jax.lax.axis_index("sp")
            return pj.apply_rope(local, pj.cp_positions(s.seq, world_size=JAX_DEVICES, rank=rank, strategy=strategy))

        fn = jax.jit(shard_map(per_rank, mesh=s.mesh, in_specs=SEQ_AXIS, out_specs=SEQ_AXIS))
        xs = jax.device_put(_rank_order(s.x, strategy), s.seq_spec)
        out = fn(xs)
        coll = collectives(fn.lower(xs).compile().as_text())
        shards = np.split(np.asarray(out), JAX_DEVICES, axis=-2)
        e = _err(posenc_np.cp_unshard(shards, strategy=strategy), s.whole)
        records.append(record(f"rope-shard_map-{strategy}", "jax", e <= s.tol and not any(coll["counts"].values())
                              and out.sharding.is_equivalent_to(s.seq_spec, s.x.ndim), max_abs_err=e, tol=s.tol,
                              collectives=coll["counts"]))
    return records


def rope_packed_zigzag(s: Setup) -> list:
    """A packed row (thd) under zigzag context parallelism, Transformer Engine's layout, in shard_map."""
    cu = np.array([0, 16, 48, 64], dtype=np.int32)  # documents padded to multiples of 2 * 8
    xt = s.rng.standard_normal((s.seq, s.heads, s.dim)).astype(np.float32)
    packed_pos = posenc_np.positions_from_cu_seqlens(cu).astype(np.int32)
    whole_t = np.asarray(pj.apply_rope(xt, packed_pos[:, None]))

    def per_rank_packed(local, cu_seqlens):
        rank = jax.lax.axis_index("sp")
        index = pj.cp_indices(cu_seqlens, world_size=JAX_DEVICES, rank=rank, strategy="zigzag", total=s.seq)
        local_positions = pj.positions_from_cu_seqlens(cu_seqlens, total=s.seq)[index]
        return pj.apply_rope(local, local_positions[:, None])

    fn = jax.jit(shard_map(per_rank_packed, mesh=s.mesh, in_specs=(P("sp"), P()), out_specs=P("sp")))
    xs = s.put(_rank_order(xt, "zigzag", axis=0, cu_seqlens=cu), "sp")
    cus = s.put(cu)
    out = fn(xs, cus)
    coll = collectives(fn.lower(xs, cus).compile().as_text())
    e = _err(posenc_np.cp_unshard(np.split(np.asarray(out), JAX_DEVICES), strategy="zigzag", axis=0, cu_seqlens=cu),
             whole_t)
    return [record("rope-shard_map-packed-zigzag", "jax", e <= s.tol and not any(coll["counts"].values()),
                   max_abs_err=e, tol=s.tol, collectives=coll["counts"])]


def biases_namedsharding(s: Setup) -> list:
    """ALiBi and T5 biases under jit with the query axis sharded: rows computed where the queries live."""
    table = s.rng.standard_normal((32, s.heads)).astype(np.float32)
    row_spec = NamedSharding(s.mesh, P(None, "sp", None))
    qs, ks = s.put(s.positions, "sp"), s.put(s.positions)
    records = []
    for name, fn, spec in (
            ("alibi", jax.jit(lambda q, k: pj.alibi_bias(s.heads, q, k, form="symmetric")),
             posenc_np.alibi_bias(s.heads, s.positions, s.positions)),
            ("t5", jax.jit(lambda q, k: pj.t5_bias(jnp.asarray(table), q, k)),
             posenc_np.t5_bias(table.astype(np.float64), s.positions, s.positions))):
        out = fn(qs, ks)
        unsharded = np.asarray(fn(s.positions, s.positions))
        coll = collectives(fn.lower(qs, ks).compile().as_text())
        e = _err(out, unsharded)
        tol_bias = tolerance("float32", scale=float(np.abs(spec).max())).atol
        records.append(record(f"{name}-namedsharding", "jax", e == 0.0 and _err(out, spec) <= tol_bias
                              and out.sharding.is_equivalent_to(row_spec, 3) and not any(coll["counts"].values()),
                              max_abs_err=e, spec_err=_err(out, spec), tol=tol_bias, sharding=str(out.sharding.spec),
                              collectives=coll["counts"]))
    return records


def mrope(s: Setup) -> list:
    """Multi-axis RoPE (Qwen2-VL contiguous, Qwen3-VL interleaved sections; head_dim 128), position ids
    `[3, seq]` of a text + image row. Global view: positions sharded on their seq axis like the tokens;
    the multi-axis path has no table fast path, so not even a scalar reduction crosses devices.
    Per-rank view: each rank gathers its tokens' ids with the zigzag cp_positions."""
    ids = mrope_ids(s.seq)
    records = []
    for convention in MROPE_CONVENTIONS:
        params, head_dim = mrope_params(convention)
        xm = s.rng.standard_normal((2, s.heads, s.seq, head_dim)).astype(np.float32)
        whole_m = np.asarray(pj.apply_rope(xm, ids, **params))
        tol_m = tolerance("float32", max_angle=float(s.seq), scale=float(np.abs(whole_m).max())).atol
        records.append(_mrope_global(s, convention, params, xm, ids, whole_m, tol_m))
        records.append(_mrope_per_rank(s, convention, params, xm, ids, whole_m, tol_m))
    return records


def _mrope_global(s, convention, params, xm, ids, whole_m, tol_m):
    rope_m = jax.jit(lambda a, p: pj.apply_rope(a, p, **params))
    xs = jax.device_put(xm, s.seq_spec)
    ps = s.put(ids, None, "sp")
    out = rope_m(xs, ps)
    coll = collectives(rope_m.lower(xs, ps).compile().as_text())
    e = _err(out, whole_m)
    kept = out.sharding.is_equivalent_to(s.seq_spec, xm.ndim)
    return record(f"mrope-{convention}-namedsharding-positions-sharded", "jax", e <= tol_m
                  and kept and not any(coll["counts"].values()),
                  max_abs_err=e, tol=tol_m, sharding=str(out.sharding.spec), collectives=coll["counts"])


def _mrope_per_rank(s, convention, params, xm, ids, whole_m, tol_m):
    def per_rank_mrope(local, ids_all):
        rank = jax.lax.axis_index("sp")
        index = pj.cp_positions(s.seq, world_size=JAX_DEVICES, rank=rank, strategy="zigzag")
        return pj.apply_rope(local, ids_all[:, index], **params)

    fn = jax.jit(shard_map(per_rank_mrope, mesh=s.mesh, in_specs=(SEQ_AXIS, P()), out_specs=SEQ_AXIS))
    xs = jax.device_put(_rank_order(xm, "zigzag"), s.seq_spec)
    ids_rep = s.put(ids)
    out = fn(xs, ids_rep)
    coll = collectives(fn.lower(xs, ids_rep).compile().as_text())
    e = _err(posenc_np.cp_unshard(np.split(np.asarray(out), JAX_DEVICES, axis=-2), strategy="zigzag"), whole_m)
    kept = out.sharding.is_equivalent_to(s.seq_spec, xm.ndim)
    return record(f"mrope-{convention}-shard_map-zigzag", "jax", e <= tol_m
                  and not any(coll["counts"].values()) and kept,
                  max_abs_err=e, tol=tol_m, collectives=coll["counts"])


#: the checks in run order (the order fixes which random draws each one gets)
CHECKS = (rope_namedsharding, rope_shard_map, rope_packed_zigzag, biases_namedsharding, mrope)


def checks(seed=0) -> list[dict]:
    """Every JAX check's records; one failing record when JAX does not see `JAX_DEVICES` devices."""
    devices = jax.devices()
    if len(devices) != JAX_DEVICES:
        return [record("jax-devices", "jax", False, message=f"expected {JAX_DEVICES} devices, got {len(devices)}")]
    s = setup(seed)
    return [r for check in CHECKS for r in check(s)]
