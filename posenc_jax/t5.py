"""T5 relative position buckets and bias in JAX / Flax NNX. Spec: `posenc_np.t5_bucket`, `posenc_np.t5_bias`."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from posenc_np.backend import T5BiasConfig, check_integer_positions, check_table, check_traced_integer
from posenc_np.t5 import check_t5_args, t5_bucket_thresholds

from ._common import TRACE, is_tracing, position_pair, spec_constant

__all__ = ["t5_bucket", "t5_bias", "T5RelativeBias"]


@partial(jax.jit, static_argnums=(1, 2, 3))  # one compile per shape instead of one per eager op
def _buckets(relative, bidirectional, num_buckets, max_distance):
    per_direction, max_exact = check_t5_args(bidirectional, num_buckets, max_distance)
    key = ("t5_thresholds", bool(bidirectional), num_buckets, max_distance)
    thresholds = spec_constant(key, lambda: t5_bucket_thresholds(
        bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance), dtype=jnp.int32)
    if bidirectional:
        offset = jnp.where(relative > 0, per_direction, 0)
        distance = jnp.abs(relative)
    else:
        offset = 0
        distance = jnp.maximum(-relative, 0)
    # count(thresholds <= distance): integers only, the spec's buckets whatever XLA's log does.
    log_steps = jnp.searchsorted(thresholds, distance, side="right", method="compare_all")
    return (offset + jnp.minimum(distance, max_exact) + log_steps).astype(jnp.int32)


def t5_bucket(relative_position, *, bidirectional=True, num_buckets=32, max_distance=128):
    """int32 T5 buckets of `key - query`; see `posenc_np.t5_bucket` (and `posenc_torch.t5_bucket` for
    why thresholds are counted instead of taking a float32 log). Concrete non-integer values raise
    ValueError; under jax.jit a floating array is a TypeError."""
    check_t5_args(bidirectional, num_buckets, max_distance)
    relative = relative_position if is_tracing(relative_position) else jnp.asarray(relative_position)
    if jnp.issubdtype(relative.dtype, jnp.floating):
        if is_tracing(relative):
            check_traced_integer("relative_position", relative.dtype, is_floating=True, where=TRACE)
        relative = jnp.asarray(check_integer_positions("relative_position", np.asarray(relative, np.float64)),
                               dtype=jnp.int32)
    return _buckets(relative, bidirectional, num_buckets, max_distance)


def t5_bias(table, q_positions, k_positions, *, bidirectional=True, num_buckets=32, max_distance=128):
    """`[..., heads, q, k]` T5 bias from `table [num_buckets, heads]`; see `posenc_np.t5_bias`.

    The table's dtype; differentiable with respect to `table`. Works under jax.jit.
    """
    check_t5_args(bidirectional, num_buckets, max_distance)
    check_table("table", table.shape, rows=num_buckets)
    q, k = position_pair(q_positions, k_positions, integer=True)
    bucket = _buckets(k[..., None, :] - q[..., :, None], bidirectional, num_buckets, max_distance)
    return jnp.moveaxis(jnp.asarray(table).T[:, bucket], 0, -3)


class T5RelativeBias(nnx.Module):
    """T5 bias with a trainable `table [num_buckets, num_heads]` (`nnx.Param`, N(0, 0.02) init)."""

    def __init__(self, num_heads, *, bidirectional=True, num_buckets=32, max_distance=128, rngs: nnx.Rngs,
                 dtype=jnp.float32):
        config = T5BiasConfig(num_heads, bidirectional=bidirectional, num_buckets=num_buckets,
                              max_distance=max_distance)
        config.bind(self)
        self.table = nnx.Param(0.02 * jax.random.normal(rngs.params(), config.table_shape, dtype))

    def __call__(self, q_positions, k_positions):
        return t5_bias(self.table[...], q_positions, k_positions, bidirectional=self.bidirectional,
                       num_buckets=self.num_buckets, max_distance=self.max_distance)
