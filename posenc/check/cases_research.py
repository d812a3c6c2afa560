"""Suite cases for the research encodings: the dynamic encoding, NoPE, xPos, KERPLE, Sandwich,
FIRE, CoPE, randomized positions, DeBERTa buckets, and gradients for their trainable parameters.

Tolerances follow `posenc_np.testing.tolerance`; each `_tol_*` says what bounds the float32 error.
Integer results (positions, buckets) and NoPE are exact.
"""

from __future__ import annotations

import math

import numpy as np

from posenc_np.backend import numpy_dtype
from posenc_np.fire import fire_bias
from posenc_np.kerple import sandwich_head_scale
from posenc_np.sinusoidal import sinusoidal
from posenc_np.testing import tolerance

from ..adapters import adapter_for
from .registry import Case, register

EAGER = ("eager",)
#: The "long" sets check float32 precision at long distances; bf16/fp16 rounding is covered by the short sets
#: (each extra dtype costs JAX an eager compile per primitive, the suite's main cost).
LONG_DTYPES = ("float32",)
HEADS = 4
POSITIONS = {
    "short": (np.arange(8), np.arange(8)),
    "kv-offset": (np.arange(28, 32), np.arange(32)),
    "long": (np.arange(4088, 4096), np.arange(0, 4096, 128)),
}


def _exact(desired, dtype, args):
    return tolerance(dtype, exact=True)


def _scaled(slack=8.0):
    def tol(desired, dtype, args):
        return tolerance(dtype, scale=float(np.abs(desired).max()), slack_ulps=slack)
    return tol


def _cast(rng, shape, dtype, scale=1.0):
    return (scale * rng.normal(size=shape)).astype(numpy_dtype(dtype))


# --- dynamic position-aware encoding, NoPE ---------------------------------------------------------------

def _make_dynamic(rng, dtype):
    dim = 16
    return (_cast(rng, (2, 12, dim), dtype), _cast(rng, (dim, dim), dtype, 0.25), _cast(rng, (dim,), dtype, 0.1)), {}


def _tol_dynamic(desired, dtype, args):
    # |error| <= eps32 * (|x| + |PE| @ |W|.T + |b|) per float32 sum (dim terms) + the final rounding of out
    x, w, b = (a.astype(np.float64) for a in args)
    table = np.abs(sinusoidal(np.arange(x.shape[-2]), x.shape[-1]))
    bound = float((np.abs(x) + table @ np.abs(w).T + np.abs(b)).max())
    return tolerance(dtype, scale=bound, slack_ulps=2.0 * x.shape[-1], max_angle=float(x.shape[-2]))


register(Case("dynamic_position_encoding", "dynamic-linear", "short", _make_dynamic, _tol_dynamic,
              description="x [2, 12, 16] + sinusoid(arange(12)) @ W.T + b (W [out, in])"))
register(Case("nope", "nope", "short", lambda rng, dtype: ((_cast(rng, (2, 5, 8), dtype),), {}), _exact,
              description="no positional encoding: x unchanged"))


# --- xPos -------------------------------------------------------------------------------------------------

def _xpos_case(kind, case_set, positions, center):
    def make(rng, dtype):
        return (_cast(rng, (2, 2, len(positions), 16), dtype), positions), {
            "kind": kind, "scale_base": 512.0, "center": center}

    def tol(desired, dtype, args):
        # RoPE angles reach max(positions) rad; the scale is one float32 pow (relative error a few ulps)
        return tolerance(dtype, scale=float(np.abs(desired).max()), max_angle=float(np.max(positions)),
                         slack_ulps=16.0)

    register(Case("apply_xpos", f"xpos-{kind}", case_set, make, tol, modes=("eager", "jit") if case_set == "short" else EAGER,
                  dtypes=LONG_DTYPES if case_set == "long" else ("float32", "bfloat16", "float16"),
                  description=f"{kind}: RoPE (interleaved) x zeta**({'+' if kind == 'query' else '-'}(p - {center})/512)"))


