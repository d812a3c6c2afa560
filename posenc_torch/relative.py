"""Relative position embeddings (Shaw et al.) in PyTorch. Spec: `posenc_np.relative_embeddings`."""

from __future__ import annotations

import torch

from posenc_np.backend import RelativeConfig
from posenc_np.relative import check_relative_args

from ._common import position_pair

__all__ = ["relative_embeddings", "RelativePositionEmbedding"]


def relative_embeddings(table, q_positions, k_positions, *, max_distance, sign="key-query"):
    """`[..., q, k, dim]` rows `clip(+-(j - i), -k, k) + k` of `table`; see `posenc_np.relative_embeddings`.

    A gather: exact, the table's dtype, differentiable with respect to `table`. Eager, non-integer
    positions raise ValueError; under torch.compile floating positions are a TypeError.
    """
    max_distance = check_relative_args(table.shape, max_distance, sign)
    q, k = position_pair(q_positions, k_positions, integer=True)
    distance = k[..., None, :] - q[..., :, None]
    if sign == "query-key":
        distance = -distance
    return table[distance.clamp(-max_distance, max_distance) + max_distance]


class RelativePositionEmbedding(torch.nn.Module):
    """Trainable `table [2*max_distance + 1, dim]` (nn.Parameter, N(0, 0.02)), called with positions.

    `sign="query-key"` reads the table as HF BERT's `distance_embedding` (max_distance = max_pos - 1).
    """

    def __init__(self, max_distance, dim, *, sign="key-query", dtype=None, device=None):
        super().__init__()
        config = RelativeConfig(max_distance, dim, sign=sign)
        config.bind(self)
        self.table = torch.nn.Parameter(torch.empty(config.table_shape, dtype=dtype, device=device))
        torch.nn.init.normal_(self.table, std=0.02)

    def forward(self, q_positions, k_positions):
        return relative_embeddings(self.table, q_positions, k_positions, max_distance=self.max_distance,
                                   sign=self.sign)

    def extra_repr(self):
        return self.config.repr_args()
