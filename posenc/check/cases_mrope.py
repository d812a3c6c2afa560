"""Suite cases for rotary over several axes: the conventions qwen2-vl, qwen3-vl, qwen2-vl-vision, pixtral and
flux, M-RoPE under the scaling types, and explicit pair -> axis tables (`mrope_axes`): ERNIE-4.5-VL's 3-D rule
and Qwen3.5's interleave with a section shorter than the rotary pairs.

Positions carry the leading axis of the section (`[A, ..., seq]`). Case sets:
* "short": small, different ids per axis; "long": ids up to 2**20 on every axis (the 1e-6 rad rule per axis);
* "per-row": `[A, batch, 1, seq]`, different ids per batch row, broadcast over heads;
* "text-image-video" (the Qwen-VL text conventions): the ids of a real mixed prompt, from `mrope_position_ids`
  (text, a 4 x 8 image, a 2-frame video 2 s per grid step at 2 tokens per second, left padding);
* "patch-grid" (the vision conventions): (row, column) of an 8 x 12 patch grid in spatial-merge window order,
  the order HF's vision towers feed.
Jit (one compile per signature, dtype and backend: the suite's main cost) runs three cases, one per traced
path that eager does not already exercise the same way: the interleaved map on the mixed prompt (qwen3-vl),
per-axis frequencies at long positions (flux), and a sequence-length dependent scaling (dynamic NTK, traced
seq_len). tests/backends/test_mrope_backends.py checks that new positions never recompile.
"""

from __future__ import annotations

import numpy as np

from posenc_np.backend import numpy_dtype
from posenc_np.conventions import conventions
from posenc_np.mrope import mrope_interleaved_axes, mrope_position_ids
from posenc_np.rope import ernie_mrope_axes, resolve_rotary_dim, rope_plan
from posenc_np.testing import ROPE_ANGLE_GOAL, tolerance

from .registry import Case, register

__all__ = ["MROPE_CONVENTIONS", "mixed_prompt_positions", "patch_grid_positions"]

LONG = 2**20
ORIGINAL = 64
MROPE_CONVENTIONS = ("qwen2-vl", "qwen3-vl", "qwen2-vl-vision", "pixtral", "flux")
VISION_HEAD_DIM = 24  # any multiple of 4 (HF's towers); 24 = 12 pairs, 6 per axis
SMALL_SECTION = [2, 3, 3]  # head_dim 16, the scaled M-RoPE cases


def mixed_prompt_positions() -> np.ndarray:
    """`[3, 2, 1, 32]` ids of a text-image-video prompt (row 0) and a left-padded text-image prompt (row 1)."""
    types = np.array([[0, 0, 0] + [1] * 8 + [0, 0] + [2] * 16 + [0, 0, 0],
                      [0] * 7 + [0, 0] + [1] * 8 + [0] * 15])
    mask = np.ones_like(types)
    mask[1, :7] = 0
    ids, _ = mrope_position_ids(types, image_grid_thw=[[1, 4, 8], [1, 4, 8]], video_grid_thw=[[2, 4, 8]],
                                second_per_grid_ts=[2.0], attention_mask=mask, spatial_merge_size=2,
                                tokens_per_second=2)
    return ids[:, :, None, :]