for _kind in ("query", "key"):
    _xpos_case(_kind, "short", np.arange(8), 0)
    # x-transformers centres at max_pos // 2: positions 0..4095 -> centre 2048
    _xpos_case(_kind, "long", np.arange(4088, 4096), 2048)


# --- KERPLE, Sandwich -------------------------------------------------------------------------------------

def _kerple_case(kernel, case_set):
    q, k = POSITIONS[case_set]

    def make(rng, dtype):
        r1 = rng.uniform(0.05, 2.0, HEADS).astype(numpy_dtype(dtype))
        r2 = rng.uniform(0.05, 1.0 if kernel == "log" else 2.0, HEADS).astype(numpy_dtype(dtype))
        return (r1, r2, q, k), {"kernel": kernel}

    # log1p / pow are a few float32 ulps relative: 16 ulps of the largest magnitude. (The power kernel at
    # distance 4096 reaches r1 * 4096**r2 ~ 1e7, beyond float16's 65504, so "long" could not be float16 anyway.)
    dtypes = LONG_DTYPES if case_set == "long" else ("float32", "bfloat16", "float16")
    register(Case("kerple_bias", f"kerple-{kernel}", case_set, make, _scaled(16.0), dtypes=dtypes,
                  modes=("eager", "jit") if case_set == "kv-offset" else EAGER,
                  description=f"{kernel} kernel, {HEADS} heads, q {q[0]}..{q[-1]}, k {k[0]}..{k[-1]}"))


for _kernel in ("log", "power"):
    for _set in ("short", "kv-offset", "long"):
        _kerple_case(_kernel, _set)


def _sandwich_case(case_set, dim=16):
    q, k = POSITIONS[case_set]

    def make(rng, dtype):
        return (HEADS, q, k), {"dim": dim, "dtype": dtype}

    def tol(desired, dtype, args):
        # dim/2 cosines, each off by <= 2 eps32 * angle (angle <= max distance * w_1 < max distance), summed and
        # scaled by at most H/8: scale = (H/8) * dim bounds both the sum's error and |bias|
        max_distance = float(np.abs(q[:, None] - k[None, :]).max())
        return tolerance(dtype, scale=float(sandwich_head_scale(HEADS).max()) * dim, max_angle=max_distance)

    register(Case("sandwich_bias", "sandwich", case_set, make, tol,
                  dtypes=LONG_DTYPES if case_set == "long" else ("float32", "bfloat16", "float16"),
                  modes=("eager", "jit") if case_set == "kv-offset" else EAGER,
                  description=f"dim={dim}, {HEADS} heads, q {q[0]}..{q[-1]}, k {k[0]}..{k[-1]}"))


for _set in ("short", "kv-offset", "long"):
    _sandwich_case(_set)


# --- FIRE -------------------------------------------------------------------------------------------------

FIRE_WIDTH = 8


def _fire_params(rng, dtype):
    cast = numpy_dtype(dtype)
    return (np.asarray(rng.uniform(0.05, 0.5), cast), np.asarray(rng.uniform(4.0, 64.0), cast),
            _cast(rng, (FIRE_WIDTH, 1), dtype), _cast(rng, (FIRE_WIDTH,), dtype, 0.1),
            _cast(rng, (HEADS, FIRE_WIDTH), dtype, 0.5), _cast(rng, (HEADS,), dtype, 0.1))


