"""Relative position embeddings (Shaw et al.) in TensorFlow / Keras 3. Spec: `posenc_np.relative_embeddings`."""

from __future__ import annotations

import keras
import tensorflow as tf

from posenc_np.backend import RelativeConfig
from posenc_np.relative import check_relative_args

from ._common import bias_output_shape, position_pair, register_serializable

__all__ = ["relative_embeddings", "RelativePositionEmbedding"]


def relative_embeddings(table, q_positions, k_positions, *, max_distance, sign="key-query"):
    """`[..., q, k, dim]` clipped relative rows of `table`; see `posenc_np.relative_embeddings`.

    A tf.gather of in-range rows (the clip guarantees it): exact, the table's dtype, differentiable.
    """
    max_distance = check_relative_args(table.shape, max_distance, sign)
    q, k = position_pair(q_positions, k_positions, integer=True)
    distance = k[..., None, :] - q[..., :, None]
    if sign == "query-key":
        distance = -distance
    return tf.gather(table, tf.clip_by_value(distance, -max_distance, max_distance) + max_distance)


@register_serializable
class RelativePositionEmbedding(keras.layers.Layer):
    """Trainable weight `table [2*max_distance + 1, dim]` (N(0, 0.02) init), called with positions."""

    def __init__(self, max_distance, dim, *, sign="key-query", **kwargs):
        super().__init__(**kwargs)
        config = RelativeConfig(max_distance, dim, sign=sign)
        config.bind(self)
        self.table = self.add_weight(name="table", shape=config.table_shape,
                                     initializer=keras.initializers.RandomNormal(stddev=0.02))
        self.built = True

    def call(self, q_positions, k_positions):
        out = relative_embeddings(self.table, q_positions, k_positions, max_distance=self.max_distance,
                                  sign=self.sign)
        return tf.cast(out, self.compute_dtype)

    def compute_output_shape(self, q_positions_shape, k_positions_shape):
        return bias_output_shape(None, q_positions_shape, k_positions_shape, self.dim)

    def get_config(self):
        return {**super().get_config(), **self.config.as_dict()}
