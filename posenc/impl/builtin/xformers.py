"""xformers' RoPE with KV-cache emplacement: `xformers/ops/rope_padded.py` `rope_padded(xq, xk, xv, cache_k, cache_v,
attn_bias, *, theta=10000.0, out_q=None, adjacents=True, internal_dtype="")` over the Triton kernel
`xformers/ops/_triton/rope_padded_kernels.py` `_rope_padded_kernel` (written against facebookresearch/xformers
01aedc3; only these arguments, stable across releases, are passed). A GPU-only built-in: xformers' wheels are
CUDA builds and `rope_padded` enters `torch.cuda.device(xq.device)`, so it runs only where torch sees a CUDA
device, `xformers.ops` imports and `posenc check --device cuda` places the inputs there; elsewhere every case is a
skip naming what is missing. xformers has no ALiBi operator (its attention takes any bias tensor; "We don't have
anything for Alibi", xformers #700), so this adapter is RoPE only.

What the kernel computes, per query `i` of batch element `b` (queries packed along dim 1, `q_seqlen[b]` each, the
cache `kv_padding` rows per element of which the first `kv_seqlen[b]` are in use):

    seq_pos = kv_seqlen[b] - (q_seqlen[b] - i)            (the queries are the last tokens of their sequence)
    angle_j = seq_pos * theta ** (-2j / dim),  j < dim / 2 (`tl_math.pow`, float32 unless internal_dtype="f64")
    pairs (2j, 2j + 1) with `adjacents=True` (Meta LLaMA), (j, j + dim / 2) with False (HF `rotate_half`)

and writes the rotated `xq` to `out_q`, the rotated `xk` into `cache_k` at rows `seqstart_k[b] + seq_pos`.
Mapping of the contract:

* rows: every row of consecutive positions `o_r .. o_r + s - 1` along x's sequence axis (`offset_rows`) is one
  batch element, one head: `q_seqlen = [s] * R`, `kv_seqlen = [o_r + s]`, `kv_padding = max(kv_seqlen)`
  (`padded_layout`), so `seq_pos = o_r + i`, the case's position. Negative positions are skips.
* `xq = xk`: the rows `(1, R * s, 1, dim)`, `xv` zeros; "xformers-rope-padded" returns `out_q`,
  "xformers-rope-padded-cache-k" the rotated keys read back from `cache_k` at the rows the kernel wrote.
* `theta = base`, `adjacents = layout == "interleaved"`; the kernel rotates the whole head dim and knows no
  scaling, so partial rotary and every `scaling` are skips. Angles: class "float32" (`internal_dtype=""`: a
  float32 `pow` and product); "xformers-rope-padded-f64" passes `internal_dtype="f64"`, class "float64".
* `rope_padded` raises "Gradients not supported." for inputs that require grad: inference only.
"""

from __future__ import annotations

import functools

import numpy as np

from ...adapters import NotSupported
from ..implementation import Implementation
from ._kernel_inputs import offset_rows, rotary_width

DISTRIBUTION = "xformers"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ("xformers-rope-padded", "xformers-rope-padded-cache-k", "xformers-rope-padded-f64")
#: the largest cache (rows per element) this adapter allocates: positions past it are skips
MAX_CACHE_ROWS = 1 << 21


@functools.cache
def kernel_refusal() -> str | None:
    """Why `rope_padded` cannot run in this process (None: it can): no CUDA device, or `xformers.ops` (a CUDA
    build) does not import."""
    import torch

    if not torch.cuda.is_available():
        return ("xformers' rope_padded runs its Triton kernel on CUDA tensors and torch sees no CUDA device "
                "(torch.cuda.is_available() is False); run `posenc check --device cuda --impl xformers` on a GPU "
                "machine")
    try:
        from xformers.ops import rope_padded  # noqa: F401
        from xformers.ops.fmha.attn_bias import BlockDiagonalCausalWithOffsetPaddedKeysMask  # noqa: F401
    except ImportError as error:
        return f"xformers.ops.rope_padded does not import ({error}); pip install xformers (a CUDA build)"
    return None


def _require_kernel(device) -> None:
    reason = kernel_refusal()
    if reason:
        raise NotSupported(reason)
    if device.type != "cuda":
        raise NotSupported(f"rope_padded takes CUDA tensors; these are on {device} (run with --device cuda)")


