"""Gradients of `sum(f(table, ...) * cotangent)` with respect to a trainable table, in every package.

The spec's gradient is exact: the encodings with trainable tables (learned, T5 bias, relative
embeddings) are gathers, linear in the table, so one central difference per table element with any
step is exact up to float64 rounding. Backends use their own autodiff (a scatter-add); the
framework-specific part is `Adapter.vjp` in `posenc.adapters`.
"""

from __future__ import annotations

from ..adapters import adapter_for

__all__ = ["table_gradient"]


def table_gradient(module, fn, table, *args, cotangent, **kwargs):
    """d/d table of `sum(fn(module, table, *args, **kwargs) * cotangent)`, as the package's array type.

    `fn(module, table, ...)` calls the encoding on `module` (posenc_np or a backend). Works eagerly and
    inside the backend's jit (see `Adapter.vjp`).
    """
    return adapter_for(module).vjp(lambda t: fn(module, t, *args, **kwargs), table, cotangent)
