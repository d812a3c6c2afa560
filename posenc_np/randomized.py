"""Randomized positional encodings (training-time position sampling): the specification (NumPy)."""

from __future__ import annotations

import numbers

import numpy as np

from ._validate import check_finite, check_float_dtype, check_positive_int

__all__ = ["randomized_positions", "sample_randomized_positions", "check_randomized_args", "check_noise_axes",
           "check_seed"]


def check_randomized_args(seq_len, max_len) -> tuple[int, int]:
    """`1 <= seq_len <= max_len`; backends call this before building anything."""
    seq_len = check_positive_int("seq_len", seq_len)
    max_len = check_positive_int("max_len", max_len)
    if seq_len > max_len:
        raise ValueError(f"seq_len={seq_len} must be <= max_len={max_len}: positions are drawn without "
                         f"replacement from 0 .. max_len - 1")
    return seq_len, max_len


def check_noise_axes(ndim) -> None:
    """`noise` is `[..., max_len]`: at least one axis (a shape: checked under jit too)."""
    if ndim < 1:
        raise ValueError("noise must be a [..., max_len] array, got a scalar")


def randomized_positions(noise, seq_len):
    """The positions a randomized encoding uses, from given noise: `[..., max_len] -> [..., seq_len]` int32.

    Formula: the indices of the `seq_len` largest values of `noise` along its last axis, in
    increasing order. With i.i.d. continuous noise this is a uniformly random, sorted subset of
    `0 .. max_len - 1` without replacement, what Ruoss et al. draw (`sort(choice(max_len, seq_len,
    replace=False))`), written as a deterministic function of the noise so that every backend can
    be checked against it exactly. Ties (probability 0 for continuous noise) go to the lower index.

    The positions then feed any encoding (sinusoidal, learned, RoPE, ALiBi...) in place of
    `arange(seq_len)` at training time; at test time use `arange(seq_len)` up to max_len.

    Args:
        noise: `[..., max_len]` float array (uniform noise; one row per sequence in a batch).
        seq_len: number of positions to keep, 1 <= seq_len <= max_len.

    Returns:
        int32 `[..., seq_len]`, strictly increasing along the last axis.

    Raises:
        TypeError: non-float noise.
        ValueError: seq_len out of range, scalar noise, NaN or infinite noise (an order of NaN is not
            defined: NumPy sorts it last, torch.topk and lax.top_k first, TF elsewhere). Backends check
            eagerly; under jit, where values cannot raise, every row holding a non-finite value
            returns -1 in all its positions (a position every posenc function refuses eagerly).

    Reference:
        Ruoss et al., "Randomized Positional Encodings Boost Length Generalization of Transformers",
        ACL 2023, arXiv:2305.16843; google-deepmind/randomized_positional_encodings
        `models/positional_encodings.py` (noisy positions: sorted sample without replacement).

    Examples:
        >>> randomized_positions(np.array([0.1, 0.9, 0.3, 0.7, 0.5]), 3).tolist()
        [1, 3, 4]
    """
    noise = np.asarray(noise)
    check_float_dtype("noise", noise.dtype)
    check_noise_axes(noise.ndim)
    check_randomized_args(seq_len, noise.shape[-1])
    check_finite("noise", noise)  # NaN has no place in an order: NumPy sorts it last, frameworks elsewhere
    order = np.argsort(-noise.astype(np.float64), axis=-1, kind="stable")[..., :seq_len]
    return np.sort(order, axis=-1).astype(np.int32)


def check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise TypeError(f"seed={seed!r} must be a non-negative integer")
    return int(seed)


def sample_randomized_positions(seq_len, max_len, *, seed, batch_shape=()):
    """Draw `[*batch_shape, seq_len]` sorted random positions from `0 .. max_len - 1` (int32).

    `randomized_positions` of uniform noise drawn from `seed` (NumPy's `default_rng(seed)` here; each
    backend uses its own generator: `torch.Generator().manual_seed(seed)`, TF's stateless uniform
    with seed `[seed, 0]`, `jax.random.key(seed)`, so the draws differ between frameworks while the
    noise-to-positions rule is checked exactly by `posenc check`).

    Examples:
        >>> sample_randomized_positions(4, 16, seed=0).shape
        (4,)
    """
    seq_len, max_len = check_randomized_args(seq_len, max_len)
    rng = np.random.default_rng(check_seed(seed))
    return randomized_positions(rng.random((*tuple(batch_shape), max_len)), seq_len)
