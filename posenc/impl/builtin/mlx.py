"""MLX's fused rotary kernel `mx.fast.rope` (mlx/fast.cpp, `rope(a, dims, *, traditional, base, scale,
offset, freqs=None)`; checked on the mlx 0.32.4 CPU wheel, `mlx[cpu]`), and the other families mlx.nn has:
`SinusoidalPositionalEncoding` (`sinusoidal`) and `ALiBi.create_alibi_matrix` (`alibi_bias`, symmetric form).

Mapping of the contract:

* `x [..., seq, dim]` -> `a [rows, seq, dim]` (MLX takes `(B, *, T, D)`, T on axis -2); `rotary_dim` ->
  `dims` (the channels past it pass through); `layout="interleaved"` -> `traditional=True`.
* positions: consecutive rows -> `offset` (an int, or one per row as a `[B]` vector); any other
  positions -> one token per row, `a [tokens, 1, dim]` with the positions as the `[B]` offset vector.
* frequencies: unscaled -> `base`; linear -> `scale = 1 / factor`; every other scaling -> `freqs`, the
  spec's frequencies given as periods `1 / inv_j` (MLX takes the reciprocal), at the case's sequence
  length. A magnitude factor (YaRN, LongRoPE) has no parameter in `mx.fast.rope` (mlx-lm scales `x`
  itself: `--impl mlx-lm`), nor has multi-axis RoPE: those are skips.

Precision class "float32": MLX forms `(offset + t) * scale * inv` in float32. On the CPU (this wheel) its
fallback also casts cos/sin to the input's dtype, so bfloat16 / float16 products are rounded in that dtype
(Metal and CUDA keep them in float32).
"""

from __future__ import annotations

import numpy as np

from ...adapters import NotSupported
from ..implementation import Implementation, ImplementationUnavailable
from ._kernel_inputs import frequencies, offset_rows, rotary_width

DISTRIBUTION = "mlx"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ('mlx',)

#: the dtypes the MLX adapters take (MLX has no float64 on every device)
MLX_DTYPES = ("float32", "float16", "bfloat16")


def _mx():
    try:
        import mlx.core as mx
    except ImportError as error:  # `pip install mlx` alone on Linux has no backend library
        raise ImplementationUnavailable(f"--impl mlx: mlx does not import ({error}); on Linux install "
                                        f"mlx[cpu]") from error
    return mx


def to_mlx(mx, array: np.ndarray):
    """A NumPy array (bfloat16 as ml_dtypes) as an MLX array of the same dtype, exactly."""
    name = str(array.dtype)
    if name == "bfloat16":
        return mx.array(array.astype(np.float32)).astype(mx.bfloat16)
    return mx.array(array)


def from_mlx(mx, array, dtype) -> np.ndarray:
    """An MLX array back as NumPy in `dtype` (bfloat16 through float32, exactly)."""
    if array.dtype == mx.bfloat16:
        return np.array(array.astype(mx.float32)).astype(dtype)
    return np.array(array).astype(dtype, copy=False)


def call_with_offsets(x: np.ndarray, positions, rope, *, what: str, scalar_offset_only: bool = False):
    """Run `rope(a, offset) -> array` (an MLX rotary call on `a [rows, seq, dim]`) for the contract's
    `x` and `positions`, returning NumPy like `x`.

    Consecutive rows pass their start as `offset` (an int when all rows share it, else a `[rows]`
    vector); other positions pass one token per row (`[tokens, 1, dim]`, the positions as the offset
    vector), which `scalar_offset_only` kernels (a frequency chosen from `offset + seq`) cannot take.
    """
    mx = _mx()
    try:
        rows = offset_rows(x.shape, positions, what=what)
    except NotSupported:
        if scalar_offset_only:
            raise NotSupported(f"{what} takes one int offset per call; positions {list(np.shape(positions))} "
                               f"are not one run of consecutive ids") from None
        flat = np.broadcast_to(np.asarray(positions), x.shape[:-1]).reshape(-1)
        out = rope(to_mlx(mx, x.reshape(-1, 1, x.shape[-1])), mx.array(flat.astype(np.int32)))
        return from_mlx(mx, out, x.dtype).reshape(x.shape)
    moved = np.moveaxis(x, rows.seq_axis, -2)
    a = to_mlx(mx, np.ascontiguousarray(moved).reshape(-1, *moved.shape[-2:]))
    if rows.uniform:
        offset = int(rows.offsets.flat[0]) if rows.offsets.size else 0
    elif scalar_offset_only:
        raise NotSupported(f"{what} takes one int offset per call; the rows start at "
                           f"{sorted(set(rows.offsets.ravel().tolist()))[:4]}...")
    else:
        offset = mx.array(rows.offsets.reshape(-1).astype(np.int32))
    out = from_mlx(mx, rope(a, offset), x.dtype).reshape(moved.shape)
    return np.moveaxis(out, -2, rows.seq_axis)


