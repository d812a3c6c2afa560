"""Learned absolute position tables and their resizing: the specification (float64 NumPy)."""

from __future__ import annotations

import math

import numpy as np

from ._validate import (
    check_choice,
    check_float_dtype,
    check_integer_positions,
    check_positions_in_table,
    check_positive_int,
    check_table,
)

__all__ = [
    "check_resize_grid", "learned", "resize_grid", "resize_grid_weights", "resize_table", "resize_weights", "RESIZE_METHODS",
]

RESIZE_METHODS = ("linear", "nearest", "cubic")


def learned(table, positions):
    """Learned absolute position embedding: `table[positions]`.

    Formula:
        out[..., :] = table[positions[...], :]        table: [max_len, dim] -> out: [*positions.shape, dim]

    Codebases differ in where positions start (BERT 0; RoBERTa/fairseq padding_idx + 1 = 2, with 514
    rows for 512 tokens): the conventions "bert" and "roberta" record the offset; this function takes
    the positions as table rows.

    Args:
        table: `[max_len, dim]` array, any float dtype (returned unchanged in dtype).
        positions: integer array of any shape, each in `[0, max_len)`.

    Raises:
        ValueError: a position outside the table (no clamping: JAX and XLA gathers clamp silently,
            which is how ports go wrong unnoticed), or a table that is not 2-D.

    Reference:
        Devlin et al., "BERT", 2018, arXiv:1810.04805; google-research/bert modeling.py
        `embedding_postprocessor`; HF models/roberta/modeling_roberta.py `create_position_ids_from_input_ids`.

    Examples:
        >>> table = np.arange(12.0).reshape(6, 2)
        >>> learned(table, np.array([0, 5]))
        array([[ 0.,  1.],
               [10., 11.]])
    """
    table = np.asarray(table)
    check_table("table", table.shape)
    positions = check_integer_positions("positions", positions)
    check_positions_in_table("positions", positions, table.shape[0])
    return table[positions]


def _check_scale(name, scale):
    """`scale` is None or a finite number > 0 (PyTorch's `scale_factor`: output rows per input row)."""
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)) \
            or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"{name}={scale!r} must be None or a finite number > 0")
    return float(scale)


RESIZE_BORDERS = ("clamp", "renormalize")


def _check_resize_options(method, align_corners, cubic_a, antialias, scale, scale_name="scale", border="clamp"):
    """The validation shared by `resize_weights`, `resize_table` and `resize_grid`; errors name the argument."""
    check_choice("method", method, RESIZE_METHODS)
    check_choice("border", border, RESIZE_BORDERS)
    if method == "nearest" and border != "clamp":
        raise ValueError(f"border={border!r} is not defined for method='nearest' (one row, nothing to renormalize)")
    if not isinstance(align_corners, bool):
        raise TypeError(f"align_corners={align_corners!r} must be a bool")
    if isinstance(cubic_a, bool) or not isinstance(cubic_a, (int, float)) or not math.isfinite(cubic_a):
        raise ValueError(f"cubic_a={cubic_a!r} must be a finite number")
    if not isinstance(antialias, bool):
        raise TypeError(f"antialias={antialias!r} must be a bool")
    if method == "nearest" and align_corners:
        raise ValueError("align_corners=True is not defined for method='nearest' (half-pixel rule only)")
    if method == "nearest" and antialias:
        raise ValueError("antialias=True is not defined for method='nearest' (PyTorch: bilinear and bicubic only)")
    if scale is not None and align_corners:
        # PyTorch ignores scale_factor under align_corners=True (area_pixel_compute_scale): refuse, not guess
        raise ValueError(f"{scale_name}={scale!r} with align_corners=True: the scale-factor grid is a "
                         "half-pixel grid; PyTorch ignores the scale there")


def _keys(distance, a):
    """Keys' cubic kernel W(|x|) with parameter a (0 for |x| >= 2)."""
    near = ((a + 2) * distance - (a + 3)) * distance**2 + 1
    far = ((a * distance - 5 * a) * distance + 8 * a) * distance - 4 * a
    return np.where(distance <= 1, near, np.where(distance < 2, far, 0.0))


