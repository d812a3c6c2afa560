"""Sinusoidal absolute position encodings: the specification (float64 NumPy)."""

from __future__ import annotations

import numpy as np

from ._dtypes import spec_output_dtype
from ._validate import check_choice, check_even_dim, check_positive_float

__all__ = ["sinusoidal", "sinusoid_inv_freq", "SINUSOID_LAYOUTS", "SINUSOID_DENOMINATORS", "check_sinusoidal_args"]

SINUSOID_LAYOUTS = ("interleaved", "concat", "concat-cos")
SINUSOID_DENOMINATORS = ("dim", "half-1")


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
