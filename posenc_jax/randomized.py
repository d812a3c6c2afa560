"""Randomized positions in JAX. Spec: `posenc_np.randomized_positions`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from posenc_np.backend import check_finite, check_float_dtype
from posenc_np.randomized import check_noise_axes, check_randomized_args, check_seed

from ._common import is_tracing

__all__ = ["randomized_positions", "sample_randomized_positions"]


def randomized_positions(noise, seq_len):
    """int32 `[..., seq_len]`: sorted indices of the `seq_len` largest noise values; see the spec.

    NaN/inf noise raises the spec's ValueError eagerly; under jax.jit a row holding one returns -1 in every
    position (no framework orders NaN like another).
    """
    noise = jnp.asarray(noise)
    check_float_dtype("noise", noise.dtype, jnp.issubdtype(noise.dtype, jnp.floating))
    check_noise_axes(noise.ndim)
    check_randomized_args(seq_len, noise.shape[-1])
    if not is_tracing(noise):
        check_finite("noise", np.asarray(noise.astype(jnp.float32)))
    indices = jnp.sort(jax.lax.top_k(noise.astype(jnp.float32), seq_len)[1], axis=-1).astype(jnp.int32)
    # under jit (no raise on data): a row holding NaN/inf gets -1 everywhere, as documented
    return jnp.where(jnp.isfinite(noise).all(-1, keepdims=True), indices, -1)


def sample_randomized_positions(seq_len, max_len, *, seed, batch_shape=()):
    """`[*batch_shape, seq_len]` sorted random positions from `jax.random.uniform(jax.random.key(seed))`."""
    seq_len, max_len = check_randomized_args(seq_len, max_len)
    noise = jax.random.uniform(jax.random.key(check_seed(seed)), (*tuple(batch_shape), max_len))
    return randomized_positions(noise, seq_len)