def _antialias_weights(old_len, new_len, method, align_corners, cubic_a, scale):
    """PyTorch's antialiased kernel (aten/src/ATen/native/cpu/UpSampleKernel.cpp
    `_compute_indices_min_size_weights_aa`, torch 2.13), in float64. With r the input rows per output row:
        center_i = r * (i + 0.5);  support = (taps / 2) * max(r, 1)  (taps 2 linear, 4 cubic)
        rows j in [max(trunc(center_i - support + 0.5), 0), min(trunc(center_i + support + 0.5), L))
        w_ij = K((j + 0.5 - center_i) / max(r, 1)), then divided by sum_j w_ij
    K is the triangle max(0, 1 - |x|) or Keys with `cubic_a` (PyTorch uses a = -0.5 here). Rows outside
    the table are dropped and the rest renormalised (no border clamping); r = (L - 1)/(N - 1) under
    align_corners (the centre formula is unchanged), 1/scale when `scale` is given, else L/N.
    """
    if align_corners:
        ratio = (old_len - 1) / (new_len - 1) if new_len > 1 else 0.0
    else:
        ratio = 1.0 / scale if scale is not None else old_len / new_len
    taps = 2 if method == "linear" else 4
    widen = max(ratio, 1.0)
    support = taps / 2 * widen
    center = ratio * (np.arange(new_len, dtype=np.float64) + 0.5)
    first = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.int64)
    stop = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), old_len)
    width = max(int((stop - first).max()), 1)
    index = first[:, None] + np.arange(width)[None, :]
    inside = index < stop[:, None]
    x = np.abs((index + 0.5 - center[:, None]) / widen)
    kernel = np.maximum(1.0 - x, 0.0) if method == "linear" else _keys(x, float(cubic_a))
    weight = np.where(inside, kernel, 0.0)
    total = weight.sum(axis=1, keepdims=True)
    weight = np.divide(weight, total, out=np.zeros_like(weight), where=total != 0)
    return np.where(inside, index, 0).astype(np.int64), weight


def _renormalize_border(index, weight, old_len):
    """border="renormalize": the taps outside [0, L - 1] get weight 0 and the rest are divided by their sum."""
    inside = (index >= 0) & (index < old_len)
    weight = np.where(inside, weight, 0.0)
    total = weight.sum(axis=1, keepdims=True)
    # a row with no tap inside (only a `scale` grid reaching past the table) is 0, as in `_antialias_weights`
    weight = np.divide(weight, total, out=np.zeros_like(weight), where=total != 0)
    return np.clip(index, 0, old_len - 1).astype(np.int64), weight


