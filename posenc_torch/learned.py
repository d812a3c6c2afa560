"""Learned absolute tables and their resizing in PyTorch. Spec: `posenc_np.learned`, `posenc_np.resize_table`."""

from __future__ import annotations

import numpy as np
import torch

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

from ._common import TRACE, as_tensor, is_tracing, spec_constant

__all__ = ["learned", "resize_grid", "resize_table", "LearnedEncoding"]


def learned(table, positions):
    """`table[positions]`; see `posenc_np.learned`.

    Eager: a position outside `[0, max_len)` (or a float that is not an integer) raises ValueError.
    Under torch.compile nothing can raise on data, so out-of-range positions give NaN rows instead
    (never a clamped or zero row); floating positions are a TypeError there.
    """
    check_table("table", table.shape)
    positions = as_tensor(positions, device=table.device)
    rows = table.shape[0]
    if is_tracing(positions):
        check_traced_integer("positions", positions.dtype, is_floating=positions.is_floating_point(), where=TRACE)
        inside = (positions >= 0) & (positions < rows)
        gathered = table[positions.clamp(0, rows - 1)]
        return torch.where(inside[..., None], gathered, torch.full_like(gathered, float("nan")))
    # validated with tensor ops (not .numpy(), which fails on tensors inside torch.func transforms);
    # the spec's checks run on the offending values only, so the message is the spec's
    if positions.is_floating_point():
        check_integer_positions("positions", np.asarray(positions[positions != positions.round()].tolist()))
        positions = positions.long()
    outside = (positions < 0) | (positions >= rows)
    if bool(outside.any()):
        check_positions_in_table("positions", np.asarray(positions[outside].tolist()), rows)
    return table[positions]


def _resize_constants(old_len, new_len, options, compute, device):
    """`resize_weights(old_len, new_len, **options)` as cached (index, weight) tensors; options hashable."""
    # repr: the spec validates inside `make` (outside any trace), so the key must not fail on bad values first
    key = ("resize", old_len, new_len) + tuple(repr(options[k]) for k in sorted(options))
    make = lambda: resize_weights(old_len, new_len, **options)  # noqa: E731
    index = spec_constant(key + ("index",), lambda: make()[0], dtype=torch.long, device=device)
    weight = spec_constant(key + ("weight",), lambda: make()[1], dtype=compute, device=device)
    return index, weight


def _options(method, align_corners, cubic_a, antialias, scale, border):
    return dict(method=method, align_corners=align_corners, cubic_a=cubic_a, antialias=antialias, scale=scale,
                border=border)


def resize_table(table, new_len, *, method="linear", align_corners=False, cubic_a=-0.75, antialias=False,
                 scale=None, border="clamp"):
    """`[L, dim] -> [new_len, dim]` on the spec's grid; see `posenc_np.resize_table`.

    Not `F.interpolate`: the gather indices and weights come from `posenc_np.resize_weights`, so
    every framework samples the same grid (and torch 2.13's `antialias=True` on a width-1 image, which
    repeats one value, is never reached). Weighted sums run in float32 at least; the result has the
    table's dtype. Differentiable with respect to `table`.
    """
    check_table("table", table.shape)
    check_float_dtype("table", table.dtype, table.is_floating_point())
    new_len = check_positive_int("new_len", new_len)
    old_len = int(table.shape[0])  # `make` closes over ints only: it runs outside any trace
    compute = torch.promote_types(table.dtype, torch.float32)
    options = _options(method, align_corners, cubic_a, antialias, scale, border)
    index, weight = _resize_constants(old_len, new_len, options, compute, table.device)  # [new_len, taps]
    out = torch.einsum("nk,nkd->nd", weight, table.to(compute)[index])
    return out.to(table.dtype)


def resize_grid(table, old_grid, new_grid, *, method="cubic", align_corners=False, cubic_a=-0.75, antialias=False,
                scale=None, prefix_tokens=0, border="clamp"):
    """`[prefix + old_h * old_w, dim] -> [prefix + new_h * new_w, dim]`; see `posenc_np.resize_grid`.

    Separable gathers with the spec's per-axis weights (not `F.interpolate`); prefix rows are copied.
    Sums in float32 at least; the result has the table's dtype. Differentiable with respect to `table`.
    """
    check_float_dtype("table", table.dtype, table.is_floating_point())
    prefix, (old_h, old_w), (new_h, new_w), (scale_h, scale_w) = check_resize_grid(
        table.shape, old_grid, new_grid, method=method, align_corners=align_corners, cubic_a=cubic_a,
        antialias=antialias, scale=scale, prefix_tokens=prefix_tokens, border=border)
    compute = torch.promote_types(table.dtype, torch.float32)
    options = _options(method, align_corners, cubic_a, antialias, scale_h, border)
    index_h, weight_h = _resize_constants(old_h, new_h, options, compute, table.device)
    options = _options(method, align_corners, cubic_a, antialias, scale_w, border)
    index_w, weight_w = _resize_constants(old_w, new_w, options, compute, table.device)
    grid = table[prefix:].to(compute).reshape(old_h, old_w, -1)
    grid = torch.einsum("ya,yaxd->yxd", weight_h, grid[index_h])        # [new_h, old_w, dim]
    grid = torch.einsum("xb,yxbd->yxd", weight_w, grid[:, index_w])     # [new_h, new_w, dim]
    return torch.cat([table[:prefix], grid.reshape(new_h * new_w, -1).to(table.dtype)], dim=0)


class LearnedEncoding(torch.nn.Module):
    """A trainable `[max_len, dim]` table (attribute `table`), called with `positions`.

    Initialised N(0, 0.02) as BERT does. The table is the limit: positions beyond it raise
    (eager) or give NaN rows (compiled); `resize_table` makes a longer one.
    """

    def __init__(self, max_len, dim, *, dtype=None, device=None):
        super().__init__()
        config = LearnedConfig(max_len, dim)
        config.bind(self)
        self.table = torch.nn.Parameter(torch.empty(config.table_shape, dtype=dtype, device=device))
        torch.nn.init.normal_(self.table, std=0.02)

    def forward(self, positions):
        return learned(self.table, positions)

    def extra_repr(self):
        return self.config.repr_args()
