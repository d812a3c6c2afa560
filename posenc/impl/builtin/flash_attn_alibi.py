"""flash-attn's in-kernel ALiBi: `flash_attn/flash_attn_interface.py` `flash_attn_func(q, k, v, dropout_p=0.0,
softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, ...)` (written against
flash-attn 2.8.3.post2). A GPU-only built-in: the kernel is the CUDA extension `flash_attn_2_cuda`, so it runs
only where torch sees a CUDA device, `import flash_attn` succeeds and `posenc check --device cuda` places the
inputs there; elsewhere every attention case is a skip naming what is missing.

What flash-attn documents adding (its docstring; `csrc/flash_attn/src/alibi.h`), for query index i < q_len and
key index j < k_len, slopes `(nheads,)` or `(batch, nheads)` float32:

    non-causal:  bias[h, i, j] = -slope_h * |i + k_len - q_len - j|       (bottom-right aligned, symmetric)
    causal:      bias[h, i, j] = +slope_h * j  (alibi.h L39-50), the same row shifted by a per-row constant,
                 so softmax-equal to the line above under the bottom-right causal mask

added after the `softmax_scale` product (post-scale units, as the contract's `attention`). Mapping of the contract:

* `alibi_slopes(num_heads)`: flash-attn's own `get_alibi_slopes(nheads)` (`flash_attn/modules/mha.py`, what
  `MHA(use_alibi=True)` passes; Press et al.'s rule at max_bias 8). Its source is read from the installed file
  and executed alone (the module imports the CUDA package), so it runs on a CPU too. Other `max_bias`: a skip.
* `alibi_bias(num_heads, q_positions, k_positions, form=)`: flash-attn computes its bias inside the kernel and
  returns none, so this is a handle for `attention(bias=...)`: its values are the documented non-causal bias
  above for the slopes and indices this adapter passes (`documented_bias`), and it carries those slopes and the
  positions. Asked for a bias tensor in a dtype (the raw `alibi_bias` cases) it is a skip: only the kernel's
  attention output is flash-attn's.
* positions: the kernel sees indices, so the case's positions must be bottom-right aligned: keys
  `k0, k0 + 1, ..., k0 + k_len - 1` and queries the last q_len of them shifted to `k0 + k_len - q_len + i`
  (a KV-cache step; `require_alignment`). Then `q_pos[i] - k_pos[j] = i + k_len - q_len - j` and the documented
  bias is the contract's `form="symmetric"` exactly. Other positions (left padding, strided keys) are skips.
* forms: "symmetric" runs causal or not; "causal" (`-m (i - j)`) equals it on the keys a causal mask keeps and
  "bloom" (`+m j`) differs from it by `m i` along a row: both only with `causal=True` (softmax-equal), else skips.
* `attention(q, k, v, bias=handle, causal=, scale=)`: q, k, v `[batch, heads, s, d]` transposed to flash-attn's
  `(batch, seqlen, nheads, headdim)`; the weights come from the same call: q and k are padded with k_len zero
  channels and v extended by an identity over the keys, so `out[..., d:] = softmax(logits) @ I = weights`;
  `softmax_scale` is the case's scale (1/sqrt(d) of the unpadded d). `d + k_len` must be at most 256
  (flash-attn's largest head dim), else a skip.
* dtypes: float16 and bfloat16 only (flash-attn 2 has no float32 kernel): float32 and float64 are skips.
"""

from __future__ import annotations

import ast
import functools
import math

import numpy as np

from ...adapters import NotSupported, adapter
from ..implementation import Implementation
from ._kernel_bias import bias_handle, kernel_attention_args
from ._kernel_bias import require_alignment as kernel_alignment
from ._loading import package_dir

