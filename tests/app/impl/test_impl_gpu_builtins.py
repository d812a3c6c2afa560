"""The GPU-only built-ins (posenc/impl/builtin/flash_attn_alibi.py, transformer_engine_fused.py, xformers.py): on this CPU
machine the argument mappings they pass to the CUDA kernels, against the float64 spec as pure functions, and
that `posenc check` reports their cases as skips naming what is missing; on a CUDA machine (the tests marked
`cuda`) the real kernels through the registry's cases."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import posenc_np
from posenc.adapters import NotSupported
from posenc.check.cases_bias import HEADS, POSITIONS
from posenc.check.registry import all_cases
from posenc.check.run_impl import run_implementations
from posenc.impl import ImplementationUnavailable
from posenc.impl.builtin import builtin_status, flash_attn_alibi, load_builtin, transformer_engine_fused, xformers
from posenc.impl.builtin import transformer_engine as te_builtin
from posenc.impl.resolve import declared_names
from posenc_np.attention import causal_mask

ROOT = Path(__file__).resolve().parents[3]
#: scripts/install_flash_attn_cpu.sh's target: flash-attn's Python files without the CUDA extension
FLASH_ATTN_CPU = ROOT / ".flash-attn-cpu"
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available())")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the skip reasons of a machine without CUDA")


def softmax_masked(logits, mask):
    z = np.where(mask, logits, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


# --- flash-attn ALiBi: the mapping ---------------------------------------------------------------------

@pytest.mark.parametrize("case_set", ["short", "kv-offset"])
def test_flash_attn_documented_bias_is_the_symmetric_alibi_at_aligned_positions(case_set):
    q, k = POSITIONS[case_set]
    flash_attn_alibi.require_alignment(q, k)  # these are the index positions flash-attn's bias reads
    got = flash_attn_alibi.documented_bias(posenc_np.alibi_slopes(HEADS), len(q), len(k))
    # slopes are powers of two (2^-x) times small integer distances: both sides exact in float64
    np.testing.assert_array_equal(got, posenc_np.alibi_bias(HEADS, q, k, form="symmetric"))


@pytest.mark.parametrize("form", ["causal", "bloom", "symmetric"])
def test_flash_attn_causal_bias_is_softmax_equal_to_every_form(form):
    """Under the bottom-right causal mask, flash-attn's documented bias and the one its causal kernel adds
    (`+m j` on key indices, research families-2026-12 section 3.2) give the contract form's softmax."""
    q, k = POSITIONS["kv-offset"]
    slopes = posenc_np.alibi_slopes(HEADS)
    mask = causal_mask(len(q), len(k))
    want = softmax_masked(posenc_np.alibi_bias(HEADS, q, k, form=form), mask)
    documented = flash_attn_alibi.documented_bias(slopes, len(q), len(k))
    causal_kernel = slopes[:, None, None] * np.arange(len(k))[None, None, :] + np.zeros((1, len(q), 1))
    for got in (documented, causal_kernel):
        np.testing.assert_allclose(softmax_masked(got, mask), want, rtol=1e-12, atol=1e-15)  # float64 rounding


def test_flash_attn_alignment_accepts_cache_steps_per_row_and_refuses_other_positions():
    flash_attn_alibi.require_alignment(np.array([[5, 6], [17, 18]]), np.array([[0, 1, 2, 3, 4, 5, 6],
                                                                             [12, 13, 14, 15, 16, 17, 18]]))
    for name in ("long", "left-pad", "kv-offset-long"):  # strided keys, padded rows
        with pytest.raises(NotSupported, match="bottom-right"):
            flash_attn_alibi.require_alignment(*POSITIONS[name])
    with pytest.raises(NotSupported, match="bottom-right"):  # queries not the last keys
        flash_attn_alibi.require_alignment(np.arange(2, 6), np.arange(8))


def _flash_attn_files(monkeypatch):
    if not builtin_status("flash-attn")[0]:
        if not FLASH_ATTN_CPU.is_dir():
            pytest.skip("flash-attn is not installed (scripts/install_flash_attn_cpu.sh)")
        monkeypatch.syspath_prepend(str(FLASH_ATTN_CPU))
    flash_attn_alibi.get_alibi_slopes.cache_clear()