def padded_layout(offsets, seq: int) -> dict:
    """The `BlockDiagonalCausalWithOffsetPaddedKeysMask.from_seqlens` arguments for rows starting at `offsets`
    (`[R]` non-negative ints), `seq` queries each: `q_seqlen`, `kv_seqlen`, `kv_padding` (module docstring)."""
    offsets = np.asarray(offsets).reshape(-1)
    if offsets.size and int(offsets.min()) < 0:
        raise NotSupported(f"rope_padded reads positions as cache rows from 0; these rows start at {int(offsets.min())}")
    kv_seqlen = [int(o) + seq for o in offsets]
    padding = max(kv_seqlen, default=seq)
    if padding > MAX_CACHE_ROWS:
        raise NotSupported(f"positions up to {padding - 1} need a KV cache of {padding} rows per sequence "
                           f"(this adapter allocates at most {MAX_CACHE_ROWS})")
    return {"q_seqlen": [seq] * offsets.size, "kv_seqlen": kv_seqlen, "kv_padding": padding}


def kernel_positions(layout: dict) -> np.ndarray:
    """`seq_pos` of every packed query as `_rope_padded_kernel` computes it: `kv_seqlen[b] - (q_seqlen[b] - i)`."""
    pairs = zip(layout["q_seqlen"], layout["kv_seqlen"], strict=True)
    return np.concatenate([k - (q - np.arange(q)) for q, k in pairs] or [np.zeros(0, dtype=np.int64)])


def make_apply_rope(*, internal_dtype: str = "", cache_k: bool = False):
    """The contract's `apply_rope` through `rope_padded` (module docstring): the rotated queries, or with
    `cache_k` the rotated keys read back from the cache."""

    def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None):
        import torch

        _require_kernel(x.device)
        if rotary_width(x.shape[-1], rotary_dim, rotary_pct) != x.shape[-1]:
            raise NotSupported("rope_padded rotates the whole head dim (no partial rotary)")
        if scaling is not None:
            raise NotSupported("rope_padded's angles are seq_pos * theta^(-2j/dim): no scaling")
        from xformers.ops import rope_padded
        from xformers.ops.fmha.attn_bias import BlockDiagonalCausalWithOffsetPaddedKeysMask

        rows = offset_rows(tuple(x.shape), positions.cpu().numpy(), what="xformers' rope_padded")  # placed on --device
        moved = x.movedim(rows.seq_axis, -2)  # [*lead, seq, dim]
        seq, dim = moved.shape[-2:]
        plan = padded_layout(rows.offsets, seq)
        count = len(plan["q_seqlen"])
        bias = BlockDiagonalCausalWithOffsetPaddedKeysMask.from_seqlens(
            q_seqlen=plan["q_seqlen"], kv_padding=plan["kv_padding"], kv_seqlen=plan["kv_seqlen"])
        xq = moved.reshape(1, count * seq, 1, dim).contiguous()
        cache = xq.new_zeros(1, count * plan["kv_padding"], 1, dim)
        with torch.no_grad():
            out_q = rope_padded(xq, xq.clone(), torch.zeros_like(xq), cache, torch.zeros_like(cache), bias,
                                theta=float(base), adjacents=layout == "interleaved", internal_dtype=internal_dtype)
        if cache_k:  # the rows the kernel wrote: seqstart_k[b] + seq_pos = b * kv_padding + o_b + i
            slots = torch.from_numpy(np.repeat(np.arange(count) * plan["kv_padding"], seq)
                                     + kernel_positions(plan)).to(x.device)
            out_q = cache[0, slots][None]
        return out_q.reshape(moved.shape).movedim(-2, rows.seq_axis)

    return apply_rope


def load() -> tuple[Implementation, ...]:
    import importlib.metadata

    reason = kernel_refusal()
    where = "CUDA" if reason is None else "not runnable here: " + reason.split(";")[0]
    common = dict(version=importlib.metadata.version(DISTRIBUTION), differentiable=False)
    return (Implementation("xformers-rope-padded", "torch", {"apply_rope": make_apply_rope()}, angles="float32",
                           description=f"rope_padded(adjacents=), the rotated queries out_q ({where})", **common),
            Implementation("xformers-rope-padded-cache-k", "torch", {"apply_rope": make_apply_rope(cache_k=True)},
                           angles="float32", description=f"rope_padded, the rotated keys read back from cache_k "
                                                         f"({where})", **common),
            Implementation("xformers-rope-padded-f64", "torch", {"apply_rope": make_apply_rope(internal_dtype="f64")},
                           angles="float64", description=f"rope_padded(internal_dtype='f64'), out_q ({where})",
                           **common))


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = "`pip install xformers` on a CUDA machine (its wheels are CUDA builds; GPU-only)"
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = ()
#: the verdicts at the pinned version, as data (not run where the suite runs: not installed, no CUDA device)
EXPECTED = None
