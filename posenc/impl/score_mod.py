"""A PyTorch FlexAttention `score_mod` judged as the bias it adds (`Implementation.from_score_mod`).

FlexAttention (torch.nn.attention.flex_attention, torch >= 2.5) computes

    logits[b, h, i, j] = score_mod(scale * q[b, h, i] . k[b, h, j], b, h, i, j)

calling `score_mod(score, b, h, q_idx, kv_idx)` on 0-d tensors under `torch.func.vmap` over the four
indices (torch/nn/attention/flex_attention.py, `_vmap_for_bhqkv`; the eager CPU path runs the same
vmapped function). A bias family's score_mod returns `score + bias(h, q_idx, kv_idx)`, so evaluating it
on score 0 over the case's position grid gives the bias itself:

    bias[h, i, j] = score_mod(0, 0, h, q_positions[i], k_positions[j])

(`[batch, n]` positions: `bias[b, h, i, j]` with each row's own `b`), formed in flex's working precision
(float32 scores for every input dtype below float64: torch/_higher_order_ops/flex_attention.py
`_math_attention_inner`, torch 2.13) and cast to the case's dtype. It is judged as the contract's
`alibi_bias [heads, q, k]` or `t5_bias [heads, q, k]`. The positions
are passed as `q_idx`/`kv_idx`, as a model with a KV cache offsets them (attn-gym's score_mods read
`q_idx - kv_idx`). The bias is also run through `flex_attention` itself: the contract's `attention(q, k,
v, bias=, causal=, scale=)` returns `(out, weights)`; when `bias` is one this module evaluated, the
score_mod is what flex applies (with the case's positions behind the indices), otherwise `score +
bias[b, h, i, j]`. The weights come from the same flex call: `v` is extended by an identity over the
keys, so `out[..., dv:] = softmax(logits) @ I = weights`. The causal mask is the contract's bottom-right
one (`j <= i + k_len - q_len`), applied as `-inf` in the score_mod.

The score_mod is given either directly (a fixed `score_mod` for one head count / table) or as a factory
that builds one from the case's arguments: family "alibi": `factory(num_heads)` (attn-gym's
`generate_alibi_bias(H)`); family "t5": `factory(table, bidirectional=, num_buckets=, max_distance=)`
with `table` the case's `[num_buckets, heads]` bias table as a torch tensor. An ALiBi score_mod declares the
form it computes (`form=`, the paper's "causal" `(kv_idx - q_idx) * m` by default): cases of another form
are skips, as is a `max_bias` other than 8 unless the factory takes a `max_bias` keyword.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Callable

import numpy as np
import torch

from ..adapters import NotSupported, adapter

__all__ = ["SCORE_MOD_FAMILIES", "score_mod_functions", "evaluate_score_mod", "flex_attention_with"]

#: the bias families a score_mod is judged as, -> the contract function its evaluated bias is
SCORE_MOD_FAMILIES = {"alibi": "alibi_bias", "t5": "t5_bias"}

#: the attribute a bias tensor evaluated here carries: `(score_mod, q_positions, k_positions)`, so that
#: `attention(bias=...)` runs flex with the score_mod itself rather than with the evaluated table
_TAG = "_posenc_score_mod"


def _positions(ad, positions) -> torch.Tensor:
    """Positions `[n]` or `[batch, n]` as the int64 tensor a score_mod's `q_idx` / `kv_idx` are."""
    p = np.asarray(ad.to_numpy(positions))
    if p.ndim not in (1, 2):
        raise NotSupported(f"a score_mod takes q_idx / kv_idx per position, [n] or [batch, n]; got positions of "
                           f"shape {p.shape}")
    if p.dtype.kind not in "iu":
        raise NotSupported(f"a score_mod's q_idx / kv_idx are integer indices; got positions of dtype {p.dtype}")
    return torch.from_numpy(p.astype(np.int64))


