"""Each framework's fast attention path against the spec: torch SDPA (bias as a float mask), FlexAttention
score_mods (ALiBi, T5; eager and torch.compile fullgraph), `jax.nn.dot_product_attention`,
`keras.ops.dot_product_attention`.

These functions exist in one backend each, so they are tests here rather than registry cases; a test runs
when its backend is selected (`--backends`, default: every installed one) and is skipped, saying so,
otherwise. The reference `attention` of every backend is the registry's attention cases.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import posenc_np as pn
from helpers import assert_close
from posenc_np._dtypes import numpy_dtype
from posenc_np.attention import attention_tolerance

HEADS, DIM = 4, 8
FRAMEWORK = {"torch": "torch", "tf": "tensorflow", "jax": "jax"}


@pytest.fixture
def require(require_backend):
    """`require(name)`: the framework of backend `name` (see conftest's `require_backend`)."""
    def need(name):
        require_backend(name)
        return importlib.import_module(FRAMEWORK[name])

    return need


def _qkv(q_len, k_len, dtype="float64", batch=2, seed=0):
    rng = np.random.default_rng(seed)
    cast = numpy_dtype(dtype)
    return tuple(rng.normal(size=(batch, HEADS, n, DIM)).astype(cast) for n in (q_len, k_len, k_len))


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


PATH_BIASES = ["none-causal", "alibi-kv-offset", "t5"]


def _path_check(actual, bias_name, dtype="float32"):
    q, k, v, bias, kwargs = _bias_case(bias_name, dtype)
    desired, _ = pn.attention(q, k, v, bias=bias, **kwargs)
    tol_out, _ = attention_tolerance(q, k, v, bias=bias, scale=kwargs.get("scale"), dtype=dtype)
    assert_close(actual, desired, tol_out)


@pytest.mark.parametrize("bias_name", PATH_BIASES)
def test_torch_sdpa(bias_name, require):
    torch = require("torch")
    from posenc_torch.attention import sdpa_attention

    q, k, v, bias, kwargs = _bias_case(bias_name, "float32")
    t = lambda x: None if x is None else torch.from_numpy(x)  # noqa: E731
    _path_check(sdpa_attention(t(q), t(k), t(v), bias=t(bias), **kwargs).numpy(), bias_name)


def test_torch_sdpa_bfloat16(require):
    require("torch")
    from posenc.adapters import adapter
    from posenc_torch.attention import sdpa_attention

    q, k, v, bias, kwargs = _bias_case("alibi-kv-offset", "bfloat16")
    out = adapter("torch").call(lambda m, q, k, v, bias: sdpa_attention(q, k, v, bias=bias, **kwargs),
                                (q, k, v, bias), {})
    _path_check(out, "alibi-kv-offset", "bfloat16")


@pytest.mark.parametrize("form", ["symmetric", "causal", "bloom"])
def test_torch_flex_alibi_score_mod(form, require):
    """No bias tensor: ALiBi inside FlexAttention's score function, each form, KV-cache offset, causal."""
    torch = require("torch")
    from posenc_torch.attention import alibi_score_mod, flex_attention

    q, k, v = _qkv(4, 12, "float32")
    out = flex_attention(*(torch.from_numpy(x) for x in (q, k, v)),
                         score_mod=alibi_score_mod(HEADS, form=form, q_offset=8), causal=True)
    bias = pn.alibi_bias(HEADS, np.arange(8, 12), np.arange(12), form=form)
    desired, _ = pn.attention(q, k, v, bias=bias, causal=True)
    assert_close(out.numpy(), desired, attention_tolerance(q, k, v, bias=bias)[0])


@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
def test_torch_flex_t5_score_mod(bidirectional, require):
    torch = require("torch")
    from posenc_torch.attention import flex_attention, t5_score_mod

    q, k, v = _qkv(6, 40, "float32")  # distances up to 39: exact and log buckets
    table = np.random.default_rng(7).normal(size=(32, HEADS)).astype(np.float32)
    score_mod = t5_score_mod(torch.from_numpy(table), bidirectional=bidirectional, q_offset=20)
    out = flex_attention(*(torch.from_numpy(x) for x in (q, k, v)), score_mod=score_mod, scale=1.0)
    bias = pn.t5_bias(table, np.arange(20, 26), np.arange(40), bidirectional=bidirectional)
    desired, _ = pn.attention(q, k, v, bias=bias, scale=1.0)
    assert_close(out.numpy(), desired, attention_tolerance(q, k, v, bias=bias, scale=1.0)[0])


@pytest.mark.parametrize("bias_name", ["alibi-kv-offset", "t5"])
def test_torch_flex_compiled(bias_name, require):
    """The fused path: torch.compile(fullgraph=True) around flex_attention with a score_mod, no bias tensor."""
    torch = require("torch")
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
def test_jax_dot_product_attention(bias_name, mode, require):
    require("jax")
    import jax

    from posenc_jax.attention import dot_product_attention

    q, k, v, bias, kwargs = _bias_case(bias_name, "float32")
    fn = lambda q, k, v, bias: dot_product_attention(q, k, v, bias=bias, **kwargs)  # noqa: E731
    out = (jax.jit(fn) if mode == "jit" else fn)(q, k, v, bias)
    _path_check(np.asarray(out), bias_name)


@pytest.mark.parametrize("bias_name", PATH_BIASES)
def test_keras_dot_product_attention(bias_name, mode, require):
    tf = require("tf")
    from posenc_tf.attention import keras_attention

    q, k, v, bias, kwargs = _bias_case(bias_name, "float32")
    fn = lambda q, k, v, bias: keras_attention(q, k, v, bias=bias, **kwargs)  # noqa: E731
    args = [tf.constant(x) for x in (q, k, v)] + [None if bias is None else tf.constant(bias)]
    out = (tf.function(fn, jit_compile=True) if mode == "jit" else fn)(*args)
    _path_check(out.numpy(), bias_name)


def test_paths_bad_input(require):
    torch = require("torch")
    from posenc_torch.attention import flex_attention, sdpa_attention, t5_score_mod

    q = torch.zeros(1, 2, 5, 4)
    with pytest.raises(ValueError, match="causal=True"):
        sdpa_attention(q, q[..., :3, :], q[..., :3, :], causal=True)
    with pytest.raises(ValueError, match="table must be"):
        t5_score_mod(torch.zeros(16, 2))
    with pytest.raises(ValueError, match="flex_attention takes"):
        flex_attention(q[0, 0], q[0, 0], q[0, 0])
