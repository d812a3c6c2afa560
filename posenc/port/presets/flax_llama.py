"""`hf-llama-to-flax`: HF LlamaForCausalLM -> the FlaxLlamaForCausalLM parameter tree."""

from __future__ import annotations

from .. import hf_config
from ..mapping import Rules, glob_match
from ..preset import Preset
from .gguf_families import LLAMA_LAYER

__all__ = ["hf_llama_to_flax", "PRESETS"]


def hf_llama_to_flax(reader, options):
    """HF LlamaForCausalLM -> the FlaxLlamaForCausalLM parameter tree (transformers 4.x
    `modeling_flax_llama.py`: `model/embed_tokens/embedding`, `model/layers/{i}/self_attn/q_proj/kernel`
    `[in, out]`, `.../input_layernorm/weight`, `model/norm/weight`, `lm_head/kernel`); both sides rotate
    halves, so q/k keep their rows and the RoPE logits check runs on the transposed kernels."""
    config = hf_config.config_beside(reader, "hf-llama-to-flax")
    heads, kv_heads, head_dim = hf_config.heads(config)
    schedule = hf_config.schedule(config, "hf-llama-to-flax")
    entry = next(e for e in schedule if e is not None)
    rename = [("model.embed_tokens.weight", "model/embed_tokens/embedding"), ("model.norm.weight", "model/norm/weight"),
              ("lm_head.weight", "lm_head/kernel")]
    layer = [(s, s.replace(".", "/").replace("/weight", "/kernel").replace("/bias", "/bias"))
             for s, _ in LLAMA_LAYER if "layernorm" not in s]
    layer += [("input_layernorm.weight", "input_layernorm/weight"),
              ("post_attention_layernorm.weight", "post_attention_layernorm/weight")]
    rename += [(f"model.layers.*.{s}", f"model/layers/*/{t}") for s, t in layer]
    rename = [(s, t) for s, t in rename if any(glob_match(n, s) for n in reader.names())]
    transpose = [s for s, t in rename if t.endswith("/kernel")]
    rules = Rules(rename=rename, transpose=transpose, strict=True, rope_q=["model.layers.*.self_attn.q_proj.weight"],
                  rope_k=["model.layers.*.self_attn.k_proj.weight"], heads=heads, kv_heads=kv_heads, rope_from="half",
                  rope_to="half", require=["model.embed_tokens.weight"],
                  drop=[n for n in reader.names() if n.endswith("rotary_emb.inv_freq")])
    rope = dict(base=entry["base"], scaling=entry["scaling"], rotary_dim=entry["rotary_dim"], source="half",
                target="half")
    sidecar = {"rope": {"layout": "half", "base": entry["base"], "rotary_dim": entry["rotary_dim"],
                        "scaling": entry["scaling"], "num_heads": heads, "num_kv_heads": kv_heads,
                        "source_layout": "half"}, "hf_config": config}
    return Preset(rules, target_format="msgpack", rope=rope, sidecar=sidecar)


#: preset name -> builder
PRESETS = {"hf-llama-to-flax": hf_llama_to_flax}
