"""Reference attention against PyTorch's float64 `scaled_dot_product_attention` (torch 2.x) and HF
transformers' own `T5Attention` (5.x, models/t5/modeling_t5.py: unscaled logits + relative bias)."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from helpers import assert_close
from posenc_np._dtypes import numpy_dtype
from posenc_np.attention import attention_tolerance, causal_mask

HEADS, DIM = 4, 8


def _qkv(q_len, k_len, dtype="float64", batch=2, seed=0):
    rng = np.random.default_rng(seed)
    cast = numpy_dtype(dtype)
    return tuple(rng.normal(size=(batch, HEADS, n, DIM)).astype(cast) for n in (q_len, k_len, k_len))


@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("scale", [None, 1.0, 0.3])
def test_spec_matches_torch_sdpa_float64(with_bias, causal, scale):
    torch = pytest.importorskip("torch")
    q, k, v = _qkv(6, 6)
    bias = pn.alibi_bias(HEADS, np.arange(6), np.arange(6)) if with_bias else None
    out, _ = pn.attention(q, k, v, bias=bias, causal=causal, scale=scale)
    t = torch.from_numpy
    # square q/k: SDPA's top-left causal alignment equals the spec's bottom-right one
    mask = None if bias is None else t(bias)
    if causal and mask is not None:
        mask = mask.masked_fill(~t(causal_mask(6, 6)), float("-inf"))
    ref = torch.nn.functional.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=mask,
                                                           is_causal=causal and mask is None, scale=scale)
    assert_close(out, ref.numpy(), pn.tolerance("float64", scale=np.abs(v).max()))


@pytest.mark.parametrize("is_decoder", [False, True], ids=["encoder", "decoder"])
def test_t5_logits_unscaled_match_hf_t5_attention(is_decoder):
    """HF T5Attention with identity projections is `attention(q, k, v, bias=t5_bias, scale=1.0)`."""
    torch = pytest.importorskip("torch")
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    d_model = HEADS * DIM
    config = T5Config(num_heads=HEADS, d_model=d_model, d_kv=DIM, is_decoder=is_decoder, dropout_rate=0.0)
    layer = T5Attention(config, has_relative_attention_bias=True).eval()
    table = np.random.default_rng(3).normal(size=(32, HEADS)).astype(np.float32)
    with torch.no_grad():
        for linear in (layer.q, layer.k, layer.v, layer.o):
            linear.weight.copy_(torch.eye(d_model))
        layer.relative_attention_bias.weight.copy_(torch.from_numpy(table))
    hidden = np.random.default_rng(4).normal(size=(1, 7, d_model)).astype(np.float32)
    with torch.no_grad():
        hf = layer(torch.from_numpy(hidden))[0].numpy()
    heads = hidden.reshape(1, 7, HEADS, DIM).transpose(0, 2, 1, 3)
    bias = pn.t5_bias(table, np.arange(7), np.arange(7), bidirectional=not is_decoder)
    # HF's T5 decoder self-attention without a mask is not causal: the bias alone is unidirectional.
    out, _ = pn.attention(heads, heads, heads, bias=bias, scale=1.0)
    ours = out.transpose(0, 2, 1, 3).reshape(1, 7, d_model)
    tol_out, _ = attention_tolerance(heads, heads, heads, bias=bias, scale=1.0)
    assert_close(hf, ours, tol_out)
