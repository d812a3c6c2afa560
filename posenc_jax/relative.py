"""Relative position embeddings (Shaw et al.) in JAX / Flax NNX. Spec: `posenc_np.relative_embeddings`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from posenc_np.backend import RelativeConfig
from posenc_np.relative import check_relative_args

from ._common import position_pair

__all__ = ["relative_embeddings", "RelativePositionEmbedding"]


def relative_embeddings(table, q_positions, k_positions, *, max_distance, sign="key-query"):
    """`[..., q, k, dim]` clipped relative rows of `table`; see `posenc_np.relative_embeddings`.

    The clip keeps every index inside the table, so JAX's clamping gather never changes a result.
    """
    max_distance = check_relative_args(table.shape, max_distance, sign)
    q, k = position_pair(q_positions, k_positions, integer=True)
    distance = k[..., None, :] - q[..., :, None]
    if sign == "query-key":
        distance = -distance
    return jnp.take(jnp.asarray(table), jnp.clip(distance, -max_distance, max_distance) + max_distance, axis=0)


class RelativePositionEmbedding(nnx.Module):
    """Trainable `table [2*max_distance + 1, dim]` (`nnx.Param`, N(0, 0.02) init), called with positions."""

    def __init__(self, max_distance, dim, *, sign="key-query", rngs: nnx.Rngs, dtype=jnp.float32):
        config = RelativeConfig(max_distance, dim, sign=sign)
        config.bind(self)
        self.table = nnx.Param(0.02 * jax.random.normal(rngs.params(), config.table_shape, dtype))

    def __call__(self, q_positions, k_positions):
        return relative_embeddings(self.table[...], q_positions, k_positions, max_distance=self.max_distance,
                                   sign=self.sign)
