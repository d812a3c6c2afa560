"""CoPE in PyTorch. Spec: `posenc_np.cope`."""

from __future__ import annotations

import torch

from posenc_np.backend import CoPEConfig, check_float_dtype
from posenc_np.cope import check_cope_shapes

from ._common import as_tensor

__all__ = ["cope", "CoPE"]


def cope(query, attn_logits, pos_emb):
    """`[..., q, k]` CoPE position logits; see `posenc_np.cope`.

    Gates, counts, the query-embedding products and the interpolation are float32; the result has
    the query's dtype. Differentiable with respect to query, attn_logits (through the gates) and
    pos_emb. Works under torch.compile(fullgraph=True).
    """
    pos_emb = as_tensor(pos_emb)
    query, attn_logits = as_tensor(query, device=pos_emb.device), as_tensor(attn_logits, device=pos_emb.device)
    check_float_dtype("query", query.dtype, query.is_floating_point())
    check_float_dtype("attn_logits", attn_logits.dtype, attn_logits.is_floating_point())
    check_float_dtype("pos_emb", pos_emb.dtype, pos_emb.is_floating_point())
    max_pos = check_cope_shapes(query.shape, attn_logits.shape, pos_emb.shape)
    gates = torch.sigmoid(attn_logits.float())
    positions = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=max_pos - 1)
    logits_int = query.float() @ pos_emb.float().T  # [..., q, max_pos]
    lead = torch.broadcast_shapes(logits_int.shape[:-2], positions.shape[:-2])
    logits_int = logits_int.expand(*lead, *logits_int.shape[-2:])
    positions = positions.expand(*lead, *positions.shape[-2:])
    floor = positions.floor()
    frac = positions - floor
    at_floor = logits_int.gather(-1, floor.long())
    at_ceil = logits_int.gather(-1, positions.ceil().long())
    return (at_ceil * frac + at_floor * (1 - frac)).to(query.dtype)


class CoPE(torch.nn.Module):
    """CoPE with a trainable `pos_emb [max_pos, dim]` (zeros at init, as x-transformers).

    Called with `(query [..., q, dim], attn_logits [..., q, k])`, returns the position logits to add
    to `attn_logits`. The trainable table is also reachable as `table`.
    """

    def __init__(self, dim, max_pos, *, dtype=None, device=None):
        super().__init__()
        config = CoPEConfig(dim, max_pos)
        config.bind(self)
        self.pos_emb = torch.nn.Parameter(torch.zeros(config.table_shape, dtype=dtype, device=device))

    @property
    def table(self):
        return self.pos_emb

    def forward(self, query, attn_logits):
        return cope(query, attn_logits, self.pos_emb)

    def extra_repr(self):
        return self.config.repr_args()
