"""Hugging Face transformers (checked on transformers 5.24 with torch 2.13): the code its modeling files run.

* `apply_rope`: a rotary class built from a config whose `rope_parameters` carry the case's base and
  scaling (`ROPE_INIT_FUNCTIONS`: linear, dynamic, yarn, llama3, longrope, with their dynamic updates)
  and partial rotary as `partial_rotary_factor` (models slice q/k to the tables' width and concatenate
  the rest back, as done here), then the modeling file's `apply_rotary_pos_emb(q, k, cos, sin,
  unsqueeze_dim)`: layout "half" -> `LlamaRotaryEmbedding` (partial: `GPTNeoXRotaryEmbedding`, whose
  default type reads the factor) + models/llama `apply_rotary_pos_emb` (`rotate_half`);
  "interleaved" -> `CohereRotaryEmbedding` (`repeat_interleave`) + models/cohere `apply_rotary_pos_emb`
  (pairs (2j, 2j+1), computed in float32); multi-axis with shared frequencies and three axes ->
  `Qwen2VLRotaryEmbedding` (contiguous sections) or `Qwen3VLTextRotaryEmbedding` (interleaved), half
  layout. `q = x`, `k = x` with its heads reversed: both outputs are checked. Positions come as
  `position_ids [batch, seq]` (`[3, batch, seq]`); 4-D x only.
* "transformers-gptj": `apply_rope` as GPT-J's attention runs it, a float32 sin/cos table of `n_positions`
  = 4096 rows gathered with `position_ids` (base 10000, no scaling) and models/gptj `apply_rotary_pos_emb`
  (`rotate_every_two`, interleaved pairs); declared `max_positions=4096`, so the edge set sees what the
  gather does past the table and for negative positions.
* `alibi_bias` (form "bloom"): models/bloom `build_alibi_tensor(attention_mask, num_heads, dtype)`, the
  mask recovered from the key positions `(cumsum(mask) - 1) * mask` (key positions 0..k-1, left padding).
* `t5_bucket`: models/t5 `T5Attention._relative_position_bucket`; `t5_bias`: `T5Attention.compute_bias`
  with the case's table as `relative_attention_bias` (keys 0..k-1, queries past..past+q-1).

Precision class "float32": the rotary classes form `position_ids.float() @ inv_freq` in float32 and cast
cos/sin to the inputs' dtype.
"""

from __future__ import annotations

import numpy as np

from ...adapters import NotSupported, adapter
from ..implementation import Implementation, ImplementationUnavailable
from ..rotary_kernel import hf_position_ids, rotated_pair
from . import transformers_sinusoids, transformers_vision
from ._kernel_inputs import require_shared_three_axes

DISTRIBUTION = "transformers"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ('transformers', 'transformers-gptj', *transformers_sinusoids.NAMES, *transformers_vision.NAMES)

#: posenc scaling types transformers' ROPE_INIT_FUNCTIONS compute (the others are other runtimes' variants)
HF_ROPE_TYPES = ("linear", "dynamic", "yarn", "llama3", "longrope")
#: max_position_embeddings when the scaling does not fix it: larger than every case's position
_LONG = 2**21
#: rows of GPT-J's position table (`n_positions`): the edge set's table length (posenc.check.cases_edge)
GPTJ_TABLE_ROWS = 4096


def _torch():
    try:
        import torch
        import transformers
    except ImportError as error:
        raise ImplementationUnavailable(f"--impl transformers: {error}") from error
    return torch, transformers


def rope_config(head_dim, rotary_dim, base, scaling, *, mrope_section=None):
    """A `LlamaConfig` whose rotary classes compute the contract's `(rotary_dim, base, scaling)` for heads of
    `head_dim` (partial rotary as `partial_rotary_factor = rotary_dim / head_dim`, the models' key)."""
    from transformers import LlamaConfig

    params = {"rope_type": "default"} if scaling is None else dict(scaling)
    kind = params.pop("type", None) or params.get("rope_type")
    params["rope_type"] = kind
    if kind != "default" and kind not in HF_ROPE_TYPES:
        raise NotSupported(f"scaling rope_type {kind!r} is not one of transformers' ({', '.join(HF_ROPE_TYPES)})")
    original = params.get("original_max_position_embeddings")
    if kind == "dynamic":  # transformers' dynamic NTK reads the original length from max_position_embeddings
        max_positions = params.pop("original_max_position_embeddings", None) or _LONG
    elif original is not None and "factor" in params:
        max_positions = int(original * params["factor"])
    else:
        max_positions = _LONG
    if mrope_section is not None:
        params["mrope_section"] = list(mrope_section)
    params["rope_theta"] = float(base)
    if rotary_dim != head_dim:
        params["partial_rotary_factor"] = rotary_dim / head_dim
    return LlamaConfig(hidden_size=head_dim, num_attention_heads=1, num_key_value_heads=1, head_dim=head_dim,
                       max_position_embeddings=max_positions, rope_parameters=params)


