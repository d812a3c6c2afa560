"""The documents' dynamic position-aware encoding, and NoPE: the specification (float64 NumPy)."""

from __future__ import annotations

import numpy as np

from ._validate import check_float_dtype, check_table
from .sinusoidal import check_sinusoidal_args, sinusoidal

__all__ = ["dynamic_position_encoding", "nope", "check_dynamic_args"]


def check_dynamic_args(x_shape, weight_shape, bias_shape, base, layout, denominator) -> int:
    """Validate `dynamic_position_encoding`'s shapes and sinusoid parameters; returns `dim`.

    Backends call this before building anything.
    """
    x_shape = tuple(x_shape)
    if len(x_shape) < 2:
        raise ValueError(f"x must be [..., seq, dim], got shape {x_shape}")
    dim = check_sinusoidal_args(x_shape[-1], base, layout, denominator)
    check_table("weight", weight_shape, rows=dim, cols=dim)
    if tuple(bias_shape) != (dim,):
        raise ValueError(f"bias must have shape ({dim},), got shape {tuple(bias_shape)}")
    return dim


def dynamic_position_encoding(x, weight, bias, *, base=10000.0, layout="interleaved", denominator="dim"):
    """Dynamic position-aware encoding: a sinusoid through a trainable linear map, added to `x`.

    Formula, for `x [..., seq, dim]` and positions p = 0 .. seq - 1:
        out[..., p, :] = x[..., p, :] + sinusoidal(p, dim) @ weight.T + bias
    i.e. `x + nn.Linear(dim, dim)(sinusoidal(arange(seq), dim))`.

    Weight orientation: `weight` is `[out, in]` = `[dim, dim]`, PyTorch's `nn.Linear.weight`. Keras
    `Dense` and Flax `nnx.Linear` store the transpose, `kernel = weight.T` (`[in, out]`); the port
    rules (`posenc port`, docs/port.md) declare that transpose.

    Args:
        x: `[..., seq, dim]` float array (the token embeddings); `dim` even.
        weight: `[dim, dim]` projection weight, `[out, in]`.
        bias: `[dim]` projection bias.
        base, layout, denominator: the sinusoid's parameters, see `posenc_np.sinusoidal`.

    Returns:
        float64 array of `x`'s shape.

    Raises:
        ValueError: `x` with fewer than two axes, odd `dim`, a weight that is not `[dim, dim]`, a
            bias that is not `[dim]`, and everything `sinusoidal` raises.

    Reference:
        The project documents' "dynamic position-aware encoding" (`nn.Linear(d_model, d_model)` over
        the Vaswani et al. 2017 sinusoid, arXiv:1706.03762 section 3.5); PyTorch `nn.Linear`
        computes `input @ weight.T + bias`.

    Examples:
        >>> out = dynamic_position_encoding(np.zeros((2, 4)), np.eye(4), np.zeros(4))
        >>> out[1].round(4).tolist()
        [0.8415, 0.5403, 0.01, 1.0]
    """
    x, weight, bias = np.asarray(x), np.asarray(weight), np.asarray(bias)
    check_float_dtype("x", x.dtype)
    dim = check_dynamic_args(x.shape, weight.shape, bias.shape, base, layout, denominator)
    table = sinusoidal(np.arange(x.shape[-2]), dim, base=base, layout=layout, denominator=denominator)
    return x.astype(np.float64) + table @ weight.astype(np.float64).T + bias.astype(np.float64)


def nope(x):
    """NoPE, no positional encoding: returns `x` unchanged (float64).

    The model's only positional signal is then the causal mask (Kazemnejad et al., "The Impact of
    Positional Encoding on Length Generalization in Transformers", 2023, arXiv:2305.19466); HF Llama 4
    `no_rope_layers` and Cohere2/Command-A global layers use it per layer. It is a named encoding so
    that `posenc experiment` and `posenc check` can treat "no encoding" like any other.

    Args:
        x: float array of any shape.

    Returns:
        `x` as float64.

    Examples:
        >>> nope(np.array([1.0, 2.0])).tolist()
        [1.0, 2.0]
    """
    x = np.asarray(x)
    check_float_dtype("x", x.dtype)
    return x.astype(np.float64)