def _fire_case(case_set):
    q, k = POSITIONS[case_set]

    def make(rng, dtype):
        return (*_fire_params(rng, dtype), q, k), {}

    def tol(desired, dtype, args):
        # u in [0, ~1] carries a few float32 ulps (two log1p, a division); the MLP sums width terms: bound
        # by the bias of |weights|, which dominates every partial sum
        c, L, w1, b1, w2, b2, q_, k_ = args
        magnitude = fire_bias(*(np.abs(np.asarray(a, np.float64)) for a in (c, L, w1, b1, w2, b2)), q_, k_)
        return tolerance(dtype, scale=float(np.abs(magnitude).max()), slack_ulps=32.0)

    register(Case("fire_bias", "fire", case_set, make, tol, modes=("eager", "jit") if case_set == "kv-offset" else EAGER,
                  dtypes=LONG_DTYPES if case_set == "long" else ("float32", "bfloat16", "float16"),
                  description=f"MLP 1->{FIRE_WIDTH}->{HEADS}, q {q[0]}..{q[-1]}, k {k[0]}..{k[-1]}"))


for _set in ("short", "kv-offset", "long"):
    _fire_case(_set)


# --- CoPE -------------------------------------------------------------------------------------------------

def _make_cope(rng, dtype, n=6, dim=8, max_pos=5):
    query = _cast(rng, (2, n, dim), dtype)
    logits = rng.normal(size=(2, n, n)) * 2.0
    logits = np.where(np.tril(np.ones((n, n), bool)), logits, -1e4)  # causal: future gates are sigmoid(-1e4) = 0
    return (query, logits.astype(numpy_dtype(dtype)), _cast(rng, (max_pos, dim), dtype)), {}


def _tol_cope(desired, dtype, args):
    # e = q . pos_emb: dim-term float32 sums; the count's float32 error moves the interpolation weight by a
    # few ulps of k, times |e_ceil - e_floor| <= 2 max|e|: 32 ulps of max(|q| @ |pos_emb|.T)
    query, _, pos_emb = (a.astype(np.float64) for a in args)
    bound = float((np.abs(query) @ np.abs(pos_emb).T).max())
    return tolerance(dtype, scale=bound, slack_ulps=32.0)


register(Case("cope", "cope", "causal", _make_cope, _tol_cope,
              description="2 x 6 queries, causal logits, max_pos 5 (the count is clipped)"))


# --- randomized positions, DeBERTa ----------------------------------------------------------------------

register(Case("randomized_positions", "ruoss-randomized", "noise", lambda rng, dtype: ((rng.random((3, 64)), 12), {}),
              _exact, dtypes=("float32",),
              description="12 sorted positions out of 64 from uniform noise, 3 rows"))


def _make_buckets(bucket_size, max_position):
    relative = np.arange(-4 * max_position, 4 * max_position + 1)
    return lambda rng, dtype: ((relative, bucket_size, max_position), {})


register(Case("make_log_bucket_position", "deberta-v3", "bucket-exact", _make_buckets(256, 512), _exact,
              dtypes=("float32",), description="every relative position in +-2048, bucket 256, max 512"))
register(Case("make_log_bucket_position", "deberta-small", "bucket-exact", _make_buckets(8, 64), _exact,
              dtypes=("float32",), description="every relative position in +-256, bucket 8, max 64"))
register(Case("build_relative_position", "deberta-v3", "kv-offset",
              lambda rng, dtype: ((np.arange(1000, 1008), np.arange(0, 1008, 9)),
                                  {"bucket_size": 256, "max_position": 512}),
              _exact, dtypes=("float32",), description="query - key, log buckets beyond 128"))


# --- gradients of the trainable parameters ------------------------------------------------------------

def _unpack(m, theta, shapes):
    """The parameters of the flat `theta`, in `m`'s (a posenc package's) array type."""
    reshape = adapter_for(m).reshape
    out, start = [], 0
    for shape in shapes:
        size = math.prod(shape)  # not np.prod: Dynamo would trace it as a tensor op
        out.append(reshape(theta[start:start + size], shape))
        start += size
    return out


def _spec_gradient(forward, theta, arrays, cotangent, step=1e-6):
    """Central differences in float64 with a small step: error ~ step**2 * f''' + 1e-16 / step, below 1e-9
    for these smooth (away from ReLU kinks, which random parameters do not hit) functions."""
    import posenc_np

    theta = np.asarray(theta, np.float64)
    grad = np.zeros_like(theta)
    for n in range(theta.size):
        plus, minus = theta.copy(), theta.copy()
        plus[n] += step
        minus[n] -= step
        grad[n] = np.sum((forward(posenc_np, plus, *arrays) - forward(posenc_np, minus, *arrays)) * cotangent) / (2 * step)
    return grad


