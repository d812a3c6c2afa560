"""CoPE in JAX / Flax NNX. Spec: `posenc_np.cope`."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from flax import nnx

from posenc_np.backend import CoPEConfig, check_float_dtype
from posenc_np.cope import check_cope_shapes

__all__ = ["cope", "CoPE"]


def cope(query, attn_logits, pos_emb):
    """`[..., q, k]` CoPE position logits in float32, returned in the query's dtype; see `posenc_np.cope`."""
    query, attn_logits, pos_emb = jnp.asarray(query), jnp.asarray(attn_logits), jnp.asarray(pos_emb)
    check_float_dtype("query", query.dtype, jnp.issubdtype(query.dtype, jnp.floating))
    check_float_dtype("attn_logits", attn_logits.dtype, jnp.issubdtype(attn_logits.dtype, jnp.floating))
    check_float_dtype("pos_emb", pos_emb.dtype, jnp.issubdtype(pos_emb.dtype, jnp.floating))
    max_pos = check_cope_shapes(query.shape, attn_logits.shape, pos_emb.shape)
    return _cope(query, attn_logits, pos_emb, max_pos=max_pos)


@partial(jax.jit, static_argnames=("max_pos",))  # one compile per shape instead of one per eager op
def _cope(query, attn_logits, pos_emb, *, max_pos):
    gates = jax.nn.sigmoid(attn_logits.astype(jnp.float32))
    positions = jnp.minimum(jnp.flip(jnp.cumsum(jnp.flip(gates, -1), -1), -1), max_pos - 1)
    logits_int = query.astype(jnp.float32) @ pos_emb.astype(jnp.float32).T
    lead = jnp.broadcast_shapes(logits_int.shape[:-2], positions.shape[:-2])
    logits_int = jnp.broadcast_to(logits_int, (*lead, *logits_int.shape[-2:]))
    positions = jnp.broadcast_to(positions, (*lead, *positions.shape[-2:]))
    floor = jnp.floor(positions)
    frac = positions - floor
    at_floor = jnp.take_along_axis(logits_int, floor.astype(jnp.int32), -1)
    at_ceil = jnp.take_along_axis(logits_int, jnp.ceil(positions).astype(jnp.int32), -1)
    return (at_ceil * frac + at_floor * (1.0 - frac)).astype(query.dtype)


class CoPE(nnx.Module):
    """CoPE with a trainable `pos_emb [max_pos, dim]` (`nnx.Param`, zeros at init as x-transformers);
    called with `(query, attn_logits)`."""

    def __init__(self, dim, max_pos, *, rngs: nnx.Rngs | None = None, dtype=jnp.float32):
        config = CoPEConfig(dim, max_pos)
        config.bind(self)
        self.pos_emb = nnx.Param(jnp.zeros(config.table_shape, dtype))

    @property
    def table(self):
        return self.pos_emb

    def __call__(self, query, attn_logits):
        return cope(query, attn_logits, self.pos_emb[...])
