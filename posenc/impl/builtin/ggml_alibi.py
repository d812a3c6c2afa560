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

Through `ggml_flash_attn_ext(q, k, v, mask, scale, max_bias, softcap)`, llama.cpp's path with flash attention on
(the op takes only an F16 mask), the offsets are `q . k` and `v` is the identity, so each output row is the
row's weights; its online softmax doubles the read-back error (still under 0.1 of the float32 tolerance). Its
three CPU paths (one chunk, split KV for one query against 512+ keys, Q tiles of 64) read the mask alike.

What it expresses: the symmetric form (llama.cpp's mask; non-causal models such as jina-bert-v2 see keys on
both sides, causal ones mask the rest with -inf), integer positions (`llama_pos` is int32), any leading batch
axes (one ggml row block per batch element), `max_bias > 0` (0 turns ALiBi off in ggml). The causal and BLOOM
forms are skips: their raw bias for keys past the query is not what llama.cpp's mask holds.
"""

from __future__ import annotations

import numpy as np

from ...adapters import NotSupported
from ._ggml_library import load_ggml

#: rows x columns the op is given at most (the float32 `a`, its offset and the weights: 12 bytes each)
_MAX_ELEMENTS = 2**26
#: probe distances 2^0 .. 2^24 (exact in float32 and float16 up to 2^15; a probe whose weight ratio
#: underflows or is inexact is not used): the largest with slope * distance <= 40 fixes each slope
_PROBE_EXPONENTS = np.arange(0, 25)


def _fresh(array) -> np.ndarray:
    """A float32 C-order copy: `from_numpy` takes ggml's byte strides `nb` from NumPy's strides, and a broadcast
    or `ascontiguousarray` view may keep stride 0 on an axis of length 1 (ggml then asserts `nb0 == 4`)."""
    return np.array(array, dtype=np.float32, order="C", copy=True)


def soft_max_ext(a: np.ndarray, mask: np.ndarray, *, max_bias: float, f16_mask: bool) -> np.ndarray:
    """`ggml_soft_max_ext(a, mask, 1.0, max_bias)` on float32 `a [B, H, R, C]` and `mask [B, 1, R, C]` (cast to
    F16 in the graph, as llama.cpp casts its KQ mask, when `f16_mask`), in a fresh context; float64 weights."""
    ggml = load_ggml()
    if a.ndim != 4 or mask.ndim != 4 or mask.shape[1] != 1 or mask.shape[0] != a.shape[0] or \
            mask.shape[2:] != a.shape[2:]:
        # GGML_ASSERTs of ggml_soft_max_impl (mask ne[0] == a ne[0], ne[1] >= a ne[1], heads divide) abort
        raise ValueError(f"soft_max_ext: a {a.shape} and mask {mask.shape} must be [B, H, R, C] and [B, 1, R, C]")
    a, mask = _fresh(a), _fresh(mask)
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


def flash_attn_ext(q: np.ndarray, k: np.ndarray, mask: np.ndarray, *, max_bias: float) -> np.ndarray:
    """`ggml_flash_attn_ext(q, k, v, mask, 1.0, max_bias, 0.0)` with `v` the identity, so each output row is the
    row's attention weights: float32 `q [B, H, R, D]`, `k [B, 1, C, D]` (one KV head for all, as under GQA),
    `mask [B, 1, R, C]` cast to F16 in the graph (the op takes only an F16 mask, llama.cpp casts its own);
    float64 weights `[B, H, R, C]`."""
    ggml = load_ggml()
    batch, heads, rows, width = q.shape
    cols = k.shape[2]
    if k.shape != (batch, 1, cols, width) or mask.shape != (batch, 1, rows, cols):
        # GGML_ASSERTs of ggml_flash_attn_ext (K . Q shapes, mask heads and batch dividing Q's) abort
        raise ValueError(f"flash_attn_ext: q {q.shape}, k {k.shape}, mask {mask.shape} must be [B, H, R, D], "
                         f"[B, 1, C, D], [B, 1, R, C]")
    q, k, mask = (_fresh(t) for t in (q, k, mask))
    v = _fresh(np.broadcast_to(np.eye(cols, dtype=np.float32), (batch, 1, cols, cols)))
    size = 4 * (q.nbytes + k.nbytes + v.nbytes + mask.nbytes) + 4 * batch * heads * rows * cols + 64 * 2**20
    ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=size, mem_buffer=None))
    try:
        tq, tk, tv = (ggml.utils.from_numpy(t, ctx) for t in (q, k, v))
        tm = ggml.ggml_cast(ctx, ggml.utils.from_numpy(mask, ctx), ggml.GGML_TYPE_F16)
        out = ggml.ggml_flash_attn_ext(ctx, tq, tk, tv, tm, 1.0, float(max_bias), 0.0)
        graph = ggml.ggml_new_graph(ctx)
        ggml.ggml_build_forward_expand(graph, out)
        ggml.ggml_graph_compute_with_ctx(ctx, graph, 1)
        out = np.array(ggml.utils.to_numpy(out), np.float64).reshape(batch, rows, heads, cols)  # ne [DV, H, R, B]
        return out.transpose(0, 2, 1, 3)
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


#: the ops an ALiBi bias is read back through: softmax with an F32 or F16 mask, flash attention (F16 mask)
OPS = ("soft_max", "soft_max_f16", "flash_attn")


def alibi_weights_bias(num_heads, q_positions, k_positions, *, max_bias, op="soft_max") -> np.ndarray:
    """`slope_h * mask_ij` as ggml adds it, float64 `[..., H, q, k]` (the module docstring's read-back), through
    `op` (`OPS`). Under flash attention the offsets are `q . k` (`q_(h,i) = s_h e_i`, `k_j[i] = |i - j|`: one
    float32 product each, as `a` holds them for the softmax)."""
    from posenc_np.backend import check_position_pair, check_real_positions

    q = _positions("q_positions", check_real_positions("q_positions", q_positions))
    k = _positions("k_positions", check_real_positions("k_positions", k_positions))
    lead = check_position_pair(q.shape, k.shape)
    batch = int(np.prod(lead, dtype=np.int64))
    q = np.broadcast_to(q, lead + q.shape[-1:]).reshape(batch, q.shape[-1])
    k = np.broadcast_to(k, lead + k.shape[-1:]).reshape(batch, k.shape[-1])
    rows, cols = q.shape[1], k.shape[1] + 1
    if batch * rows * (cols - 1) == 0:  # ggml asserts on empty tensors (and aborts): nothing to compute
        return np.zeros(lead + (num_heads, rows, cols - 1))
    elements = batch * max(num_heads * rows, cols if op == "flash_attn" else 0) * cols  # V is [C, C]
    if elements > _MAX_ELEMENTS:
        raise NotSupported(f"{elements} elements are past this adapter's {_MAX_ELEMENTS} (one float32 row per "
                           f"query and head{', an identity V' if op == 'flash_attn' else ''})")
    distance = np.abs(q[:, :, None] - k[:, None, :])  # [B, q, k]; llama.cpp: -std::abs(p0 - p1) as float
    if distance.size and distance.max() >= 2**31:
        raise NotSupported("llama.cpp's distances p0 - p1 are int32")
    mask = np.zeros((batch, 1, rows, cols), np.float32)
    mask[:, 0, :, 1:] = -distance.astype(np.float32)
    slopes = op_slopes(num_heads, max_bias).astype(np.float32)
    offset = np.zeros((batch, num_heads, rows, cols), np.float32)
    offset[..., 1:] = slopes[None, :, None, None] * distance[:, None].astype(np.float32)  # float32 products
    if op == "flash_attn":
        q_rows = slopes[None, :, None, None] * np.eye(rows, dtype=np.float32)  # [1, H, R, R]
        k_rows = np.zeros((batch, 1, cols, rows), np.float32)
        k_rows[:, 0, 1:, :] = distance.transpose(0, 2, 1)
        w = flash_attn_ext(np.broadcast_to(q_rows, (batch, num_heads, rows, rows)), k_rows, mask, max_bias=max_bias)
    else:
        w = soft_max_ext(offset, mask, max_bias=max_bias, f16_mask=op == "soft_max_f16")
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


def _alibi_bias(op):
    def alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", max_bias=8.0, dtype=None):
        """The contract's `alibi_bias(form="symmetric", max_bias)` read back from `ggml_soft_max_ext` (or
        `ggml_flash_attn_ext`) with llama.cpp's mask `-|p0 - p1|` (module docstring)."""
        heads = _check(num_heads, form, max_bias)
        bias = alibi_weights_bias(heads, q_positions, k_positions, max_bias=float(max_bias), op=op)
        from posenc_np.backend import numpy_dtype

        return bias.astype(numpy_dtype(dtype or "float32"))

    alibi_bias.__qualname__ = f"ggml_alibi_bias_{op}"
    return alibi_bias


def alibi_slopes(num_heads, *, max_bias=8.0):
    """The contract's `alibi_slopes` as `ggml_soft_max_ext` applies them (`op_slopes`), float32."""
    heads = _check(num_heads, "symmetric", max_bias)
    return op_slopes(heads, float(max_bias)).astype(np.float32)


alibi_bias = _alibi_bias("soft_max")
alibi_bias_f16_mask = _alibi_bias("soft_max_f16")
alibi_bias_flash_attn = _alibi_bias("flash_attn")
