"""Learned absolute tables and their resizing in TensorFlow / Keras 3. Spec: `posenc_np.learned`, `posenc_np.resize_table`."""

from __future__ import annotations

import keras
import tensorflow as tf

from posenc_np.backend import (
    LearnedConfig,
    check_float_dtype,
    check_integer_positions,
    check_positions_in_table,
    check_positive_int,
    check_table,
    check_traced_integer,
)
from posenc_np.learned import check_resize_grid, resize_weights

from ._common import TRACE, as_tensor, is_tracing, register_serializable, spec_constant

__all__ = ["learned", "resize_grid", "resize_table", "LearnedEncoding"]


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


def _resize_constants(old_len, new_len, options, compute):
    """`resize_weights(old_len, new_len, **options)` as cached (index, weight) arrays."""
    # repr: the spec validates inside `make` (outside any trace), so the key must not fail on bad values first
    key = ("resize", old_len, new_len) + tuple(repr(options[k]) for k in sorted(options))
    make = lambda: resize_weights(old_len, new_len, **options)  # noqa: E731
    index = spec_constant(key + ("index",), lambda: make()[0], dtype=tf.int32)
    weight = spec_constant(key + ("weight",), lambda: make()[1], dtype=compute)
    return index, weight


def _options(method, align_corners, cubic_a, antialias, scale, border):
    return dict(method=method, align_corners=align_corners, cubic_a=cubic_a, antialias=antialias, scale=scale,
                border=border)


def resize_table(table, new_len, *, method="linear", align_corners=False, cubic_a=-0.75, antialias=False,
                 scale=None, border="clamp"):
    """`[L, dim] -> [new_len, dim]` on the spec's grid; see `posenc_np.resize_table`.

    Not `tf.image.resize` (a = -0.5 cubic, antialias option): the gather indices and weights come from
    `posenc_np.resize_weights`. Sums in float32 at least; the result has the table's dtype.
    """
    table = as_tensor(table)
    check_table("table", table.shape)
    check_float_dtype("table", table.dtype, table.dtype.is_floating)
    new_len = check_positive_int("new_len", new_len)
    old_len = int(table.shape[0])
    compute = tf.float64 if table.dtype == tf.float64 else tf.float32
    options = _options(method, align_corners, cubic_a, antialias, scale, border)
    index, weight = _resize_constants(old_len, new_len, options, compute)  # [new_len, taps]
    out = tf.einsum("nk,nkd->nd", weight, tf.gather(tf.cast(table, compute), index))
    return tf.cast(out, table.dtype)


def resize_grid(table, old_grid, new_grid, *, method="cubic", align_corners=False, cubic_a=-0.75, antialias=False,
                scale=None, prefix_tokens=0, border="clamp"):
    """`[prefix + old_h * old_w, dim] -> [prefix + new_h * new_w, dim]`; see `posenc_np.resize_grid`.

    Separable gathers with the spec's per-axis weights (not the framework's image resize); prefix rows are
    copied. Sums in float32 at least; the result has the table's dtype.
    """
    table = as_tensor(table)
    check_float_dtype("table", table.dtype, table.dtype.is_floating)
    prefix, (old_h, old_w), (new_h, new_w), (scale_h, scale_w) = check_resize_grid(
        table.shape, old_grid, new_grid, method=method, align_corners=align_corners, cubic_a=cubic_a,
        antialias=antialias, scale=scale, prefix_tokens=prefix_tokens, border=border)
    compute = tf.float64 if table.dtype == tf.float64 else tf.float32
    options = _options(method, align_corners, cubic_a, antialias, scale_h, border)
    index_h, weight_h = _resize_constants(old_h, new_h, options, compute)
    options = _options(method, align_corners, cubic_a, antialias, scale_w, border)
    index_w, weight_w = _resize_constants(old_w, new_w, options, compute)
    grid = tf.reshape(tf.cast(table[prefix:], compute), (old_h, old_w, -1))
    grid = tf.einsum("ya,yaxd->yxd", weight_h, tf.gather(grid, index_h))             # [new_h, old_w, dim]
    grid = tf.einsum("xb,yxbd->yxd", weight_w, tf.gather(grid, index_w, axis=1))     # [new_h, new_w, dim]
    return tf.concat([table[:prefix], tf.cast(tf.reshape(grid, (new_h * new_w, -1)), table.dtype)], axis=0)


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
