"""Suite cases for gradients with respect to trainable tables (learned, T5 bias, relative embeddings).

float32 only: a bf16/fp16 table's gradient is accumulated in that dtype by the frameworks' scatter-add,
one rounding per contribution, so its error depends on how many positions share a row; the float32
bound below is what a training step relies on.
"""

from __future__ import annotations

import numpy as np

from posenc_np.testing import tolerance

from ..adapters import adapter_for
from .registry import Case, register

Q_POS = np.arange(20, 26)
K_POS = np.arange(0, 40, 3)  # relative distances -25 .. 19: exact and logarithmic T5 buckets, clipped Shaw rows
ROWS = np.array([[0, 3, 3, 11], [5, 5, 5, 0]])  # repeated rows: the scatter-add must accumulate

ENCODINGS = {
    # family function, convention, table shape, forward(module, table, *arrays, **kwargs), arrays, kwargs
    ("learned", "bert"): ((12, 4), lambda m, t, p: m.learned(t, p), (ROWS,), {}),
    ("t5_bias", "t5"): ((16, 3), lambda m, t, q, k, **kw: m.t5_bias(t, q, k, **kw), (Q_POS, K_POS),
                        {"num_buckets": 16, "max_distance": 32}),
    ("t5_bias", "t5-decoder"): ((16, 3), lambda m, t, q, k, **kw: m.t5_bias(t, q, k, **kw), (Q_POS, K_POS),
                                {"bidirectional": False, "num_buckets": 16, "max_distance": 32}),
    ("relative_embeddings", "shaw"): ((9, 5), lambda m, t, q, k, **kw: m.relative_embeddings(t, q, k, **kw),
                                      (Q_POS, K_POS), {"max_distance": 4}),
    ("relative_embeddings", "hf-bert-relative-key"): (
        (9, 5), lambda m, t, q, k, **kw: m.relative_embeddings(t, q, k, **kw), (Q_POS, K_POS),
        {"max_distance": 4, "sign": "query-key"}),
}


def _register(encoding, convention, shape, forward, arrays, fwd_kwargs):
    import posenc_np

    def make(rng, dtype):
        table = rng.normal(size=shape).astype(np.float32)
        out_shape = np.shape(forward(posenc_np, table.astype(np.float64), *arrays, **fwd_kwargs))
        cotangent = rng.normal(size=out_shape).astype(np.float32)
        return (table, *arrays, cotangent), {}

    def grad(module, table, *rest):
        *arrays_, cotangent = rest
        return adapter_for(module).vjp(lambda t: forward(module, t, *arrays_, **fwd_kwargs), table, cotangent)

    def tol(desired, dtype, args):
        # each gradient cell is a float32 sum of the cotangents gathered into it, so its rounding error
        # scales with the largest sum of their magnitudes: the spec's gradient for |cotangent|
        table, *arrays_, cotangent = args
        magnitude = adapter_for(posenc_np).vjp(lambda t: forward(posenc_np, t, *arrays_, **fwd_kwargs),
                                               table.astype(np.float64), np.abs(cotangent.astype(np.float64)))
        return tolerance(dtype, scale=float(magnitude.max()))

    register(Case(encoding, convention, "grad", make, tol, fn=grad, dtypes=("float32",),
                  description="d table of sum(f(table) * cotangent), random cotangent"))


for (_encoding, _convention), (_shape, _forward, _arrays, _kwargs) in ENCODINGS.items():
    _register(_encoding, _convention, _shape, _forward, _arrays, _kwargs)