def _rotary(layout, axes, interleaved_sections, partial):
    """`(rotary class, apply_rotary_pos_emb)` of the modeling file for a layout / multi-axis form."""
    if axes is None:
        if layout == "half" and partial:  # GPT-NeoX's class reads partial_rotary_factor for the default type too
            from transformers.models.gpt_neox import modeling_gpt_neox as m

            return m.GPTNeoXRotaryEmbedding, m.apply_rotary_pos_emb
        if layout == "half":
            from transformers.models.llama import modeling_llama as m

            return m.LlamaRotaryEmbedding, m.apply_rotary_pos_emb
        from transformers.models.cohere import modeling_cohere as m

        return m.CohereRotaryEmbedding, m.apply_rotary_pos_emb
    if layout != "half":
        raise NotSupported("transformers' multi-axis rotary classes (Qwen2-VL, Qwen3-VL) use the half layout")
    if interleaved_sections:
        from transformers.models.qwen3_vl import modeling_qwen3_vl as m

        return m.Qwen3VLTextRotaryEmbedding, m.apply_rotary_pos_emb
    from transformers.models.qwen2_vl import modeling_qwen2_vl as m

    return m.Qwen2VLRotaryEmbedding, m.apply_rotary_pos_emb


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None,
               mrope_section=None, mrope_interleaved=False, mrope_frequencies="shared"):
    """The contract's `apply_rope` through transformers' rotary class and `apply_rotary_pos_emb`."""
    from posenc_np.rope import resolve_rotary_dim

    torch, _ = _torch()
    ad = adapter("torch")
    x_np = np.asarray(ad.to_numpy(x))
    r = resolve_rotary_dim(x_np.shape[-1], rotary_dim, rotary_pct)
    axes = None
    if mrope_section is not None:
        require_shared_three_axes("transformers' text M-RoPE classes", mrope_section, mrope_frequencies)
        axes = 3
    ids, unsqueeze_dim = hf_position_ids(np.asarray(ad.to_numpy(positions)), x_np.shape, axes=axes)
    rotary_class, apply = _rotary(layout, axes, bool(mrope_interleaved), r != x_np.shape[-1])
    rotary = rotary_class(rope_config(x_np.shape[-1], r, base, scaling, mrope_section=mrope_section))
    cos, sin = rotary(x[..., :r], torch.from_numpy(ids))
    if cos.shape[-1] != r:
        raise NotSupported(f"{rotary_class.__name__} built tables of width {cos.shape[-1]}, not rotary_dim={r}")
    return rotated_pair(ad, x, x_np, r, unsqueeze_dim, lambda q, k: apply(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim))


def gptj_apply_rope(x, positions, *, layout="interleaved", rotary_dim=None, rotary_pct=None):
    """The contract's `apply_rope` as GPT-J's attention computes it: `GPTJRotaryEmbedding` (a float32
    `[max_position_embeddings, rotary_dim]` sin/cos table gathered with `position_ids`, base 10000) and
    models/gptj `apply_rotary_pos_emb(tensor [b, s, h, d], sin, cos)` (`rotate_every_two`)."""
    from posenc_np.rope import resolve_rotary_dim

    torch, transformers = _torch()
    from transformers.models.gptj import modeling_gptj as m

    if layout != "interleaved":
        raise NotSupported("GPT-J rotates interleaved pairs (rotate_every_two) only")
    ad = adapter("torch")
    x_np = np.asarray(ad.to_numpy(x))
    r = resolve_rotary_dim(x_np.shape[-1], rotary_dim, rotary_pct)
    ids, heads_axis = hf_position_ids(np.asarray(ad.to_numpy(positions)), x_np.shape)
    config = transformers.GPTJConfig(n_embd=x_np.shape[-1], n_head=1, rotary_dim=r,
                                     n_positions=GPTJ_TABLE_ROWS)
    sin, cos = m.GPTJRotaryEmbedding(config)(x, torch.from_numpy(ids))
    bshd = (lambda t: t.transpose(1, 2)) if heads_axis == 1 else (lambda t: t)  # GPT-J's [b, s, h, d]

    def rotate(q, k):
        return (bshd(m.apply_rotary_pos_emb(bshd(q), sin, cos)), bshd(m.apply_rotary_pos_emb(bshd(k), sin, cos)))

    return rotated_pair(ad, x, x_np, r, heads_axis, rotate)