def test_flash_attn_get_alibi_slopes_are_press_slopes(monkeypatch):
    _flash_attn_files(monkeypatch)
    for heads in (1, 2, 3, 8, 12, 40, 64, 112):
        got = np.asarray(flash_attn_alibi.get_alibi_slopes()(heads))
        # `start * ratio**i`: ratio = 2^-x is rounded once (half an ulp), its i-th power carries i times that,
        # plus the product's and start's roundings; posenc's 2 ** (-8 (h + 1) / n) is one rounding
        np.testing.assert_allclose(got, posenc_np.alibi_slopes(heads), rtol=(heads + 3) * np.finfo(float).eps)


def test_flash_attn_bias_handle_is_for_attention_only(monkeypatch):
    _flash_attn_files(monkeypatch)
    q, k = POSITIONS["kv-offset"]
    handle = flash_attn_alibi.alibi_bias(HEADS, torch.from_numpy(q), torch.from_numpy(k), form="causal")
    assert handle.shape == (HEADS, len(q), len(k))
    with pytest.raises(NotSupported, match="only inside flash_attn_func"):
        handle - handle  # noqa: B018 - a raw-logit case would judge values flash-attn never exposes
    with pytest.raises(NotSupported, match="returns no bias tensor"):
        flash_attn_alibi.alibi_bias(HEADS, torch.from_numpy(q), torch.from_numpy(k), dtype="float16")


def reference_flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_func as its docstring states it, in float64 torch on (batch, seqlen, nheads, headdim): the
    bias `-slope * |i + k_len - q_len - j|` after the scale, the bottom-right causal mask, out in q's dtype."""
    qf, kf, vf = (t.double().transpose(1, 2) for t in (q, k, v))  # (b, h, s, d)
    q_len, k_len = qf.shape[-2], kf.shape[-2]
    logits = softmax_scale * qf @ kf.transpose(-1, -2)
    i, j = torch.arange(q_len)[:, None], torch.arange(k_len)[None, :]
    if alibi_slopes is not None:
        logits = logits - alibi_slopes.double()[:, None, None] * (i + k_len - q_len - j).abs()
    if causal:
        logits = logits.masked_fill(j > i + k_len - q_len, -float("inf"))
    return (torch.softmax(logits, -1) @ vf).transpose(1, 2).to(q.dtype)


@pytest.mark.parametrize("form", ["causal", "bloom", "symmetric"])
def test_flash_attn_alibi_attention_plumbing_against_the_spec(monkeypatch, form):
    """The adapter's `attention` (padding, identity values, transposes, slopes, scale) with flash_attn_func
    replaced by its documented semantics gives the spec's attention-causal output and weights."""
    _flash_attn_files(monkeypatch)
    q_pos, k_pos = POSITIONS["kv-offset"]
    rng = np.random.default_rng(3)
    q, k, v = (rng.normal(size=(2, HEADS, n, 8)).astype(np.float16) for n in (len(q_pos), len(k_pos), len(k_pos)))
    handle = flash_attn_alibi.alibi_bias(HEADS, torch.from_numpy(q_pos), torch.from_numpy(k_pos), form=form)
    stand_in = type(sys)("flash_attn")  # after the slopes are read from the installed files
    stand_in.flash_attn_func = reference_flash_attn_func
    monkeypatch.setitem(sys.modules, "flash_attn", stand_in)
    monkeypatch.setattr(flash_attn_alibi, "_require_kernel", lambda device: None)
    out, weights = flash_attn_alibi.attention(*(torch.from_numpy(t) for t in (q, k, v)), bias=handle, causal=True)
    want_out, want_weights = posenc_np.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                                                 bias=posenc_np.alibi_bias(HEADS, q_pos, k_pos, form=form),
                                                 causal=True)
    # float64 inside the stand-in: only the float16 rounding of its outputs (|values| < 4: 2e-3) remains
    np.testing.assert_allclose(out.double().numpy(), want_out, rtol=0, atol=4e-3)
    np.testing.assert_allclose(weights.double().numpy(), want_weights, rtol=0, atol=1e-3)  # weights <= 1
    with pytest.raises(NotSupported, match="float16 and bfloat16"):
        flash_attn_alibi.attention(*(torch.from_numpy(t.astype(np.float32)) for t in (q, k, v)), bias=handle,
                                   causal=True)


