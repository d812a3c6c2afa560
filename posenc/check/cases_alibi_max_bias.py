"""Check cases for ALiBi's `max_bias` (MPT's `alibi_bias_max`, GGUF's `max_alibi_bias`): the bias under the
`mpt-alibi` and `ggml-alibi` conventions at their default and other `max_bias`, and the slopes themselves for
head counts that are not a power of two. The positions are `cases_bias`'s."""

from __future__ import annotations

from posenc_np.conventions import conventions
from posenc_np.testing import tolerance

from .cases_bias import DESCRIPTIONS, EAGER, HEADS, POSITIONS
from .registry import Case, register


def _same_dtype(dtype):
    return dtype


def _scaled(desired, dtype, args):
    return tolerance(dtype, scale=float(abs(desired).max()))


def _max_bias_case(convention, case_set, positions, max_bias=None):
    """`alibi_bias` under `convention` (its form and max_bias, or `max_bias` instead) at `POSITIONS[positions]`."""
    params = dict(conventions[convention].params)
    params["max_bias"] = params["max_bias"] if max_bias is None else max_bias
    q, k = POSITIONS[positions]

    def make(rng, dtype):
        return (HEADS, q, k), {**params, "dtype": dtype}

    # eager only: max_bias changes a constant, and the forms' traced code is what the kv-offset cases above compile
    register(Case("alibi_bias", convention, case_set, make, _scaled, modes=EAGER, out_dtype=_same_dtype,
                  description=f"form={params['form']}, max_bias={params['max_bias']:g}, {HEADS} heads, "
                              f"{DESCRIPTIONS[positions]}"))


# 12 heads (not a power of two): max_bias scales both the power-of-two slopes and the interleaved extra ones; one
# case per convention at its default (max_bias 8, the forms above) for `--impl` runs named by convention
_max_bias_case("mpt-alibi", "kv-offset", "kv-offset")
_max_bias_case("mpt-alibi", "max-bias-4", "short", max_bias=4.0)
_max_bias_case("ggml-alibi", "long", "long")
_max_bias_case("ggml-alibi", "max-bias-4-long", "long", max_bias=4.0)
_max_bias_case("ggml-alibi", "max-bias-16-kv-offset", "kv-offset", max_bias=16.0)


def _slopes(m, num_heads, *, max_bias):
    """The slopes themselves (float32 in the backends, float64 in the spec): one number per head."""
    return m.alibi_slopes(num_heads, max_bias=max_bias)


def _slopes_case(convention, num_heads, max_bias):
    def make(rng, dtype):
        return (num_heads,), {"max_bias": max_bias}

    register(Case("alibi_bias", convention, f"slopes-{num_heads}-heads-max-bias-{max_bias:g}", make, _scaled,
                  fn=_slopes, dtypes=("float32",), modes=EAGER, out_dtype=_same_dtype,
                  description=f"alibi_slopes({num_heads}, max_bias={max_bias:g}): {num_heads} is not a power of two"))


_slopes_case("mpt-alibi", 40, 8.0)  # Baichuan-13B's 40 heads (llama.cpp: max_bias 8)
_slopes_case("ggml-alibi", 12, 16.0)
