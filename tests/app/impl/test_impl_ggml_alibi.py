"""The ggml built-in's ALiBi (posenc/impl/builtin/ggml_alibi.py): `ggml_soft_max_ext(a, mask, scale, max_bias)`
with llama.cpp's mask `-|p0 - p1|`, its bias read back from the softmax weights, against the float64 spec on
KV-cache positions at max_bias 8 and 4; the F16 mask (llama.cpp under flash attention) rounding distances past
2048, through `ggml_soft_max_ext` and through `ggml_flash_attn_ext` itself (its three CPU paths), named
`positions-rounded` by the judge; skips and errors; `posenc check --impl ggml --encoding alibi`."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import posenc_np
from posenc.adapters import NotSupported
from posenc.check.registry import all_cases
from posenc.check.run_impl import run_implementations
from posenc.impl.builtin import builtin_status, load_builtin
from posenc_np.testing import tolerance

if not builtin_status("ggml")[0]:
    pytest.skip("ggml-python is not installed", allow_module_level=True)

from posenc.impl.builtin import ggml_alibi  # noqa: E402  (after the skip: it loads ggml's library)

ROOT = pathlib.Path(__file__).resolve().parents[3]
HEADS = 12  # not a power of two: ggml's m1 slopes for heads 8..11
#: a decoding step deep in a cache: 4 queries against every key up to them (distances 0 .. 5003)
Q, K = np.arange(5000, 5004), np.arange(0, 5004)


def _tol(desired):
    """The judge's float32 tolerance, 8 ulp of the largest |bias|: the op forms `slope * mask` in float32 (half an
    ulp of it) and the read-back adds the float32 softmax's few-ulp error on weight ratios near 1."""
    return tolerance("float32", scale=float(np.abs(desired).max())).atol


@pytest.mark.parametrize("max_bias", [8.0, 4.0])
def test_bias_equals_the_spec_on_cache_positions(max_bias):
    got = ggml_alibi.alibi_bias(HEADS, Q, K, max_bias=max_bias, dtype="float64")
    want = posenc_np.alibi_bias(HEADS, Q, K, form="symmetric", max_bias=max_bias)
    assert got.shape == want.shape == (HEADS, Q.size, K.size)
    err = np.abs(got - want).max()
    assert err <= _tol(want), (max_bias, err, _tol(want))
    assert np.all(got[:, -1, -1] == 0.0)  # the query's own cell: mask 0, read back exactly


def _ggml_rule(heads, max_bias):
    """ggml ops.cpp L5375-5397 re-typed: float32 bases m0 = powf(2, -max_bias / n_log2), m1 = powf(2, -max_bias / 2 /
    n_log2) raised to the head's exponent in float64 (powf rounds that once more); and the exponents."""
    n_log2 = 2 ** int(np.floor(np.log2(heads)))
    m0, m1 = (float(np.float32(2.0 ** (-b / n_log2))) for b in (max_bias, max_bias / 2))
    h = np.arange(heads)
    exponent = np.where(h < n_log2, h + 1, 2 * (h - n_log2) + 1)
    return np.where(h < n_log2, m0, m1) ** exponent, exponent


@pytest.mark.parametrize("max_bias", [8.0, 4.0, 16.0])
@pytest.mark.parametrize("heads", [1, 5, 8, 12, 40, 96])
def test_slopes_are_ggml_rule_in_float32(heads, max_bias):
    """The probed slopes are ggml's float32 slopes (1 ulp: powf's rounding; the probe's read-back is below 1e-8
    relative), and Press's rule within the base's rounding raised to the exponent, `exponent / 2 + 1` ulp."""
    got = ggml_alibi.alibi_slopes(heads, max_bias=max_bias)
    assert got.dtype == np.float32
    rule, exponent = _ggml_rule(heads, max_bias)
    np.testing.assert_allclose(got, rule, rtol=2.0**-23, atol=0)
    spec = posenc_np.alibi_slopes(heads, max_bias=max_bias)
    assert np.all(np.abs(got / spec - 1) <= (exponent / 2 + 1) * 2.0**-23)


def test_leading_batch_axes_give_one_bias_per_row():
    left_pad = np.array([[0, 0, 0, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5, 6, 7]])
    got = ggml_alibi.alibi_bias(HEADS, left_pad, left_pad, dtype="float64")
    want = posenc_np.alibi_bias(HEADS, left_pad, left_pad)
    assert got.shape == (2, HEADS, 8, 8)
    assert np.abs(got - want).max() <= _tol(want)


def _f16_mask_paths():
    """The F16-mask functions and the inputs each runs on: `ggml_soft_max_ext`, and `ggml_flash_attn_ext`'s three CPU
    paths (ops.cpp L8994-9060: split KV for one query against 512+ keys, Q tiles of 64 queries, one chunk)."""
    return [pytest.param(ggml_alibi.alibi_bias_f16_mask, Q, K, id="soft_max"),
            pytest.param(ggml_alibi.alibi_bias_flash_attn, Q, K[::7], id="flash-attn-one-chunk"),
            pytest.param(ggml_alibi.alibi_bias_flash_attn, Q[-1:], K[::7], id="flash-attn-split-kv"),
            pytest.param(ggml_alibi.alibi_bias_flash_attn, np.arange(8000, 8064), np.arange(0, 8064, 128),
                         id="flash-attn-tiled")]