@no_cuda
def test_flash_attn_alibi_check_on_a_cpu_reports_skips_naming_cuda(tmp_path):
    """`posenc check --impl flash-attn-alibi` here: exit 0, no error, the attention cases skipped for want of
    CUDA, flash-attn's own slopes judged (they run without it)."""
    if not (builtin_status("flash-attn")[0] or FLASH_ATTN_CPU.is_dir()):
        pytest.skip("flash-attn is not installed (scripts/install_flash_attn_cpu.sh)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(FLASH_ATTN_CPU), str(ROOT),
                                                                    os.environ.get("PYTHONPATH")))))
    out = subprocess.run([sys.executable, "-m", "posenc", "check", "--impl", "flash-attn-alibi", "--encoding",
                          "alibi", "--jobs", "1", "-q", "--json", str(tmp_path / "check.json")], env=env, capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    records = json.loads((tmp_path / "check.json").read_text())["records"]
    statuses = {r["status"] for r in records}
    assert statuses <= {"pass", "skip"} and "pass" in statuses, statuses
    attention = [r for r in records if r["case"] == "attention-causal"]
    assert len(attention) == 3 * 3  # three conventions x the default dtypes float32, bfloat16, float16
    assert all(r["status"] == "skip" and "no CUDA device" in r["message"] for r in attention)


# --- Transformer Engine fused RoPE: the mapping --------------------------------------------------------

def _spy_unfused(monkeypatch):
    """TE's rope module with `apply_rotary_pos_emb` recording its arguments and running the unfused path."""
    module = te_builtin.rope_module()
    real, calls = module.apply_rotary_pos_emb, []

    def spy(t, freqs, **kwargs):
        calls.append(dict(kwargs, freqs=freqs, t=t))
        return real(t, freqs, **dict(kwargs, fused=False))

    monkeypatch.setattr(module, "apply_rotary_pos_emb", spy)
    return calls


@pytest.mark.parametrize("tensor_format", ["bshd", "thd"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_te_fused_mapping_gives_the_spec_through_the_unfused_path(monkeypatch, tensor_format, layout):
    """The arguments the fused built-in passes (fused=True, freqs, start_positions, cu_seqlens), run through
    TE's unfused path here, rotate as the spec does; what the fused kernel does with them needs CUDA."""
    if not builtin_status("transformer-engine")[0]:
        pytest.skip("transformer-engine is not installed")
    calls = _spy_unfused(monkeypatch)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 6, 16))
    positions = np.array([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12]])[:, None, :]  # rows from 0 and from 7
    got = te_builtin.make_apply_rope(tensor_format, fused=True)(torch.from_numpy(x), torch.from_numpy(positions),
                                                                layout=layout)
    want = posenc_np.apply_rope(x, positions, layout=layout)
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-12)  # float64 in and out: rounding only
    (call,) = calls
    assert call["fused"] is True and call["tensor_format"] == tensor_format
    assert call["freqs"].dtype == torch.float64 and call["freqs"].shape == (te_builtin.TABLE_ROWS, 1, 1, 16)
    starts = call["start_positions"].tolist()
    assert starts == ([0, 7] if tensor_format == "bshd" else [0, 0, 0, 7, 7, 7])  # heads kept / one row each


def test_te_fused_thd_cp_mapping_passes_fused(monkeypatch):
    if not builtin_status("transformer-engine")[0]:
        pytest.skip("transformer-engine is not installed")
    calls = _spy_unfused(monkeypatch)
    x = np.random.default_rng(1).normal(size=(1, 4, 8))
    positions = np.array([[2, 3, 4, 5]])  # rank 1 of a zigzag shard over cp_size 2: chunks 1 and 2 of 0..7
    got = transformer_engine_fused.fused_apply_rope_thd_cp().__wrapped__(torch.from_numpy(x),
                                                                          torch.from_numpy(positions))
    np.testing.assert_allclose(got.numpy(), posenc_np.apply_rope(x, positions), rtol=0, atol=1e-12)
    (call,) = calls
    assert (call["fused"], call["cp_size"], call["cp_rank"]) == (True, 2, 1)


@no_cuda
def test_te_fused_cases_on_a_cpu_are_skips_naming_cuda():
    if not builtin_status("transformer-engine-fused")[0]:
        pytest.skip("transformer-engine is not installed")
    cases = [c for c in all_cases() if c.family == "rope" and c.convention == "hf-llama"]
    records = run_implementations(cases, load_builtin("transformer-engine-fused"), dtypes=["float32"])
    assert records and all(r.status == "skip" for r in records)
    ran = [r for r in records if "declares" not in r.message and "does not accept" not in r.message
           and "outside" not in r.message and "training" not in r.message]
    assert ran and all("no CUDA device" in r.message for r in ran), {r.message[:80] for r in ran}


