"""Learned absolute tables and their resizing in JAX / Flax NNX. Spec: `posenc_np.learned`, `posenc_np.resize_table`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

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

from ._common import TRACE, is_tracing, spec_constant

__all__ = ["learned", "resize_grid", "resize_table", "LearnedEncoding"]


def learned(table, positions):
    """`table[positions]`; see `posenc_np.learned`.

    JAX gathers clamp out-of-range indices silently. Eagerly (concrete positions) an out-of-range or
    non-integer position raises ValueError; under jax.jit it cannot raise, so out-of-range positions
    give NaN rows (never a clamped row), and floating positions are a TypeError.
    """
    check_table("table", table.shape)
    rows = table.shape[0]
    if is_tracing(positions):
        check_traced_integer("positions", positions.dtype, is_floating=jnp.issubdtype(positions.dtype, jnp.floating),
                             where=TRACE)
        inside = (positions >= 0) & (positions < rows)
        gathered = jnp.take(table, jnp.clip(positions, 0, rows - 1), axis=0)
        return jnp.where(inside[..., None], gathered, jnp.asarray(jnp.nan, table.dtype))
    checked = check_integer_positions("positions", np.asarray(positions))
    check_positions_in_table("positions", checked, rows)
    return jnp.take(table, jnp.asarray(checked, dtype=jnp.int32), axis=0)


def _resize_constants(old_len, new_len, options, compute):
    """`resize_weights(old_len, new_len, **options)` as cached (index, weight) arrays."""
    # repr: the spec validates inside `make` (outside any trace), so the key must not fail on bad values first
    key = ("resize", old_len, new_len) + tuple(repr(options[k]) for k in sorted(options))
    make = lambda: resize_weights(old_len, new_len, **options)  # noqa: E731
    index = spec_constant(key + ("index",), lambda: make()[0], dtype=jnp.int32)
    weight = spec_constant(key + ("weight",), lambda: make()[1], dtype=compute)
    return index, weight


def _options(method, align_corners, cubic_a, antialias, scale, border):
    return dict(method=method, align_corners=align_corners, cubic_a=cubic_a, antialias=antialias, scale=scale,
                border=border)


def resize_table(table, new_len, *, method="linear", align_corners=False, cubic_a=-0.75, antialias=False,
                 scale=None, border="clamp"):
    """`[L, dim] -> [new_len, dim]` on the spec's grid; see `posenc_np.resize_table`.

    Not `jax.image.resize` (antialiased by default, a = -0.5 cubic, no align_corners): the gather
    indices and weights come from `posenc_np.resize_weights`. Sums in float32 at least; the result has
    the table's dtype.
    """
    check_table("table", table.shape)
    check_float_dtype("table", table.dtype, jnp.issubdtype(table.dtype, jnp.floating))
    new_len = check_positive_int("new_len", new_len)
    old_len = int(table.shape[0])
    compute = jnp.promote_types(table.dtype, jnp.float32)
    options = _options(method, align_corners, cubic_a, antialias, scale, border)
    index, weight = _resize_constants(old_len, new_len, options, compute)  # [new_len, taps]
    out = jnp.einsum("nk,nkd->nd", weight, jnp.asarray(table).astype(compute)[index])
    return out.astype(table.dtype)


def resize_grid(table, old_grid, new_grid, *, method="cubic", align_corners=False, cubic_a=-0.75, antialias=False,
                scale=None, prefix_tokens=0, border="clamp"):
    """`[prefix + old_h * old_w, dim] -> [prefix + new_h * new_w, dim]`; see `posenc_np.resize_grid`.

    Separable gathers with the spec's per-axis weights (not the framework's image resize); prefix rows are
    copied. Sums in float32 at least; the result has the table's dtype.
    """
    check_float_dtype("table", table.dtype, jnp.issubdtype(table.dtype, jnp.floating))
    prefix, (old_h, old_w), (new_h, new_w), (scale_h, scale_w) = check_resize_grid(
        table.shape, old_grid, new_grid, method=method, align_corners=align_corners, cubic_a=cubic_a,
        antialias=antialias, scale=scale, prefix_tokens=prefix_tokens, border=border)
    compute = jnp.promote_types(table.dtype, jnp.float32)
    options = _options(method, align_corners, cubic_a, antialias, scale_h, border)
    index_h, weight_h = _resize_constants(old_h, new_h, options, compute)
    options = _options(method, align_corners, cubic_a, antialias, scale_w, border)
    index_w, weight_w = _resize_constants(old_w, new_w, options, compute)
    table = jnp.asarray(table)
    grid = table[prefix:].astype(compute).reshape(old_h, old_w, -1)
    grid = jnp.einsum("ya,yaxd->yxd", weight_h, grid[index_h])        # [new_h, old_w, dim]
    grid = jnp.einsum("xb,yxbd->yxd", weight_w, grid[:, index_w])     # [new_h, new_w, dim]
    return jnp.concatenate([table[:prefix], grid.reshape(new_h * new_w, -1).astype(table.dtype)], axis=0)


class LearnedEncoding(nnx.Module):
    """A trainable `[max_len, dim]` table (`nnx.Param` attribute `table`, N(0, 0.02) init)."""

    def __init__(self, max_len, dim, *, rngs: nnx.Rngs, dtype=jnp.float32):
        config = LearnedConfig(max_len, dim)
        config.bind(self)
        self.table = nnx.Param(0.02 * jax.random.normal(rngs.params(), config.table_shape, dtype))

    def __call__(self, positions):
        return learned(self.table[...], positions)
