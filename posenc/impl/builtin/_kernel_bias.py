"""An ALiBi bias that exists only inside an attention kernel (flash-attn's `alibi_slopes`, vLLM's CPU attention
op): the contract's `alibi_bias` returns a tagged tensor handle, which the same adapter's `attention(bias=...)`
reads, and any other use of it is a skip. The kernels read query and key indices, so the case's positions must
be bottom-right aligned (`require_alignment`)."""

from __future__ import annotations

import functools
import math

import numpy as np

from ...adapters import NotSupported

#: the attribute of a bias handle: the adapter's tag `(slopes [H] float64, q_positions, k_positions, form)`
TAG = "_posenc_kernel_alibi"
#: the torch functions a bias handle answers: attribute reads (`shape`, `dtype`, `device`), `dim()`, `size()`, repr
_METADATA = frozenset({"__get__", "dim", "size", "__repr__"})


def require_alignment(q_positions, k_positions, *, kernel: str) -> None:
    """Check the case's positions are the indices `kernel`'s bias reads, bottom-right aligned: every row's
    keys `k0 .. k0 + k_len - 1` and queries `k0 + k_len - q_len .. k0 + k_len - 1`. NotSupported otherwise."""
    q = np.asarray(q_positions)
    k = np.asarray(k_positions)
    if q.ndim not in (1, 2) or k.ndim != q.ndim or (q.ndim == 2 and q.shape[0] != k.shape[0]):
        raise NotSupported(f"{kernel}'s ALiBi reads one index per query and key, [n] or [batch, n] positions; "
                           f"got {q.shape} and {k.shape}")
    q_len, k_len = q.shape[-1], k.shape[-1]
    start = k[..., :1]
    aligned = (np.array_equal(k, start + np.arange(k_len))
               and np.array_equal(q, start + (k_len - q_len) + np.arange(q_len)))
    if not aligned:
        raise NotSupported(f"{kernel}'s ALiBi is computed on indices (bottom-right aligned): it expresses keys "
                           "k0..k0+k_len-1 with the last q_len of them as queries, not query positions "
                           f"{q.reshape(-1)[:4].tolist()}... against keys {k.reshape(-1)[:4].tolist()}...")


def kernel_attention_args(q, k, v, bias, *, call: str, dtypes: tuple, causal, scale):
    """`(scale, tag)` of an attention kernel's call that adds ALiBi from a handle's slopes: the logit scale
    (1/sqrt(d) when None), and the handle's tag (None without a bias). q, k, v torch `[batch, heads, s, d]` with
    equal batch and heads, in one of `dtypes`; `bias` None or a handle of as many slopes as heads.
    NotSupported naming `call` otherwise."""
    from posenc_np.attention import check_attention_args

    scale = check_attention_args(q.shape, k.shape, v.shape, causal=causal, scale=scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or not (q.shape[:2] == k.shape[:2] == v.shape[:2]):
        raise NotSupported(f"{call} takes [batch, heads, s, d] q, k, v here with equal batch and heads; got "
                           f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if str(q.dtype).removeprefix("torch.") not in dtypes:
        raise NotSupported(f"{call} takes {' and '.join(dtypes)} here, not {q.dtype}")
    if bias is None:
        return scale, None
    tag = handle_tag(bias)
    if tag is None:
        raise NotSupported(f"{call} adds ALiBi from per-head slopes, not an arbitrary bias tensor")
    if len(tag[0]) != q.shape[1]:
        raise NotSupported(f"the ALiBi handle has {len(tag[0])} heads, q has {q.shape[1]}")
    return scale, tag


def bias_handle(values: np.ndarray, tag: tuple, *, inside: str):
    """A float32 torch tensor of `values` that carries `tag` (`handle_tag` reads it back); `inside` names the
    call that computes the bias, for the skip any other use of the handle gets."""
    import torch

    out = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).as_subclass(_handle_class())
    setattr(out, TAG, tag)
    out._posenc_inside = inside
    return out


def handle_tag(bias):
    """The tag of a `bias_handle`, or None for any other bias."""
    return getattr(bias, TAG, None)


@functools.cache
def _handle_class():
    import torch

    class KernelBias(torch.Tensor):
        """A bias handle: any torch operation on it is a skip (the case would judge values the kernel never
        exposes, e.g. the difference of two forms' raw logits); `attention` reads only its tag."""

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", None) in _METADATA:  # shape, dtype, device, dim(): what callers inspect
                with torch._C.DisableTorchFunctionSubclass():
                    return func(*args, **(kwargs or {}))
            inside = next((a._posenc_inside for a in args if hasattr(a, "_posenc_inside")),
                          "the attention kernel")
            raise NotSupported(f"this ALiBi bias exists only inside {inside}: the handle is for "
                               f"attention(bias=...), not for {getattr(func, '__name__', func)}")

    return KernelBias
