"""Suite cases for the attention biases: ALiBi (three forms), T5 (buckets and bias), relative embeddings,
and whole attention outputs with each bias.

Case sets: "short" (positions 0..7), "long" (queries near 8192), "kv-offset" (queries n-4 .. n-1 against
keys 0..n-1, a decoding step with a cache), "left-pad" (`[batch, seq]` positions as BLOOM's cumsum of a
left-padded attention mask gives). Under jit (one torch compile per case and dtype) run "kv-offset",
the bucket exactness and the attention cases; the rest run eagerly (under jit the position math is
the same code with traced positions).
"""

from __future__ import annotations

import numpy as np

from posenc_np._dtypes import numpy_dtype
from posenc_np.alibi import alibi_bias
from posenc_np.attention import attention_tolerance
from posenc_np.conventions import conventions
from posenc_np.t5 import t5_bias
from posenc_np.testing import Tolerance, tolerance
from .registry import Case, register

HEADS = 12  # not a power of two: exercises the slope interleaving rule
HEAD_DIM = 8
EAGER = ("eager",)

_MASK = np.array([[0, 0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1]])
POSITIONS = {
    "short": (np.arange(8), np.arange(8)),
    "long": (np.arange(8184, 8192), np.arange(0, 8192, 256)),
    "kv-offset": (np.arange(28, 32), np.arange(32)),
    "left-pad": ((np.cumsum(_MASK, axis=1) - 1) * _MASK, (np.cumsum(_MASK, axis=1) - 1) * _MASK),
}
DESCRIPTIONS = {
    "short": "positions 0..7",
    "long": "queries 8184..8191, keys 0..8191 step 256",
    "kv-offset": "queries 28..31 against keys 0..31 (cache step)",
    "left-pad": "[2, 8] positions, cumsum of a left-padded mask",
}


def _scaled(desired, dtype):
    return tolerance(dtype, scale=float(np.abs(desired).max()))


def _exact(desired, dtype):
    return tolerance(dtype, exact=True)


def _modes(case):
    return ("eager", "jit") if case == "kv-offset" else EAGER


# --- ALiBi --------------------------------------------------------------------------------------------

def _alibi_case(convention, form, case):
    q, k = POSITIONS[case]

    def make(rng, dtype):
        return (HEADS, q, k), {"form": form, "dtype": dtype}

    register(Case("alibi_bias", convention, case, make, _scaled, modes=_modes(case),
                  description=f"form={form}, {HEADS} heads, {DESCRIPTIONS[case]}"))


for _case in ("short", "long", "kv-offset", "left-pad"):
    _alibi_case("press-alibi", conventions["press-alibi"].params["form"], _case)
for _case in ("kv-offset", "left-pad"):
    _alibi_case("bloom-alibi", conventions["bloom-alibi"].params["form"], _case)
for _case in ("short", "long"):
    _alibi_case("alibi-symmetric", "symmetric", _case)


def _qkv(q_len, k_len, dtype, seed):
    """Attention inputs from a fixed seed, so a case's tolerance can rebuild what its make() built."""
    rng = np.random.default_rng(seed)
    cast = numpy_dtype(dtype)
    return tuple(rng.normal(size=(2, HEADS, n, HEAD_DIM)).astype(cast) for n in (q_len, k_len, k_len))


def _attention_tol(q_len, k_len, seed, bias_of, scale=None):
    def tol(desired, dtype):
        q, k, v = _qkv(q_len, k_len, dtype, seed)
        tols = attention_tolerance(q, k, v, bias=bias_of(), scale=scale, dtype=dtype)
        return max(tols, key=lambda t: t.atol)  # out and weights are compared together

    return tol


def _alibi_attention(m, q, k, v, q_positions, k_positions, *, form):
    return m.attention(q, k, v, bias=m.alibi_bias(HEADS, q_positions, k_positions, form=form), causal=True)


def _alibi_attention_case(convention, form):
    q_pos, k_pos = POSITIONS["kv-offset"]

    def make(rng, dtype):
        return (*_qkv(len(q_pos), len(k_pos), dtype, 11), q_pos, k_pos), {"form": form}

    register(Case("alibi_bias", convention, "attention-causal", make,
                  _attention_tol(len(q_pos), len(k_pos), 11, lambda: alibi_bias(HEADS, q_pos, k_pos, form=form)),
                  fn=_alibi_attention,
                  description=f"attention(bias=alibi {form}, causal=True), {DESCRIPTIONS['kv-offset']}"))