def evaluate_score_mod(score_mod: Callable, num_heads: int, q_positions: torch.Tensor, k_positions: torch.Tensor,
                       *, dtype=torch.float32) -> torch.Tensor:
    """`score_mod(0, b, h, q_positions[b, i], k_positions[b, j])` over `[heads, q, k]` (`[batch, heads, q, k]`
    for `[batch, n]` positions, b = 0 otherwise), vmapped over the indices as flex calls it, in `dtype`."""
    from torch.func import vmap

    if q_positions.dim() != k_positions.dim():
        raise NotSupported(f"query positions {tuple(q_positions.shape)} and key positions {tuple(k_positions.shape)} "
                           "must both be [n] or both [batch, n]")
    zero = torch.zeros((), dtype=dtype)

    def at(b, h, i, j):
        return score_mod(zero, b, h, i, j)

    over_hqk = vmap(vmap(vmap(at, in_dims=(None, None, None, 0)), in_dims=(None, None, 0, None)),
                    in_dims=(None, 0, None, None))
    heads = torch.arange(num_heads)
    if q_positions.dim() == 1:
        out = over_hqk(torch.zeros((), dtype=torch.int64), heads, q_positions, k_positions)
    else:
        out = vmap(over_hqk, in_dims=(0, None, 0, 0))(torch.arange(q_positions.shape[0]), heads, q_positions,
                                                      k_positions)
    return out.to(dtype)


def _takes_keyword(fn: Callable, keyword: str) -> bool:
    """Whether `fn` takes `keyword` by name or through `**kwargs` (a signature that cannot be read: no)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return keyword in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _as_bhsd(t: torch.Tensor) -> tuple[torch.Tensor, tuple]:
    """`t [..., s, d]` as flex's `[B, H, s, d]` (leading dims folded into B, H) and the leading shape."""
    lead = tuple(t.shape[:-2])
    if len(lead) == 0:
        return t[None, None], lead
    if len(lead) == 1:
        return t[None], lead
    return t.reshape(-1, lead[-1], *t.shape[-2:]), lead


def flex_attention_with(q, k, v, score_mod: Callable, *, causal=False, scale=None):
    """`(out [..., q, dv], weights [..., q, k])` of one eager `flex_attention` call with `score_mod` (plus the
    contract's bottom-right causal mask), weights read from an identity appended to `v`."""
    from torch.nn.attention.flex_attention import flex_attention

    from posenc_np.attention import check_attention_args

    scale = check_attention_args(q.shape, k.shape, v.shape, causal=causal, scale=scale)
    qb, lead = _as_bhsd(q)
    kb, _ = _as_bhsd(k)
    vb, _ = _as_bhsd(v)
    if kb.shape[:2] != qb.shape[:2] or vb.shape[:2] != qb.shape[:2]:
        raise NotSupported(f"flex_attention here takes q, k, v with equal leading dims; got {tuple(q.shape)}, "
                           f"{tuple(k.shape)}, {tuple(v.shape)}")
    q_len, k_len, dv = qb.shape[-2], kb.shape[-2], vb.shape[-1]
    eye = torch.eye(k_len, dtype=vb.dtype).expand(*vb.shape[:2], k_len, k_len)
    offset = k_len - q_len

    def mod(score, b, h, i, j):
        score = score_mod(score, b, h, i, j)
        return torch.where(j <= i + offset, score, -float("inf")) if causal else score

    with warnings.catch_warnings():  # eager flex warns that it is the unfused debug path: that path is the point
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        out = flex_attention(qb, kb, torch.cat([vb, eye], dim=-1), score_mod=mod, scale=scale)
    out, weights = out[..., :dv], out[..., dv:]
    return out.reshape(*lead, q_len, dv), weights.reshape(*lead, q_len, k_len)


def _bias_score_mod(bias: torch.Tensor, batch_heads: tuple) -> Callable:
    """A score_mod adding `bias` (broadcast to `[B, H, q, k]`) to the score: a bias not evaluated here."""
    def mod(score, b, h, i, j):
        return score + full[b, h, i, j].to(score.dtype)

    full = bias
    while full.dim() < 4:
        full = full[None]
    full = full.expand(*batch_heads, *full.shape[-2:])
    return mod


