"""Sinusoidal absolute position encodings: the specification (float64 NumPy)."""

from __future__ import annotations

import numpy as np

from ._dtypes import spec_output_dtype
from ._validate import check_choice, check_even_dim, check_positive_float

__all__ = ["sinusoidal", "sinusoid_inv_freq", "SINUSOID_LAYOUTS", "SINUSOID_DENOMINATORS", "check_sinusoidal_args",
           "sinusoidal_2d", "check_sinusoidal_2d_args", "sinusoid_2d_axes", "SINUSOID_2D_AXIS_ORDERS",
           "SINUSOID_2D_BLOCKS"]

SINUSOID_LAYOUTS = ("interleaved", "concat", "concat-cos")
SINUSOID_DENOMINATORS = ("dim", "half-1")
SINUSOID_2D_AXIS_ORDERS = ("xy", "yx")
SINUSOID_2D_BLOCKS = ("per-axis", "sin-cos")


def check_sinusoidal_args(dim, base, layout, denominator) -> int:
    """Validate the parameters of `sinusoidal`; backends call this before building anything."""
    dim = check_even_dim("dim", dim)
    check_positive_float("base", base)
    check_choice("layout", layout, SINUSOID_LAYOUTS)
    check_choice("denominator", denominator, SINUSOID_DENOMINATORS)
    if denominator == "half-1" and dim < 4:
        raise ValueError(f"dim={dim} must be >= 4 with denominator='half-1' (it divides by dim/2 - 1)")
    return dim


