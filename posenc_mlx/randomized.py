"""Randomized positions in MLX. Spec: `posenc_np.randomized_positions`."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from posenc_np.backend import check_finite, check_float_dtype
from posenc_np.randomized import check_noise_axes, check_randomized_args, check_seed

from ._common import as_tensor, is_floating, is_tracing

__all__ = ["randomized_positions", "sample_randomized_positions"]


def randomized_positions(noise, seq_len):
    """int32 `[..., seq_len]`: sorted indices of the `seq_len` largest noise values; see the spec.

    NaN/inf noise raises the spec's ValueError eagerly; under mx.compile a row holding one returns -1 in
    every position (no framework orders NaN like another).
    """
    noise = as_tensor(noise)
    check_float_dtype("noise", noise.dtype, is_floating(noise))
    check_noise_axes(noise.ndim)
    check_randomized_args(seq_len, noise.shape[-1])
    noise32 = noise.astype(mx.float32)
    if not is_tracing(noise):
        check_finite("noise", np.asarray(noise32))
    # the seq_len largest, ties to the lower index as the spec's stable sort of -noise (MLX's argsort is stable)
    largest = mx.argsort(-noise32, axis=-1)[..., :seq_len]
    indices = mx.sort(largest, axis=-1).astype(mx.int32)
    # under mx.compile (no raise on data): a row holding NaN/inf gets -1 everywhere, as documented
    return mx.where(mx.all(mx.isfinite(noise32), axis=-1, keepdims=True), indices, -1)


def sample_randomized_positions(seq_len, max_len, *, seed, batch_shape=()):
    """`[*batch_shape, seq_len]` sorted random positions from `mx.random.uniform(key=mx.random.key(seed))`."""
    seq_len, max_len = check_randomized_args(seq_len, max_len)
    noise = mx.random.uniform(shape=(*tuple(batch_shape), max_len), key=mx.random.key(check_seed(seed)))
    return randomized_positions(noise, seq_len)
