"""Randomized positions in TensorFlow. Spec: `posenc_np.randomized_positions`."""

from __future__ import annotations

import tensorflow as tf

from posenc_np.randomized import check_randomized_args, check_seed

from ._common import as_tensor

__all__ = ["randomized_positions", "sample_randomized_positions"]


def randomized_positions(noise, seq_len):
    """int32 `[..., seq_len]`: sorted indices of the `seq_len` largest noise values; see the spec."""
    noise = as_tensor(noise)
    if noise.shape.rank is None or noise.shape.rank < 1 or not noise.dtype.is_floating:
        raise TypeError(f"noise must be a [..., max_len] float tensor, got shape {noise.shape} dtype {noise.dtype.name}")
    check_randomized_args(seq_len, noise.shape[-1])
    indices = tf.math.top_k(tf.cast(noise, tf.float32), k=seq_len, sorted=False).indices
    return tf.sort(indices, axis=-1)


def sample_randomized_positions(seq_len, max_len, *, seed, batch_shape=()):
    """`[*batch_shape, seq_len]` sorted random positions from `tf.random.stateless_uniform(seed=[seed, 0])`."""
    seq_len, max_len = check_randomized_args(seq_len, max_len)
    noise = tf.random.stateless_uniform((*tuple(batch_shape), max_len), seed=[check_seed(seed), 0])
    return randomized_positions(noise, seq_len)
