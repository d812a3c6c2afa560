"""Reference attention: spec against PyTorch's float64 `scaled_dot_product_attention` and HF's T5
attention (unscaled logits + bias); backends' `attention` and each framework's fast path against the spec:
torch SDPA (bias as float mask), FlexAttention score_mods (ALiBi, T5), `jax.nn.dot_product_attention`,
`keras.ops.dot_product_attention`."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from posenc_np._dtypes import numpy_dtype
from posenc_np.attention import attention_tolerance, causal_mask
from posenc_np.testing import compare

HEADS, DIM = 4, 8


def _assert_close(actual, desired, tol):
    result = compare(actual, desired, tol)
    assert result.passed, f"max abs err {result.max_abs_err:.3g} at {result.worst_index} > {tol}: {result.message}"


def _qkv(q_len, k_len, dtype="float64", batch=2, seed=0):
    rng = np.random.default_rng(seed)
    cast = numpy_dtype(dtype)
    return tuple(rng.normal(size=(batch, HEADS, n, DIM)).astype(cast) for n in (q_len, k_len, k_len))


# --- spec -------------------------------------------------------------------------------------------

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
    _assert_close(out, ref.numpy(), pn.tolerance("float64", scale=np.abs(v).max()))


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
    _assert_close(hf, ours, tol_out)


def test_causal_mask_bottom_right_and_exact_zeros():
    q, k, v = _qkv(3, 7)
    _, weights = pn.attention(q, k, v, causal=True)
    allowed = np.arange(7)[None, :] <= np.arange(3)[:, None] + 4
    assert np.all(weights[..., ~allowed] == 0.0)
    assert np.all(weights[..., allowed] > 0.0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=0, atol=1e-15)
    # the last query sees every key: a one-token decoding step needs no offset
    _, step = pn.attention(q[..., -1:, :], k, v, causal=True)
    assert np.all(step > 0)


def test_bias_broadcasts_without_batch_copy():
    q, k, v = _qkv(5, 5, batch=3)
    bias = pn.alibi_bias(HEADS, np.arange(5), np.arange(5))  # [heads, q, k]
    out, weights = pn.attention(q, k, v, bias=bias)
    for b in range(3):
        one, _ = pn.attention(q[b], k[b], v[b], bias=bias)
        np.testing.assert_array_equal(out[b], one)
    assert weights.shape == (3, HEADS, 5, 5)


def test_dtype_follows_q():
    q, k, v = _qkv(4, 4, "bfloat16")
    out, weights = pn.attention(q, k, v)
    assert out.dtype == numpy_dtype("bfloat16") and weights.dtype == numpy_dtype("bfloat16")


@pytest.mark.parametrize("call, error, match", [
    (lambda q, k, v: pn.attention(q, k, v[..., :3, :]), ValueError, "same sequence length"),
    (lambda q, k, v: pn.attention(q, k[..., :4], v), ValueError, "same last dim"),
    (lambda q, k, v: pn.attention(q, k[..., :2, :], v[..., :2, :], causal=True), ValueError, "causal=True"),
    (lambda q, k, v: pn.attention(q, k, v, bias=np.zeros((3, 5, 5))), ValueError, "bias"),
    (lambda q, k, v: pn.attention(q, k, v, scale=float("nan")), ValueError, "scale"),
    (lambda q, k, v: pn.attention(q, k, v, causal=1), TypeError, "causal"),
])
def test_bad_input(call, error, match):
    q, k, v = _qkv(5, 5)
    with pytest.raises(error, match=match):
        call(q, k, v)


# --- backends: the reference `attention` with each bias -----------------------------------------------

def _bias_case(name, dtype):
    """(q, k, v, bias, kwargs) for one bias; the bias is in `dtype` as a model would hold it."""
    if name == "alibi-kv-offset":
        q, k, v = _qkv(4, 12, dtype)
        bias = pn.alibi_bias(HEADS, np.arange(8, 12), np.arange(12), form="causal", dtype=dtype)
        return q, k, v, bias, {"causal": True}
    if name == "t5":
        q, k, v = _qkv(6, 6, dtype)
        table = np.random.default_rng(5).normal(size=(32, HEADS)).astype(numpy_dtype(dtype))
        return q, k, v, pn.t5_bias(table, np.arange(6), np.arange(6)), {"scale": 1.0}
    if name == "shaw":
        q, k, v = _qkv(5, 5, dtype)
        table = np.random.default_rng(6).normal(size=(5, DIM))
        rel = pn.relative_embeddings(table, np.arange(5), np.arange(5), max_distance=2)
        bias = (np.einsum("bhqd,qkd->bhqk", q.astype(np.float64), rel) / np.sqrt(DIM)).astype(numpy_dtype(dtype))
        return q, k, v, bias, {}
    q, k, v = _qkv(5, 5, dtype)
    return q, k, v, None, {"causal": True}


BIASES = ["none-causal", "alibi-kv-offset", "t5", "shaw"]


@pytest.mark.parametrize("bias_name", BIASES)
def test_backend_attention(backend, dtype, mode, bias_name, jit_cache):
    if mode == "jit" and backend.name == "torch" and (dtype != "float32" or bias_name != "alibi-kv-offset"):
        pytest.skip("torch.compile budget: torch jit runs float32 on the representative case only")
    q, k, v, bias, kwargs = _bias_case(bias_name, dtype)
    args = (q, k, v) if bias is None else (q, k, v, bias)
    fn = lambda m, q, k, v, bias=None, **kw: m.attention(q, k, v, bias=bias, **kw)  # noqa: E731
    out, weights = backend.call(fn, args, kwargs, mode=mode, cache=jit_cache, key=("attention", bias_name))
    desired_out, desired_weights = pn.attention(q, k, v, bias=bias, **kwargs)
    tol_out, tol_weights = attention_tolerance(q, k, v, bias=bias, scale=kwargs.get("scale"), dtype=dtype)
    assert out.dtype == numpy_dtype(dtype)
    _assert_close(out, desired_out, tol_out)
    _assert_close(weights, desired_weights, tol_weights)
    if kwargs.get("causal"):
        mask = causal_mask(q.shape[-2], k.shape[-2])
        assert np.all(weights[..., ~mask] == 0)


# --- fast paths -------------------------------------------------------------------------------------

PATH_BIASES = ["none-causal", "alibi-kv-offset", "t5"]


def _path_check(actual, bias_name, dtype="float32"):
    q, k, v, bias, kwargs = _bias_case(bias_name, dtype)
    desired, _ = pn.attention(q, k, v, bias=bias, **kwargs)
    tol_out, _ = attention_tolerance(q, k, v, bias=bias, scale=kwargs.get("scale"), dtype=dtype)
    _assert_close(actual, desired, tol_out)


@pytest.mark.parametrize("bias_name", PATH_BIASES)
def test_torch_sdpa(bias_name):
    torch = pytest.importorskip("torch")
    from posenc_torch.attention import sdpa_attention

    q, k, v, bias, kwargs = _bias_case(bias_name, "float32")
    t = lambda x: None if x is None else torch.from_numpy(x)  # noqa: E731
    _path_check(sdpa_attention(t(q), t(k), t(v), bias=t(bias), **kwargs).numpy(), bias_name)


def test_torch_sdpa_bfloat16():
    pytest.importorskip("torch")
    from posenc.adapters import adapter
    from posenc_torch.attention import sdpa_attention

    q, k, v, bias, kwargs = _bias_case("alibi-kv-offset", "bfloat16")
    out = adapter("torch").call(lambda m, q, k, v, bias: sdpa_attention(q, k, v, bias=bias, **kwargs),
                                (q, k, v, bias), {})
    _path_check(out, "alibi-kv-offset", "bfloat16")


@pytest.mark.parametrize("form", ["symmetric", "causal", "bloom"])
def test_torch_flex_alibi_score_mod(form):
    """No bias tensor: ALiBi inside FlexAttention's score function, each form, KV-cache offset, causal."""
    torch = pytest.importorskip("torch")
    from posenc_torch.attention import alibi_score_mod, flex_attention

    q, k, v = _qkv(4, 12, "float32")
    out = flex_attention(*(torch.from_numpy(x) for x in (q, k, v)),
                         score_mod=alibi_score_mod(HEADS, form=form, q_offset=8), causal=True)
    bias = pn.alibi_bias(HEADS, np.arange(8, 12), np.arange(12), form=form)
    desired, _ = pn.attention(q, k, v, bias=bias, causal=True)
    _assert_close(out.numpy(), desired, attention_tolerance(q, k, v, bias=bias)[0])


