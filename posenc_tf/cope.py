"""CoPE in TensorFlow / Keras 3. Spec: `posenc_np.cope`."""

from __future__ import annotations

import keras
import tensorflow as tf

from posenc_np.backend import CoPEConfig, check_float_dtype
from posenc_np.cope import check_cope_shapes

from ._common import as_tensor, register_serializable

__all__ = ["cope", "CoPE"]


def cope(query, attn_logits, pos_emb):
    """`[..., q, k]` CoPE position logits in float32, returned in the query's dtype; see `posenc_np.cope`."""
    query, attn_logits, pos_emb = as_tensor(query), as_tensor(attn_logits), as_tensor(pos_emb)
    check_float_dtype("query", tf.as_dtype(query.dtype).name, tf.as_dtype(query.dtype).is_floating)
    check_float_dtype("attn_logits", tf.as_dtype(attn_logits.dtype).name, tf.as_dtype(attn_logits.dtype).is_floating)
    check_float_dtype("pos_emb", tf.as_dtype(pos_emb.dtype).name, tf.as_dtype(pos_emb.dtype).is_floating)
    max_pos = check_cope_shapes(query.shape, attn_logits.shape, pos_emb.shape)
    gates = tf.sigmoid(tf.cast(attn_logits, tf.float32))
    positions = tf.minimum(tf.reverse(tf.cumsum(tf.reverse(gates, [-1]), -1), [-1]), float(max_pos - 1))
    logits_int = tf.matmul(tf.cast(query, tf.float32), tf.cast(pos_emb, tf.float32), transpose_b=True)
    lead = tf.broadcast_dynamic_shape(tf.shape(logits_int)[:-2], tf.shape(positions)[:-2])
    logits_int = tf.broadcast_to(logits_int, tf.concat([lead, tf.shape(logits_int)[-2:]], 0))
    positions = tf.broadcast_to(positions, tf.concat([lead, tf.shape(positions)[-2:]], 0))
    floor = tf.floor(positions)
    frac = positions - floor
    batch_dims = len(positions.shape) - 1
    at_floor = tf.gather(logits_int, tf.cast(floor, tf.int32), axis=-1, batch_dims=batch_dims)
    at_ceil = tf.gather(logits_int, tf.cast(tf.math.ceil(positions), tf.int32), axis=-1, batch_dims=batch_dims)
    return tf.cast(at_ceil * frac + at_floor * (1.0 - frac), query.dtype)


@register_serializable
class CoPE(keras.layers.Layer):
    """CoPE with a trainable weight `pos_emb [max_pos, dim]` (zeros at init, as x-transformers); called
    with `(query, attn_logits)`."""

    def __init__(self, dim, max_pos, **kwargs):
        super().__init__(**kwargs)
        config = CoPEConfig(dim, max_pos)
        config.bind(self)
        self.pos_emb = self.add_weight(name="pos_emb", shape=config.table_shape, initializer="zeros")
        self.built = True

    @property
    def table(self):
        return self.pos_emb

    def call(self, query, attn_logits):
        return tf.cast(cope(query, attn_logits, self.pos_emb), self.compute_dtype)

    def compute_output_shape(self, query_shape, attn_logits_shape):
        return tuple(attn_logits_shape)

    def get_config(self):
        return {**super().get_config(), **self.config.as_dict()}
