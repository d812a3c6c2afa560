"""The training probes of a torch implementation: its backward through `torch.autograd.grad` with the
cotangent in the memory form a case names, what the forward and the backward wrote into the caller's tensors
(and whether autograd's version counter saw it), the upstream gradient through an op that saves its output,
and the gradients of the cos/sin tables a kernel is fed. Each returns NumPy float64 results; the judging is
`posenc.check.run_training`'s, against `posenc.impl.training`."""

from __future__ import annotations

import numpy as np
import torch

from ..adapters import adapter
from .rotary_kernel import hf_tables

__all__ = ["cotangent_in_form", "kernel_probe", "function_probe", "angle_probe"]


def _tensor(array, dtype):
    # a copy: torch.from_numpy shares memory, and a kernel that writes into its input or its cotangent must
    # not change the case's arrays the spec's answer is computed from
    return adapter("torch").from_numpy(np.array(array, order="C", copy=True)).to(dtype)


def cotangent_in_form(cotangent: np.ndarray, form: str, dtype) -> torch.Tensor:
    """The cotangent `[batch, heads, seq, dim]` as a tensor of that memory form (values unchanged)."""
    if form == "zero-stride":
        return _tensor(cotangent[:, :1], dtype).expand(cotangent.shape)
    if form == "bshd":
        return _tensor(cotangent.transpose(0, 2, 1, 3), dtype).transpose(1, 2)
    if form == "non-contiguous":
        wide = np.concatenate([cotangent, np.full_like(cotangent, np.nan)], axis=-1)
        return _tensor(wide, dtype)[..., : cotangent.shape[-1]]
    return _tensor(cotangent, dtype)


def _leaf_and_view(array, dtype, order):
    """`(leaf, x)`: a leaf tensor that requires grad and the `[batch, heads, seq, dim]` tensor a kernel is
    given: a copy of the leaf made by autograd (a non-leaf, as a projection's output is: torch refuses in-place
    writes into a leaf, and an in-place kernel must be judged where users call it), or (`order="bshd"`) a
    transposed view of such a `[batch, seq, heads, dim]` copy, the memory order transformers' attention
    layers hand their RoPE (`q_proj(x).view(b, s, h, d).transpose(1, 2)`)."""
    if order == "bshd":
        leaf = _tensor(array.transpose(0, 2, 1, 3), dtype).requires_grad_(True)
        return leaf, leaf.clone().transpose(1, 2)
    leaf = _tensor(array, dtype).requires_grad_(True)
    return leaf, leaf.clone()


def _from_leaf(grad, order):
    return None if grad is None else (grad.transpose(1, 2) if order == "bshd" else grad)


def _np(tensor):
    return None if tensor is None else tensor.detach().to(torch.float64).cpu().numpy()


def _aliasing(run, inputs, cotangents, leaf_grads):
    """`(forward wrote into (name, versioned) ..., cotangent changed)` around `run()`."""
    before = [(name, t.detach().clone(), t._version) for name, t in inputs]
    saved = [c.detach().clone() for c in cotangents]
    outs = run()
    written = [(name, t._version != version) for (name, copy, version), (_, t) in zip(before, inputs, strict=True)
               if not torch.equal(t.detach(), copy)]
    grads = torch.autograd.grad(outs, leaf_grads, cotangents, allow_unused=True)
    mutated = any(not torch.equal(c.detach(), s) for c, s in zip(cotangents, saved, strict=True))
    return outs, grads, written, mutated