DISTRIBUTION = "flash-attn"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ("flash-attn-alibi",)
#: the dtypes flash-attn 2's CUDA kernels take (csrc/flash_attn/flash_api.cpp: "only support fp16 and bf16")
KERNEL_DTYPES = ("float16", "bfloat16")
#: flash-attn 2's largest head dim (flash_api.cpp: "FlashAttention forward only supports head dimension at most 256")
MAX_HEAD_DIM = 256

_MISSING = "--impl flash-attn-alibi: flash_attn is not installed (pip install flash-attn, a CUDA build)"


@functools.cache
def get_alibi_slopes():
    """flash-attn's `get_alibi_slopes(nheads)` from `flash_attn/modules/mha.py`, its source executed alone (it
    needs only `math`; the module's own imports need the CUDA package)."""
    path = package_dir("flash_attn", missing=_MISSING) / "modules" / "mha.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "get_alibi_slopes"]
    if not found:
        raise NotSupported(f"{path} defines no get_alibi_slopes")
    namespace = {"math": math}
    exec(compile(ast.Module(body=found, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace["get_alibi_slopes"]


@functools.cache
def kernel_refusal() -> str | None:
    """Why flash-attn's CUDA kernel cannot run in this process (None: it can): no CUDA device, or
    `flash_attn` (its CUDA extension `flash_attn_2_cuda`) does not import."""
    import torch

    if not torch.cuda.is_available():
        return ("flash_attn_func is a CUDA kernel and torch sees no CUDA device (torch.cuda.is_available() is "
                "False); run `posenc check --device cuda --impl flash-attn-alibi` on a GPU machine")
    try:
        import flash_attn  # noqa: F401 - its __init__ imports the CUDA extension flash_attn_2_cuda
    except ImportError as error:
        return f"flash_attn does not import: its CUDA extension flash_attn_2_cuda is missing or broken ({error})"
    return None


def _require_kernel(device) -> None:
    reason = kernel_refusal()
    if reason:
        raise NotSupported(reason)
    if getattr(device, "type", device) != "cuda":
        raise NotSupported(f"flash_attn_func takes CUDA tensors; these are on {device} (run with --device cuda)")


def require_alignment(q_positions, k_positions) -> None:
    """Check the case's positions are the indices flash-attn's bias reads, bottom-right aligned (`_kernel_bias`)."""
    kernel_alignment(q_positions, k_positions, kernel="flash-attn")


def documented_bias(slopes, q_len: int, k_len: int) -> np.ndarray:
    """The bias flash-attn's docstring says it adds for `alibi_slopes=slopes` (non-causal):
    `-slopes[..., h] * |i + k_len - q_len - j|`, `[..., heads, q_len, k_len]` in float64."""
    slopes = np.asarray(slopes, dtype=np.float64)[..., None, None]
    i = np.arange(q_len)[:, None]
    j = np.arange(k_len)[None, :]
    return -slopes * np.abs(i + k_len - q_len - j)


def alibi_slopes(num_heads, *, max_bias=8.0, dtype=None):
    """The contract's `alibi_slopes` as flash-attn's `get_alibi_slopes(nheads)` (max_bias 8 only)."""
    import torch

    if float(max_bias) != 8.0:
        raise NotSupported(f"flash-attn's get_alibi_slopes(nheads) has no max_bias (8 built in), not {max_bias:g}")
    slopes = get_alibi_slopes()(int(num_heads))
    return torch.tensor(slopes, dtype=adapter("torch").dtype(dtype or "float32"))


def alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", max_bias=8.0, dtype=None):
    """The handle `attention(bias=...)` runs flash_attn_func with (module docstring): the documented
    non-causal bias, float32, tagged with flash-attn's slopes, the positions and the form."""
    if dtype is not None:
        raise NotSupported("flash-attn adds its ALiBi bias inside flash_attn_func and returns no bias tensor: "
                           "it is judged through attention (the attention-causal cases)")
    if float(max_bias) != 8.0:
        raise NotSupported(f"flash-attn's get_alibi_slopes(nheads) has no max_bias (8 built in), not {max_bias:g}")
    ad = adapter("torch")
    q, k = np.asarray(ad.to_numpy(q_positions)), np.asarray(ad.to_numpy(k_positions))
    require_alignment(q, k)
    slopes = np.asarray(get_alibi_slopes()(int(num_heads)), dtype=np.float64)
    bias = documented_bias(slopes, q.shape[-1], k.shape[-1])
    if q.ndim == 2:
        bias = np.broadcast_to(bias, (q.shape[0], *bias.shape))
    return bias_handle(bias, (slopes, q, k, form), inside="flash_attn_func")


def attention(q, k, v, *, bias=None, causal=False, scale=None):
    """The contract's `attention` through one `flash_attn_func` call (module docstring): `bias` a handle of
    this adapter's `alibi_bias` (or None: no ALiBi); `(out, weights)` in q's dtype."""
    _require_kernel(q.device)
    scale, tag = kernel_attention_args(q, k, v, bias, call="flash_attn_func", dtypes=KERNEL_DTYPES, causal=causal,
                                       scale=scale)
    slopes = None if tag is None else tag[0]
    if tag is not None and not causal and tag[3] != "symmetric":
        raise NotSupported(f"without a causal mask flash-attn adds the symmetric form, not {tag[3]!r}")
    return flash_attn_alibi_weights(q, k, v, slopes, causal=causal, scale=scale)


def flash_attn_alibi_weights(q, k, v, slopes, *, causal, scale):
    """`(out, weights)` of `flash_attn_func(q', k', v', softmax_scale=scale, causal=, alibi_slopes=slopes)` with
    q', k' zero-padded and v' = [v | I] (`[batch, heads, s, d]` in and out)."""
    import torch
    from flash_attn import flash_attn_func

    (batch, heads, _, d), k_len, dv = q.shape, k.shape[-2], v.shape[-1]
    width = max(d, dv) + k_len
    if width > MAX_HEAD_DIM:
        raise NotSupported(f"reading the weights needs head dim d + k_len = {width} > {MAX_HEAD_DIM}, flash-attn's "
                           "largest")

    def padded(t, extra=None):  # [b, h, s, c] -> (b, s, h, width): zero channels, or `extra` after t
        tail = t.new_zeros(*t.shape[:-1], width - t.shape[-1]) if extra is None else extra
        return torch.cat([t, tail], dim=-1).transpose(1, 2).contiguous()

    eye = torch.eye(k_len, dtype=v.dtype, device=v.device).expand(batch, heads, k_len, k_len)
    eye = torch.cat([eye, eye.new_zeros(batch, heads, k_len, width - dv - k_len)], dim=-1)
    alibi = None if slopes is None else torch.tensor(np.asarray(slopes), dtype=torch.float32, device=q.device)
    with torch.no_grad():
        out = flash_attn_func(padded(q), padded(k), padded(v, eye), softmax_scale=float(scale), causal=bool(causal),
                              alibi_slopes=alibi).transpose(1, 2)
    return out[..., :dv], out[..., dv:dv + k_len]


def version() -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def load() -> Implementation:
    package_dir("flash_attn", missing=_MISSING)
    reason = kernel_refusal()
    where = "CUDA" if reason is None else "not runnable here: " + reason.split(";")[0]
    return Implementation("flash-attn-alibi", "torch",
                          {"alibi_slopes": alibi_slopes, "alibi_bias": alibi_bias, "attention": attention},
                          version=version(), dtypes=KERNEL_DTYPES + ("float32", "float64"), differentiable=False,
                          description=f"flash_attn_func(alibi_slopes=get_alibi_slopes(H)), bottom-right aligned "
                                      f"({where})")


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = "`pip install flash-attn` on a CUDA machine (the prebuilt wheel or a CUDA build; GPU-only)"
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = ()
#: the verdicts at the pinned version, as data (not run where the suite runs: no CUDA device)
EXPECTED = None