@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
def test_torch_flex_t5_score_mod(bidirectional):
    torch = pytest.importorskip("torch")
    from posenc_torch.attention import flex_attention, t5_score_mod

    q, k, v = _qkv(6, 40, "float32")  # distances up to 39: exact and log buckets
    table = np.random.default_rng(7).normal(size=(32, HEADS)).astype(np.float32)
    score_mod = t5_score_mod(torch.from_numpy(table), bidirectional=bidirectional, q_offset=20)
    out = flex_attention(*(torch.from_numpy(x) for x in (q, k, v)), score_mod=score_mod, scale=1.0)
    bias = pn.t5_bias(table, np.arange(20, 26), np.arange(40), bidirectional=bidirectional)
    desired, _ = pn.attention(q, k, v, bias=bias, scale=1.0)
    _assert_close(out.numpy(), desired, attention_tolerance(q, k, v, bias=bias, scale=1.0)[0])


@pytest.mark.parametrize("bias_name", ["alibi-kv-offset", "t5"])
def test_torch_flex_compiled(bias_name):
    """The fused path: torch.compile(fullgraph=True) around flex_attention with a score_mod, no bias tensor."""
    torch = pytest.importorskip("torch")
    from posenc_torch.attention import alibi_score_mod, flex_attention, t5_score_mod

    q, k, v, _, kwargs = _bias_case(bias_name, "float32")
    if bias_name == "t5":
        table = np.random.default_rng(5).normal(size=(32, HEADS)).astype(np.float32)  # _bias_case's table
        score_mod = t5_score_mod(torch.from_numpy(table))
    else:
        score_mod = alibi_score_mod(HEADS, form="causal", q_offset=8)
    compiled = torch.compile(lambda q, k, v: flex_attention(q, k, v, score_mod=score_mod, **kwargs), fullgraph=True)
    out = compiled(*(torch.from_numpy(x) for x in (q, k, v)))
    _path_check(out.numpy(), bias_name)