def kernel_probe(kernel, x, positions, kwargs, cotangent, *, form, dtype_name, tables, order="bhsd"):
    """Backward, aliasing and (with `tables`) table gradients of `fn(q, k, cos, sin, unsqueeze_dim)`.

    `q = x[..., :r]`, `k` the same with its heads reversed; the cotangents are `w` and `w` with its heads
    reversed. Returns a dict: `grad_q`, `grad_k` (k's heads back in order), `written` (inputs the forward
    changed, with whether their version counter moved), `cotangent_mutated`, `dcos`, `dsin` (None: no
    gradient), `cos`, `sin` (float64 tables) and `upstream` (the gradient through `tanh`, or the message of
    the error autograd raised).
    """
    fn, layout = kernel
    dtype = adapter("torch").dtype(dtype_name)
    r = kwargs.get("rotary_dim") or x.shape[-1]
    rope = {k: v for k, v in kwargs.items() if k not in ("rotary_dim", "rotary_pct", "layout")}
    cos64, sin64, unsqueeze_dim = hf_tables(positions, x.shape, r, layout=layout, **rope)
    heads = 1 if unsqueeze_dim == 1 else 2
    q_leaf, q = _leaf_and_view(np.ascontiguousarray(x[..., :r]), dtype, order)
    k_leaf, k = _leaf_and_view(np.ascontiguousarray(np.flip(x[..., :r], heads)), dtype, order)
    cos = _tensor(cos64, dtype).requires_grad_(tables)
    sin = _tensor(sin64, dtype).requires_grad_(tables)
    wq = cotangent_in_form(cotangent[..., :r], form, dtype)
    wk = cotangent_in_form(np.ascontiguousarray(np.flip(cotangent[..., :r], heads)), form, dtype)
    leaves = [q_leaf, k_leaf] + ([cos, sin] if tables else [])
    outs, grads, written, mutated = _aliasing(lambda: fn(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim),
                                              [("q", q), ("k", k)], [wq, wk], leaves)
    grads = [_from_leaf(grads[0], order), _from_leaf(grads[1], order), *grads[2:]]
    result = dict(grad_q=_np(grads[0]), grad_k=np.flip(_np(grads[1]), heads), written=written,
                  cotangent_mutated=mutated, cos=cos64, sin=sin64, heads_axis=heads, rotary_dim=r)
    if tables:
        result.update(dcos=_np(grads[2]), dsin=_np(grads[3]))
    result["upstream"] = _upstream(lambda h: fn(h, h.flip(heads), cos.detach(), sin.detach(),
                                                unsqueeze_dim=unsqueeze_dim)[0], x[..., :r], cotangent[..., :r], dtype,
                                   order)
    return result


def angle_probe(angle_kernel, x, positions, kwargs, cotangent, *, dtype_name):
    """Backward and `d/dfreqs` of an angle-fed kernel `fn(t [s, b, h, r], freqs [s, 1, 1, r])` (the same dict as
    `kernel_probe`: `grad_q`, `dfreqs`, `freqs` (float64), `rotary_dim`); positions one row `[s]`."""
    from posenc_np import rope_frequencies

    fn, layout = angle_kernel
    dtype = adapter("torch").dtype(dtype_name)
    r = kwargs.get("rotary_dim") or x.shape[-1]
    inv_freq, _ = rope_frequencies(r, base=kwargs.get("base", 10000.0))
    half = np.asarray(positions, np.float64).reshape(-1, 1) * inv_freq
    full = np.concatenate([half, half], -1) if layout == "half" else np.repeat(half, 2, axis=-1)
    freqs64 = full[:, None, None, :]
    leaf = _tensor(np.ascontiguousarray(x[..., :r].transpose(2, 0, 1, 3)), dtype).requires_grad_(True)
    freqs = _tensor(freqs64, torch.float32).requires_grad_(True)
    w = _tensor(np.ascontiguousarray(cotangent[..., :r].transpose(2, 0, 1, 3)), dtype)
    out = fn(leaf, freqs)
    grad_t, grad_f = torch.autograd.grad(out, [leaf, freqs], w, allow_unused=True)
    return dict(grad_q=None if grad_t is None else _np(grad_t).transpose(1, 2, 0, 3), dfreqs=_np(grad_f),
                freqs=freqs64, rotary_dim=r, layout=layout)


def function_probe(fn, x, positions, kwargs, cotangent, *, form, dtype_name, order="bhsd"):
    """Backward and aliasing of a torch `apply_rope(x, positions, **kwargs)` (the same dict as `kernel_probe`,
    `grad_q` the gradient; no tables)."""
    dtype = adapter("torch").dtype(dtype_name)
    leaf, xt = _leaf_and_view(x, dtype, order)
    pt = adapter("torch").from_numpy(np.asarray(positions))
    w = cotangent_in_form(cotangent, form, dtype)
    outs, grads, written, mutated = _aliasing(lambda: _first(fn(xt, pt, **kwargs)), [("x", xt)], [w], [leaf])
    return dict(grad_q=_np(_from_leaf(grads[0], order)), written=written, cotangent_mutated=mutated,
                upstream=_upstream(lambda h: _first(fn(h, pt, **kwargs)), x, cotangent, dtype, order))


def _first(out):
    """The output judged: a function returning `(q, k)` for one `x` (a kernel's pair) is judged by its `q`."""
    return out[0] if isinstance(out, (tuple, list)) else out


def _upstream(call, x, cotangent, dtype, order):
    """The gradient of `<call(tanh(x0)), w>` with respect to `x0` (tanh saves its output for its backward: a
    kernel that overwrites its input unseen corrupts it), or the message autograd raised instead."""
    leaf, x0 = _leaf_and_view(np.ascontiguousarray(x), dtype, order)
    try:
        out = call(torch.tanh(x0))
        (grad,) = torch.autograd.grad(out, leaf, _tensor(cotangent, dtype))
    except RuntimeError as error:  # autograd saw the in-place write: the error a user gets, not a wrong number
        return str(error).splitlines()[0][:200]
    return _np(_from_leaf(grad, order))