def _bloom_mask(k_positions: np.ndarray) -> np.ndarray:
    """The attention mask whose `(cumsum(mask) - 1) * mask` is `k_positions` `[batch, k]` (NotSupported if none)."""
    mask = (k_positions > 0).astype(np.int64)
    for row, p in zip(mask, k_positions, strict=True):
        first = np.flatnonzero(p > 0)
        row[(first[0] - 1) if first.size and first[0] > 0 else (0 if not first.size else first[0])] = 1
    if not np.array_equal((np.cumsum(mask, axis=-1) - 1) * mask, k_positions):
        raise NotSupported("BLOOM's build_alibi_tensor derives key positions from an attention mask, "
                           "(cumsum(mask) - 1) * mask; these key positions are not of that form")
    return mask


def alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", dtype=None):
    """The contract's `alibi_bias` (form "bloom") through BLOOM's `build_alibi_tensor`."""
    torch, _ = _torch()
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    if form != "bloom":
        raise NotSupported(f"BLOOM's build_alibi_tensor computes form='bloom' (m_h * key position), not {form!r}")
    ad = adapter("torch")
    q = np.asarray(ad.to_numpy(q_positions))
    k = np.asarray(ad.to_numpy(k_positions))
    batched = k.ndim > 1
    keys = k.reshape(-1, k.shape[-1]) if batched else k[None]
    mask = torch.from_numpy(_bloom_mask(keys.astype(np.int64)))
    out = build_alibi_tensor(mask, int(num_heads), ad.dtype(dtype or "float32"))
    out = out.reshape(keys.shape[0], int(num_heads), 1, keys.shape[-1]).expand(-1, -1, q.shape[-1], -1)
    return out if batched else out[0]


def t5_bucket(relative_position, *, bidirectional=True, num_buckets=32, max_distance=128):
    """The contract's `t5_bucket` through `T5Attention._relative_position_bucket`."""
    _torch()
    from transformers.models.t5.modeling_t5 import T5Attention

    return T5Attention._relative_position_bucket(relative_position, bidirectional=bidirectional,
                                                 num_buckets=num_buckets, max_distance=max_distance)


def t5_bias(table, q_positions, k_positions, *, bidirectional=True, num_buckets=32, max_distance=128):
    """The contract's `t5_bias` through `T5Attention.compute_bias` holding `table` as its bias embedding."""
    torch, _ = _torch()
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    ad = adapter("torch")
    q = np.asarray(ad.to_numpy(q_positions))
    k = np.asarray(ad.to_numpy(k_positions))
    if q.ndim != 1 or k.ndim != 1 or not np.array_equal(k, np.arange(k.size)) or \
            not np.array_equal(q, q[0] + np.arange(q.size)):
        raise NotSupported("T5Attention.compute_bias takes keys 0..k-1 and consecutive queries from an offset; "
                           f"got query positions {q.shape} and key positions {k.shape} of another form")
    heads = table.shape[1]
    config = T5Config(num_heads=heads, d_model=heads, d_kv=1, is_decoder=not bidirectional,
                      relative_attention_num_buckets=num_buckets, relative_attention_max_distance=max_distance)
    attention = T5Attention(config, has_relative_attention_bias=True)
    with torch.no_grad():
        attention.relative_attention_bias.weight = torch.nn.Parameter(table, requires_grad=False)
        return attention.compute_bias(q.size, k.size, past_seen_tokens=int(q[0]))[0]


def load() -> tuple[Implementation, ...]:
    torch, transformers = _torch()
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    main = Implementation("transformers", "torch",
                           {"apply_rope": apply_rope, "alibi_bias": alibi_bias, "t5_bucket": t5_bucket,
                            "t5_bias": t5_bias},
                           version=transformers.__version__, angles="float32",
                           description="rotary classes + apply_rotary_pos_emb (llama, gpt-neox, cohere, qwen2-vl, "
                                       "qwen3-vl), BLOOM build_alibi_tensor, T5 buckets and compute_bias")
    # a training step runs the modeling file's apply_rotary_pos_emb on the rotary class's tables: the training
    # probes call it with tensors that require grad
    main.kernel = (apply_rotary_pos_emb, "half")
    # GPT-J's forward is judged through NumPy tables here; its training path is not probed
    gptj = Implementation("transformers-gptj", "torch", {"apply_rope": gptj_apply_rope},
                          version=transformers.__version__, layouts=("interleaved",), angles="float32",
                          max_positions=GPTJ_TABLE_ROWS, differentiable=False,
                          description="GPT-J's sin/cos table (n_positions rows) + rotate_every_two")
    return (main, gptj, *transformers_sinusoids.implementations(transformers.__version__),
            *transformers_vision.implementations(transformers.__version__))


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ("`pip install transformers` (posenc's dev extra)")
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = ()

#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
EXPECTED = {
    'transformers-gptj edge/negative-positions-interleaved': 'wrapped',
}
