"""CoPE in MLX. Spec: `posenc_np.cope`."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from posenc_np.backend import CoPEConfig, check_float_dtype
from posenc_np.cope import check_cope_shapes

from ._common import as_tensor, bind_config, is_floating

__all__ = ["cope", "CoPE"]


def cope(query, attn_logits, pos_emb):
    """`[..., q, k]` CoPE position logits in float32, returned in the query's dtype; see `posenc_np.cope`."""
    query, attn_logits, pos_emb = as_tensor(query), as_tensor(attn_logits), as_tensor(pos_emb)
    check_float_dtype("query", query.dtype, is_floating(query))
    check_float_dtype("attn_logits", attn_logits.dtype, is_floating(attn_logits))
    check_float_dtype("pos_emb", pos_emb.dtype, is_floating(pos_emb))
    max_pos = check_cope_shapes(tuple(query.shape), tuple(attn_logits.shape), tuple(pos_emb.shape))
    gates = mx.sigmoid(attn_logits.astype(mx.float32))
    positions = mx.minimum(mx.cumsum(gates, axis=-1, reverse=True), max_pos - 1)
    logits_int = query.astype(mx.float32) @ pos_emb.astype(mx.float32).T
    lead = mx.broadcast_shapes(tuple(logits_int.shape[:-2]), tuple(positions.shape[:-2]))
    logits_int = mx.broadcast_to(logits_int, (*lead, *logits_int.shape[-2:]))
    positions = mx.broadcast_to(positions, (*lead, *positions.shape[-2:]))
    floor = mx.floor(positions)
    frac = positions - floor
    at_floor = mx.take_along_axis(logits_int, floor.astype(mx.int32), -1)
    at_ceil = mx.take_along_axis(logits_int, mx.ceil(positions).astype(mx.int32), -1)
    return (at_ceil * frac + at_floor * (1.0 - frac)).astype(query.dtype)


class CoPE(nn.Module):
    """CoPE with a trainable `pos_emb [max_pos, dim]` (a parameter, zeros at init as x-transformers; also
    read as `table`); called with `(query, attn_logits)`."""

    def __init__(self, dim, max_pos, *, dtype=mx.float32):
        super().__init__()
        config = CoPEConfig(dim, max_pos)
        bind_config(config, self)
        self.pos_emb = mx.zeros(config.table_shape, dtype)

    @property
    def table(self):
        return self.pos_emb

    def __call__(self, query, attn_logits):
        return cope(query, attn_logits, self.pos_emb)

    def _extra_repr(self):
        return self.config.repr_args()
