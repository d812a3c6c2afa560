"""`posenc.formats.gguf_quant`: llama.cpp's converter's type rule, gguf-py's quantizers, and the error bounds.

References: the `gguf` package's own `quants.quantize`/`dequantize` (gguf-py 0.19, ggml's reference
quantizers) and llama.cpp's converter rule (conversion/base.py `prepare_tensors`, vendored in
llama-cpp-python 0.3.36): 1-D, `_norm.weight` and non-`.weight` tensors F32, a QuantError falls back to F16.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from posenc.formats import gguf_quant as gq  # noqa: E402

BLOCK_TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")


def test_type_rule_is_the_converters():
    assert gq.tensor_type("blk.0.attn_q.weight", (64, 64), "q8_0") == "Q8_0"
    assert gq.tensor_type("token_embd.weight", (300, 64), "q4_1") == "Q4_1"
    assert gq.tensor_type("blk.0.attn_norm.weight", (64,), "q8_0") == "F32"
    assert gq.tensor_type("blk.0.attn_q_norm.weight", (16,), "q8_0") == "F32"
    assert gq.tensor_type("blk.0.attn_q.bias", (64,), "q8_0") == "F32"
    assert gq.tensor_type("rope_freqs.weight", (8,), "f16") == "F32"
    assert gq.tensor_type("blk.0.ffn_down.weight", (64, 48), "q8_0") == "F16"  # 48 columns: not whole blocks
    with pytest.raises(gguf.QuantError):  # the fallback mirrors gguf-py refusing the shape
        gguf.quants.quantize(np.zeros((64, 48), np.float32), gguf.GGMLQuantizationType.Q8_0)
    assert gq.tensor_type("blk.0.ffn_down.weight", (64, 48), "bf16") == "BF16"
    with pytest.raises(ValueError, match="'q4_k'"):
        gq.outtype_of("q4_k")
    assert {k: gguf.LlamaFileType(v).name for k, v in gq.FILE_TYPE.items()}["q5_1"] == "MOSTLY_Q5_1"


@pytest.mark.parametrize("kind", BLOCK_TYPES + ("F16", "BF16"))
def test_rounding_matches_gguf_and_stays_in_its_bound(kind):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((48, 128)) * 0.05).astype(np.float32)
    x[0, :32], x[1, :32], x[2, 32:64] = 0.0, 3.0, np.linspace(-1, 2, 32)  # zero, constant and ramp blocks
    back = gq.rounded(x, kind)
    if kind in BLOCK_TYPES:
        qtype = getattr(gguf.GGMLQuantizationType, kind)
        np.testing.assert_array_equal(back, gguf.quants.dequantize(gguf.quants.quantize(x, qtype), qtype))
        # what the writer stores for these values gives them back unchanged
        np.testing.assert_array_equal(gq.rounded(back, kind), back)
    error = np.abs(back.astype(np.float64) - x)
    bound = gq.error_bound(x, kind)
    assert (error <= bound).all()
    assert (error / np.maximum(bound, 1e-300)).max() > 0.9  # the bound is attained, not a loose envelope
    e = gq.quantization_error("w", x, kind)
    assert e.max_abs_err == pytest.approx(error.max())
    if kind in BLOCK_TYPES:  # uniform rounding of Gaussian rows: RMS error close to step / sqrt(12)
        g = gq.quantization_error("g", (rng.standard_normal((64, 256)) * 0.05).astype(np.float32), kind)
        assert 0.8 < g.rms_err / (g.mean_step / math.sqrt(12)) < 1.2


def test_expected_logit_error_adds_in_quadrature():
    errors = [gq.TensorError("blk.0.attn_q.weight", "Q8_0", 0.0, 0.0, 0.003, 0.0),
              gq.TensorError("blk.0.ffn_down.weight", "Q8_0", 0.0, 0.0, 0.004, 0.0),
              gq.TensorError("token_embd.weight", "Q8_0", 0.0, 0.0, 0.002, 0.0)]
    tol, shares = gq.expected_logit_error(errors, logits_rms=2.0, samples=1000)
    rho_a = 3 / (127 * math.sqrt(12))
    total = 0.003 ** 2 + 0.004 ** 2 + 0.002 ** 2 + 2 * rho_a ** 2  # the embedding is read by rows: no activation term
    assert tol == pytest.approx((math.sqrt(2 * math.log(2000)) + 1) * 2.0 * math.sqrt(total))
    assert list(shares)[0] == "blk.0.ffn_down.weight" and sum(shares.values()) == pytest.approx(1.0)
