"""Learned absolute tables and their resizing in MLX. Spec: `posenc_np.learned`, `posenc_np.resize_table`."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

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

from ._common import F64, TRACE, as_tensor, bind_config, is_floating, is_tracing, spec_constant

__all__ = ["learned", "resize_grid", "resize_table", "LearnedEncoding"]


def _host(positions):
    """Positions as NumPy (float64 for floating ones, so the spec's integer check sees their values)."""
    if is_floating(positions):
        return np.asarray(positions.astype(mx.float64, stream=F64))
    return np.asarray(positions)


def learned(table, positions):
    """`table[positions]`; see `posenc_np.learned`.

    MLX gathers do not check their indices. Eagerly (readable positions) an out-of-range or
    non-integer position raises ValueError; under mx.compile it cannot raise, so out-of-range
    positions give NaN rows (never a clamped row), and floating positions are a TypeError.
    """
    table = as_tensor(table)
    check_table("table", table.shape)
    rows = table.shape[0]
    positions = as_tensor(positions)
    if is_tracing(positions):
        check_traced_integer("positions", positions.dtype, is_floating=is_floating(positions), where=TRACE)
        inside = (positions >= 0) & (positions < rows)
        gathered = mx.take(table, mx.clip(positions, 0, rows - 1), axis=0)
        return mx.where(inside[..., None], gathered, mx.array(float("nan"), table.dtype))
    checked = check_integer_positions("positions", _host(positions))
    check_positions_in_table("positions", checked, rows)
    return mx.take(table, mx.array(checked.astype(np.int32)), axis=0)


def _resize_constants(old_len, new_len, options, compute):
    """`resize_weights(old_len, new_len, **options)` as cached (index, weight) arrays."""
    # repr: the spec validates inside `make` (outside any trace), so the key must not fail on bad values first
    key = ("resize", old_len, new_len) + tuple(repr(options[k]) for k in sorted(options))
    make = lambda: resize_weights(old_len, new_len, **options)  # noqa: E731
    index = spec_constant(key + ("index",), lambda: make()[0], dtype=mx.int32)
    weight = spec_constant(key + ("weight",), lambda: make()[1], dtype=compute)
    return index, weight


def _options(method, align_corners, cubic_a, antialias, scale, border):
    return dict(method=method, align_corners=align_corners, cubic_a=cubic_a, antialias=antialias, scale=scale,
                border=border)


def resize_table(table, new_len, *, method="linear", align_corners=False, cubic_a=-0.75, antialias=False,
                 scale=None, border="clamp"):
    """`[L, dim] -> [new_len, dim]` on the spec's grid; see `posenc_np.resize_table`.

    The gather indices and weights come from `posenc_np.resize_weights`. Sums in float32 at least;
    the result has the table's dtype.
    """
    table = as_tensor(table)
    check_table("table", table.shape)
    check_float_dtype("table", table.dtype, is_floating(table))
    new_len = check_positive_int("new_len", new_len)
    old_len = int(table.shape[0])
    compute = mx.float64 if table.dtype == mx.float64 else mx.float32
    options = _options(method, align_corners, cubic_a, antialias, scale, border)
    index, weight = _resize_constants(old_len, new_len, options, compute)  # [new_len, taps]
    stream = F64 if compute == mx.float64 else None
    rows = mx.take(table.astype(compute, stream=stream), index, axis=0)  # [new_len, taps, dim]
    out = mx.sum(weight[..., None] * rows, axis=1, stream=stream)
    return out.astype(table.dtype, stream=stream)


def resize_grid(table, old_grid, new_grid, *, method="cubic", align_corners=False, cubic_a=-0.75, antialias=False,
                scale=None, prefix_tokens=0, border="clamp"):
    """`[prefix + old_h * old_w, dim] -> [prefix + new_h * new_w, dim]`; see `posenc_np.resize_grid`.

    Separable gathers with the spec's per-axis weights (not the framework's image resize); prefix rows are
    copied. Sums in float32 at least; the result has the table's dtype.
    """
    table = as_tensor(table)
    check_float_dtype("table", table.dtype, is_floating(table))
    prefix, (old_h, old_w), (new_h, new_w), (scale_h, scale_w) = check_resize_grid(
        table.shape, old_grid, new_grid, method=method, align_corners=align_corners, cubic_a=cubic_a,
        antialias=antialias, scale=scale, prefix_tokens=prefix_tokens, border=border)
    compute = mx.float64 if table.dtype == mx.float64 else mx.float32
    options = _options(method, align_corners, cubic_a, antialias, scale_h, border)
    index_h, weight_h = _resize_constants(old_h, new_h, options, compute)
    options = _options(method, align_corners, cubic_a, antialias, scale_w, border)
    index_w, weight_w = _resize_constants(old_w, new_w, options, compute)
    stream = F64 if compute == mx.float64 else None
    grid = table[prefix:].astype(compute, stream=stream).reshape(old_h, old_w, -1)
    grid = mx.take(grid, index_h, axis=0)                                             # [new_h, taps, old_w, dim]
    grid = mx.sum(weight_h[:, :, None, None] * grid, axis=1, stream=stream)
    grid = mx.take(grid, index_w, axis=1)                                             # [new_h, new_w, taps, dim]
    grid = mx.sum(weight_w[None, :, :, None] * grid, axis=2, stream=stream)
    grid = grid.reshape(new_h * new_w, -1).astype(table.dtype, stream=stream)
    return mx.concatenate([table[:prefix], grid], axis=0)


class LearnedEncoding(nn.Module):
    """A trainable `[max_len, dim]` table (the parameter `table`, N(0, 0.02) init from MLX's global
    random state, or from `key=` an `mx.random.key`); called with `positions`."""

    def __init__(self, max_len, dim, *, dtype=mx.float32, key=None):
        super().__init__()
        config = LearnedConfig(max_len, dim)
        bind_config(config, self)
        self.table = (0.02 * mx.random.normal(config.table_shape, key=key)).astype(dtype)

    def __call__(self, positions):
        return learned(self.table, positions)

    def _extra_repr(self):
        return self.config.repr_args()
