"""Gradients with respect to the trainable tables (T5 bias, Shaw relative embeddings, learned absolute):
the spec's finite differences are the scatter-add, and the backends agree with each other. Each backend
against the spec, eager and jitted, is the registry's `grad` cases (posenc/check/cases_grad.py), run by
tests/backends/test_conformance.py. A gather's gradient is a scatter-add; a random cotangent g checks it: d/dT sum(out * g)."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from posenc.adapters import adapter
from posenc_np.testing import compare, tolerance

Q_POS, K_POS = np.arange(20, 26), np.arange(0, 40, 3)  # distances from -25 to 19: exact and log buckets

# name -> (table shape, spec function of (module, table))
ENCODINGS = {
    "t5": ((16, 3), lambda m, t: m.t5_bias(t, Q_POS, K_POS, num_buckets=16, max_distance=32)),
    "t5-decoder": ((16, 3), lambda m, t: m.t5_bias(t, Q_POS, K_POS, bidirectional=False, num_buckets=16,
                                                   max_distance=32)),
    "shaw": ((9, 5), lambda m, t: m.relative_embeddings(t, Q_POS, K_POS, max_distance=4)),
    "hf-bert-relative-key": ((9, 5), lambda m, t: m.relative_embeddings(t, Q_POS, K_POS, max_distance=4,
                                                                        sign="query-key")),
    "learned": ((12, 4), lambda m, t: m.learned(t, np.array([[0, 3, 3, 11], [5, 5, 5, 0]]))),
}


def _inputs(name):
    shape, fn = ENCODINGS[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    table = rng.normal(size=shape).astype(np.float32)
    cotangent = rng.normal(size=fn(pn, table).shape).astype(np.float32)
    return table, cotangent, fn


def _finite_difference(fn, table, cotangent):
    return adapter("numpy").vjp(lambda t: fn(pn, t), table.astype(np.float64), cotangent.astype(np.float64))


def _backend_grad(backend_name, fn, table, cotangent, mode="eager"):
    chosen = adapter(backend_name)
    return chosen.call(lambda m, t, g: chosen.vjp(lambda t_: fn(m, t_), t, g), (table, cotangent), {}, mode=mode)


def _tol(cotangent, dtype="float32"):
    # Each gradient entry sums a subset of g in float32: the error is a few ulps of sum |g|.
    return tolerance(dtype, scale=float(np.abs(cotangent).sum()))


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_spec_finite_difference_is_scatter_add(name):
    """The finite-difference gradient of the spec is the scatter-add of g onto the gathered rows."""
    table, cotangent, fn = _inputs(name)
    index_table = np.arange(table.size, dtype=np.float64).reshape(table.shape)
    gathered = fn(pn, index_table)  # which table element each output element reads
    scatter = np.zeros(table.size)
    np.add.at(scatter, gathered.astype(np.int64).ravel(), cotangent.astype(np.float64).ravel())
    fd = _finite_difference(fn, table, cotangent)
    result = compare(fd, scatter.reshape(table.shape), tolerance("float64", scale=np.abs(cotangent).sum()))
    assert result.passed, result


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_backends_agree(backend_names, name):
    names = list(backend_names)
    if len(names) < 2:
        pytest.skip(f"needs two selected backends, --backends selects {names}")
    table, cotangent, fn = _inputs(name)
    grads = {b: _backend_grad(b, fn, table, cotangent, "eager") for b in names}
    first = names[0]
    for other in names[1:]:
        result = compare(grads[other], grads[first], _tol(cotangent))
        assert result.passed, f"{other} vs {first}: {result.max_abs_err:.3g} > {result.atol:.3g}"


def test_t5_table_gradient_through_flex_attention_matches_sdpa(require_backend):
    """T5 bias inside FlexAttention's score_mod passes gradients to the table like the materialised bias.

    Eager FlexAttention: with torch 2.13 on CPU, compiling the backward of a score_mod that reads a
    trainable tensor fails inside Inductor (IndexError); the compiled forward works (test_attention).
    """
    require_backend("torch")
    import torch

    from posenc_torch.attention import flex_attention, sdpa_attention, t5_score_mod

    rng = np.random.default_rng(0)
    q, k, v = (torch.from_numpy(rng.normal(size=(1, 3, n, 8)).astype(np.float32)) for n in (6, 6, 6))
    table = np.random.default_rng(1).normal(size=(32, 3)).astype(np.float32)
    cotangent = torch.from_numpy(rng.normal(size=(1, 3, 6, 8)).astype(np.float32))
    grads = []
    for path in ("sdpa", "flex"):
        weights = torch.from_numpy(table).requires_grad_(True)
        if path == "sdpa":
            import posenc_torch

            out = sdpa_attention(q, k, v, bias=posenc_torch.t5_bias(weights, np.arange(6), np.arange(6)), scale=1.0)
        else:
            out = flex_attention(q, k, v, score_mod=t5_score_mod(weights), scale=1.0)
        (out * cotangent).sum().backward()
        grads.append(weights.grad.numpy())
    result = compare(grads[1], grads[0], tolerance("float32", max_angle=2 * 20.0, scale=float(cotangent.abs().sum())))
    assert result.passed, f"{result.max_abs_err:.3g} > {result.atol:.3g}"