def score_mod_functions(score_mod_or_factory: Callable, family: str, *, factory: bool, form: str = "causal") -> dict:
    """The contract functions `{<family's bias>: ..., "attention": ...}` of a score_mod (or factory).

    `form`: the ALiBi form the score_mod computes (a score_mod has no form argument): cases of another form
    are skips. attn-gym's `score + (kv_idx - q_idx) * m_h` is the paper's "causal" form.
    """
    from posenc_np.alibi import ALIBI_FORMS

    if family not in SCORE_MOD_FAMILIES:
        raise ValueError(f"family={family!r} is not one of {list(SCORE_MOD_FAMILIES)}")
    if form not in ALIBI_FORMS:
        raise ValueError(f"form={form!r} is not one of {list(ALIBI_FORMS)}")
    if not callable(score_mod_or_factory):
        raise TypeError(f"score_mod_or_factory={score_mod_or_factory!r} is not callable")
    ad = adapter("torch")
    declared_form = form

    def tagged(mod, heads, q_positions, k_positions, dtype):
        q, k = _positions(ad, q_positions), _positions(ad, k_positions)
        # flex's working precision: float32 scores for every dtype below float64 (_math_attention_inner)
        working = torch.float64 if dtype == torch.float64 else torch.float32
        out = evaluate_score_mod(mod, heads, q, k, dtype=working).to(dtype)
        setattr(out, _TAG, (mod, q, k))
        return out

    def alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", max_bias=8.0, dtype=None):
        """The contract's `alibi_bias` as the score_mod's bias, for the form it was declared to compute; a
        `max_bias` other than 8 reaches a factory that takes a `max_bias` keyword, else the case is a skip."""
        if form != declared_form:
            raise NotSupported(f"the score_mod computes the {declared_form!r} ALiBi form, not {form!r}")
        extra = {}
        if float(max_bias) != 8.0:
            if not (factory and _takes_keyword(score_mod_or_factory, "max_bias")):
                raise NotSupported(f"the score_mod{' factory' if factory else ''} takes no max_bias "
                                   f"(this case has max_bias={max_bias:g})")
            extra["max_bias"] = max_bias
        mod = score_mod_or_factory(int(num_heads), **extra) if factory else score_mod_or_factory
        return tagged(mod, int(num_heads), q_positions, k_positions, ad.dtype(dtype or "float32"))

    def t5_bias(table, q_positions, k_positions, *, bidirectional=True, num_buckets=32, max_distance=128):
        """The contract's `t5_bias` as the score_mod's bias (a factory is given the case's table)."""
        mod = (score_mod_or_factory(table, bidirectional=bidirectional, num_buckets=num_buckets,
                                    max_distance=max_distance) if factory else score_mod_or_factory)
        return tagged(mod, int(table.shape[-1]), q_positions, k_positions, table.dtype)

    def attention(q, k, v, *, bias=None, causal=False, scale=None):
        """The contract's `attention` through one eager `flex_attention` call."""
        if bias is None:
            return flex_attention_with(q, k, v, lambda s, b, h, i, j: s, causal=causal, scale=scale)
        qb, _ = _as_bhsd(q)
        found = getattr(bias, _TAG, None)
        if found is None:
            return flex_attention_with(q, k, v, _bias_score_mod(bias, tuple(qb.shape[:2])), causal=causal,
                                       scale=scale)
        mod, q_pos, k_pos = found
        if qb.shape[1] != bias.shape[-3]:
            raise NotSupported(f"the score_mod's bias has {bias.shape[-3]} heads, q has {qb.shape[1]}")
        # flex's indices are 0..q-1 / 0..k-1; the score_mod sees the case's positions behind them
        if q_pos.dim() == 1:
            return flex_attention_with(q, k, v, lambda s, b, h, i, j: mod(s, b, h, q_pos[i], k_pos[j]),
                                       causal=causal, scale=scale)
        return flex_attention_with(q, k, v, lambda s, b, h, i, j: mod(s, b, h, q_pos[b, i], k_pos[b, j]),
                                   causal=causal, scale=scale)

    bias_fn = alibi_bias if family == "alibi" else t5_bias
    return {SCORE_MOD_FAMILIES[family]: bias_fn, "attention": attention}
