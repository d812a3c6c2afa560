"""transformers' attention biases beyond the main built-in (checked on transformers 5.24 with torch 2.13).

ALiBi builders of the modeling files (BLOOM's `build_alibi_tensor` is judged by `--impl transformers`):

* "transformers-mpt": models/mpt `build_mpt_alibi_tensor(num_heads, sequence_length, alibi_bias_max)`
  (L43-63): slopes `2^(-k * alibi_bias_max / N)`, N = 2^ceil(log2 H), k = 1..N, reordered
  `concat(s[1::2], s[::2])[:H]`, times `arange(1 - L, 1)`: `[H, 1, L]`, the bias `m_h (j - (L - 1))`
  added to every query row (`MptAttention.forward` slices the last `key_length` columns). That is the
  contract's `alibi_bias(form="causal", max_bias=alibi_bias_max)` for a query at the last key, L - 1; for
  other query rows it differs by the row constant `m_h (L - 1 - i)` (softmax-equal under a causal mask:
  the `attention-causal` case). Key positions `k` are the columns `k` of the tensor for L = max(k) + 1.
  `alibi_slopes(H, max_bias)`: the slopes read back as `-tensor[:, 0, 0]` for L = 2.
* "transformers-falcon": models/falcon `build_alibi_tensor(attention_mask, num_heads, dtype)` (L149-177):
  BLOOM's slopes and key positions `(cumsum(mask) - 1) * mask`, but `slopes.bfloat16() * arange`: a bf16
  slope times the integer position, rounded to bf16, then cast to `dtype` (form "bloom", `m_h j`).
  `alibi_slopes(H)`: the bias at key position 1, i.e. the bf16 slopes Falcon multiplies with.

T5 attention through the interfaces `T5Attention` dispatches to (`ALL_ATTENTION_FUNCTIONS`, PR #47014):

* "transformers-t5-eager", "transformers-t5-sdpa", "transformers-t5-flex": `attention(q, k, v, bias=t5_bias,
  scale=1.0)` as `T5Attention(config).forward(hidden_states, key_value_states=..., position_bias=bias)` with
  `config._attn_implementation` "eager", "sdpa" or "flex_attention", and `t5_bias` as `T5Attention.compute_bias`
  (its `[1, heads, q, k]` output is the `position_bias` the model passes on). The case's q, k, v
  `[batch, heads, s, d]` reach the interface unchanged: a tiny random T5 config (nothing downloaded) whose
  projections `q`, `k`, `v`, `o` are 0/1 selection matrices (each output one input times 1: exact in
  every dtype) of `hidden_states = [q' | 0]` and `key_value_states = [k' | v']`. The weights come from the
  same call: per head `q' = [q | 0]`, `k' = [k | 0]`, `v' = [v | I_K]` (`d_kv = d + K`), so the output's last
  K channels are `softmax(logits) @ I = weights`. T5's logits are unscaled (`self.scaling = 1.0`): a case
  with another scale is a skip. `causal=True` becomes an additive `-inf` mask (the contract's bottom-right
  alignment). The registry's T5 attention case runs at batch 2, where the flex interface indexes the
  batch-1 `position_bias` by batch (finding below).

Precision class "float32": the ALiBi tensors are formed in float32 (Falcon: bf16) and cast to the case's
dtype; T5's bucket gather is exact and its attention runs in the inputs' dtype.
"""

from __future__ import annotations

import numpy as np

from ...adapters import NotSupported, adapter
from ..implementation import Implementation, ImplementationUnavailable
from . import transformers as _hf

DISTRIBUTION = "transformers"
#: the T5 attention interfaces: name suffix -> `config._attn_implementation`
T5_INTERFACES = {"eager": "eager", "sdpa": "sdpa", "flex": "flex_attention"}
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ("transformers-mpt", "transformers-falcon", *(f"transformers-t5-{name}" for name in T5_INTERFACES))


def _torch():
    try:
        import torch
        import transformers
    except ImportError as error:
        raise ImplementationUnavailable(f"--impl transformers-bias: {error}") from error
    return torch, transformers