def _grad_case(encoding, convention, make_parts, call, slack=32.0):
    """`make_parts(rng) -> (params list, arrays tuple)`; `call(m, *params, *arrays)` is the encoding."""
    def make(rng, dtype):
        params, arrays = make_parts(rng)
        theta = np.concatenate([np.ravel(p) for p in params]).astype(np.float32)
        shapes = [np.shape(p) for p in params]
        import posenc_np

        out = call(posenc_np, *params, *arrays)
        cotangent = rng.normal(size=np.shape(out)).astype(np.float32)
        return (theta, *arrays, cotangent), {"shapes": shapes}

    def forward(m, theta, *arrays, shapes=None):
        return call(m, *_unpack(m, theta, shapes), *arrays)

    def grad(m, theta, *rest, shapes):
        *arrays, cotangent = rest
        if m.__name__ == "posenc_np":
            return _spec_gradient(lambda mod, t, *a: np.asarray(forward(mod, t, *a, shapes=shapes), np.float64),
                                  theta, arrays, cotangent)
        return adapter_for(m).vjp(lambda t: forward(m, t, *arrays, shapes=shapes), theta, cotangent)

    def tol(desired, dtype, args):
        # a float32 gradient is a sum over the output of cotangent x local derivative, each a few float32 ops:
        # bound by the spec's gradient against |cotangent| with |desired| as a floor
        theta, *arrays, cotangent = args
        shapes = [np.shape(p) for p in make_parts(np.random.default_rng(0))[0]]
        magnitude = _spec_gradient(lambda mod, t, *a: np.abs(np.asarray(forward(mod, t, *a, shapes=shapes))),
                                   np.abs(np.asarray(theta, np.float64)), arrays, np.abs(cotangent))
        scale = max(float(np.abs(magnitude).max()), float(np.abs(desired).max()))
        return tolerance(dtype, scale=scale, slack_ulps=slack)

    register(Case(encoding, convention, "grad", make, tol, fn=grad, dtypes=("float32",),
                  description="d params of sum(f(params) * cotangent), random cotangent"))


_gq, _gk = np.arange(20, 26), np.arange(0, 40, 3)
_grad_case("dynamic_position_encoding", "dynamic-linear",
           lambda rng: ([0.25 * rng.normal(size=(8, 8)), 0.1 * rng.normal(size=8)], (rng.normal(size=(2, 6, 8)),)),
           lambda m, w, b, x: m.dynamic_position_encoding(x, w, b))
for _kernel in ("log", "power"):
    _grad_case("kerple_bias", f"kerple-{_kernel}",
               lambda rng: ([rng.uniform(0.1, 2.0, 3), rng.uniform(0.1, 1.0, 3)], (_gq, _gk)),
               lambda m, r1, r2, q, k, _kernel=_kernel: m.kerple_bias(r1, r2, q, k, kernel=_kernel))
_grad_case("fire_bias", "fire",
           lambda rng: ([np.asarray(0.2), np.asarray(16.0), rng.normal(size=(6, 1)), 0.1 * rng.normal(size=6),
                         0.5 * rng.normal(size=(3, 6)), 0.1 * rng.normal(size=3)], (_gq, _gk)),
           lambda m, c, L, w1, b1, w2, b2, q, k: m.fire_bias(c, L, w1, b1, w2, b2, q, k))
_grad_case("cope", "cope",
           lambda rng: ([rng.normal(size=(5, 4))], _make_cope(np.random.default_rng(3), "float32", n=6, dim=4)[0][:2]),
           lambda m, pos_emb, query, logits: m.cope(query, logits, pos_emb))
