"""Randomized positions in JAX. Spec: `posenc_np.randomized_positions`."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from posenc_np.randomized import check_randomized_args, check_seed

__all__ = ["randomized_positions", "sample_randomized_positions"]


def randomized_positions(noise, seq_len):
    """int32 `[..., seq_len]`: sorted indices of the `seq_len` largest noise values; see the spec."""
    noise = jnp.asarray(noise)
    if noise.ndim < 1 or not jnp.issubdtype(noise.dtype, jnp.floating):
        raise TypeError(f"noise must be a [..., max_len] float array, got shape {noise.shape} dtype {noise.dtype}")
    check_randomized_args(seq_len, noise.shape[-1])
    indices = jax.lax.top_k(noise.astype(jnp.float32), seq_len)[1]
    return jnp.sort(indices, axis=-1).astype(jnp.int32)


def sample_randomized_positions(seq_len, max_len, *, seed, batch_shape=()):
    """`[*batch_shape, seq_len]` sorted random positions from `jax.random.uniform(jax.random.key(seed))`."""
    seq_len, max_len = check_randomized_args(seq_len, max_len)
    noise = jax.random.uniform(jax.random.key(check_seed(seed)), (*tuple(batch_shape), max_len))
    return randomized_positions(noise, seq_len)
