"""Check cases for the attention biases: ALiBi (three forms), T5 (buckets and bias), relative embeddings,
and whole attention outputs with each bias.

This is the only conformance matrix for these encodings: `posenc check` runs it, and so does
tests/backends/test_conformance.py (one test id per case x backend x dtype x mode).

Case sets (positions, `POSITIONS`): "short" (0..7), "long" (queries near 8192), "kv-offset" (queries n-4
.. n-1 against keys 0..n-1, a decoding step with a cache), "left-pad" (`[batch, seq]` positions as BLOOM's
cumsum of a left-padded attention mask gives), and "kv-offset-long" (a cache step far from 0 against
strided keys: ALiBi 8188..8191 vs every 512th key below 8192, T5 1020..1023 vs every 31st key below 1024,
beyond max_distance; relative 60..63 vs 0..63, far beyond the clip). Every convention runs every case set
that applies to it. Under jit (one compile per case, dtype and backend) run "kv-offset", the bucket
exactness and the attention cases; the other sets run eagerly (under jit the position math is the same
code with traced positions, which "kv-offset" already traces).

Tolerances are derived from the case's own inputs (`tol(desired, dtype, args)`), so `--seed` changes
every case's inputs, attention included.
"""

from __future__ import annotations

import numpy as np

from posenc_np.alibi import alibi_bias
from posenc_np.attention import causal_mask
from posenc_np.backend import numpy_dtype
from posenc_np.conventions import conventions
from posenc_np.relative import relative_embeddings
from posenc_np.t5 import t5_bias
from posenc_np.testing import Tolerance, attention_tolerance, tolerance

from .registry import Case, register

HEADS = 12  # not a power of two: exercises the slope interleaving rule
HEAD_DIM = 8
EAGER = ("eager",)

_MASK = np.array([[0, 0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1]])
_LEFT_PAD = (np.cumsum(_MASK, axis=1) - 1) * _MASK
POSITIONS = {
    "short": (np.arange(8), np.arange(8)),
    "long": (np.arange(8184, 8192), np.arange(0, 8192, 256)),
    "kv-offset": (np.arange(28, 32), np.arange(32)),
    "left-pad": (_LEFT_PAD, _LEFT_PAD),
    "kv-offset-long": (np.arange(8188, 8192), np.arange(0, 8192, 512)),
    # short distances at positions bfloat16 cannot hold (4 apart from 512): a model that casts its positions
    # to its dtype before taking differences gets distances off by up to 4
    "past-256": (np.arange(1000, 1004), np.arange(990, 1004)),
    # the same for float16, which holds only even integers from 2048 to 4096
    "past-2048": (np.arange(3001, 3005), np.arange(2991, 3005)),
}
DESCRIPTIONS = {
    "short": "positions 0..7",
    "long": "queries 8184..8191, keys 0..8191 step 256",
    "kv-offset": "queries 28..31 against keys 0..31 (cache step)",
    "left-pad": "[2, 8] positions, cumsum of a left-padded mask",
    "kv-offset-long": "queries 8188..8191 against keys 0..8191 step 512 (cache step, long)",
    "past-256": "queries 1000..1003 against keys 990..1003: short distances where bfloat16 rounds positions",
    "past-2048": "queries 3001..3004 against keys 2991..3004: short distances where float16 rounds positions",
}


def _same_dtype(dtype):
    return dtype


def _int32(dtype):
    return "int32"


def _scaled(desired, dtype, args):
    return tolerance(dtype, scale=float(np.abs(desired).max()))


def _exact(desired, dtype, args):
    return tolerance(dtype, exact=True)


def _modes(case_set):
    return ("eager", "jit") if case_set == "kv-offset" else EAGER


# --- ALiBi --------------------------------------------------------------------------------------------

ALIBI_CONVENTIONS = {"press-alibi": conventions["press-alibi"].params["form"],
                     "bloom-alibi": conventions["bloom-alibi"].params["form"],
                     "alibi-symmetric": "symmetric"}


def _alibi_case(convention, form, case_set):
    q, k = POSITIONS[case_set]

    def make(rng, dtype):
        return (HEADS, q, k), {"form": form, "dtype": dtype}

    register(Case("alibi_bias", convention, case_set, make, _scaled, modes=_modes(case_set), out_dtype=_same_dtype,
                  description=f"form={form}, {HEADS} heads, {DESCRIPTIONS[case_set]}"))


for _convention, _form in ALIBI_CONVENTIONS.items():
    for _set in POSITIONS:
        _alibi_case(_convention, _form, _set)


def _qkv(rng, q_len, k_len, dtype, batch=2):
    return tuple(rng.normal(size=(batch, HEADS, n, HEAD_DIM)).astype(numpy_dtype(dtype)) for n in (q_len, k_len, k_len))