def resize_weights(old_len, new_len, *, method="linear", align_corners=False, cubic_a=-0.75,
                   antialias=False, scale=None, border="clamp"):
    """The sampling grid of `resize_table` as gather indices and weights, in float64.

    Returns `(index [new_len, taps], weight [new_len, taps])` with
    `resize_table(table)[i] = sum_k weight[i, k] * table[index[i, k]]`; taps is 1 (nearest), 2 (linear)
    or 4 (cubic), more with `antialias` when downsampling (unused taps carry weight 0). Backends gather
    and sum with exactly these numbers, so every framework samples the same grid whatever its own resize
    defaults are.

    Source coordinate of output row i (L = old_len, N = new_len):
        align_corners=False (half-pixel centres):  s_i = (i + 0.5) * L / N - 0.5
        scale given (PyTorch's `scale_factor`):     s_i = (i + 0.5) / scale - 0.5
        align_corners=True:                        s_i = i * (L - 1) / (N - 1)   (0 when N == 1)
    "linear": rows floor(s), floor(s) + 1 (clamped to L - 1) with weights 1 - f, f, f = s - floor(s);
        negative s is set to 0 first (PyTorch's `linear`/`bilinear`).
    "nearest": row min(floor((i + 0.5) * L / N), L - 1) (with `scale`: floor((i + 0.5) / scale)), the
        half-pixel rule (PyTorch `nearest-exact`); `align_corners` and `antialias` must be False.
    "cubic": rows floor(s) - 1 .. floor(s) + 2, each clamped into [0, L - 1] (replicated borders),
        Keys kernel with parameter a = `cubic_a`:
            W(x) = (a + 2)|x|^3 - (a + 3)|x|^2 + 1        for |x| <= 1
            W(x) = a|x|^3 - 5a|x|^2 + 8a|x| - 4a          for 1 < |x| < 2
        a = -0.75 is PyTorch's `bicubic`; a = -0.5 is TF's and JAX's `cubic`.
    antialias=True: PyTorch's `antialias=True` kernel (see `_antialias_weights`): the kernel's support
        widened by L/N when downsampling, taps outside the table dropped, weights renormalised to sum 1.
        PyTorch's antialiased bicubic uses a = -0.5: pass `cubic_a=-0.5` to reproduce it.
    border: what the taps that fall outside the table do ("linear" and "cubic"; antialias=True always drops
        and renormalises, as PyTorch's antialiased kernel does, whatever `border` says):
        "clamp" (default): each index is clamped into [0, L - 1] (PyTorch's replicated borders);
        "renormalize": taps outside [0, L - 1] are dropped and the rest renormalised,
            w_ik <- w_ik * [0 <= j_ik < L] / sum_k' w_ik' [0 <= j_ik' < L],
        with the same taps and kernel (no widening when downsampling). That is `jax.image.resize`
        (jax 0.10 jax/_src/image/scale.py `scale_and_translate`, antialias=False), keras 3.15.1
        `keras.ops.image.resize` on the NumPy and JAX backends and TF 2.21 `ResizeBicubic`
        (core/kernels/image/resize_bicubic_op.cc `GetWeightsAndIndices`, half_pixel_centers), all with
        a = -0.5. For "linear" both borders give the same numbers while s stays within [-1, L]: the one
        outside tap is dropped, and its neighbour, the border row, gets weight 1 either way.

    Reference:
        Keys, "Cubic convolution interpolation for digital image processing", 1981;
        PyTorch aten/src/ATen/native/UpSample.h `area_pixel_compute_source_index`,
        `area_pixel_compute_scale` (the scale_factor grid), `upsample_bicubic2d`;
        aten/src/ATen/native/cpu/UpSampleKernel.cpp `_compute_indices_min_size_weights_aa` (antialias).
    """
    old_len = check_positive_int("old_len", old_len)
    new_len = check_positive_int("new_len", new_len)
    scale = _check_scale("scale", scale)
    _check_resize_options(method, align_corners, cubic_a, antialias, scale, border=border)
    if antialias:
        return _antialias_weights(old_len, new_len, method, align_corners, cubic_a, scale)
    out = np.arange(new_len, dtype=np.float64)
    if method == "nearest":
        if scale is not None:
            index = np.minimum(np.floor((out + 0.5) * (1.0 / scale)), old_len - 1).astype(np.int64)
            return index[:, None], np.ones((new_len, 1))
        # exact integer arithmetic: floor((2i + 1) * L / (2N)); PyTorch multiplies by a float32 scale
        # and can land one row lower at exact ties (24 -> 37, row 18)
        rows = np.arange(new_len, dtype=np.int64)
        index = np.minimum((2 * rows + 1) * old_len // (2 * new_len), old_len - 1)
        return index[:, None], np.ones((new_len, 1))
    if align_corners:
        source = out * ((old_len - 1) / (new_len - 1)) if new_len > 1 else np.zeros(new_len)
    elif scale is not None:
        source = (out + 0.5) * (1.0 / scale) - 0.5
    else:
        source = (out + 0.5) * (old_len / new_len) - 0.5
    if method == "linear":
        source = np.maximum(source, 0.0) if border == "clamp" else source
        lower = np.floor(source)
        frac = source - lower
        index = np.stack([lower, lower + 1], axis=1)
        weight = np.stack([1.0 - frac, frac], axis=1)
    else:
        lower = np.floor(source)
        frac = source - lower
        index = lower[:, None] + np.arange(-1, 3)[None, :]
        distance = np.abs(frac[:, None] - np.arange(-1, 3)[None, :])  # |s - tap|, taps -1, 0, 1, 2
        weight = _keys(distance, float(cubic_a))
    if border == "renormalize":
        return _renormalize_border(index.astype(np.int64), weight, old_len)
    index = np.clip(index, 0, old_len - 1).astype(np.int64)
    return index, weight


def resize_table(table, new_len, *, method="linear", align_corners=False, cubic_a=-0.75, antialias=False,
                 scale=None, border="clamp"):
    """Resample a learned position table along the position axis: `[L, dim] -> [new_len, dim]`.

    This is the `interpolate_pos_embed` / `extend_pe` step of porting a model to a longer (or shorter)
    context, defined on one grid for every framework. The grid and kernels are documented in
    `resize_weights`; the defaults reproduce `torch.nn.functional.interpolate(table.T[None],
    size=new_len, mode="linear", align_corners=False)` and, with method="cubic", PyTorch's `bicubic`
    (a = -0.75, replicated borders, no antialias).

    `antialias=True` with `cubic_a=-0.5` reproduces `F.interpolate(..., antialias=True)` (timm's
    `resample_abs_pos_embed` default, open_clip): when downsampling the kernel is widened by L/N and
    renormalised. `scale` reproduces `F.interpolate(..., scale_factor=scale)`: sources at
    `(i + 0.5) / scale - 0.5` instead of `(i + 0.5) * L / new_len - 0.5` (PyTorch makes
    floor(L * scale) rows; `new_len` is given here, so pass that).

    Where the frameworks' own resizers differ from this spec (which is why backends do not call them):
      - `tf.image.resize`: half-pixel centres like this spec, but bicubic uses a = -0.5, and
        `antialias=True` widens the kernel when downsampling.
      - `jax.image.resize`: antialias is on by default (so downsampling differs), cubic uses a = -0.5,
        and there is no align_corners option.
      - PyTorch: `nearest` (not `nearest-exact`) uses floor(i * L / N), without half-pixel centres.
    `border="renormalize", cubic_a=-0.5` reproduces the JAX/TF/keras-numpy cubic without antialias.

    Args:
        table: `[L, dim]` array (any float dtype; the dtype is returned).
        new_len: number of output rows, >= 1.
        method: "linear", "nearest" or "cubic".
        align_corners: map the first and last rows onto each other instead of half-pixel centres.
        cubic_a: the Keys kernel parameter for "cubic".
        antialias: PyTorch's antialiased kernel ("linear" and "cubic" only).
        scale: None, or PyTorch's `scale_factor` (> 0; not with align_corners).
        border: "clamp" (replicated borders) or "renormalize" (outside taps dropped, see `resize_weights`).

    Raises:
        ValueError: `new_len < 1`, an unknown method, a table that is not 2-D, a bad `scale`,
            antialias or border="renormalize" with "nearest", an unknown border.
        TypeError: an integer or bool table.

    Examples:
        >>> resize_table(np.arange(4.0)[:, None], 8)[:, 0]  # half-pixel centres, borders clamped
        array([0.  , 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3.  ])
        >>> resize_table(np.arange(4.0)[:, None], 2, antialias=True)[:, 0]  # a widened triangle over 3 rows
        array([0.71428571, 2.28571429])
    """
    table = np.asarray(table)
    check_table("table", table.shape)
    check_float_dtype("table", table.dtype)  # an integer table would be rounded back: backends could not agree
    if isinstance(new_len, (int, np.integer)) and not isinstance(new_len, bool) and new_len < 1:
        raise ValueError(f"new_len={new_len} must be >= 1")
    index, weight = resize_weights(table.shape[0], new_len, method=method, align_corners=align_corners,
                                   cubic_a=cubic_a, antialias=antialias, scale=scale, border=border)
    out = np.einsum("nk,nkd->nd", weight, table.astype(np.float64)[index])
    return out.astype(table.dtype)


def _check_grid(name, grid):
    """A grid is `(h, w)` of positive ints, or one int for a square grid."""
    if isinstance(grid, (int, np.integer)) and not isinstance(grid, bool):
        grid = (grid, grid)
    if not isinstance(grid, (tuple, list)) or len(grid) != 2:
        raise ValueError(f"{name}={grid!r} must be (height, width) or one int for a square grid")
    return tuple(check_positive_int(f"{name}[{k}]", v) for k, v in enumerate(grid))


def _check_grid_scale(scale):
    """`scale` for resize_grid: None, one number for both axes, or `(scale_h, scale_w)`."""
    if scale is None:
        return (None, None)
    if isinstance(scale, (tuple, list)):
        if len(scale) != 2:
            raise ValueError(f"scale={scale!r} must be None, a number or (scale_h, scale_w)")
        return tuple(_check_scale(f"scale[{k}]", v) for k, v in enumerate(scale))
    value = _check_scale("scale", scale)
    return (value, value)


def check_resize_grid(table_shape, old_grid, new_grid, *, method="cubic", align_corners=False, cubic_a=-0.75,
                      antialias=False, scale=None, prefix_tokens=0, border="clamp"):
    """Validate `resize_grid`'s arguments once for every backend (shapes and options only, no data, so it
    runs under jit); return `(prefix_tokens, (old_h, old_w), (new_h, new_w), (scale_h, scale_w))`."""
    check_table("table", table_shape)
    old_h, old_w = _check_grid("old_grid", old_grid)
    new_h, new_w = _check_grid("new_grid", new_grid)
    prefix = check_positive_int("prefix_tokens", prefix_tokens, minimum=0)
    if int(table_shape[0]) != prefix + old_h * old_w:
        raise ValueError(f"table has {int(table_shape[0])} rows; prefix_tokens={prefix} + old_grid {old_h}x{old_w} "
                         f"needs {prefix + old_h * old_w}")
    scale_h, scale_w = _check_grid_scale(scale)
    _check_resize_options(method, align_corners, cubic_a, antialias, scale_h if scale_h is not None else scale_w,
                          border=border)
    return prefix, (old_h, old_w), (new_h, new_w), (scale_h, scale_w)


def resize_grid_weights(table_shape, old_grid, new_grid, *, method="cubic", align_corners=False, cubic_a=-0.75,
                        antialias=False, scale=None, prefix_tokens=0, border="clamp"):
    """`resize_grid`'s plan: `(prefix_tokens, (old_h, old_w), (new_h, new_w), (index_h, weight_h),
    (index_w, weight_w))`, the per-axis `resize_weights` in float64, after `check_resize_grid`.

    >>> resize_grid_weights((5, 4), (2, 2), (3, 3), prefix_tokens=1)[:3]
    (1, (2, 2), (3, 3))
    """
    prefix, (old_h, old_w), (new_h, new_w), (scale_h, scale_w) = check_resize_grid(
        table_shape, old_grid, new_grid, method=method, align_corners=align_corners, cubic_a=cubic_a,
        antialias=antialias, scale=scale, prefix_tokens=prefix_tokens, border=border)
    options = dict(method=method, align_corners=align_corners, cubic_a=cubic_a, antialias=antialias, border=border)
    rows = resize_weights(old_h, new_h, scale=scale_h, **options)
    cols = resize_weights(old_w, new_w, scale=scale_w, **options)
    return prefix, (old_h, old_w), (new_h, new_w), rows, cols


def resize_grid(table, old_grid, new_grid, *, method="cubic", align_corners=False, cubic_a=-0.75, antialias=False,
                scale=None, prefix_tokens=0, border="clamp"):
    """Resample a ViT's learned position table on its 2-D patch grid:
    `[prefix_tokens + old_h * old_w, dim] -> [prefix_tokens + new_h * new_w, dim]`.

    The grid rows follow the prefix rows (CLS, registers) in row-major `(h, w)` order; the prefix rows pass
    through unchanged. The grid is resampled separably, each axis with `resize_table`'s kernel and grid
    (`resize_weights`):
        out[p + y * new_w + x] = sum_{a, b} Wh[y, a] * Ww[x, b] * table[p + Ih[y, a] * old_w + Iw[x, b]]
    with `(Ih, Wh) = resize_weights(old_h, new_h, scale=scale_h, ...)` and likewise for the width. This is
    `F.interpolate(grid[None].permute(0, 3, 1, 2), size=new_grid or scale_factor=scale, mode="bicubic",
    align_corners=..., antialias=...)` in float64.

    Conventions (posenc_np.conventions) of it, each checked against the real code in
    tests/reference/test_resize_grid_reference.py:
      - transformers ViT/CLIP/SigLIP/Dinov2 `interpolate_pos_encoding`: cubic, size grid, no antialias;
      - timm `layers/pos_embed.py` `resample_abs_pos_embed` and open_clip `resize_pos_embed`: cubic with
        antialias (PyTorch's AA bicubic: `cubic_a=-0.5`);
      - original DINOv2 (`interpolate_offset=0.1`): `scale=((h + 0.1) / old_h, (w + 0.1) / old_w)`, the
        `scale_factor` grid source = (i + 0.5) / scale - 0.5;
      - DINOv2 with registers, Siglip2: antialias (cubic, resp. linear).

    Args:
        table: `[prefix_tokens + old_h * old_w, dim]` array (any float dtype; the dtype is returned).
        old_grid, new_grid: `(height, width)` in patches, or one int for a square grid.
        method, align_corners, cubic_a, antialias, border: as in `resize_table`, applied to both axes.
        scale: None (size grid), one number or `(scale_h, scale_w)`: PyTorch's `scale_factor`.
        prefix_tokens: rows before the grid that are copied unchanged.

    Raises:
        ValueError: a table whose row count is not `prefix_tokens + old_h * old_w`, a bad grid, scale or
            option (the message names the argument).
        TypeError: an integer or bool table.

    Reference:
        PyTorch aten UpSample.h / cpu/UpSampleKernel.cpp; timm layers/pos_embed.py `resample_abs_pos_embed`;
        facebookresearch/dinov2 dinov2/models/vision_transformer.py `interpolate_pos_encoding`;
        transformers models/{vit,dinov2,clip,siglip}/modeling_*.py `interpolate_pos_encoding`.

    Examples:
        >>> table = np.arange(5.0)[:, None]                    # CLS row 0, then a 2x2 grid 1 2 / 3 4
        >>> resize_grid(table, (2, 2), (1, 2), method="linear", prefix_tokens=1)[:, 0]
        array([0., 2., 3.])
    """
    table = np.asarray(table)
    check_float_dtype("table", table.dtype)
    prefix, (old_h, old_w), (new_h, new_w), (ih, wh), (iw, ww) = resize_grid_weights(
        table.shape, old_grid, new_grid, method=method, align_corners=align_corners, cubic_a=cubic_a,
        antialias=antialias, scale=scale, prefix_tokens=prefix_tokens, border=border)
    values = table.astype(np.float64)
    grid = values[prefix:].reshape(old_h, old_w, -1)
    grid = np.einsum("ya,yaxd->yxd", wh, grid[ih])                       # [new_h, old_w, dim]
    grid = np.einsum("xb,yxbd->yxd", ww, grid[:, iw])                    # [new_h, new_w, dim]
    out = np.concatenate([values[:prefix], grid.reshape(new_h * new_w, -1)], axis=0)
    return out.astype(table.dtype)