def patch_grid_positions(rows=8, cols=12, merge=2) -> np.ndarray:
    """`[2, rows * cols]` (row, column) ids in HF's spatial-merge window order (`get_vision_position_ids`)."""
    h, w = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    shape = (rows // merge, merge, cols // merge, merge)
    return np.stack([h.reshape(shape).transpose(0, 2, 1, 3).ravel(), w.reshape(shape).transpose(0, 2, 1, 3).ravel()])


def _positions(case_set, axes):
    rng = np.random.default_rng(axes)
    if case_set == "short":
        return rng.integers(0, 40, size=(axes, 8))
    if case_set == "long":
        return np.stack([np.array([0, 255, 4097, 65537, 300001, LONG - 3, LONG - 1, 77])[np.roll(np.arange(8), a)]
                         for a in range(axes)])
    if case_set == "per-row":
        return rng.integers(0, 3000, size=(axes, 2, 1, 8))
    if case_set == "text-image-video":
        return mixed_prompt_positions()
    if case_set == "patch-grid":
        return patch_grid_positions()
    raise ValueError(case_set)


def _x_shape(positions, head_dim):
    seq = positions.shape[-1]
    return (2, 2, seq, head_dim) if positions.ndim <= 2 else (positions.shape[1], 2, seq, head_dim)


def mrope_case(tag, case_set, params, *, head_dim, modes=("eager",)):
    """Register `apply_rope(x, positions, **params)` on one position set (also used by the planted tests)."""
    rotary_dim = resolve_rotary_dim(head_dim, params.get("rotary_dim"), params.get("rotary_pct"))
    plan = rope_plan(rotary_dim, base=params.get("base", 10000.0), scaling=params.get("scaling"),
                     layout=params.get("layout", "half"), mrope_section=params.get("mrope_section"),
                     mrope_interleaved=params.get("mrope_interleaved", False),
                     mrope_frequencies=params.get("mrope_frequencies", "shared"), mrope_axes=params.get("mrope_axes"))
    positions = _positions(case_set, plan.num_axes)
    shape = _x_shape(positions, head_dim)

    def make(rng, dtype):
        x = rng.standard_normal(shape).astype(numpy_dtype(dtype))
        return (x, positions.astype(np.int64)), dict(params)

    def tol(desired, dtype, args):
        return tolerance(dtype, angle_error=ROPE_ANGLE_GOAL, scale=float(np.abs(desired.astype(np.float64)).max()))

    axes = "x".join(str(s) for s in plan.mrope_section)
    kind = "pairs per axis (mrope_axes table)" if params.get("mrope_axes") is not None else "section"
    return register(Case("apply_rope", tag, case_set, make, tol, modes=modes,
                         description=f"{params.get('layout', 'half')}, {kind} {axes}"
                                     f"{' interleaved' if params.get('mrope_interleaved') else ''}, "
                                     f"{params.get('mrope_frequencies', 'shared')} frequencies, {plan.kind} "
                                     f"scaling: positions {list(positions.shape)}"))


_JIT = {("qwen3-vl", "text-image-video"), ("flux", "long")}

for _name in MROPE_CONVENTIONS:
    _params = dict(conventions[_name].params)
    _head_dim = conventions[_name].extra.get("head_dim", VISION_HEAD_DIM)
    _sets = ("short", "long", "per-row") + (("text-image-video",) if _name in ("qwen2-vl", "qwen3-vl") else
                                            ("patch-grid",) if _name in ("qwen2-vl-vision", "pixtral") else ())
    for _set in _sets:
        mrope_case(_name, _set, _params, head_dim=_head_dim,
                   modes=("eager", "jit") if (_name, _set) in _JIT else ("eager",))

# M-RoPE keeps every scaling type (shared frequencies): the small [2, 3, 3] section, contiguous and interleaved.
SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": ORIGINAL},
    "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": ORIGINAL},
    "longrope": {"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.8],
                 "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 13.0, 18.0], "factor": 16.0,
                 "original_max_position_embeddings": ORIGINAL},
}
for _name, _scaling in SCALINGS.items():
    for _interleaved in (False, True):
        _tag = f"mrope-{'interleaved' if _interleaved else 'contiguous'}-{_name}"
        _seq = _name in ("dynamic", "longrope")
        for _set in (("short", "long") if _seq else ("long",)):
            mrope_case(_tag, _set, {"mrope_section": SMALL_SECTION, "mrope_interleaved": _interleaved,
                                    "scaling": _scaling}, head_dim=16,
                       modes=("eager", "jit") if _name == "dynamic" and _set == "long" and not _interleaved
                       else ("eager",))
# per-axis frequencies under a scaling (each axis its own width): FLUX-like layout at head_dim 16
mrope_case("per-axis-yarn", "long", {"mrope_section": SMALL_SECTION, "mrope_frequencies": "per-axis",
                                     "layout": "interleaved", "scaling": SCALINGS["yarn"]}, head_dim=16)

# explicit pair -> axis tables: ERNIE-4.5-VL (height/width alternating over 44 pairs, time after; interleaved pairs,
# modeling_ernie4_5_vl_moe.py) and Qwen3.5's [11, 11, 10] interleave over a 64-pair head (pairs 33.. on time)
AXES_TABLES = {
    "ernie4.5-vl": ({"layout": "interleaved", "base": 500000.0, "mrope_axes": ernie_mrope_axes([22, 22, 20])}, 128),
    "qwen3.5-short-section": ({"layout": "half", "base": 10000000.0,
                               "mrope_axes": mrope_interleaved_axes([11, 11, 10], 64)}, 128),
}
for _name, (_params, _head_dim) in AXES_TABLES.items():
    for _set in ("short", "long", "text-image-video"):
        mrope_case(_name, _set, _params, head_dim=_head_dim,
                   modes=("eager", "jit") if _set == "text-image-video" else ("eager",))