def _key_positions(ad, q_positions, k_positions, who):
    """The 1-D non-negative integer (query, key) positions a single-sequence bias builder takes."""
    q = np.asarray(ad.to_numpy(q_positions))
    k = np.asarray(ad.to_numpy(k_positions))
    if q.ndim != 1 or k.ndim != 1:
        raise NotSupported(f"{who} builds one sequence's bias; got query positions {q.shape}, key positions {k.shape}")
    if k.dtype.kind not in "iu" or k.size == 0 or k.min() < 0:
        raise NotSupported(f"{who} indexes keys 0..L-1; got key positions of dtype {k.dtype} "
                           f"from {k.min() if k.size else None}")
    return q, k.astype(np.int64)


# --- MPT ---------------------------------------------------------------------------------------------

def mpt_alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", max_bias=8.0, dtype=None):
    """The contract's `alibi_bias(form="causal")` through `build_mpt_alibi_tensor`: the `[H, 1, L]` bias of the
    last query, columns `k_positions`, added to every query row as `MptAttention` does."""
    torch, _ = _torch()
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    if form != "causal":
        raise NotSupported(f"MPT's build_mpt_alibi_tensor computes m_h (j - (L-1)), form 'causal', not {form!r}")
    ad = adapter("torch")
    q, k = _key_positions(ad, q_positions, k_positions, "build_mpt_alibi_tensor")
    table = build_mpt_alibi_tensor(int(num_heads), int(k.max()) + 1, alibi_bias_max=float(max_bias))
    out = table[:, 0, torch.from_numpy(k)]  # [H, K]
    return out[:, None, :].expand(-1, q.size, -1).to(ad.dtype(dtype or "float32"))


def mpt_alibi_slopes(num_heads, *, max_bias=8.0, dtype=None):
    """The contract's `alibi_slopes`: `-build_mpt_alibi_tensor(H, 2, max_bias)[:, 0, 0]` (the bias one key back)."""
    _torch()
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    ad = adapter("torch")
    return (-build_mpt_alibi_tensor(int(num_heads), 2, alibi_bias_max=float(max_bias))[:, 0, 0]).to(
        ad.dtype(dtype or "float32"))


# --- Falcon ------------------------------------------------------------------------------------------

def falcon_alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", dtype=None):
    """The contract's `alibi_bias(form="bloom")` through Falcon's `build_alibi_tensor` (bf16 product)."""
    torch, _ = _torch()
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor

    if form != "bloom":
        raise NotSupported(f"Falcon's build_alibi_tensor computes form='bloom' (m_h * key position), not {form!r}")
    ad = adapter("torch")
    q = np.asarray(ad.to_numpy(q_positions))
    k = np.asarray(ad.to_numpy(k_positions))
    keys = k.reshape(-1, k.shape[-1]) if k.ndim > 1 else k[None]
    mask = torch.from_numpy(_hf._bloom_mask(keys.astype(np.int64)))  # NotSupported when not of the cumsum form
    out = build_alibi_tensor(mask, int(num_heads), ad.dtype(dtype or "float32"))
    out = out.reshape(keys.shape[0], int(num_heads), 1, keys.shape[-1]).expand(-1, -1, q.shape[-1], -1)
    return out if k.ndim > 1 else out[0]


def falcon_alibi_slopes(num_heads, *, dtype=None):
    """The contract's `alibi_slopes` as Falcon multiplies with them: its bias at key position 1 (bf16 slopes)."""
    torch, _ = _torch()
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor

    ad = adapter("torch")
    out = build_alibi_tensor(torch.ones(1, 2, dtype=torch.int64), int(num_heads), ad.dtype(dtype or "float32"))
    return out[:, 0, 1]


# --- T5 attention through its interfaces -------------------------------------------------------------

def _selection(rows, cols, offset, dtype):
    """A `[rows, cols]` 0/1 matrix picking input `offset + r` for output r (`nn.Linear` weight layout)."""
    import torch

    weight = torch.zeros(rows, cols, dtype=dtype)
    weight[torch.arange(rows), offset + torch.arange(rows)] = 1
    return weight


