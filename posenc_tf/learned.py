"""Learned absolute tables and their resizing in TensorFlow / Keras 3. Spec: `posenc_np.learned`, `posenc_np.resize_table`."""

from __future__ import annotations

import keras
import tensorflow as tf

from posenc_np.backend import (
    LearnedConfig,
    check_integer_positions,
    check_positions_in_table,
    check_positive_int,
    check_table,
    check_traced_integer,
)
from posenc_np.learned import resize_weights

from ._common import TRACE, as_tensor, is_tracing, register_serializable, spec_constant

__all__ = ["learned", "resize_table", "LearnedEncoding"]


def learned(table, positions):
    """`table[positions]`; see `posenc_np.learned`.

    Eager: an out-of-range or non-integer position raises ValueError. Inside tf.function (and XLA,
    whose gathers clamp or return zeros) nothing can raise on data, so out-of-range positions give
    NaN rows instead; floating positions are a TypeError there.
    """
    check_table("table", table.shape)
    rows = table.shape[0]
    positions = as_tensor(positions)
    if is_tracing(positions):
        check_traced_integer("positions", positions.dtype.name, is_floating=positions.dtype.is_floating, where=TRACE)
        positions = tf.cast(positions, tf.int32)
        inside = (positions >= 0) & (positions < rows)
        gathered = tf.gather(table, tf.clip_by_value(positions, 0, rows - 1))
        return tf.where(inside[..., None], gathered, tf.constant(float("nan"), gathered.dtype))
    checked = check_integer_positions("positions", positions.numpy())
    check_positions_in_table("positions", checked, rows)
    return tf.gather(table, tf.constant(checked, tf.int32))


def resize_table(table, new_len, *, method="linear", align_corners=False, cubic_a=-0.75):
    """`[L, dim] -> [new_len, dim]` on the spec's grid; see `posenc_np.resize_table`.

    Not `tf.image.resize` (a = -0.5 cubic, antialias option): the gather indices and weights come from
    `posenc_np.resize_weights`. Sums in float32 at least; the result has the table's dtype.
    """
    check_table("table", table.shape)
    new_len = check_positive_int("new_len", new_len)
    old_len = int(table.shape[0])
    key = ("resize", old_len, new_len, method, align_corners, float(cubic_a))
    make = lambda: resize_weights(old_len, new_len, method=method,  # noqa: E731
                                  align_corners=align_corners, cubic_a=cubic_a)
    index = spec_constant(key + ("index",), lambda: make()[0], dtype=tf.int32)
    table = as_tensor(table)
    compute = tf.float64 if table.dtype == tf.float64 else tf.float32
    weight = spec_constant(key + ("weight",), lambda: make()[1], dtype=compute)  # [new_len, taps]
    out = tf.einsum("nk,nkd->nd", weight, tf.gather(tf.cast(table, compute), index))
    return tf.cast(out, table.dtype)


@register_serializable
class LearnedEncoding(keras.layers.Layer):
    """A trainable `[max_len, dim]` table (weight `table`, N(0, 0.02) init), called with `positions`.

    Args:
        max_len: rows of the table; positions must lie in [0, max_len).
        dim: width of each row.
    """

    def __init__(self, max_len, dim, **kwargs):
        super().__init__(**kwargs)
        config = LearnedConfig(max_len, dim)
        config.bind(self)
        self.table = self.add_weight(name="table", shape=config.table_shape,
                                     initializer=keras.initializers.RandomNormal(stddev=0.02))
        self.built = True

    def call(self, positions):
        return tf.cast(learned(self.table, positions), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.dim)

    def get_config(self):
        return {**super().get_config(), **self.config.as_dict()}