_alibi_attention_case("press-alibi", "causal")
_alibi_attention_case("bloom-alibi", "bloom")
_alibi_attention_case("alibi-symmetric", "symmetric")


def _form_gap(m, q, k, v, q_positions, k_positions):
    """Causal-masked weights of the bloom form minus the paper's form: 0 up to rounding."""
    bloom = m.attention(q, k, v, bias=m.alibi_bias(HEADS, q_positions, k_positions, form="bloom"), causal=True)[1]
    paper = m.attention(q, k, v, bias=m.alibi_bias(HEADS, q_positions, k_positions, form="causal"), causal=True)[1]
    return bloom - paper


def _make_gap(rng, dtype):
    q_pos, k_pos = POSITIONS["kv-offset"]
    return (*_qkv(len(q_pos), len(k_pos), dtype, 12), q_pos, k_pos), {}


def _gap_tol(desired, dtype):
    q_pos, k_pos = POSITIONS["kv-offset"]
    q, k, v = _qkv(len(q_pos), len(k_pos), dtype, 12)
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
    **{name: POSITIONS[name] for name in ("short", "kv-offset", "left-pad")},
    "long": (np.arange(1020, 1028), np.arange(0, 1100, 37)),  # distances beyond max_distance: last bucket
}


def _t5_case(convention, case):
    q, k = T5_POSITIONS[case]
    params = dict(conventions[convention].params)

    def make(rng, dtype):
        table = rng.normal(size=(params["num_buckets"], HEADS)).astype(numpy_dtype(dtype))
        return (table, q, k), params

    register(Case("t5_bias", convention, case, make, _exact, modes=_modes(case),
                  description=f"table [{params['num_buckets']}, {HEADS}] gathered, {DESCRIPTIONS.get(case, case)}"))


for _case in ("short", "long", "kv-offset", "left-pad"):
    _t5_case("t5", _case)
for _case in ("long", "kv-offset"):
    _t5_case("t5-decoder", _case)


def _bucket_case(convention):
    params = dict(conventions[convention].params)
    relative = np.arange(-4 * params["max_distance"], 4 * params["max_distance"] + 1)

    def make(rng, dtype):
        return (relative,), params

    register(Case("t5_bucket", convention, "bucket-exact", make, _exact, dtypes=("float32",),
                  description="every relative position in +-4 max_distance, int32 buckets exactly"))


_bucket_case("t5")
_bucket_case("t5-decoder")


def _t5_attention(m, q, k, v, table, q_positions, k_positions):
    return m.attention(q, k, v, bias=m.t5_bias(table, q_positions, k_positions), scale=1.0)


def _t5_table(dtype):
    return np.random.default_rng(13).normal(size=(32, HEADS)).astype(numpy_dtype(dtype))


def _make_t5_attention(rng, dtype):
    q_pos, k_pos = POSITIONS["kv-offset"]
    return (*_qkv(len(q_pos), len(k_pos), dtype, 14), _t5_table(dtype), q_pos, k_pos), {}


def _t5_attention_tol(desired, dtype):
    q_pos, k_pos = POSITIONS["kv-offset"]
    bias = t5_bias(_t5_table(dtype).astype(np.float64), q_pos, k_pos)
    return _attention_tol(len(q_pos), len(k_pos), 14, lambda: bias, scale=1.0)(desired, dtype)


register(Case("t5_bias", "t5", "attention-unscaled", _make_t5_attention, _t5_attention_tol, fn=_t5_attention,
              description="attention(bias=t5_bias, scale=1.0): T5's unscaled logits, cache step"))


# --- relative (Shaw, HF BERT relative_key) --------------------------------------------------------------

def _relative_case(convention, case, max_distance):
    q, k = POSITIONS[case]
    params = dict(conventions[convention].params)

    def make(rng, dtype):
        table = rng.normal(size=(2 * max_distance + 1, HEAD_DIM)).astype(numpy_dtype(dtype))
        return (table, q, k), {"max_distance": max_distance, **params}

    register(Case("relative_embeddings", convention, case, make, _exact, modes=_modes(case),
                  description=f"k={max_distance}, {DESCRIPTIONS[case]}"))


for _case in ("short", "kv-offset", "left-pad"):
    _relative_case("shaw", _case, 4)  # clipped: distances reach 31
# HF BERT: k = max_position_embeddings - 1 with every position below max_position_embeddings (no clip)
_relative_case("hf-bert-relative-key", "short", 7)
_relative_case("hf-bert-relative-key", "kv-offset", 31)