def sinusoid_inv_freq(dim: int, *, base: float = 10000.0, denominator: str = "dim") -> np.ndarray:
    """Inverse frequencies `w_i`, i = 0 .. dim/2 - 1, in float64.

    Formula:
        denominator="dim":     w_i = base ** (-2i / dim)          (Vaswani et al. 2017)
        denominator="half-1":  w_i = base ** (-i / (dim/2 - 1))   (tensor2tensor get_timing_signal_1d,
                                                                  fairseq SinusoidalPositionalEmbedding)
    With "half-1" the last channel reaches exactly 1/base; with "dim" it stops at base**(-(dim-2)/dim).

    Examples:
        >>> sinusoid_inv_freq(8)
        array([1.   , 0.1  , 0.01 , 0.001])
        >>> sinusoid_inv_freq(8, denominator="half-1")[-1]  # tensor2tensor: the last channel reaches 1/base
        np.float64(0.0001)
    """
    i = np.arange(dim // 2, dtype=np.float64)
    exponent = 2.0 * i / dim if denominator == "dim" else i / (dim // 2 - 1)
    return np.power(float(base), -exponent)


def sinusoidal(positions, dim, *, base=10000.0, layout="interleaved", denominator="dim", dtype=None):
    """Fixed sinusoidal position encoding: `[*positions.shape] -> [*positions.shape, dim]`.

    Formula, for pair index i = 0 .. dim/2 - 1 and angle t_i = p * w_i (see `sinusoid_inv_freq`):
        layout="interleaved":  PE[p, 2i] = sin(t_i),  PE[p, 2i+1] = cos(t_i)   (the paper; keras-hub
                               SinePositionEncoding)
        layout="concat":       PE[p, i] = sin(t_i),   PE[p, dim/2 + i] = cos(t_i)   (tensor2tensor,
                               fairseq, Marian, Flax WMT: "[sin | cos]")
        layout="concat-cos":   PE[p, i] = cos(t_i),   PE[p, dim/2 + i] = sin(t_i)   ("[cos | sin]":
                               diffusers' `get_timestep_embedding(flip_sin_to_cos=True)`, the timestep
                               embedding of SD 1.x-XL, SD3, Flux, DiT)

    Named conventions (`posenc_np.conventions`): "vaswani" = (interleaved, dim); "tensor2tensor" =
    (concat, half-1); "fairseq" = (concat, half-1) with positions starting at padding_idx + 1 = 2 and a
    zero row at padding_idx.

    Args:
        positions: integer or float array of any shape. Float positions are allowed (interpolated
            positions); they are read in float64.
        dim: even encoding width.
        base: the wavelength base (10000 in the paper; "max_wavelength" in keras-hub).
        layout: "interleaved", "concat" or "concat-cos".
        denominator: "dim" or "half-1".
        dtype: output dtype (float64 when None); the computation is float64 regardless.

    Returns:
        `[*positions.shape, dim]` array.

    Raises:
        ValueError: odd `dim`, non-positive `base`, unknown `layout` or `denominator`.

    Reference:
        Vaswani et al., "Attention Is All You Need", 2017, arXiv:1706.03762, section 3.5;
        tensor2tensor/layers/common_attention.py `get_timing_signal_1d`;
        fairseq/modules/sinusoidal_positional_embedding.py;
        diffusers/models/embeddings.py `get_timestep_embedding` (diffusers 0.3x).

    Examples:
        >>> sinusoidal(np.arange(3), 4)[1].round(4).tolist()
        [0.8415, 0.5403, 0.01, 1.0]
    """
    dim = check_sinusoidal_args(dim, base, layout, denominator)
    positions = np.asarray(positions, dtype=np.float64)
    angles = positions[..., None] * sinusoid_inv_freq(dim, base=base, denominator=denominator)  # [..., dim/2]
    sin, cos = np.sin(angles), np.cos(angles)
    if layout == "interleaved":
        table = np.stack([sin, cos], axis=-1).reshape(*positions.shape, dim)
    elif layout == "concat":
        table = np.concatenate([sin, cos], axis=-1)
    else:
        table = np.concatenate([cos, sin], axis=-1)
    return table.astype(spec_output_dtype(dtype))


def check_sinusoidal_2d_args(positions_shape, dim, base, axis_order, blocks, layout, denominator) -> int:
    """Validate the parameters of `sinusoidal_2d`; backends call this before building anything.

    `positions_shape` is the positions' shape (a tuple; an entry may be None where a tracer does not
    know it), whose last axis must be 2: (row, column).
    """
    dim = check_even_dim("dim", dim)
    if dim % 4:
        raise ValueError(f"dim={dim} must be divisible by 4: sinusoidal_2d gives each axis dim/2 channels "
                         "of (sin, cos) pairs")
    check_positive_float("base", base)
    check_choice("axis_order", axis_order, SINUSOID_2D_AXIS_ORDERS)
    check_choice("blocks", blocks, SINUSOID_2D_BLOCKS)
    check_choice("layout", layout, SINUSOID_LAYOUTS)
    check_choice("denominator", denominator, SINUSOID_DENOMINATORS)
    if blocks == "sin-cos" and layout == "interleaved":
        raise ValueError("layout='interleaved' has no separate sin and cos blocks: blocks='sin-cos' needs "
                         "layout 'concat' or 'concat-cos'")
    if denominator == "half-1" and dim < 8:
        raise ValueError(f"dim={dim} must be >= 8 with denominator='half-1' (each axis divides by dim/4 - 1)")
    shape = tuple(positions_shape)
    if not shape or (shape[-1] is not None and shape[-1] != 2):
        raise ValueError(f"positions must have a last axis of size 2 (row, column), got shape {shape}")
    return dim


def sinusoid_2d_axes(axis_order) -> tuple:
    """Indices into `positions[..., 2]` = (row, column) of the (first, second) encoded coordinate.

    "xy": the column (x) first, as MAE's `meshgrid(grid_w, grid_h)`; "yx": the row (y) first, as timm.
    """
    return (1, 0) if axis_order == "xy" else (0, 1)


def sinusoidal_2d(positions, dim, *, base=10000.0, axis_order="xy", blocks="per-axis", layout="concat",
                  denominator="dim", dtype=None):
    """2-D sin-cos table of ViTs and diffusion transformers: `[..., 2] -> [..., dim]`.

    `positions[..., 0]` is the row (y), `positions[..., 1]` the column (x). With (a, b) the two coordinates
    in `axis_order` ("xy": a = x, b = y; "yx": a = y, b = x) and `enc(p) = sinusoidal(p, dim/2, base=base,
    layout=layout, denominator=denominator)`, so frequencies w_i = base ** (-2i / (dim/2)) for
    denominator="dim", i = 0 .. dim/4 - 1:
        blocks="per-axis":  PE = [enc(a) | enc(b)]
                            (layout "concat": [sin a | cos a | sin b | cos b], each dim/4 wide)
        blocks="sin-cos":   PE = [S(a) | S(b) | C(a) | C(b)], where enc(p) = [S(p) | C(p)] in halves
                            (layout "concat": [sin a | sin b | cos a | cos b])

    Conventions:
        MAE `util/pos_embed.py get_2d_sincos_pos_embed` (also DiT `models.py`, SD3's `mmditx.py`):
            axis_order="xy", blocks="per-axis", layout="concat", denominator="dim", integer grid (MAE's
            `emb_h` is built from `meshgrid(grid_w, grid_h)[0]`, the column index: x comes first);
        diffusers `models/embeddings.py get_2d_sincos_pos_embed(embed_dim, grid_size, base_size,
            interpolation_scale)` (diffusers 0.42): the same, at float positions
            `index / (grid_size / base_size) / interpolation_scale` per axis (PixArt, SD3, Latte);
        timm `layers/pos_embed_sincos.py build_sincos2d_pos_embed` (timm 1.0): axis_order="yx",
            blocks="sin-cos" ([sin h | sin w | cos h | cos w]; `interleave_sin_cos=True` is "yx" "per-axis");
        big_vision `posemb_sincos_2d`: "xy", "per-axis", "concat", denominator="half-1" (its omega is
            linspace(0, 1, dim/4), i.e. base ** (-i / (dim/4 - 1))).

    Args:
        positions: `[..., 2]` integer or float array of (row, column); read in float64.
        dim: table width, divisible by 4.
        base: the wavelength base (MAE, timm `temperature`: 10000).
        axis_order: "xy" (column first) or "yx" (row first).
        blocks: "per-axis" or "sin-cos".
        layout: layout of each axis' `sinusoidal`; "interleaved" only with blocks="per-axis".
        denominator: "dim" or "half-1", of each axis' width dim/2.
        dtype: output dtype (float64 when None); the computation is float64 regardless.

    Returns:
        `[*positions.shape[:-1], dim]` array.

    Raises:
        ValueError: `dim` not divisible by 4, positions' last axis not 2, unknown `axis_order`, `blocks`,
            `layout` or `denominator`, non-positive `base`.

    Reference:
        He et al., "Masked Autoencoders Are Scalable Vision Learners", 2021, arXiv:2111.06377
        (facebookresearch/mae util/pos_embed.py); diffusers/models/embeddings.py `get_2d_sincos_pos_embed`,
        `get_2d_sincos_pos_embed_from_grid`; timm/layers/pos_embed_sincos.py `build_sincos2d_pos_embed`.

    Examples:
        >>> sinusoidal_2d(np.array([0, 1]), 4).round(4).tolist()  # row 0, column 1: [sin x, cos x, sin y, cos y]
        [0.8415, 0.5403, 0.0, 1.0]
        >>> sinusoidal_2d(np.array([0, 1]), 4, axis_order="yx", blocks="sin-cos").round(4).tolist()
        [0.0, 0.8415, 1.0, 0.5403]
    """
    positions = np.asarray(positions)
    dim = check_sinusoidal_2d_args(positions.shape, dim, base, axis_order, blocks, layout, denominator)
    positions = positions.astype(np.float64)
    first, second = (sinusoidal(positions[..., axis], dim // 2, base=base, layout=layout, denominator=denominator)
                     for axis in sinusoid_2d_axes(axis_order))
    if blocks == "per-axis":
        table = np.concatenate([first, second], axis=-1)
    else:
        q = dim // 4
        table = np.concatenate([first[..., :q], second[..., :q], first[..., q:], second[..., q:]], axis=-1)
    return table.astype(spec_output_dtype(dtype))
