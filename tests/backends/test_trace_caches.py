"""No backend cache may hold a value created during tracing.

Every backend caches what the spec computes from parameters alone (RoPE plans and cos/sin tables,
sinusoid frequencies, ALiBi slopes, T5 thresholds, resize weights, causal masks). A cache filled
while tracing (a JAX tracer, a TF graph tensor, a torch FakeTensor) breaks the next trace: JAX
raises `UnexpectedTracerError`, TF refuses a tensor of another graph. Each test below shows a
backend parameters it has never seen (a `base`, a length or a head count no other test uses)
first inside a compiled function (`Adapter.jit`, what `posenc check` compiles with: torch.compile
with aot_eager, tf.function(jit_compile=True), jax.jit, mx.compile), then retraces the same function (a new length, then a new dtype), then calls eagerly,
and compares every result with the float64 spec.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import posenc_np as pn
from posenc_np._dtypes import numpy_dtype
from posenc_np.testing import attention_tolerance, compare, tolerance

_FRESH = itertools.count(1)


def fresh(start: float) -> float:
    """A parameter value no other test (and no earlier call here) has used: its cache entry is new."""
    return start + 0.125 * next(_FRESH)


def _run(backend, fn, calls, desired, tol):
    """`fn` compiled, called with each `calls[i]` (NumPy arrays) in order, then eagerly with the first;
    each result compared with `desired(*args)` (float64 spec) within `tol(args, desired)`."""
    compiled = backend.jit(fn)
    for mode, args in [("jit", a) for a in calls] + [("eager", calls[0])]:
        tensors = [backend.from_numpy(a) for a in args]
        out = (compiled if mode == "jit" else fn)(*tensors)
        want = desired(*args)
        got = backend.to_numpy(out).astype(np.float64)
        result = compare(got, want, tol(args, want))
        assert result.passed, (mode, [a.shape for a in args], [a.dtype for a in args], result)


def _positions(n, start=0):
    return np.arange(start, start + n, dtype=np.int32)


def _x(shape, dtype, seed=0):
    return _cast(np.random.default_rng(seed).standard_normal(shape), dtype)


def _cast(x, dtype):
    return x.astype(numpy_dtype(dtype))


def _rope_tol(args, want):
    x, positions = args
    return tolerance(x.dtype, max_angle=float(np.abs(positions).max()), scale=float(np.abs(want).max()))


ROPE_SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8},
    "longrope": {"rope_type": "longrope", "original_max_position_embeddings": 8, "factor": 2.0,
                 "short_factor": [1.0, 1.5, 2.0, 2.5], "long_factor": [2.0, 3.0, 4.0, 5.0]},
}


# every layout and every kind of plan (static, linear, the two sequence-length dependent ones); the cos/sin
# table does not depend on the layout, so crossing them all would only repeat compilations
@pytest.mark.parametrize("layout, scaling", [("half", "default"), ("interleaved", "default"), ("half", "linear"),
                                             ("interleaved", "dynamic"), ("half", "longrope")])
def test_apply_rope_first_seen_under_jit(backend, layout, scaling):
    """The plan and the cos/sin table of each layout and scaling; lengths 8 and 16 cross longrope's and
    dynamic's original length, so both of their branches run; a bfloat16 x retraces once more."""
    base, scaling = fresh(12345.0), ROPE_SCALINGS[scaling]
    kwargs = dict(base=base, layout=layout, scaling=scaling, rotary_dim=8)
    apply_rope = backend.module.apply_rope  # looked up outside the compiled function
    fn = lambda x, p: apply_rope(x, p, **kwargs)  # noqa: E731
    calls = [(_x((2, 8, 12), "float32"), _positions(8)),
             (_x((2, 16, 12), "float32", 1), _positions(16)),
             (_x((2, 16, 12), "bfloat16", 2), _positions(16, 4090))]  # across the table end
    _run(backend, fn, calls, lambda x, p: pn.apply_rope(x.astype(np.float64), p, **kwargs), _rope_tol)


@pytest.mark.parametrize("scaling", ["default", "dynamic"])
def test_rope_cos_sin_and_frequencies_first_seen_under_jit(backend, scaling):
    base, scaling = fresh(23456.0), ROPE_SCALINGS[scaling]
    m = backend.module

    def fn(p):
        cos, sin = m.rope_cos_sin(p, 8, base=base, scaling=scaling, layout="interleaved", dtype="bfloat16")
        inv_freq, _ = m.rope_frequencies(8, base=base, scaling=scaling, seq_len=p[-1] + 1)
        return cos, sin, inv_freq

    compiled = backend.jit(fn)
    for mode, n in (("jit", 8), ("jit", 16), ("eager", 8)):
        p = _positions(n)
        cos, sin, inv_freq = (backend.to_numpy(t).astype(np.float64)
                              for t in (compiled if mode == "jit" else fn)(backend.from_numpy(p)))
        want_cos, want_sin = pn.rope_cos_sin(p, 8, base=base, scaling=scaling, layout="interleaved")
        tol = tolerance("bfloat16", max_angle=float(n))
        assert compare(cos, want_cos, tol).passed and compare(sin, want_sin, tol).passed, (mode, n)
        want_inv, _ = pn.rope_frequencies(8, base=base, scaling=scaling, seq_len=n)
        assert compare(inv_freq, want_inv, tolerance("float32")).passed, (mode, n)


@pytest.mark.parametrize("max_len", [None, 12])
def test_rotary_module_first_seen_under_jit(backend, max_len):
    """The module's own cache (`max_len`) or the shared spec table (None), built outside and inside."""
    base = fresh(34567.0)
    kwargs = dict(base=base, layout="half", rotary_dim=8)
    module = backend.module.RotaryEmbedding(max_len=max_len, **kwargs)
    calls = [(_x((8, 8), "float32"), _positions(8)),
             (_x((16, 8), "float32", 1), _positions(16)),  # 16 > max_len: computed
             (_x((16, 8), "bfloat16", 2), _positions(16))]
    _run(backend, lambda x, p: module(x, p), calls,
         lambda x, p: pn.apply_rope(x.astype(np.float64), p, **kwargs), _rope_tol)