def _fast_rope_args(rotary_dim, *, base, scaling, positions):
    """`(base, scale, freqs)` of `mx.fast.rope` for the contract's frequencies (see the module docstring)."""
    kind = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return float(base), 1.0, None
    if kind == "linear":
        return float(base), 1.0 / float(scaling["factor"]), None
    inv, attention_scale = frequencies(rotary_dim, base=base, scaling=scaling, positions=positions)
    if attention_scale != 1.0:
        raise NotSupported(f"mx.fast.rope has no magnitude factor ({kind} scales cos/sin by "
                           f"{attention_scale:.4g}); mlx-lm multiplies x itself: --impl mlx-lm")
    with np.errstate(divide="ignore"):
        periods = 1.0 / inv
    return None, 1.0, periods.astype(np.float32)


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None):
    """The contract's `apply_rope` through `mx.fast.rope` (NumPy in, NumPy out; see the module docstring)."""
    mx = _mx()
    x = np.asarray(x)
    r = rotary_width(x.shape[-1], rotary_dim, rotary_pct)
    fast_base, scale, periods = _fast_rope_args(r, base=base, scaling=scaling, positions=positions)
    freqs = None if periods is None else mx.array(periods)

    def rope(a, offset):
        return mx.fast.rope(a, r, traditional=layout == "interleaved", base=fast_base, scale=scale,
                            offset=offset, freqs=freqs)

    return call_with_offsets(x, positions, rope, what="mx.fast.rope")


_COS_FIRST = {"concat": False, "concat-cos": True}


def sinusoidal(positions, dim, *, base=10000.0, layout="interleaved", denominator="dim", dtype=None):
    """The contract's `sinusoidal` through `mlx.nn.SinusoidalPositionalEncoding(dim, min_freq=1 / base,
    max_freq=1, scale=1, cos_first)`: frequencies `exp((1 - i / (dim/2 - 1)) ln(max) + ... )`, i.e.
    `base^(-i / (dim/2 - 1))` (tensor2tensor's denominator), `[sin | cos]` or `[cos | sin]` (NumPy in and out)."""
    import mlx.nn as nn

    mx = _mx()
    if layout not in _COS_FIRST or denominator != "half-1":
        raise NotSupported(f"SinusoidalPositionalEncoding writes [sin | cos] or [cos | sin] halves with frequencies "
                           f"base^(-i/(dim/2-1)); not layout={layout!r}, denominator={denominator!r}")
    module = nn.SinusoidalPositionalEncoding(int(dim), min_freq=1.0 / float(base), max_freq=1.0, scale=1.0,
                                             cos_first=_COS_FIRST[layout])
    out = module(mx.array(np.asarray(positions, np.float32)))
    return from_mlx(mx, out, np.dtype(np.float32) if dtype is None else _numpy_dtype(dtype))


def alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", dtype=None):
    """The contract's `alibi_bias` through `mlx.nn.ALiBi.create_alibi_matrix(q_len, k_len, num_heads, offset)`:
    `-|i - j| m_h` for queries `offset .. q_len - 1` against keys `0 .. k_len - 1` (NumPy in and out)."""
    import mlx.nn as nn

    mx = _mx()
    q, k = np.asarray(q_positions), np.asarray(k_positions)
    if form != "symmetric":
        raise NotSupported(f"ALiBi.create_alibi_matrix computes the symmetric form -|i - j| m, not form={form!r}")
    if q.ndim != 1 or k.ndim != 1 or not q.size or not k.size:
        raise NotSupported("create_alibi_matrix takes one row of query and one row of key positions")
    if not np.array_equal(k, np.arange(k.size)) or not np.array_equal(q, np.arange(q[0], q[0] + q.size)):
        raise NotSupported("create_alibi_matrix takes keys 0 .. k-1 and consecutive queries from an offset")
    mlx_dtype = mx.float32 if dtype is None else getattr(mx, str(dtype))
    out = nn.ALiBi.create_alibi_matrix(int(q[-1]) + 1, k.size, int(num_heads), offset=int(q[0]), dtype=mlx_dtype)
    return from_mlx(mx, out[0], np.dtype(np.float32) if dtype is None else _numpy_dtype(dtype))


def _numpy_dtype(name):
    from posenc_np.backend import numpy_dtype

    return numpy_dtype(str(name))


def load() -> Implementation:
    import importlib.metadata

    _mx()
    return Implementation("mlx", "numpy", {"apply_rope": apply_rope, "sinusoidal": sinusoidal,
                                           "alibi_bias": alibi_bias},
                          version=importlib.metadata.version("mlx"), dtypes=MLX_DTYPES, angles="float32",
                          description="mx.fast.rope (CPU fallback on this machine): offsets, base/scale/freqs; "
                                      "nn.SinusoidalPositionalEncoding; nn.ALiBi.create_alibi_matrix")


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ('`pip install "mlx[cpu]"` on Linux (plain `mlx` has no backend library there; needs glibc '
           '>= 2.35)')
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = ()

#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
EXPECTED = {
    # nn.SinusoidalPositionalEncoding forms its frequencies as exp(linspace of logs) in float32: a few ulps each,
    # past the one-product angle bound from ~500 positions, within twice it (0.25 rad at 2^20)
    'mlx fairseq/long': 'angle-precision',
    'mlx fairseq/per-row': 'angle-precision',
    'mlx tensor2tensor/per-row': 'angle-precision',
    'mlx whisper-encoder/encoder': 'angle-precision',
}
