"""ggml's rotary op, llama.cpp's RoPE: `ggml_rope_ext(ctx, a, b, c, n_dims, mode, n_ctx_orig, freq_base,
freq_scale, ext_factor, attn_factor, beta_fast, beta_slow)` and `ggml_rope_multi(..., sections[4], mode, ...)`
(ggml include/ggml.h, src/ggml-cpu/ops.cpp), through the ctypes bindings of ggml-python 0.0.45 (its vendored
ggml; the sdist builds the CPU library, about 100 s).

Mapping of the contract (tensors are `ne = [head_dim, heads, tokens]`, NumPy `[tokens, heads, dim]`):

* every token of `x` is one row with its own position: `a [tokens, 1, dim]`, `b` int32 `[tokens]` (four
  streams `[4 * tokens]` for `ggml_rope_multi`); `n_dims = rotary_dim` (channels past it pass through).
* modes: `half` -> NEOX (2), `interleaved` -> NORMAL (0); a 3-axis section with shared frequencies ->
  MROPE (8) with `sections = [s_t, s_h, s_w, 0]`, interleaved sections -> IMROPE (40); the 4th stream is 0,
  as llama.cpp fills it for text; two axes with per-axis frequencies over the whole head (Qwen2-VL's
  vision tower) -> VISION (24) with `n_dims = dim / 2` and `sections = [dim / 4, dim / 4, 0, 0]`.
* scalings as llama.cpp passes them: linear -> `freq_scale = 1 / factor`; yarn -> `freq_scale = 1 /
  factor`, `ext_factor = 1`, `beta_fast`, `beta_slow`, `n_ctx_orig = original_max_position_embeddings`
  (ggml multiplies by `1 + 0.1 ln(factor)` itself); llama3, longrope and llama.cpp's freq factors -> the
  factors tensor `c` (theta is divided by it: `inv_default / inv_scaled` of the spec, as llama.cpp's
  converter writes `rope_freqs`) with the spec's magnitude as `attn_factor`. Others are skips.

ALiBi (`alibi_bias`, `alibi_slopes`) is `ggml_alibi`'s: `ggml_soft_max_ext(a, mask, scale, max_bias)` with
llama.cpp's mask `-|p0 - p1|`, F32 (`ggml`) or cast to F16 as under flash attention (`ggml-f16-mask`), and
`ggml_flash_attn_ext(q, k, v, mask, scale, max_bias, 0)` with the F16 mask (`ggml-flash-attn`).

Precision class "float32": theta is formed iteratively in float32 (`theta *= theta_scale` per pair).
ggml aborts the process on a failed GGML_ASSERT, so every shape it asserts on is checked here first.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ...adapters import NotSupported
from ..implementation import Implementation
from ._ggml_library import load_ggml
from ._kernel_inputs import frequencies, rotary_width, token_positions

DISTRIBUTION = "ggml-python"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ('ggml', 'ggml-f16-mask', 'ggml-flash-attn')

NORMAL, NEOX, MROPE, VISION, IMROPE = 0, 2, 8, 24, 40
_FACTOR_TYPES = ("llama3", "longrope", "llamacpp-freq-factors")


def rope_params(rotary_dim: int, *, base, scaling, positions) -> dict:
    """ggml's `n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow` and the
    factors `c` (float32 `[r/2]` or None) for the contract's `base` and `scaling`."""
    from posenc_np import rope_frequencies

    params = dict(n_ctx_orig=0, freq_base=float(base), freq_scale=1.0, ext_factor=0.0, attn_factor=1.0,
                  beta_fast=32.0, beta_slow=1.0, factors=None)
    kind = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return params
    if kind == "linear":
        return {**params, "freq_scale": 1.0 / float(scaling["factor"])}
    if kind == "yarn":
        extra = sorted(set(scaling) - {"rope_type", "type", "factor", "original_max_position_embeddings",
                                       "beta_fast", "beta_slow", "truncate"})
        if extra or scaling.get("truncate", True) is not True:
            raise NotSupported(f"llama.cpp's YaRN parameters have no {', '.join(extra) or 'truncate=False'}")
        return {**params, "freq_scale": 1.0 / float(scaling["factor"]), "ext_factor": 1.0,
                "n_ctx_orig": int(scaling["original_max_position_embeddings"]),
                "beta_fast": float(scaling.get("beta_fast", 32.0)), "beta_slow": float(scaling.get("beta_slow", 1.0))}
    if kind in _FACTOR_TYPES:
        inv, attention_scale = frequencies(rotary_dim, base=base, scaling=scaling, positions=positions)
        default, _ = rope_frequencies(rotary_dim, base=base)
        return {**params, "factors": (default / inv).astype(np.float32), "attn_factor": float(attention_scale)}
    raise NotSupported(f"llama.cpp passes linear, yarn and frequency factors (llama3, longrope) to ggml; "
                       f"not {kind!r}")