def _sinusoid_tol(dtype):
    return lambda args, want: tolerance(dtype, max_angle=float(np.abs(args[0]).max()))


@pytest.mark.parametrize("denominator", ["dim", "half-1"])
def test_sinusoidal_first_seen_under_jit(backend, denominator):
    base, m = fresh(45678.0), backend.module
    kwargs = dict(base=base, denominator=denominator, layout="interleaved")
    for dtype in ("float32", "bfloat16"):  # the same parameters: traced again for each dtype and length
        _run(backend, lambda p, dtype=dtype: m.sinusoidal(p, 8, dtype=dtype, **kwargs),
             [(_positions(8),), (_positions(16, 3),)], lambda p: pn.sinusoidal(p, 8, **kwargs), _sinusoid_tol(dtype))


@pytest.mark.parametrize("max_len", [None, 10])
def test_sinusoidal_module_first_seen_under_jit(backend, max_len):
    base = fresh(56789.0)
    module = backend.module.SinusoidalEncoding(8, base=base, max_len=max_len)
    # [0, 8) inside the cache; [5, 21) crosses its end (gathered and computed in one call); int64 retraces
    calls = [(_positions(8),), (_positions(16, 5),), (_positions(16, 5).astype(np.int64),)]
    _run(backend, lambda p: module(p), calls, lambda p: pn.sinusoidal(p, 8, base=base), _sinusoid_tol("float32"))


def test_resize_table_first_seen_under_jit(backend):
    new_len = 40 + next(_FRESH)  # the resize weights are cached per (old_len, new_len, method)
    resize_table = backend.module.resize_table
    fn = lambda t: resize_table(t, new_len, method="cubic")  # noqa: E731
    table = np.random.default_rng(0).standard_normal((12, 4))
    calls = [(table.astype(np.float32),), (table.astype(np.float32)[:, :3],), (_cast(table, "bfloat16"),)]
    _run(backend, fn, calls, lambda t: pn.resize_table(t.astype(np.float64), new_len, method="cubic"),
         lambda args, want: tolerance(args[0].dtype, scale=2 * float(np.abs(want).max())))


def test_resize_grid_first_seen_under_jit(backend):
    """Per-axis resize weights (antialiased, scale-factor grid) first built in a trace."""
    new = (3 + next(_FRESH), 5)
    resize_grid = backend.module.resize_grid
    keywords = dict(method="cubic", cubic_a=-0.5, antialias=True, scale=(new[0] / 6.5, new[1] / 4.2), prefix_tokens=1)
    fn = lambda t: resize_grid(t, (6, 4), new, **keywords)  # noqa: E731
    table = np.random.default_rng(0).standard_normal((1 + 6 * 4, 4))
    calls = [(table.astype(np.float32),), (table.astype(np.float32)[:, :3],), (_cast(table, "bfloat16"),)]
    _run(backend, fn, calls, lambda t: pn.resize_grid(t.astype(np.float64), (6, 4), new, **keywords),
         lambda args, want: tolerance(args[0].dtype, scale=2 * float(np.abs(want).max())))


def test_alibi_and_t5_first_seen_under_jit(backend):
    """ALiBi slopes (per head count) and T5 bucket thresholds (per max_distance) first built in a trace."""
    heads, max_distance = 3 + next(_FRESH), 50 + next(_FRESH)
    table = np.random.default_rng(0).standard_normal((16, 2)).astype(np.float32)
    m = backend.module
    t5_table = backend.from_numpy(table)

    def fn(q, k):
        return m.alibi_bias(heads, q, k, form="causal"), m.t5_bias(t5_table, q, k, num_buckets=16,
                                                                   max_distance=max_distance)

    compiled = backend.jit(fn)
    for mode, (nq, nk) in (("jit", (4, 8)), ("jit", (8, 64)), ("eager", (4, 8))):
        q, k = _positions(nq, nk - nq), _positions(nk)
        alibi, t5 = (backend.to_numpy(t).astype(np.float64)
                     for t in (compiled if mode == "jit" else fn)(backend.from_numpy(q), backend.from_numpy(k)))
        want = pn.alibi_bias(heads, q, k, form="causal")
        assert compare(alibi, want, tolerance("float32", scale=float(np.abs(want).max()))).passed, mode
        want = pn.t5_bias(table.astype(np.float64), q, k, num_buckets=16, max_distance=max_distance)
        assert compare(t5, want, tolerance("float32", exact=True)).passed, mode


def test_causal_attention_first_seen_under_jit(backend):
    """The causal mask is cached per (q_len, k_len): lengths no other test uses."""
    n = 20 + next(_FRESH)
    attention = backend.module.attention
    fn = lambda q, k, v: attention(q, k, v, causal=True)[0]  # noqa: E731
    rng = np.random.default_rng(0)
    make = lambda q_len, dtype: tuple(_cast(rng.standard_normal((2, length, 4)), dtype)  # noqa: E731
                                      for length in (q_len, n, n))
    calls = [make(n - 3, "float32"), make(n - 1, "float32"), make(n - 3, "bfloat16")]

    def desired(q, k, v):
        return pn.attention(*(a.astype(np.float64) for a in (q, k, v)), causal=True)[0]

    def tol(args, want):
        return attention_tolerance(*(a.astype(np.float64) for a in args), dtype=args[0].dtype)[0]

    _run(backend, fn, calls, desired, tol)
