"""Learned absolute position tables and their resizing: the specification (float64 NumPy)."""

from __future__ import annotations

import math

import numpy as np

from ._validate import (
    check_choice,
    check_integer_positions,
    check_positions_in_table,
    check_positive_int,
    check_table,
)

__all__ = ["learned", "resize_table", "resize_weights", "RESIZE_METHODS"]

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


def resize_weights(old_len, new_len, *, method="linear", align_corners=False, cubic_a=-0.75):
    """The sampling grid of `resize_table` as gather indices and weights, in float64.

    Returns `(index [new_len, taps], weight [new_len, taps])` with
    `resize_table(table)[i] = sum_k weight[i, k] * table[index[i, k]]`; taps is 1 (nearest), 2 (linear)
    or 4 (cubic). Backends gather and sum with exactly these numbers, so every framework samples the
    same grid whatever its own resize defaults are.

    Source coordinate of output row i (L = old_len, N = new_len):
        align_corners=False (half-pixel centres):  s_i = (i + 0.5) * L / N - 0.5
        align_corners=True:                        s_i = i * (L - 1) / (N - 1)   (0 when N == 1)
    "linear": rows floor(s), floor(s) + 1 (clamped to L - 1) with weights 1 - f, f, f = s - floor(s);
        negative s is set to 0 first (PyTorch's `linear`/`bilinear`).
    "nearest": row min(floor((i + 0.5) * L / N), L - 1), the half-pixel rule (PyTorch `nearest-exact`);
        `align_corners` does not apply and must be False.
    "cubic": rows floor(s) - 1 .. floor(s) + 2, each clamped into [0, L - 1] (replicated borders),
        Keys kernel with parameter a = `cubic_a`:
            W(x) = (a + 2)|x|^3 - (a + 3)|x|^2 + 1        for |x| <= 1
            W(x) = a|x|^3 - 5a|x|^2 + 8a|x| - 4a          for 1 < |x| < 2
        a = -0.75 is PyTorch's `bicubic`; a = -0.5 is TF's and JAX's `cubic`. No antialiasing.

    Reference:
        Keys, "Cubic convolution interpolation for digital image processing", 1981;
        PyTorch aten/src/ATen/native/UpSample.h `area_pixel_compute_source_index`, `upsample_bicubic2d`.
    """
    old_len = check_positive_int("old_len", old_len)
    new_len = check_positive_int("new_len", new_len)
    check_choice("method", method, RESIZE_METHODS)
    if not isinstance(align_corners, bool):
        raise TypeError(f"align_corners={align_corners!r} must be a bool")
    if isinstance(cubic_a, bool) or not isinstance(cubic_a, (int, float)) or not math.isfinite(cubic_a):
        raise ValueError(f"cubic_a={cubic_a!r} must be a finite number")
    out = np.arange(new_len, dtype=np.float64)
    if method == "nearest":
        if align_corners:
            raise ValueError("align_corners=True is not defined for method='nearest' (half-pixel rule only)")
        # exact integer arithmetic: floor((2i + 1) * L / (2N)); PyTorch multiplies by a float32 scale
        # and can land one row lower at exact ties (24 -> 37, row 18)
        rows = np.arange(new_len, dtype=np.int64)
        index = np.minimum((2 * rows + 1) * old_len // (2 * new_len), old_len - 1)
        return index[:, None], np.ones((new_len, 1))
    if align_corners:
        source = out * ((old_len - 1) / (new_len - 1)) if new_len > 1 else np.zeros(new_len)
    else:
        source = (out + 0.5) * (old_len / new_len) - 0.5
    if method == "linear":
        source = np.maximum(source, 0.0)
        lower = np.floor(source)
        frac = source - lower
        index = np.stack([lower, lower + 1], axis=1)
        weight = np.stack([1.0 - frac, frac], axis=1)
    else:
        lower = np.floor(source)
        frac = source - lower
        index = lower[:, None] + np.arange(-1, 3)[None, :]
        distance = np.abs(frac[:, None] - np.arange(-1, 3)[None, :])  # |s - tap|, taps -1, 0, 1, 2
        a = float(cubic_a)
        near = ((a + 2) * distance - (a + 3)) * distance**2 + 1
        far = ((a * distance - 5 * a) * distance + 8 * a) * distance - 4 * a
        weight = np.where(distance <= 1, near, np.where(distance < 2, far, 0.0))
    index = np.clip(index, 0, old_len - 1).astype(np.int64)
    return index, weight


def resize_table(table, new_len, *, method="linear", align_corners=False, cubic_a=-0.75):
    """Resample a learned position table along the position axis: `[L, dim] -> [new_len, dim]`.

    This is the `interpolate_pos_embed` / `extend_pe` step of porting a model to a longer (or shorter)
    context, defined on one grid for every framework. The grid and kernels are documented in
    `resize_weights`; the defaults reproduce `torch.nn.functional.interpolate(table.T[None],
    size=new_len, mode="linear", align_corners=False)` and, with method="cubic", PyTorch's `bicubic`
    (a = -0.75, replicated borders, no antialias).

    Where the frameworks' own resizers differ from this spec (which is why backends do not call them):
      - `tf.image.resize`: half-pixel centres like this spec, but bicubic uses a = -0.5, and
        `antialias=True` widens the kernel when downsampling.
      - `jax.image.resize`: antialias is on by default (so downsampling differs), cubic uses a = -0.5,
        and there is no align_corners option.
      - PyTorch: `nearest` (not `nearest-exact`) uses floor(i * L / N), without half-pixel centres.

    Args:
        table: `[L, dim]` array (any float dtype; the dtype is returned).
        new_len: number of output rows, >= 1.
        method: "linear", "nearest" or "cubic".
        align_corners: map the first and last rows onto each other instead of half-pixel centres.
        cubic_a: the Keys kernel parameter for "cubic".

    Raises:
        ValueError: `new_len < 1`, an unknown method, a table that is not 2-D.

    Examples:
        >>> resize_table(np.arange(4.0)[:, None], 8)[:, 0]  # half-pixel centres, borders clamped
        array([0.  , 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3.  ])
    """
    table = np.asarray(table)
    check_table("table", table.shape)
    if isinstance(new_len, (int, np.integer)) and not isinstance(new_len, bool) and new_len < 1:
        raise ValueError(f"new_len={new_len} must be >= 1")
    index, weight = resize_weights(table.shape[0], new_len, method=method, align_corners=align_corners,
                                   cubic_a=cubic_a)
    out = np.einsum("nk,nkd->nd", weight, table.astype(np.float64)[index])
    return out.astype(table.dtype)