def _attention_tol(bias_of, scale=None):
    """Tolerance of an attention case whose args start with (q, k, v); `bias_of(args)` is the float64 bias."""
    def tol(desired, dtype, args):
        q, k, v = args[:3]
        tols = attention_tolerance(q, k, v, bias=bias_of(args), scale=scale, dtype=dtype)
        return max(tols, key=lambda t: t.atol)  # out and weights are compared together

    return tol


def _alibi_attention(m, q, k, v, q_positions, k_positions, *, form):
    return m.attention(q, k, v, bias=m.alibi_bias(HEADS, q_positions, k_positions, form=form), causal=True)


def _alibi_attention_case(convention, form):
    q_pos, k_pos = POSITIONS["kv-offset"]

    def make(rng, dtype):
        return (*_qkv(rng, len(q_pos), len(k_pos), dtype), q_pos, k_pos), {"form": form}

    register(Case("alibi_bias", convention, "attention-causal", make,
                  _attention_tol(lambda args: alibi_bias(HEADS, args[3], args[4], form=form)),
                  fn=_alibi_attention, out_dtype=_same_dtype,
                  description=f"attention(bias=alibi {form}, causal=True), {DESCRIPTIONS['kv-offset']}"))


for _convention, _form in ALIBI_CONVENTIONS.items():
    _alibi_attention_case(_convention, _form)


def _form_gap(m, q, k, v, q_positions, k_positions):
    """Causal-masked weights of the bloom form minus the paper's form: 0 up to rounding."""
    bloom = m.attention(q, k, v, bias=m.alibi_bias(HEADS, q_positions, k_positions, form="bloom"), causal=True)[1]
    paper = m.attention(q, k, v, bias=m.alibi_bias(HEADS, q_positions, k_positions, form="causal"), causal=True)[1]
    return bloom - paper


def _make_gap(rng, dtype):
    q_pos, k_pos = POSITIONS["kv-offset"]
    return (*_qkv(rng, len(q_pos), len(k_pos), dtype), q_pos, k_pos), {}


def _gap_tol(desired, dtype, args):
    q, k, v, q_pos, k_pos = args
    # the difference of two weight tensors, each within the weights tolerance of the same spec value
    weights = attention_tolerance(q, k, v, bias=alibi_bias(HEADS, q_pos, k_pos, form="bloom"), dtype=dtype)[1]
    return Tolerance(2 * weights.atol, f"2 x ({weights.why})")


register(Case("alibi_bias", "alibi-forms", "causal-softmax-equal", _make_gap, _gap_tol, fn=_form_gap,
              dtypes=("float32",),
              description="bloom vs paper form under a causal mask: weights equal (spec gap exactly 0)"))


def _logit_gap(m, q_positions, k_positions):
    """Without a mask the raw logits differ: bloom - paper = m_h * i, constant along each row, not 0."""
    return m.alibi_bias(HEADS, q_positions, k_positions, form="bloom") - \
        m.alibi_bias(HEADS, q_positions, k_positions, form="causal")


register(Case("alibi_bias", "alibi-forms", "raw-logits-differ", lambda rng, dtype: (POSITIONS["kv-offset"], {}),
              _scaled, fn=_logit_gap, dtypes=("float32",), modes=EAGER,
              description="bloom - paper bias = m_h * i (nonzero): the forms differ without a mask"))


# --- T5 -----------------------------------------------------------------------------------------------

T5_POSITIONS = {
    **{name: POSITIONS[name] for name in ("short", "kv-offset", "left-pad", "past-256", "past-2048")},
    "long": (np.arange(1020, 1028), np.arange(0, 1100, 37)),  # distances beyond max_distance: last bucket
    "kv-offset-long": (np.arange(1020, 1024), np.arange(0, 1024, 31)),
}
T5_DESCRIPTIONS = {**DESCRIPTIONS, "long": "queries 1020..1027, keys 0..1099 step 37 (beyond max_distance)",
                   "kv-offset-long": "queries 1020..1023 against keys 0..1023 step 31 (cache step, long)"}


def _t5_case(convention, case_set):
    q, k = T5_POSITIONS[case_set]
    params = dict(conventions[convention].params)

    def make(rng, dtype):
        table = rng.normal(size=(params["num_buckets"], HEADS)).astype(numpy_dtype(dtype))
        return (table, q, k), params

    register(Case("t5_bias", convention, case_set, make, _exact, modes=_modes(case_set), out_dtype=_same_dtype,
                  description=f"table [{params['num_buckets']}, {HEADS}] gathered, {T5_DESCRIPTIONS[case_set]}"))


for _convention in ("t5", "t5-decoder"):
    for _set in T5_POSITIONS:
        _t5_case(_convention, _set)


def _bucket_case(convention, case_set="bucket-exact", **override):
    params = {**conventions[convention].params, **override}
    relative = np.arange(-4 * params["max_distance"], 4 * params["max_distance"] + 1)

    def make(rng, dtype):
        return (relative,), params

    detail = "" if not override else (f", num_buckets={params['num_buckets']}, max_distance={params['max_distance']}"
                                      ": a float64 log would bucket distances 8, 16, 64 differently")
    register(Case("t5_bucket", convention, case_set, make, _exact, dtypes=("float32",), out_dtype=_int32,
                  description=f"every relative position in +-4 max_distance, int32 buckets exactly{detail}"))