def _mode(x_shape, rotary_dim, layout, mrope_section, mrope_interleaved, mrope_frequencies):
    """`(mode, n_dims, sections or None, axes)` of ggml for the contract's layout and multi-axis options."""
    if mrope_section is None:
        return (NEOX if layout == "half" else NORMAL), rotary_dim, None, None
    dim = x_shape[-1]
    if layout != "half":
        raise NotSupported("ggml's multi-axis modes rotate halves (NEOX pairs) only")
    if mrope_frequencies == "shared" and not np.isscalar(mrope_section) and len(mrope_section) == 3:
        sections = [int(s) for s in mrope_section] + [0]
        return (IMROPE if mrope_interleaved else MROPE), rotary_dim, sections, 3
    two_even = np.isscalar(mrope_section) and int(mrope_section) == 2
    if mrope_frequencies == "per-axis" and two_even and rotary_dim == dim and dim % 4 == 0 and not mrope_interleaved:
        return VISION, dim // 2, [dim // 4, dim // 4, 0, 0], 2
    raise NotSupported(f"ggml_rope_multi has MROPE/IMROPE (3 axes, shared frequencies) and VISION (2 axes, "
                       f"per-axis over the whole head); not mrope_section={mrope_section!r}, "
                       f"mrope_frequencies={mrope_frequencies!r}")


def _compute(x_rows: np.ndarray, streams: np.ndarray, *, mode, n_dims, sections, params) -> np.ndarray:
    """Run one rope node on `x_rows [tokens, 1, dim]` with int32 `streams` in a fresh ggml context."""
    ggml = load_ggml()
    factors = params["factors"]
    size = 4 * x_rows.nbytes + streams.nbytes + (0 if factors is None else factors.nbytes) + 16 * 2**20
    ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=size, mem_buffer=None))
    try:
        a = ggml.utils.from_numpy(x_rows, ctx)
        b = ggml.utils.from_numpy(streams, ctx)
        c = None if factors is None else ggml.utils.from_numpy(factors, ctx)
        tail = (params["n_ctx_orig"], params["freq_base"], params["freq_scale"], params["ext_factor"],
                params["attn_factor"], params["beta_fast"], params["beta_slow"])
        if sections is None:
            out = ggml.ggml_rope_ext(ctx, a, b, c, n_dims, mode, *tail)
        else:
            out = ggml.ggml_rope_multi(ctx, a, b, c, n_dims, (ctypes.c_int * 4)(*sections), mode, *tail)
        graph = ggml.ggml_new_graph(ctx)
        ggml.ggml_build_forward_expand(graph, out)
        ggml.ggml_graph_compute_with_ctx(ctx, graph, 1)
        return np.array(ggml.utils.to_numpy(out))
    finally:
        ggml.ggml_free(ctx)


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None,
               mrope_section=None, mrope_interleaved=False, mrope_frequencies="shared"):
    """The contract's `apply_rope` through one ggml rope node (NumPy in, NumPy out)."""
    x = np.asarray(x)
    if x.dtype not in (np.float32, np.float16):
        raise NotSupported(f"ggml-python passes float32 and float16 tensors, not {x.dtype}")
    r = rotary_width(x.shape[-1], rotary_dim, rotary_pct)
    mode, n_dims, sections, axes = _mode(x.shape, r, layout, mrope_section, mrope_interleaved, mrope_frequencies)
    tokens = token_positions(x.shape, positions, axes=axes)
    pos_all = np.asarray(positions)
    params = rope_params(r, base=base, scaling=scaling, positions=pos_all)
    if np.abs(tokens).max(initial=0) >= 2**31:
        raise NotSupported("ggml positions are int32")
    if axes is None:
        streams = tokens.reshape(-1)
    else:
        flat = tokens.reshape(axes, -1)
        streams = np.concatenate([flat, np.zeros((4 - axes, flat.shape[1]), flat.dtype)]).reshape(-1)
    rows = np.ascontiguousarray(x.reshape(-1, 1, x.shape[-1]))
    out = _compute(rows, np.ascontiguousarray(streams, dtype=np.int32), mode=mode, n_dims=n_dims,
                   sections=sections, params=params)
    return out.reshape(x.shape).astype(x.dtype, copy=False)


