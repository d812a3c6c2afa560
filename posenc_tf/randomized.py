"""Randomized positions in TensorFlow. Spec: `posenc_np.randomized_positions`."""

from __future__ import annotations

import tensorflow as tf

from posenc_np.backend import check_finite, check_float_dtype
from posenc_np.randomized import check_noise_axes, check_randomized_args, check_seed

from ._common import as_tensor, is_tracing

__all__ = ["randomized_positions", "sample_randomized_positions"]


def randomized_positions(noise, seq_len):
    """int32 `[..., seq_len]`: sorted indices of the `seq_len` largest noise values; see the spec.

    NaN/inf noise raises the spec's ValueError eagerly; under tf.function a row holding one returns -1 in every
    position (no framework orders NaN like another).
    """
    noise = as_tensor(noise)
    check_float_dtype("noise", tf.as_dtype(noise.dtype).name, tf.as_dtype(noise.dtype).is_floating)
    check_noise_axes(noise.shape.rank if noise.shape.rank is not None else 1)
    check_randomized_args(seq_len, noise.shape[-1])
    if not is_tracing(noise):
        check_finite("noise", tf.cast(noise, tf.float32).numpy())
    indices = tf.sort(tf.math.top_k(tf.cast(noise, tf.float32), k=seq_len, sorted=False).indices, axis=-1)
    # inside tf.function (no raise on data): a row holding NaN/inf gets -1 everywhere, as documented
    finite = tf.reduce_all(tf.math.is_finite(noise), axis=-1, keepdims=True)
    return tf.where(finite, indices, tf.constant(-1, indices.dtype))


def sample_randomized_positions(seq_len, max_len, *, seed, batch_shape=()):
    """`[*batch_shape, seq_len]` sorted random positions from `tf.random.stateless_uniform(seed=[seed, 0])`."""
    seq_len, max_len = check_randomized_args(seq_len, max_len)
    noise = tf.random.stateless_uniform((*tuple(batch_shape), max_len), seed=[check_seed(seed), 0])
    return randomized_positions(noise, seq_len)