for _convention in ("t5", "t5-decoder"):
    _bucket_case(_convention)
    # where HF's float32 log and a float64 log disagree (see tests/reference/test_t5_reference.py)
    _bucket_case(_convention, "bucket-exact-18x128", num_buckets=18, max_distance=128)


def _t5_attention(m, q, k, v, table, q_positions, k_positions):
    return m.attention(q, k, v, bias=m.t5_bias(table, q_positions, k_positions), scale=1.0)


def _make_t5_attention(rng, dtype):
    q_pos, k_pos = POSITIONS["kv-offset"]
    table = rng.normal(size=(32, HEADS)).astype(numpy_dtype(dtype))
    return (*_qkv(rng, len(q_pos), len(k_pos), dtype), table, q_pos, k_pos), {}


register(Case("t5_bias", "t5", "attention-unscaled", _make_t5_attention,
              _attention_tol(lambda args: t5_bias(args[3].astype(np.float64), args[4], args[5]), scale=1.0),
              fn=_t5_attention, out_dtype=_same_dtype,
              description="attention(bias=t5_bias, scale=1.0): T5's unscaled logits, cache step"))


# --- relative (Shaw, HF BERT relative_key) --------------------------------------------------------------

RELATIVE_POSITIONS = {**{name: POSITIONS[name] for name in ("short", "kv-offset", "left-pad")},
                      "kv-offset-long": (np.arange(60, 64), np.arange(64))}
RELATIVE_DESCRIPTIONS = {**DESCRIPTIONS, "kv-offset-long": "queries 60..63 against keys 0..63 (cache step)"}


def _relative_case(convention, case_set, max_distance, params=None):
    q, k = RELATIVE_POSITIONS[case_set]
    params = dict(conventions[convention].params) if params is None else params

    def make(rng, dtype):
        table = rng.normal(size=(2 * max_distance + 1, HEAD_DIM)).astype(numpy_dtype(dtype))
        return (table, q, k), {"max_distance": max_distance, **params}

    register(Case("relative_embeddings", convention, case_set, make, _exact, modes=_modes(case_set),
                  out_dtype=_same_dtype, description=f"k={max_distance}, {params}, {RELATIVE_DESCRIPTIONS[case_set]}"))


for _set in RELATIVE_POSITIONS:
    _relative_case("shaw", _set, 4)  # clipped: distances reach 63
    # the query - key sign (HF BERT's) with Shaw's clipping: the sign and the clip are independent options
    _relative_case("query-key-clipped", _set, 4, {"sign": "query-key"})
# HF BERT: k = max_position_embeddings - 1 with every position below max_position_embeddings (no clip)
_relative_case("hf-bert-relative-key", "short", 7)
_relative_case("hf-bert-relative-key", "kv-offset", 31)


def _make_shaw_attention(rng, dtype):
    """Shaw's logit term q . a_ij folded into a dense bias (in `dtype`, as a model would hold it)."""
    q, k, v = _qkv(rng, 5, 5, dtype)
    rel = relative_embeddings(rng.normal(size=(5, HEAD_DIM)), np.arange(5), np.arange(5), max_distance=2)
    bias = np.einsum("bhqd,qkd->bhqk", q.astype(np.float64), rel) / np.sqrt(HEAD_DIM)
    return (q, k, v, bias.astype(numpy_dtype(dtype))), {}


register(Case("relative_embeddings", "shaw", "attention-bias", _make_shaw_attention,
              _attention_tol(lambda args: args[3].astype(np.float64)),
              fn=lambda m, q, k, v, bias: m.attention(q, k, v, bias=bias), out_dtype=_same_dtype,
              description="attention(bias=q . relative_embeddings / sqrt(d)): a dense [batch, heads, q, k] bias"))


# --- attention without a bias -------------------------------------------------------------------------

def _make_causal(rng, dtype):
    return _qkv(rng, 5, 5, dtype), {}


register(Case("attention", "no-bias", "causal", _make_causal, _attention_tol(lambda args: None),
              fn=lambda m, q, k, v: m.attention(q, k, v, causal=True), out_dtype=_same_dtype,
              description="attention(causal=True), no bias, 5 x 5"))


def _make_masked(rng, dtype):
    q, k, v = _qkv(rng, 4, 12, dtype)
    future = (~causal_mask(4, 12)).astype(numpy_dtype(dtype))  # 1 where the causal mask hides the key
    return (q, k, v, future), {}


register(Case("attention", "no-bias", "causal-masked-zeros", _make_masked, _exact,
              fn=lambda m, q, k, v, future: m.attention(q, k, v, causal=True)[1] * future, out_dtype=_same_dtype,
              description="weights of masked keys are exactly 0 (not ~1e-9): 4 queries against 12 keys"))