def load() -> tuple[Implementation, ...]:
    """`ggml`: RoPE and ALiBi with an F32 mask (llama.cpp without flash attention); `ggml-f16-mask`: ALiBi
    with llama.cpp's flash-attention mask, cast to F16; `ggml-flash-attn`: ALiBi through `ggml_flash_attn_ext`
    itself, as llama.cpp runs it with flash attention on (`ggml_alibi`)."""
    import importlib.metadata

    from . import ggml_alibi

    load_ggml()
    version = importlib.metadata.version(DISTRIBUTION)
    main = Implementation("ggml", "numpy", {"apply_rope": apply_rope, "alibi_bias": ggml_alibi.alibi_bias,
                                            "alibi_slopes": ggml_alibi.alibi_slopes},
                          version=version, dtypes=("float32", "float16"), angles="float32",
                          description="ggml_rope_ext / ggml_rope_multi (NORMAL, NEOX, MROPE, IMROPE, VISION), "
                                      "llama.cpp's scaling parameters; ALiBi from ggml_soft_max_ext(max_bias) "
                                      "with llama.cpp's F32 mask -|p0 - p1|")
    # float32 only: a float16 case's own rounding (2^-11 relative) would hide what the F16 mask rounds; `angles`
    # judges RoPE only, the ecosystem table prints it as the precision class (the op computes in float32)
    f16 = Implementation("ggml-f16-mask", "numpy", {"alibi_bias": ggml_alibi.alibi_bias_f16_mask},
                         version=version, dtypes=("float32",), angles="float32",
                         description="ALiBi from ggml_soft_max_ext(max_bias) with llama.cpp's flash-attention "
                                     "mask -|p0 - p1| cast to F16 (distances past 2048 round)")
    flash = Implementation("ggml-flash-attn", "numpy", {"alibi_bias": ggml_alibi.alibi_bias_flash_attn},
                           version=version, dtypes=("float32",), angles="float32",
                           description="ALiBi from ggml_flash_attn_ext(max_bias), llama.cpp's flash-attention "
                                       "path, with its F16 mask -|p0 - p1| (the weights through an identity V)")
    return main, f16, flash


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ("`pip install ggml-python` (an sdist: builds ggml's CPU library with CMake, about 100 s)")
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = (
    {
        'implementation': ('ggml'),
        'title': ('IMROPE feeds pairs HF gives the temporal id from the 4th position stream'),
        'text': ('`ggml_mrope_cache_init` with `is_imrope` takes T only where `sector % 3 == 0 && sector '
            '< 3 s_t`, H and W where `sector % 3 == 1 && sector < 3 s_h` (2, `3 s_w`), and the 4th '
            "stream everywhere else; HF's Qwen3-VL (`apply_interleaved_mrope`) starts every pair at "
            'T and overwrites only the H and W slots. With `[24, 20, 20]` (64 pairs) pairs 61 and 62 '
            'read the 4th stream, which llama.cpp sets to 0 for text: they are never rotated (HF '
            'turns them by T; at base 5e6 about 0.013 rad at 32k). A pair `j` falls through whenever '
            "`j` is past 3x its residue's part (`j % 3 == 0` and `j >= 3 s_t`, and so on): `[2, 3, "
            "3]` has pair 6 too; Qwen3.5's `[11, 11, 10]` has none."),
        'reproduction': ('import ctypes\n'
                         'import numpy as np\n'
                         'import ggml, ggml.utils\n'
                         'x = np.random.default_rng(0).standard_normal((4, 1, 128)).astype(np.float32)  # ne = '
                         '[dim, heads, tokens]\n'
                         "ids = np.arange(100000, 100004)  # text: the same id on every axis; llama.cpp's 4th "
                         'stream is 0\n'
                         'streams = np.concatenate([ids, ids, ids, 0 * ids]).astype(np.int32)\n'
                         'ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=16 * 2**20, mem_buffer=None))\n'
                         'a, b = ggml.utils.from_numpy(x, ctx), ggml.utils.from_numpy(streams, ctx)\n'
                         'IMROPE = 40  # GGML_ROPE_TYPE_IMROPE: interleaved sections [t, h, w, e], NEOX pairs (j, j '
                         '+ 64)\n'
                         'sections = (ctypes.c_int * 4)(24, 20, 20, 0)\n'
                         'out = ggml.ggml_rope_multi(ctx, a, b, None, 128, sections, IMROPE, 0, 5e6, 1.0, 0.0, 1.0, '
                         '32.0, 1.0)\n'
                         'graph = ggml.ggml_new_graph(ctx); ggml.ggml_build_forward_expand(graph, out)\n'
                         'ggml.ggml_graph_compute_with_ctx(ctx, graph, 1)\n'
                         'y = np.array(ggml.utils.to_numpy(out)); ggml.ggml_free(ctx)\n'
                         "# HF's apply_interleaved_mrope with equal ids on every axis is plain 1-D NEOX RoPE at the "
                         'id\n'
                         'ang = ids[:, None, None] * 5e6 ** (-np.arange(64) / 64.0)\n'
                         'x1, x2 = x[..., :64].astype(np.float64), x[..., 64:].astype(np.float64)\n'
                         'want = np.concatenate([x1 * np.cos(ang) - x2 * np.sin(ang), x2 * np.cos(ang) + x1 * '
                         'np.sin(ang)], -1)\n'
                         'pairs = [61, 62, 125, 126]\n'
                         'print(np.array_equal(y[..., pairs], x[..., pairs]), np.abs(want - x)[..., pairs].max())  '
                         '# True 0.063: never rotated'),
        'still': 'np.array_equal(y[..., pairs], x[..., pairs]) and np.abs(want - x)[..., pairs].max() > 0.01',
    },
    {
        'implementation': 'ggml-f16-mask',
        'title': "llama.cpp's F16 KQ mask rounds ALiBi distances past 2048",
        'text': ("llama.cpp fills its KQ mask with `-|p0 - p1|` for ALiBi models (llama-kv-cache.cpp "
                 "`set_input_kq_mask`) and casts it to F16 when flash attention is on (llama-graph.cpp); "
                 "`ggml_soft_max_ext` / `ggml_flash_attn_ext` then add `slope * mask`. float16 holds integers "
                 "only to 2048: distances round to even numbers up to 4096, to multiples of 4 up to 8192 (16 "
                 "past 32768), and past 65504 they become -inf, masking the key. Through `ggml_soft_max_ext` "
                 "at 12 heads, queries 8184..8191 against keys 0..8191 step 256, the bias is off by up to 1.41 "
                 "(slope 2^-0.5 times a distance off by 2; the F32 mask: 1.5e-4, float32); one head at slope "
                 "2^-8 over keys 8189..8193 back gets four equal weights, 0.7 % from softmax(-d/256)."),
        'reproduction': 'import numpy as np\nimport ggml\nimport ggml.utils\n# llama.cpp\'s ALiBi mask holds -|p0 - p1| (llama-kv-cache.cpp set_input_kq_mask); with flash attention the\n# graph casts it to F16 (llama-graph.cpp: ggml_cast(kq_mask, GGML_TYPE_F16)). One query, keys 8189..8193 back.\nd = np.arange(8189, 8194)\n\n\ndef weights(f16_mask):\n    ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=16 * 2**20, mem_buffer=None))\n    a = ggml.utils.from_numpy(np.zeros((1, d.size), np.float32), ctx)  # q.k = 0: the weights are the bias\'s\n    mask = ggml.utils.from_numpy(-d[None].astype(np.float32), ctx)\n    if f16_mask:\n        mask = ggml.ggml_cast(ctx, mask, ggml.GGML_TYPE_F16)\n    out = ggml.ggml_soft_max_ext(ctx, a, mask, 1.0, 8.0)  # 1 head, max_bias 8: slope 2^-8\n    graph = ggml.ggml_new_graph(ctx)\n    ggml.ggml_build_forward_expand(graph, out)\n    ggml.ggml_graph_compute_with_ctx(ctx, graph, 1)\n    w = np.array(ggml.utils.to_numpy(out), np.float64).reshape(-1)\n    ggml.ggml_free(ctx)\n    return w\n\n\nw32, w16 = weights(False), weights(True)\nwant = np.exp(-d / 256.0) / np.exp(-d / 256.0).sum()\nprint("F32 mask:", np.abs(w32 / want - 1).max())  # 1e-7: float32\nprint("F16 mask:", np.abs(w16 / want - 1).max(), w16)  # distances 8188, 8192, 8192, 8192, 8192: four equal weights\n',
        'still': ('np.abs(w32 / want - 1).max() < 1e-6 and np.all(w16[1:] == w16[1]) '
                  'and np.abs(w16 / want - 1).max() > 1e-3'),
    },
)

#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
EXPECTED = {
    'ggml qwen3-vl/short': 'imrope-fourth-stream',
    'ggml qwen3-vl/long': 'imrope-fourth-stream',
    'ggml qwen3-vl/per-row': 'imrope-fourth-stream',
    'ggml qwen3-vl/text-image-video': 'imrope-fourth-stream',
    'ggml mrope-interleaved-linear/long': 'imrope-fourth-stream',
    'ggml mrope-interleaved-yarn/long': 'imrope-fourth-stream',
    'ggml mrope-interleaved-longrope/short': 'imrope-fourth-stream',
    'ggml mrope-interleaved-longrope/long': 'imrope-fourth-stream',
    # llama.cpp's flash-attention mask: -|p0 - p1| cast to F16 (finding above); every case with distances past 2048
    **{f"ggml-{variant} {case}": "positions-rounded" for variant in ("f16-mask", "flash-attn")
       for case in ("alibi-symmetric/kv-offset-long", "alibi-symmetric/long", "ggml-alibi/long",
                    "ggml-alibi/max-bias-4-long")},
}
