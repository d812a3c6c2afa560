"""`posenc check --impl` against mock implementations that wrap the float64 spec with one planted mismatch
each: every mismatch of the contract's list must fail and be named by the diagnosis; an honest float32
implementation passes as angles="float32" and fails (angle-precision) as "float64"; the table class's
rounding allowance holds transformers' bfloat16 application and the worst case of its five roundings, and
not the worst case of six; refusing in the edge set is correct, unrotated or non-finite rows are not.
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np
from posenc.check.registry import all_cases
from posenc.check.run_impl import run_implementations
from posenc.impl import Implementation
from posenc.impl.diagnosis import DIAGNOSES
from posenc.impl.precision import UNIT_ROUNDOFF, spec_rotation
from posenc_np.rope import resolve_rotary_dim, rope_plan

CASES = {c.id: c for c in all_cases()}


def _records(impl, case_id, dtypes=("float32",)):
    return run_implementations([CASES[case_id]], [impl], dtypes=list(dtypes))


def _mock(name, fn, **declared):
    return Implementation(f"mock-{name}", "numpy", {"apply_rope": fn}, version="0", **declared)


def _spec(x, positions, **kw):
    return posenc_np.apply_rope(np.asarray(x, np.float64), positions, **kw).astype(np.asarray(x).dtype)


def _other_layout(x, p, *, layout="half", **kw):
    return _spec(x, p, layout="interleaved" if layout == "half" else "half", **kw)


def _shifted(x, p, **kw):
    return _spec(x, np.asarray(p) + 1, **kw)


def _default_base(x, p, *, base=10000.0, **kw):
    return _spec(x, p, **kw)


def _scaling_dropped(x, p, *, scaling=None, **kw):
    return _spec(x, p, **kw)


def _factor_dropped(x, p, **kw):
    out = posenc_np.apply_rope(np.asarray(x, np.float64), p, **kw)
    r = resolve_rotary_dim(np.shape(x)[-1], kw.get("rotary_dim"), kw.get("rotary_pct"))
    out[..., :r] /= rope_plan(r, scaling=kw.get("scaling")).attention_scale
    return out.astype(np.asarray(x).dtype)


def _always_long(x, p, *, scaling, **kw):
    # mlx-lm's SuScaledRoPE: the long factors at every length, the short ones never read
    return _spec(x, p, scaling={**scaling, "rope_type": "mlx-longrope"}, **kw)


def _always_long_half(x, p, *, scaling, layout="half", **kw):  # SuScaledRoPE also drops `traditional`
    return _always_long(x, p, scaling=scaling, **kw)


def _always_short(x, p, *, scaling, **kw):
    return _spec(x, p, scaling={**scaling, "long_factor": scaling["short_factor"]}, **kw)


#: the pairs ggml's IMROPE reads from its 4th stream (research kernels-and-schemes B.3): pair j with
#: j % 3 == a and j >= 3 x section[a]; [24, 20, 20] over 64 pairs: 61 and 62; [2, 3, 3] over 8 pairs: 6
_FOURTH_STREAM_PAIRS = {(24, 20, 20): [61, 62], (2, 3, 3): [6]}


def _fourth_stream(x, p, **kw):
    # those pairs keep their input (times the attention factor): llama.cpp sets the 4th stream to 0 for text
    out, x64 = _spec(x, p, **kw).astype(np.float64), np.asarray(x, np.float64)
    rot = spec_rotation(np.shape(x), p, kw)
    pairs = _FOURTH_STREAM_PAIRS[tuple(kw["mrope_section"])]
    for channels in (rot.first[pairs], rot.second[pairs]):
        out[..., channels] = rot.attention_scale * x64[..., channels]
    return out.astype(np.asarray(x).dtype)


def _proportional(x, p, *, base=10000.0, **kw):
    r = resolve_rotary_dim(np.shape(x)[-1], kw.get("rotary_dim"), kw.get("rotary_pct"))
    return _spec(x, p, base=base ** (r / np.shape(x)[-1]), **kw)


def _first_axis(x, p, **kw):
    p = np.asarray(p)
    return _spec(x, np.broadcast_to(p[:1], p.shape).copy(), **kw)


def _sections_flipped(x, p, *, mrope_interleaved=False, **kw):
    return _spec(x, p, mrope_interleaved=not mrope_interleaved, **kw)


def _backwards(x, p, **kw):
    rot = spec_rotation(np.shape(x), p, kw)
    x64 = np.asarray(x, np.float64)
    out = x64.copy()
    a, b = x64[..., rot.first], x64[..., rot.second]
    out[..., rot.first], out[..., rot.second] = a * rot.c + b * rot.d, -a * rot.d + b * rot.c
    return out.astype(np.asarray(x).dtype)


def _noisy(x, p, **kw):
    return _spec(x, p, **kw) + 0.01 * np.sign(np.asarray(x))


def _table_rows(kind, rows=4096):
    """A kernel with a `rows`-row table that returns rows past it unrotated (flash-attn's Triton rotary with
    tensor offsets), non-finite (vLLM's CPU kernel), or raises (ONNX Runtime)."""
    def apply_rope(x, p, **kw):
        out = _spec(x, p, **kw)
        past = np.broadcast_to(np.asarray(p) >= rows, np.shape(x)[:-1])
        if kind == "raise" and past.any():
            raise IndexError(f"position {int(np.max(p))} is past the table of {rows} rows")
        if kind == "wrap":  # a gather that indexes from the end for negative positions (Python, torch)
            return _spec(x, np.mod(p, rows), **kw)
        if kind == "garbage":  # an unchecked gather: finite values from whatever memory lies outside
            outside = past | np.broadcast_to(np.asarray(p) < 0, past.shape)
            out[outside] = np.random.default_rng(0).normal(size=out[outside].shape) * 1e3
            return out
        out[past] = np.asarray(x)[past] if kind == "unrotated" else np.nan
        return out
    return apply_rope


PLANTED = [  # (diagnosis, mock, case)
    ("layout", _other_layout, "rope/hf-llama/kv-offset"),
    ("layout", _other_layout, "rope/gptj/per-row"),
    ("offset", _shifted, "rope/hf-llama/kv-offset"),
    ("base", _default_base, "rope/qwen2-vl/short"),
    ("scaling-ignored", _scaling_dropped, "rope/half-linear/long"),
    ("scaling-ignored", _scaling_dropped, "rope/interleaved-llama3/long"),
    ("attention-factor", _factor_dropped, "rope/half-yarn/long"),
    ("longrope-factors", _always_long, "rope/half-longrope/short"),
    ("longrope-factors", _always_long_half, "rope/interleaved-longrope/per-row"),
    ("partial-vs-proportional", _proportional, "rope/gpt-neox/kv-offset"),
    ("mrope-axes", _first_axis, "rope/qwen2-vl/text-image-video"),
    ("mrope-axes", _first_axis, "rope/qwen3-vl/text-image-video"),
    ("mrope-layout", _sections_flipped, "rope/qwen3-vl/text-image-video"),
    ("imrope-fourth-stream", _fourth_stream, "rope/qwen3-vl/text-image-video"),
    ("imrope-fourth-stream", _fourth_stream, "rope/mrope-interleaved-longrope/short"),
    ("mrope-layout", _sections_flipped, "rope/mrope-contiguous-yarn/long"),
    ("direction", _backwards, "rope/hf-llama/kv-offset"),
    ("unrotated", _table_rows("unrotated"), "rope/edge/offset-past-table"),
    ("unrotated", _table_rows("unrotated"), "rope/edge/decode-past-table"),
    ("non-finite", _table_rows("nan"), "rope/edge/past-table"),
    ("wrapped", _table_rows("wrap"), "rope/edge/negative-positions"),
    ("wrapped", _table_rows("wrap"), "rope/edge/offset-past-table-interleaved"),
    ("out-of-table", _table_rows("garbage"), "rope/edge/past-table"),
    ("out-of-table", _table_rows("garbage"), "rope/edge/negative-positions"),
    ("unknown", _noisy, "rope/hf-llama/short"),
]


@pytest.mark.parametrize("diagnosis, fn, case_id", PLANTED, ids=[f"{d}-{c}" for d, _, c in PLANTED])
def test_planted_mismatch_fails_and_is_named(diagnosis, fn, case_id):
    declared = {"max_positions": 4096} if diagnosis in ("wrapped", "out-of-table") else {}
    [record] = _records(_mock(diagnosis, fn, **declared), case_id)
    assert record.status == "fail", record
    assert record.diagnosis == diagnosis, (record.diagnosis, record.diagnosis_detail)
    assert record.diagnosis_detail.startswith("your outputs"), record.diagnosis_detail
    assert record.impl == "0" and record.backend == f"mock-{diagnosis}"


def test_longrope_factors_names_only_the_long_set_at_short_lengths():
    # the long factors at long positions are HF's own rule: nothing to name
    [record] = _records(_mock("long", _always_long), "rope/half-longrope/long")
    assert record.status == "pass", record
    # the short set past the original length is another mismatch (HF: long factors there)
    [record] = _records(_mock("short", _always_short), "rope/half-longrope/long")
    assert record.status == "fail" and record.diagnosis != "longrope-factors", record


def test_out_of_table_needs_every_row_inside_the_table_right():
    def garbage_everywhere(x, p, **kw):
        return _table_rows("garbage")(x, p, **kw) + 0.01 * np.sign(np.asarray(x))
    [record] = _records(_mock("everywhere", garbage_everywhere, max_positions=4096), "rope/edge/past-table")
    assert record.status == "fail" and record.diagnosis == "unknown", record


def test_every_diagnosis_of_the_contract_is_planted():
    planted = {d for d, _, _ in PLANTED} | {"angle-precision"}  # angle-precision: test_float32_angles below
    # planted in their own modules: the training cases' and autocast (test_impl_training.py), positions-rounded
    # (test_impl_planted_positions.py), the other families' (test_impl_planted_families.py), compute-dtype
    # (test_impl_planted_composite.py), border and kernel-table (test_impl_keras_resize.py)
    elsewhere = {"pass-through", "cotangent-layout", "in-place-unversioned", "in-place-undeclared",
                 "cotangent-mutated", "upstream-gradient-corrupted", "no-gradient", "positions-rounded", "autocast",
                 "sinusoid-layout", "denominator", "slopes", "alibi-form", "antialias", "resize-grid",
                 "align-corners", "cubic-a", "t5-direction", "transposed", "compute-dtype", "border", "kernel-table"}
    # the contract's list, and `wrapped` (an extension: a gather indexing modulo its table)
    assert planted | elsewhere == set(DIAGNOSES)


def test_layout_sentence_names_the_variant():
    [record] = _records(_mock("layout", _other_layout), "rope/hf-llama/kv-offset")
    assert record.diagnosis_detail == "your outputs equal the spec with layout='interleaved'"


def _float32_angles(x, p, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None,
                    mrope_section=None, mrope_interleaved=False, mrope_frequencies="shared"):
    """An honest implementation whose angles are the float32 product `p * inv_freq` (as MLX, vLLM and
    transformers' rotary classes form them), everything after in float64."""
    x64 = np.asarray(x, np.float64)
    r = resolve_rotary_dim(x64.shape[-1], rotary_dim, rotary_pct)
    plan = rope_plan(r, base=base, scaling=scaling, layout=layout, mrope_section=mrope_section,
                     mrope_interleaved=mrope_interleaved, mrope_frequencies=mrope_frequencies)
    p = np.asarray(p)
    inv = (plan.turns_at(int(p.max()) + 1) * 2 * np.pi).astype(np.float32)
    if plan.axis_of_pair is None:
        angles = p.astype(np.float32)[..., None] * inv
    else:
        angles = np.moveaxis(p, 0, -1)[..., plan.axis_of_pair].astype(np.float32) * inv
    c, s = np.cos(angles.astype(np.float64)) * plan.attention_scale, np.sin(angles.astype(np.float64)) * plan.attention_scale
    half = layout == "half"
    a, b = (x64[..., : r // 2], x64[..., r // 2: r]) if half else (x64[..., 0:r:2], x64[..., 1:r:2])
    out = x64.copy()
    ya, yb = a * c - b * s, a * s + b * c
    if half:
        out[..., : r // 2], out[..., r // 2: r] = ya, yb
    else:
        out[..., 0:r:2], out[..., 1:r:2] = ya, yb
    return out.astype(np.asarray(x).dtype)


ROPE_CASES = [c for c in all_cases() if c.encoding == "apply_rope" and c.fn is None]


def test_float32_angles_pass_as_float32_on_every_rope_case():
    impl = _mock("float32", _float32_angles, angles="float32")
    records = run_implementations(ROPE_CASES, [impl], dtypes=["float32", "bfloat16", "float16"])
    assert sum(r.status == "pass" for r in records) > 250
    bad = [(r.convention, r.case, r.dtype, r.err_in_tol, r.message) for r in records if r.status in ("fail", "error")]
    assert not bad, bad
    # what the mock's signature lacks (keywords of newer multi-axis cases) is a skip, never a pass
    assert all("does not accept keyword" in r.message for r in records if r.status == "skip")
    # pass or fail, each record states the worst angle error and where: float32 angles cost ~0.03 rad at 2^20
    long = [r for r in records if r.case == "long" and r.dtype == "float32" and r.convention == "half-default"]
    assert long[0].worst_angle_err > 1e-3 and long[0].worst_angle_position > 2**19


def test_float32_angles_fail_as_float64_named_angle_precision():
    impl = _mock("float64", _float32_angles, angles="float64")
    [short] = _records(impl, "rope/half-default/long")
    assert short.status == "fail" and short.diagnosis == "angle-precision", short
    assert short.worst_angle_err > 1e-3 and short.worst_angle_position > 2**19
    # below the positions where float32 costs more than the 1e-6 rad goal, it passes even as float64
    [near] = _records(impl, "rope/hf-llama/short")
    assert near.status == "pass" and near.worst_angle_err < 1e-6, near


# --- the table class's rounding allowance -------------------------------------------------------------

def _worst_case_rounding(roundings):
    """A kernel that applies the spec's tables in the inputs' dtype with every one of `roundings` (5:
    cos, sin, two products, a sum; 6: and the result once more) erring by its largest amount, u x value,
    in the direction that adds up."""
    def apply_rope(x, p, **kw):
        name = np.asarray(x).dtype.name if np.asarray(x).dtype.name != "bfloat16" else "bfloat16"
        u = UNIT_ROUNDOFF[name]
        rot = spec_rotation(np.shape(x), p, kw)
        x64 = np.asarray(x, np.float64)
        a, b = x64[..., rot.first], x64[..., rot.second]
        out = x64.copy()
        for target, (t1, t2) in ((rot.first, (a * rot.c, -b * rot.d)), (rot.second, (a * rot.d, b * rot.c))):
            exact = t1 + t2
            sign = np.where(exact >= 0, 1.0, -1.0)
            # cos/sin and the product each err by u |term| (first order: (1 + u)^2 - 1 = 2u + u^2)
            p1 = t1 + sign * np.abs(t1) * (2 * u + u * u)
            p2 = t2 + sign * np.abs(t2) * (2 * u + u * u)
            y = (p1 + p2) + sign * np.abs(p1 + p2) * u  # the sum
            if roundings == 6:
                y = y + sign * np.abs(y) * u
            out[..., target] = y
        return out
    return apply_rope


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_five_worst_case_roundings_pass_six_fail(dtype):
    five = run_implementations([CASES["rope/hf-llama/kv-offset"]], [_mock("5", _worst_case_rounding(5), angles="table")],
                               dtypes=[dtype])
    six = run_implementations([CASES["rope/hf-llama/kv-offset"]], [_mock("6", _worst_case_rounding(6), angles="table")],
                              dtypes=[dtype])
    assert five[0].status == "pass" and 0.99 < five[0].err_in_tol <= 1.0, five[0]
    assert six[0].status == "fail" and six[0].err_in_tol > 1.0, six[0]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_transformers_apply_rotary_pos_emb_in_half_precision_passes_as_table(dtype):
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    impl = Implementation.from_rotary_kernel(apply_rotary_pos_emb, "hf", layout="half")
    records = run_implementations(ROPE_CASES, [impl], dtypes=[dtype])
    ran = [r for r in records if r.status != "skip"]
    assert len(ran) > 60 and all(r.status == "pass" for r in ran), [
        (r.convention, r.case, r.err_in_tol) for r in ran if r.status != "pass"]
    assert max(r.err_in_tol for r in ran) > 0.3  # the allowance is not loose by an order of magnitude


# --- the edge set ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("case_id", ["rope/edge/past-table", "rope/edge/offset-past-table",
                                     "rope/edge/decode-past-table", "rope/edge/offset-past-table-interleaved"])
def test_refusing_past_the_table_is_correct(case_id):
    [record] = _records(_mock("raise", _table_rows("raise"), max_positions=4096), case_id)
    assert record.status == "pass" and record.message.startswith("refused"), record


def test_declared_table_skips_regular_cases_past_it():
    [record] = _records(_mock("table", _table_rows("raise"), max_positions=4096), "rope/hf-llama/long")
    assert record.status == "skip" and "declared table of 4096 rows" in record.message


def test_an_exception_outside_the_edge_set_is_an_error():
    [record] = _records(_mock("raise", _table_rows("raise", rows=8)), "rope/hf-llama/kv-offset")
    assert record.status == "error" and "IndexError" in record.message


def test_non_contiguous_input_reaches_the_implementation_as_a_view():
    seen = {}

    def apply_rope(x, p, **kw):
        seen["contiguous"] = x.flags.c_contiguous
        return np.ascontiguousarray(x) @ np.eye(x.shape[-1]) * 0 + _spec(np.ascontiguousarray(x), p, **kw)

    [record] = _records(_mock("view", apply_rope), "rope/edge/non-contiguous")
    assert seen["contiguous"] is False and record.status == "pass", record


def test_reading_past_a_view_shows_as_non_finite():
    def apply_rope(x, p, **kw):  # treats the view's memory as contiguous: reads the NaN columns beyond it
        dense = np.cumprod((x.itemsize,) + x.shape[::-1][:-1])[::-1]
        return _spec(np.array(np.lib.stride_tricks.as_strided(x, shape=x.shape, strides=tuple(dense))), p, **kw)

    [record] = _records(_mock("strides", apply_rope), "rope/edge/non-contiguous")
    assert record.status == "fail" and record.diagnosis == "non-finite", record


def test_a_kernel_that_leaves_a_single_key_head_unrotated_is_caught():
    """Liger-Kernel #342: with num_kv_heads = 1 the keys came back unrotated; from_rotary_kernel(kv_heads=1)."""
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    def buggy(q, k, cos, sin, unsqueeze_dim=1):
        q_embed, k_embed = apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)
        heads_axis = unsqueeze_dim
        return q_embed, (k if k.shape[heads_axis] == 1 else k_embed)

    case = CASES["rope/hf-llama/kv-offset"]
    full = Implementation.from_rotary_kernel(buggy, "same-heads")
    gqa = Implementation.from_rotary_kernel(buggy, "one-kv-head", kv_heads=1)
    same, single = run_implementations([case], [full, gqa], dtypes=["float32"])
    assert same.status == "pass"  # with as many key heads as query heads the bug does not show
    assert single.status == "fail" and single.diagnosis == "unrotated", single
    ok = Implementation.from_rotary_kernel(apply_rotary_pos_emb, "hf-one-kv-head", kv_heads=1)
    assert run_implementations([case], [ok], dtypes=["float32", "bfloat16"])[0].status == "pass"
