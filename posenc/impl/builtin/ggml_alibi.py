"""ggml's ALiBi, llama.cpp's: `ggml_soft_max_ext(a, mask, scale, max_bias)` (ggml include/ggml.h L1735; CPU
kernel `ggml_compute_forward_soft_max_f32`, src/ggml-cpu/ops.cpp L5344-5450, slopes L5375-5397, in the ggml that
ggml-python 0.0.45 vendors) computes, per head h of `a`'s `ne[2]` and per row,

    n_log2 = 2^floor(log2 n_head),  m0 = 2^(-max_bias / n_log2),  m1 = 2^(-max_bias / 2 / n_log2)
    slope_h = m0^(h + 1) for h < n_log2, else m1^(2 (h - n_log2) + 1)        (powf, float32)
    w = softmax(a * scale + slope_h * mask)

with llama.cpp's mask `-|p0 - p1|` over real KV-cache positions (llama-kv-cache.cpp `set_input_kq_mask`:
`hparams.use_alibi ? -std::abs(p0 - p1) : 0`, -inf for cells a token does not see), cast to F16 when flash
attention is on (`ggml_cast(kq_mask, GGML_TYPE_F16)`): float16 holds integers only to 2048, so past it the
distances round (to even numbers up to 4096, multiples of 4 up to 8192).

The op returns softmax weights, not the bias; the bias is read back exactly as the op adds it. Each row is one
query with a reference key of mask 0 in front of its keys; `a` holds, per key, an offset `s_h |i - j|` (s_h the
op's own slopes, probed first) that keeps every logit of the row near 0, so no weight underflows (the bias
alone reaches -4096 at distance 8191); then `slope_h * mask_ij = log(w_ij / w_i,ref) - a_ij`. The error of that
read-back is the float32 softmax's, a few ulp of the row's largest weight ratio (about 1e-7 absolute), against
the float32 product `slope * mask` the op forms anyway.

What it expresses: the symmetric form (llama.cpp's mask; non-causal models such as jina-bert-v2 see keys on
both sides, causal ones mask the rest with -inf), integer positions (`llama_pos` is int32), any leading batch
axes (one ggml row block per batch element), `max_bias > 0` (0 turns ALiBi off in ggml). The causal and BLOOM
forms are skips: their raw bias for keys past the query is not what llama.cpp's mask holds.
"""

from __future__ import annotations

import numpy as np

from ...adapters import NotSupported

#: rows x columns the op is given at most (the float32 `a`, its offset and the weights: 12 bytes each)
_MAX_ELEMENTS = 2**26
#: probe distances 2^0 .. 2^24 (exact in float32 and float16 up to 2^15; a probe whose weight ratio
#: underflows or is inexact is not used): the largest with slope * distance <= 40 fixes each slope
_PROBE_EXPONENTS = np.arange(0, 25)


def _ggml():
    from .ggml import _ggml as load

    return load()


def soft_max_ext(a: np.ndarray, mask: np.ndarray, *, max_bias: float, f16_mask: bool) -> np.ndarray:
    """`ggml_soft_max_ext(a, mask, 1.0, max_bias)` on float32 `a [B, H, R, C]` and `mask [B, 1, R, C]` (cast to
    F16 in the graph, as llama.cpp casts its KQ mask, when `f16_mask`), in a fresh context; float64 weights."""
    ggml = _ggml()
    if a.ndim != 4 or mask.ndim != 4 or mask.shape[1] != 1 or mask.shape[0] != a.shape[0] or \
            mask.shape[2:] != a.shape[2:]:
        # GGML_ASSERTs of ggml_soft_max_impl (mask ne[0] == a ne[0], ne[1] >= a ne[1], heads divide) abort
        raise ValueError(f"soft_max_ext: a {a.shape} and mask {mask.shape} must be [B, H, R, C] and [B, 1, R, C]")
    a = np.ascontiguousarray(a, np.float32)
    mask = np.ascontiguousarray(mask, np.float32)
    size = 4 * a.nbytes + 4 * mask.nbytes + 16 * 2**20
    ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=size, mem_buffer=None))
    try:
        ta = ggml.utils.from_numpy(a, ctx)
        tm = ggml.utils.from_numpy(mask, ctx)
        if f16_mask:
            tm = ggml.ggml_cast(ctx, tm, ggml.GGML_TYPE_F16)
        out = ggml.ggml_soft_max_ext(ctx, ta, tm, 1.0, float(max_bias))
        graph = ggml.ggml_new_graph(ctx)
        ggml.ggml_build_forward_expand(graph, out)
        ggml.ggml_graph_compute_with_ctx(ctx, graph, 1)
        return np.array(ggml.utils.to_numpy(out), np.float64).reshape(a.shape)  # to_numpy drops trailing ne of 1
    finally:
        ggml.ggml_free(ctx)


