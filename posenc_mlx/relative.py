"""Relative position embeddings (Shaw et al.) in MLX. Spec: `posenc_np.relative_embeddings`."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from posenc_np.backend import RelativeConfig
from posenc_np.relative import check_relative_args

from ._common import as_tensor, bind_config, position_pair

__all__ = ["relative_embeddings", "RelativePositionEmbedding"]


def relative_embeddings(table, q_positions, k_positions, *, max_distance, sign="key-query"):
    """`[..., q, k, dim]` clipped relative rows of `table`; see `posenc_np.relative_embeddings`.

    The clip keeps every index inside the table, so MLX's unchecked gather never reads outside it.
    """
    table = as_tensor(table)
    max_distance = check_relative_args(table.shape, max_distance, sign)
    q, k = position_pair(q_positions, k_positions, integer=True)
    distance = k[..., None, :] - q[..., :, None]
    if sign == "query-key":
        distance = -distance
    return mx.take(table, mx.clip(distance, -max_distance, max_distance) + max_distance, axis=0)


class RelativePositionEmbedding(nn.Module):
    """Trainable `table [2*max_distance + 1, dim]` (a parameter, N(0, 0.02) init), called with positions."""

    def __init__(self, max_distance, dim, *, sign="key-query", dtype=mx.float32, key=None):
        super().__init__()
        config = RelativeConfig(max_distance, dim, sign=sign)
        bind_config(config, self)
        self.table = (0.02 * mx.random.normal(config.table_shape, key=key)).astype(dtype)

    def __call__(self, q_positions, k_positions):
        return relative_embeddings(self.table, q_positions, k_positions, max_distance=self.max_distance,
                                   sign=self.sign)

    def _extra_repr(self):
        return self.config.repr_args()