@pytest.mark.parametrize("bias_name", PATH_BIASES)
def test_jax_dot_product_attention(bias_name, mode):
    pytest.importorskip("jax")
    import jax

    from posenc_jax.attention import dot_product_attention

    q, k, v, bias, kwargs = _bias_case(bias_name, "float32")
    fn = lambda q, k, v, bias: dot_product_attention(q, k, v, bias=bias, **kwargs)  # noqa: E731
    out = (jax.jit(fn) if mode == "jit" else fn)(q, k, v, bias)
    _path_check(np.asarray(out), bias_name)


@pytest.mark.parametrize("bias_name", PATH_BIASES)
def test_keras_dot_product_attention(bias_name, mode):
    tf = pytest.importorskip("tensorflow")
    from posenc_tf.attention import keras_attention

    q, k, v, bias, kwargs = _bias_case(bias_name, "float32")
    fn = lambda q, k, v, bias: keras_attention(q, k, v, bias=bias, **kwargs)  # noqa: E731
    args = [tf.constant(x) for x in (q, k, v)] + [None if bias is None else tf.constant(bias)]
    out = (tf.function(fn, jit_compile=True) if mode == "jit" else fn)(*args)
    _path_check(out.numpy(), bias_name)


def test_paths_bad_input():
    torch = pytest.importorskip("torch")
    from posenc_torch.attention import flex_attention, sdpa_attention, t5_score_mod

    q = torch.zeros(1, 2, 5, 4)
    with pytest.raises(ValueError, match="causal=True"):
        sdpa_attention(q, q[..., :3, :], q[..., :3, :], causal=True)
    with pytest.raises(ValueError, match="table must be"):
        t5_score_mod(torch.zeros(16, 2))
    with pytest.raises(ValueError, match="flex_attention takes"):
        flex_attention(q[0, 0], q[0, 0], q[0, 0])