@pytest.mark.parametrize(("fn", "q", "k"), _f16_mask_paths())
def test_f16_mask_rounds_distances_past_2048_only(fn, q, k):
    f16 = fn(HEADS, q, k, dtype="float64")
    want = posenc_np.alibi_bias(HEADS, q, k)
    distance = np.abs(q[:, None] - k[None, :])
    rounded = -posenc_np.alibi_slopes(HEADS)[:, None, None] * distance.astype(np.float16).astype(np.float64)
    tol = _tol(want)
    assert np.abs(f16 - rounded).max() <= tol  # exactly the F16 mask's distances
    near = distance <= 2048  # float16 holds every integer up to 2048
    assert np.abs(f16 - want)[:, near].max() <= tol
    # past 2048 a distance is off by up to 1 (to 4096) or 2 (to 8192): slope 2^-0.5 times 2 at most here
    assert 1.0 < np.abs(f16 - want)[:, ~near].max() <= 2 * 2**-0.5 + tol


def test_f16_mask_is_named_positions_rounded_by_the_judge():
    cases = [c for c in all_cases() if c.encoding == "alibi_bias" and c.fn is None and c.convention == "ggml-alibi"
             and c.case_set in ("long", "max-bias-4-long", "max-bias-16-kv-offset")]
    assert len(cases) == 3
    records = run_implementations(cases, load_builtin("ggml"), dtypes=["float32"])
    verdicts = {(r.backend, r.case): (r.status, r.diagnosis) for r in records}
    assert verdicts == {
        ("ggml", "long"): ("pass", None), ("ggml", "max-bias-4-long"): ("pass", None),
        ("ggml", "max-bias-16-kv-offset"): ("pass", None),
        **{(f"ggml-{variant}", case): verdict for variant in ("f16-mask", "flash-attn") for case, verdict in (
            ("long", ("fail", "positions-rounded")), ("max-bias-4-long", ("fail", "positions-rounded")),
            ("max-bias-16-kv-offset", ("pass", None)))},  # distances below 32
    }, verdicts


def test_what_ggml_cannot_express_is_a_skip_and_bad_input_an_error():
    for form in ("causal", "bloom"):
        with pytest.raises(NotSupported, match="symmetric"):
            ggml_alibi.alibi_bias(HEADS, Q, K, form=form)
    with pytest.raises(NotSupported, match="integers"):
        ggml_alibi.alibi_bias(HEADS, Q + 0.5, K)
    with pytest.raises(NotSupported, match="int32"):
        ggml_alibi.alibi_bias(HEADS, np.array([2**31]), K)
    with pytest.raises(ValueError, match="max_bias"):
        ggml_alibi.alibi_bias(HEADS, Q, K, max_bias=0.0)
    with pytest.raises(ValueError, match="num_heads"):
        ggml_alibi.alibi_slopes(0)
    with pytest.raises(ValueError, match="q_positions"):
        ggml_alibi.alibi_bias(HEADS, np.array(3), K)
    # empty inputs return an empty bias without reaching ggml, which asserts on empty tensors (and aborts)
    assert ggml_alibi.alibi_bias(HEADS, Q[:0], K).shape == (HEADS, 0, K.size)
    assert ggml_alibi.alibi_bias(HEADS, np.zeros((0, 4), int), Q).shape == (0, HEADS, 4, Q.size)
    with pytest.raises(ValueError, match="soft_max_ext"):  # checked before ggml's GGML_ASSERT would abort
        ggml_alibi.soft_max_ext(np.zeros((1, 2, 3, 4)), np.zeros((1, 1, 2, 4)), max_bias=8.0, f16_mask=False)


def test_the_cli_runs_ggml_alibi(tmp_path):
    report = tmp_path / "report.json"
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    environ.pop("POSENC_IMPL", None)
    done = subprocess.run([sys.executable, "-m", "posenc", "check", "--impl", "ggml", "--encoding", "alibi",
                           "--json", str(report), "--quiet"], cwd=tmp_path, capture_output=True, text=True,
                          env=environ, timeout=600)
    records = json.loads(report.read_text())["records"]
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]  # the F16 mask's failures
    ran = [r for r in records if r["backend"] == "ggml" and r["status"] != "skip"]
    assert len(ran) >= 20 and all(r["status"] == "pass" for r in ran)
    failed = {(r["backend"], r["convention"], r["case"]): r["diagnosis"] for r in records
              if r["status"] != "pass" and r["status"] != "skip"}
    assert failed == {(b, c, s): "positions-rounded" for b in ("ggml-f16-mask", "ggml-flash-attn") for c, s in (
        ("alibi-symmetric", "long"), ("alibi-symmetric", "kv-offset-long"), ("ggml-alibi", "long"),
        ("ggml-alibi", "max-bias-4-long"))}, failed
