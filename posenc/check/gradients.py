"""Gradients of `sum(f(table, ...) * cotangent)` with respect to a trainable table, in every package.

The spec's gradient is exact: the encodings with trainable tables (learned, T5 bias, relative
embeddings) are gathers, linear in the table, so one central difference per table element with any
step is exact up to float64 rounding. Backends use their own autodiff (a scatter-add).
"""

from __future__ import annotations

import numpy as np

__all__ = ["table_gradient"]


def table_gradient(module, fn, table, *args, cotangent, **kwargs):
    """d/d table of `sum(fn(module, table, *args, **kwargs) * cotangent)`, as the package's array type.

    `fn(module, table, ...)` calls the encoding on `module` (posenc_np or a backend). Works eagerly and
    inside the backend's jit (torch.func.vjp under torch.compile, GradientTape under tf.function,
    jax.vjp under jax.jit).
    """
    name = module.__name__
    if name == "posenc_np":
        table = np.asarray(table, np.float64)
        grad = np.zeros_like(table)
        for index in np.ndindex(table.shape):  # exact for a linear f: step 1, central difference
            plus, minus = table.copy(), table.copy()
            plus[index] += 1.0
            minus[index] -= 1.0
            grad[index] = np.sum((np.asarray(fn(module, plus, *args, **kwargs), np.float64)
                                  - np.asarray(fn(module, minus, *args, **kwargs), np.float64)) * cotangent) / 2
        return grad
    if name == "posenc_torch":
        import torch

        out, pullback = torch.func.vjp(lambda t: fn(module, t, *args, **kwargs), table)
        return pullback(cotangent.to(out.dtype))[0]
    if name == "posenc_tf":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            tape.watch(table)
            out = fn(module, table, *args, **kwargs)
        return tf.convert_to_tensor(tape.gradient(out, table, output_gradients=tf.cast(cotangent, out.dtype)))
    if name == "posenc_jax":
        import jax

        out, pullback = jax.vjp(lambda t: fn(module, t, *args, **kwargs), table)
        return pullback(cotangent.astype(out.dtype))[0]
    raise ValueError(f"module={name!r} is not a posenc package")
