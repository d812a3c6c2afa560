"""Diagnosis of a case built of several calls (an attention with its bias inside, the slopes of a bias): the
case's own function re-run on the spec with one contract call inside it replaced by one of that call's named
variants (`diagnosis.spec_variants`), so a failure inside the composite is named as the single call's would be.

The case function is handed a stand-in for `posenc_np` that records each contract function it calls and,
for one variant, answers the calls of one function with that variant computed from the call's own inputs.
"""

from __future__ import annotations

import numpy as np

from .diagnosis import spec_variants

__all__ = ["composite_variants"]


def _flat(out) -> np.ndarray:
    """A case function's output as one float64 array (tuples flattened and joined, as the judge does)."""
    if isinstance(out, (tuple, list)):
        return np.concatenate([np.asarray(o, np.float64).ravel() for o in out])
    return np.asarray(out, np.float64)


class _Spec:
    """`posenc_np` as a case function sees it: every public function is recorded in `calls` (its first
    inputs), and the calls of `replaced[0]` are answered by `replaced[1](args, kwargs)`."""

    def __init__(self, calls: dict, replaced=None):
        self._calls, self._replaced = calls, replaced

    def __getattr__(self, name):
        import posenc_np

        attr = getattr(posenc_np, name)
        if name.startswith("_") or isinstance(attr, type) or not callable(attr):
            return attr

        def call(*args, **kwargs):
            self._calls.setdefault(name, (args, kwargs))
            if self._replaced is not None and self._replaced[0] == name:
                return self._replaced[1](args, kwargs)
            return attr(*args, **kwargs)

        return call


def _variants_of(name, args, kwargs, dtype):
    import posenc_np

    fn = getattr(posenc_np, name)
    return list(spec_variants(lambda *a, **k: np.asarray(fn(*a, **k), np.float64), name, args, kwargs, dtype))


def _attention_in(dtype):
    """`posenc_np.attention` with every intermediate rounded to half-precision `dtype`, as an eager attention
    run in the model's dtype computes it (transformers' T5 `eager`: bf16 matmuls, a bf16 bias sum, a float32
    softmax cast back): scores, the biased logits, the weights and the output each rounded once."""
    from posenc_np.attention import causal_mask
    from posenc_np.backend import numpy_dtype

    half = numpy_dtype(dtype)

    def rounded(x):
        return np.asarray(x, np.float64).astype(half).astype(np.float64)

    def attention(q, k, v, *, bias=None, causal=False, scale=None):
        scale = 1.0 / np.sqrt(np.shape(q)[-1]) if scale is None else scale
        logits = rounded(scale * (rounded(q) @ np.swapaxes(rounded(k), -1, -2)))
        if bias is not None:
            logits = rounded(logits + rounded(bias))
        if causal:
            logits = np.where(causal_mask(logits.shape[-2], logits.shape[-1]), logits, -np.inf)
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        weights = rounded(weights / weights.sum(-1, keepdims=True))
        return rounded(weights @ rounded(v)), weights

    return attention


def composite_variants(case_fn, args, kwargs, dtype):
    """`(name, sentence, build)` for each variant of each contract call `case_fn(posenc_np, *args, **kwargs)`
    makes, `build()` giving the whole case's float64 output with that call's variant in place.

    A variant is defined by its position in the call's list of variants, so a function called several times
    (the key and query biases of one case) takes the same variant in every call; a call whose own list differs
    there makes the variant undefined (ValueError, skipped by the diagnosis)."""
    calls: dict = {}
    try:
        case_fn(_Spec(calls), *args, **kwargs)
    except (ValueError, TypeError):
        return
    for name, (call_args, call_kwargs) in calls.items():
        try:
            first = _variants_of(name, call_args, call_kwargs, dtype)
        except (ValueError, TypeError):  # a function whose output is not one array (attention's pair)
            continue
        for index, (variant, sentence, _) in enumerate(first):
            def answer(a, k, name=name, index=index, variant=variant):
                options = _variants_of(name, a, k, dtype)
                if index >= len(options) or options[index][0] != variant:
                    raise ValueError(f"variant {variant!r} is not defined for this call of {name}")
                return options[index][2]()

            def build(name=name, answer=answer):
                return _flat(case_fn(_Spec({}, (name, answer)), *args, **kwargs))

            yield variant, f"{sentence}, in the case's {name} call", build
    if "attention" in calls and dtype in ("bfloat16", "float16"):
        attention = _attention_in(dtype)
        yield ("compute-dtype", f"your outputs equal the spec's attention computed in {dtype} (its logits, the "
                                "bias sum, the weights and the output each rounded to it), not in float32",
               lambda: _flat(case_fn(_Spec({}, ("attention", lambda a, k: attention(*a, **k))), *args, **kwargs)))
