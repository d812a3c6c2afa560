"""`meta-llama-to-hf`: Meta's `consolidated.*.pth` / safetensors names -> HF `LlamaForCausalLM`, q/k rows
permuted interleaved -> half per head (k with `n_kv_heads`), as transformers' `convert_llama_weights_to_hf.py`.
Reads `params.json` beside SOURCE; flags override it.
"""

from __future__ import annotations

import json
import os
import re

from ...errors import UsageError
from ..mapping import Rules
from ..preset import Preset, PresetOptions, rope_sidecar

__all__ = ["meta_llama_to_hf", "PRESETS"]


def _meta_params(reader, options: PresetOptions):
    path = os.path.join(os.path.dirname(os.path.abspath(reader.path)), "params.json")
    params = {}
    if os.path.exists(path):
        try:
            with open(path) as f:
                params = json.load(f)
        except (OSError, json.JSONDecodeError) as error:
            raise UsageError(f"cannot read {path!r}: {error}") from None
    dim = params.get("dim")
    layers = params.get("n_layers")
    heads = options.heads or params.get("n_heads")
    kv_heads = options.kv_heads or params.get("n_kv_heads") or heads
    theta = options.rope_theta or params.get("rope_theta") or 10000.0
    if not heads:
        raise UsageError(f"meta-llama-to-hf needs n_heads: put params.json beside SOURCE ({path!r}) or pass --heads")
    if dim is None:
        dim = reader.shape("tok_embeddings.weight")[1] if "tok_embeddings.weight" in reader else None
    if layers is None:
        layers = len({m.group(1) for n in reader.names() if (m := re.match(r"layers\.(\d+)\.", n))})
    return dict(dim=dim, layers=int(layers), heads=int(heads), kv_heads=int(kv_heads), theta=float(theta),
                norm_eps=params.get("norm_eps", 1e-5), scaled=params.get("use_scaled_rope", False))


def meta_llama_to_hf(reader, options: PresetOptions):
    p = _meta_params(reader, options)
    layer = [("attention.wq.weight", "self_attn.q_proj.weight"), ("attention.wk.weight", "self_attn.k_proj.weight"),
             ("attention.wv.weight", "self_attn.v_proj.weight"), ("attention.wo.weight", "self_attn.o_proj.weight"),
             ("feed_forward.w1.weight", "mlp.gate_proj.weight"), ("feed_forward.w3.weight", "mlp.up_proj.weight"),
             ("feed_forward.w2.weight", "mlp.down_proj.weight"), ("attention_norm.weight", "input_layernorm.weight"),
             ("ffn_norm.weight", "post_attention_layernorm.weight")]
    rename = [("tok_embeddings.weight", "model.embed_tokens.weight"), ("norm.weight", "model.norm.weight"),
              ("output.weight", "lm_head.weight")]
    rename += [(f"layers.*.{src}", f"model.layers.*.{dst}") for src, dst in layer]
    require = [src for src, _ in rename[:3]] + [f"layers.{i}.{src}" for i in range(p["layers"]) for src, _ in layer]
    rules = Rules(rename=rename, rope_q=["layers.*.attention.wq.weight"], rope_k=["layers.*.attention.wk.weight"],
                  heads=p["heads"], kv_heads=p["kv_heads"], rope_from="interleaved", rope_to="half",
                  rotary_dim=options.rotary_dim, require=require, strict=True,
                  drop=[n for n in ("rope.freqs",) if n in reader])
    missing = [n for n in require if n not in reader]
    if missing:
        return Preset(rules)  # build_plan names the missing tensors
    hidden = reader.shape("tok_embeddings.weight")[1]
    if p["dim"] is not None and hidden != p["dim"]:
        raise UsageError(f"params.json dim={p['dim']} but tok_embeddings.weight has shape "
                         f"{reader.shape('tok_embeddings.weight')}")
    head_dim = hidden // p["heads"]
    for i in range(p["layers"]):
        for name, rows in (("wq", p["heads"] * head_dim), ("wk", p["kv_heads"] * head_dim)):
            shape = reader.shape(f"layers.{i}.attention.{name}.weight")
            if shape != (rows, hidden):
                raise UsageError(f"layers.{i}.attention.{name}.weight has shape {shape}; n_heads={p['heads']}, "
                                 f"n_kv_heads={p['kv_heads']}, dim={hidden} imply {(rows, hidden)}")
    scaling = None
    if options.rope_scaling:
        scaling = options.rope_scaling
    elif p["scaled"]:  # Meta's apply_scaling constants (llama-models model.py)
        scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192}
    rotary_dim = options.rotary_dim or head_dim
    rope = dict(base=p["theta"], scaling=scaling, rotary_dim=rotary_dim, source="interleaved", target="half")
    hf_config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
                 "intermediate_size": reader.shape("layers.0.feed_forward.w1.weight")[0],
                 "num_hidden_layers": p["layers"], "num_attention_heads": p["heads"],
                 "num_key_value_heads": p["kv_heads"], "head_dim": head_dim, "rms_norm_eps": p["norm_eps"],
                 "vocab_size": reader.shape("tok_embeddings.weight")[0], "rope_theta": p["theta"],
                 "rope_scaling": scaling, "tie_word_embeddings": False}
    sidecar = {**rope_sidecar(layout="half", base=p["theta"], rotary_dim=rotary_dim, scaling=scaling,
                              num_heads=p["heads"], num_kv_heads=p["kv_heads"], source_layout="interleaved"),
               "hf_config": hf_config}
    return Preset(rules, rope=rope, sidecar=sidecar)


#: preset name -> builder
PRESETS = {"meta-llama-to-hf": meta_llama_to_hf}