def t5_attention_module(heads, head_dim, interface, dtype):
    """A `T5Attention` over `d_kv = head_dim` per head whose projections select `[q | k | v]` parts of its inputs:
    `q(h)` the first `heads * head_dim` channels of `hidden_states`, `k(kv)` the first and `v(kv)` the second
    half of `key_value_states`, `o` back into the first half of `d_model = 2 * heads * head_dim`."""
    torch, _ = _torch()
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    inner = heads * head_dim
    config = T5Config(num_heads=heads, d_kv=head_dim, d_model=2 * inner, dropout_rate=0.0)
    config._attn_implementation = interface
    module = T5Attention(config, has_relative_attention_bias=False).eval()
    with torch.no_grad():
        module.q.weight.copy_(_selection(inner, 2 * inner, 0, torch.float32))
        module.k.weight.copy_(_selection(inner, 2 * inner, 0, torch.float32))
        module.v.weight.copy_(_selection(inner, 2 * inner, inner, torch.float32))
        module.o.weight.copy_(_selection(inner, 2 * inner, 0, torch.float32).T)
    return module.to(dtype)


def _t5_attention(interface):
    def attention(q, k, v, *, bias=None, causal=False, scale=None):
        """The contract's `attention` through `T5Attention.forward` on the given interface (unscaled logits)."""
        torch, _ = _torch()
        from posenc_np.attention import causal_mask, check_attention_args

        if scale is None or float(scale) != 1.0:
            raise NotSupported(f"T5 attention computes unscaled logits (scaling 1.0), not scale={scale!r}")
        if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or q.shape[:2] != k.shape[:2] or v.shape[:2] != k.shape[:2]:
            raise NotSupported("T5Attention takes [batch, heads, s, d] q, k, v with equal batch and heads; got "
                               f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
        check_attention_args(q.shape, k.shape, v.shape, causal=causal, scale=scale)
        (batch, heads, q_len, d), k_len, dv = q.shape, k.shape[-2], v.shape[-1]
        if dv != d:
            raise NotSupported(f"T5Attention's values have d_kv channels like its keys; got d={d}, dv={dv}")
        width = d + k_len
        eye = torch.eye(k_len, dtype=v.dtype).expand(batch, heads, k_len, k_len)
        q2 = torch.cat([q, q.new_zeros(batch, heads, q_len, k_len)], dim=-1)
        k2 = torch.cat([k, k.new_zeros(batch, heads, k_len, k_len)], dim=-1)
        v2 = torch.cat([v, eye], dim=-1)

        def flat(t):  # [b, h, s, w] -> [b, s, h * w]
            return t.transpose(1, 2).reshape(batch, t.shape[2], heads * width)

        hidden = torch.cat([flat(q2), torch.zeros_like(flat(q2))], dim=-1)
        key_values = torch.cat([flat(k2), flat(v2)], dim=-1)
        position_bias = q.new_zeros(1, heads, q_len, k_len) if bias is None else bias
        position_bias = position_bias[None] if position_bias.dim() == 3 else position_bias
        mask = None
        if causal:
            hidden_keys = torch.from_numpy(~causal_mask(q_len, k_len))
            mask = torch.zeros(batch, 1, q_len, k_len, dtype=q.dtype).masked_fill(hidden_keys, -float("inf"))
        module = t5_attention_module(heads, width, interface, q.dtype)
        with torch.no_grad():
            out = module(hidden, mask=mask, key_value_states=key_values, position_bias=position_bias)[0]
        out = out[..., : heads * width].reshape(batch, q_len, heads, width).transpose(1, 2)
        return out[..., :d], out[..., d:]

    attention.__qualname__ = f"t5_attention_{interface}"
    return attention


def load() -> tuple[Implementation, ...]:
    _, transformers = _torch()
    version = transformers.__version__
    mpt = Implementation("transformers-mpt", "torch", {"alibi_bias": mpt_alibi_bias, "alibi_slopes": mpt_alibi_slopes},
                         version=version, description="MPT build_mpt_alibi_tensor (alibi_bias_max): the last "
                                                      "query's causal-form row, added to every query")
    falcon = Implementation("transformers-falcon", "torch",
                            {"alibi_bias": falcon_alibi_bias, "alibi_slopes": falcon_alibi_slopes},
                            version=version, description="Falcon build_alibi_tensor: BLOOM's form, "
                                                         "slopes.bfloat16() * key position")
    t5 = tuple(Implementation(f"transformers-t5-{name}", "torch",
                              {"t5_bias": _hf.t5_bias, "attention": _t5_attention(interface)},
                              version=version, differentiable=False,
                              description=f"T5Attention.forward, attn_implementation={interface!r} "
                                          "(position_bias from compute_bias; the case's batch, 2 in the registry)")
               for name, interface in T5_INTERFACES.items())
    return (mpt, falcon, *t5)


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = "`pip install transformers` (posenc's dev extra)"
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = (
    {
        "implementation": "transformers-falcon",
        "title": "Falcon's build_alibi_tensor multiplies bf16 slopes by the key position in bf16",
        "text": ("models/falcon build_alibi_tensor (L149-177) computes BLOOM's ALiBi but as "
                 "`slopes[..., None].bfloat16() * arange_tensor`: each slope is rounded to bfloat16 and so is its "
                 "product with the key position, before the cast to the model's dtype. With a float32 model the bias "
                 "m_h * j is off by up to 13.3 logits at key positions below 3000 (12 heads; 4 with 8 heads), and "
                 "the error is not constant along j, so softmax does not absorb it; BLOOM's own builder (float32) "
                 "is exact to float32 rounding."),
        "reproduction": 'import math\nimport torch\nfrom transformers.models.falcon.modeling_falcon import build_alibi_tensor\nH, L = 12, 3000\ngot = build_alibi_tensor(torch.ones(1, L, dtype=torch.int64), H, torch.float32)[:, 0, :].double()  # [H, L]\nc = 2 ** math.floor(math.log2(H))  # Press et al.\'s slopes, as BLOOM computes them\nslopes = [2 ** (-8 * (h + 1) / c) for h in range(c)] + [2 ** (-8 * (2 * i + 1) / (2 * c)) for i in range(H - c)]\nwant = torch.tensor(slopes, dtype=torch.float64)[:, None] * torch.arange(L, dtype=torch.float64)\nworst = float((got - want).abs().max())\nprint("max |falcon alibi - m_h * j| over 12 heads, j < 3000:", worst)  # 13.3 (bf16 slope times j, rounded to bf16)\n',
        "still": "worst > 1.0",
    },
    {
        "implementation": "transformers-t5-flex",
        "title": "T5 with attn_implementation='flex_attention' fails at batch 2 or more",
        "text": ("transformers 5.24 dispatches T5Attention through ALL_ATTENTION_FUNCTIONS with a separate "
                 "position_bias; compute_bias returns it as [1, heads, q, k] and the flex interface's score_mod "
                 "reads position_bias[batch_idx, head_idx, q_idx, kv_idx] (integrations/flex_attention.py L286-292). "
                 "At batch 1 eager, sdpa and flex agree (7e-7); at batch 2 the compiled CPU kernel raises "
                 "'index out of bounds: 0 <= tmp8 < 1' (related: pytorch #172225). A tiny random T5 encoder shows it; "
                 "eager and sdpa run the same batch."),
        "reproduction": 'import torch\nfrom transformers import T5Config, T5EncoderModel\ntorch.manual_seed(0)\ndef config(attn):\n    return T5Config(vocab_size=32, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=4, attn_implementation=attn)\neager = T5EncoderModel(config("eager")).eval()\nflex = T5EncoderModel(config("flex_attention")).eval()\nflex.load_state_dict(eager.state_dict())\nids = torch.randint(0, 32, (2, 8))  # batch 2\nwith torch.no_grad():\n    want = eager(input_ids=ids).last_hidden_state\n    try:\n        got = flex(input_ids=ids).last_hidden_state\n        error = None\n        print("flex - eager at batch 2:", float((got - want).abs().max()))\n    except RuntimeError as e:  # the [1, heads, q, k] position_bias indexed by batch in the compiled score_mod\n        error = str(e)\n        print("flex_attention at batch 2 raises:", error.splitlines()[0][-60:])\n',
        "still": "error is not None and 'index out of bounds' in error",
    },
)

#: the verdicts at the pinned version, as data: every float32 comparison that fails or errors,
#: "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
EXPECTED = {
    # MPT adds the last query's row m_h (j - (L-1)) to every query (softmax-equal under a causal mask): the raw
    # bias is the spec's with every query at the last key
    **{f"transformers-mpt {case}": "alibi-form"
       for case in ("mpt-alibi/kv-offset", "mpt-alibi/max-bias-4", "press-alibi/kv-offset", "press-alibi/kv-offset-long",
                    "press-alibi/long", "press-alibi/past-256", "press-alibi/past-2048", "press-alibi/short")},
    # bf16 slopes times the key position, rounded to bf16 (finding above)
    **{f"transformers-falcon bloom-alibi/{case}": "slopes" for case in ("kv-offset", "left-pad", "short")},
}