def op_slopes(num_heads: int, max_bias: float) -> np.ndarray:
    """The op's own slopes, float64 `[H]`: one row per probe distance D = 2^e with mask `[0, -D]` and `a = 0`,
    so `log(w0 / w1) = slope * D`; the largest D whose ratio stays below e^40 (no underflow) is used, which
    leaves the float32 softmax's few-ulp error divided by D."""
    distances = 2.0 ** _PROBE_EXPONENTS
    mask = np.zeros((1, 1, distances.size, 2), np.float32)
    mask[..., 1] = -distances
    w = soft_max_ext(np.zeros((1, num_heads, distances.size, 2), np.float32), mask, max_bias=max_bias, f16_mask=False)
    with np.errstate(divide="ignore"):
        ratio = np.log(w[0, :, :, 0]) - np.log(w[0, :, :, 1])  # [H, probes]
    usable = np.isfinite(ratio) & (ratio <= 40.0)
    if not usable[:, 0].all():
        raise NotSupported(f"ggml's slopes for max_bias={max_bias:g} are past e^40 at distance 1")
    best = usable.shape[1] - 1 - np.argmax(usable[:, ::-1], axis=1)  # the largest usable probe per head
    heads = np.arange(num_heads)
    return ratio[heads, best] / distances[best]


def _positions(name, positions) -> np.ndarray:
    """Integer positions, as `llama_pos` (int32) holds them."""
    p = np.asarray(positions)
    if p.dtype.kind == "f" and not np.array_equal(p, np.round(p)):
        raise NotSupported(f"llama.cpp's positions are integers (llama_pos), {name} holds fractions")
    if p.size and np.abs(p).max() >= 2**31:
        raise NotSupported(f"llama.cpp's positions are int32 (llama_pos), {name} reaches {np.abs(p).max():g}")
    return p.astype(np.int64)


def alibi_weights_bias(num_heads, q_positions, k_positions, *, max_bias, f16_mask) -> np.ndarray:
    """`slope_h * mask_ij` as ggml adds it, float64 `[..., H, q, k]` (the module docstring's read-back)."""
    from posenc_np._validate import check_position_pair, check_real_positions

    q = _positions("q_positions", check_real_positions("q_positions", q_positions))
    k = _positions("k_positions", check_real_positions("k_positions", k_positions))
    lead = check_position_pair(q.shape, k.shape)
    batch = int(np.prod(lead, dtype=np.int64))
    q = np.broadcast_to(q, lead + q.shape[-1:]).reshape(batch, q.shape[-1])
    k = np.broadcast_to(k, lead + k.shape[-1:]).reshape(batch, k.shape[-1])
    rows, cols = q.shape[1], k.shape[1] + 1
    if batch * rows * (cols - 1) == 0:  # ggml asserts on empty tensors (and aborts): nothing to compute
        return np.zeros(lead + (num_heads, rows, cols - 1))
    if batch * num_heads * rows * cols > _MAX_ELEMENTS:
        raise NotSupported(f"{batch * num_heads * rows * cols} softmax elements are past this adapter's "
                           f"{_MAX_ELEMENTS} (one float32 row per query and head)")
    distance = np.abs(q[:, :, None] - k[:, None, :])  # [B, q, k]; llama.cpp: -std::abs(p0 - p1) as float
    if distance.size and distance.max() >= 2**31:
        raise NotSupported("llama.cpp's distances p0 - p1 are int32")
    mask = np.zeros((batch, 1, rows, cols), np.float32)
    mask[:, 0, :, 1:] = -distance.astype(np.float32)
    slopes = op_slopes(num_heads, max_bias)
    offset = np.zeros((batch, num_heads, rows, cols), np.float32)
    offset[..., 1:] = (slopes[None, :, None, None] * distance[:, None]).astype(np.float32)
    w = soft_max_ext(offset, mask, max_bias=max_bias, f16_mask=f16_mask)
    with np.errstate(divide="ignore"):  # a zero weight (an F16 mask past 65504 is -inf) reads back as -inf
        bias = np.log(w[..., 1:]) - np.log(w[..., :1]) - offset[..., 1:].astype(np.float64)
    return bias.reshape(lead + (num_heads, rows, cols - 1))


def _check(num_heads, form, max_bias):
    from posenc_np.alibi import check_alibi_args

    num_heads = check_alibi_args(num_heads, form, max_bias)
    if form != "symmetric":
        raise NotSupported(f"llama.cpp's ALiBi mask is -|p0 - p1| (form 'symmetric', -inf for hidden cells); "
                           f"form {form!r} has other values for keys past the query")
    return num_heads


def _alibi_bias(f16_mask):
    def alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", max_bias=8.0, dtype=None):
        """The contract's `alibi_bias(form="symmetric", max_bias)` read back from `ggml_soft_max_ext` with
        llama.cpp's mask `-|p0 - p1|` (module docstring)."""
        heads = _check(num_heads, form, max_bias)
        bias = alibi_weights_bias(heads, q_positions, k_positions, max_bias=float(max_bias), f16_mask=f16_mask)
        from posenc_np.backend import numpy_dtype

        return bias.astype(numpy_dtype(dtype or "float32"))

    alibi_bias.__qualname__ = f"ggml_alibi_bias_{'f16' if f16_mask else 'f32'}_mask"
    return alibi_bias


def alibi_slopes(num_heads, *, max_bias=8.0):
    """The contract's `alibi_slopes` as `ggml_soft_max_ext` applies them (`op_slopes`), float32."""
    heads = _check(num_heads, "symmetric", max_bias)
    return op_slopes(heads, float(max_bias)).astype(np.float32)


alibi_bias = _alibi_bias(False)
alibi_bias_f16_mask = _alibi_bias(True)