# --- xformers rope_padded: the mapping ---------------------------------------------------------------------

def rope_padded_model(rows, plan, *, theta, adjacents):
    """float64 NumPy transcription of `_rope_padded_kernel` (xformers/ops/_triton/rope_padded_kernels.py at
    01aedc3) on packed rows `[tokens, dim]`: `seq_pos * theta ** (-2j / dim)`, pairs per `adjacents`."""
    dim = rows.shape[-1]
    seq_pos = xformers.kernel_positions(plan).astype(np.float64)[:, None]
    freqs = seq_pos * theta ** (np.arange(dim // 2) * 2.0 / -dim)
    re_cols = np.arange(dim // 2) * 2 if adjacents else np.arange(dim // 2)
    im_cols = re_cols + 1 if adjacents else re_cols + dim // 2
    out = rows.copy()
    re, im = rows[:, re_cols], rows[:, im_cols]
    out[:, re_cols] = re * np.cos(freqs) - im * np.sin(freqs)
    out[:, im_cols] = im * np.cos(freqs) + re * np.sin(freqs)
    return out


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_xformers_padded_layout_puts_each_row_at_its_positions(layout):
    """The mask arguments the adapter builds make the kernel's `seq_pos` the case's positions, and the kernel's
    formula with `theta=base`, `adjacents=(layout == "interleaved")` is the spec's rotation."""
    offsets, seq = np.array([0, 7, 4090, 3]), 5
    plan = xformers.padded_layout(offsets, seq)
    assert plan["kv_padding"] == 4095 and plan["q_seqlen"] == [5] * 4
    positions = offsets[:, None] + np.arange(seq)
    np.testing.assert_array_equal(xformers.kernel_positions(plan), positions.reshape(-1))
    x = np.random.default_rng(2).normal(size=(4, seq, 16))
    got = rope_padded_model(x.reshape(-1, 16), plan, theta=500000.0, adjacents=layout == "interleaved")
    want = posenc_np.apply_rope(x, positions, base=500000.0, layout=layout).reshape(-1, 16)
    # angles up to 4094 rad formed two ways in float64 (pow here, posenc's inv_freq): ~1e-12 apart; a swapped
    # pair layout or base is O(1) off
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)


def test_xformers_padded_layout_refuses_negative_and_huge_positions():
    with pytest.raises(NotSupported, match="from 0"):
        xformers.padded_layout([-1, 0], 4)
    with pytest.raises(NotSupported, match="KV cache"):
        xformers.padded_layout([xformers.MAX_CACHE_ROWS], 4)


def _stand_in_xformers(monkeypatch):
    """`xformers.ops.rope_padded` and its mask class as rope_padded.py / rope_padded_kernels.py state them
    (float64 NumPy, `rope_padded_model`): queries rotated into `out_q`, keys into `cache_k` at `seqstart_k[b] +
    seq_pos`, values into `cache_v`."""
    class PaddedKeysMask:
        @classmethod
        def from_seqlens(cls, q_seqlen, kv_padding, kv_seqlen, causal_diagonal=None):
            mask = cls()
            mask.layout = {"q_seqlen": list(q_seqlen), "kv_padding": kv_padding, "kv_seqlen": list(kv_seqlen)}
            return mask

    def rope_padded(xq, xk, xv, cache_k, cache_v, attn_bias, *, theta=10000.0, out_q=None, adjacents=True,
                    internal_dtype=""):
        plan, dim = attn_bias.layout, xq.shape[-1]
        rotate = functools.partial(rope_padded_model, plan=plan, theta=theta, adjacents=adjacents)
        out_q = torch.from_numpy(rotate(xq[0, :, 0].double().numpy())).to(xq.dtype).reshape(xq.shape)
        starts = np.repeat(np.arange(len(plan["q_seqlen"])) * plan["kv_padding"], plan["q_seqlen"])
        slots = torch.from_numpy(starts + xformers.kernel_positions(plan))
        cache_k[0, slots, 0] = torch.from_numpy(rotate(xk[0, :, 0].double().numpy())).to(cache_k.dtype)
        cache_v[0, slots] = xv[0]
        assert dim == cache_k.shape[-1]
        return out_q

    modules = {name: type(sys)(name) for name in ("xformers", "xformers.ops", "xformers.ops.fmha",
                                                  "xformers.ops.fmha.attn_bias")}
    modules["xformers.ops"].rope_padded = rope_padded
    modules["xformers.ops.fmha.attn_bias"].BlockDiagonalCausalWithOffsetPaddedKeysMask = PaddedKeysMask
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(xformers, "_require_kernel", lambda device: None)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("cache_k", [False, True])
def test_xformers_apply_rope_plumbing_against_the_spec(monkeypatch, layout, cache_k):
    """The adapter's packing of rows, the mask it builds and the cache rows it reads back, with rope_padded
    replaced by its stated semantics, give the spec's rotation for per-row offsets."""
    _stand_in_xformers(monkeypatch)
    x = np.random.default_rng(4).normal(size=(2, 3, 5, 16))  # [batch, heads, seq, dim]
    positions = (np.array([[0], [40]]) + np.arange(5))[:, None, :]  # rows from 0 and from 40
    got = xformers.make_apply_rope(cache_k=cache_k)(torch.from_numpy(x), torch.from_numpy(positions), layout=layout,
                                                    base=10000.0)
    # float64 throughout: angles up to 44 rad formed two ways, ~1e-14 apart
    np.testing.assert_allclose(got.numpy(), posenc_np.apply_rope(x, positions, layout=layout), rtol=0, atol=1e-12)


@no_cuda
def test_xformers_without_cuda_is_unavailable_or_skips_naming_what_is_missing():
    x, positions = torch.zeros(1, 2, 4, 16), torch.arange(4)
    for apply_rope in (xformers.make_apply_rope(), xformers.make_apply_rope(cache_k=True)):
        with pytest.raises(NotSupported, match="no CUDA device"):
            apply_rope(x, positions)
    if not builtin_status("xformers")[0]:  # `posenc check --impl xformers` is exit 2 with this message
        with pytest.raises(ImplementationUnavailable, match="xformers is not installed"):
            declared_names("xformers")


# --- the real kernels, where a CUDA device is lent -----------------------------------------------------

@cuda
def test_flash_attn_alibi_kernel_passes_the_attention_cases(monkeypatch):
    monkeypatch.setenv("POSENC_DEVICE", "cuda")
    if flash_attn_alibi.kernel_refusal():
        pytest.skip(flash_attn_alibi.kernel_refusal())
    cases = [c for c in all_cases() if c.family == "alibi" and c.case_set == "attention-causal"]
    records = run_implementations(cases, load_builtin("flash-attn-alibi"), dtypes=["float16", "bfloat16"])
    assert len(records) == 6 and all(r.status == "pass" for r in records), [(r.convention, r.dtype, r.status,
                                                                            r.message) for r in records]


@cuda
def test_te_fused_kernel_passes_hf_llama(monkeypatch):
    monkeypatch.setenv("POSENC_DEVICE", "cuda")
    if transformer_engine_fused.kernel_refusal():
        pytest.skip(transformer_engine_fused.kernel_refusal())
    cases = [c for c in all_cases() if c.family == "rope" and c.convention == "hf-llama" and not c.training]
    records = run_implementations(cases, load_builtin("transformer-engine-fused"), dtypes=["float32", "bfloat16"])
    assert not [r for r in records if r.status in ("fail", "error")], [(r.backend, r.case, r.dtype, r.message)
                                                                       for r in records if r.status != "pass"][:8]
    assert sum(r.status == "pass" for r in records) >= 10


@cuda
def test_xformers_rope_padded_passes_hf_llama_and_meta_llama(monkeypatch):
    monkeypatch.setenv("POSENC_DEVICE", "cuda")
    if xformers.kernel_refusal():
        pytest.skip(xformers.kernel_refusal())
    cases = [c for c in all_cases() if c.family == "rope" and c.convention in ("hf-llama", "meta-llama")
             and not c.training]
    records = run_implementations(cases, load_builtin("xformers"), dtypes=["float32", "float16"])
    assert not [r for r in records if r.status in ("fail", "error")], [(r.backend, r.case, r.dtype, r.message)
                                                                       for r in records if r.status != "pass"][:8]
    assert sum(r.status == "pass" for r in records) >= 10
