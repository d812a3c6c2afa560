"""`t5x-to-hf-t5`: t5x parameter names (`[target/]encoder/layers_0/attention/query/kernel`, ...) -> HF
`T5ForConditionalGeneration`; kernels transposed; relative bias tables `[heads, buckets]` -> `[buckets, heads]`,
checked as encoder (bidirectional) and decoder (causal) T5 biases.
"""

from __future__ import annotations

from ..mapping import Rules, glob_regex
from ..preset import Preset, PresetOptions

__all__ = ["t5x_to_hf_t5", "PRESETS"]

_T5X_ATTN = (("query", "q"), ("key", "k"), ("value", "v"), ("out", "o"))


def t5x_to_hf_t5(reader, options: PresetOptions):
    names = reader.names()
    prefix = "target/" if any(n.startswith("target/") for n in names) else ""
    rename, transpose = [(f"{prefix}token_embedder/embedding", "shared.weight")], []
    t5_tags = {}

    def kernel(src, dst):
        rename.append((f"{prefix}{src}", dst))
        transpose.append(f"{prefix}{src}")

    for stack in ("encoder", "decoder"):
        bias = f"{prefix}{stack}/relpos_bias/rel_embedding"
        kernel(f"{stack}/relpos_bias/rel_embedding",
               f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight")
        t5_tags[bias] = {"source_layout": "heads-buckets", "target_layout": "buckets-heads"}
        rename.append((f"{prefix}{stack}/{stack}_norm/scale", f"{stack}.final_layer_norm.weight"))
    for t5x, hf in _T5X_ATTN:
        kernel(f"encoder/layers_*/attention/{t5x}/kernel", f"encoder.block.*.layer.0.SelfAttention.{hf}.weight")
        kernel(f"decoder/layers_*/self_attention/{t5x}/kernel", f"decoder.block.*.layer.0.SelfAttention.{hf}.weight")
        kernel(f"decoder/layers_*/encoder_decoder_attention/{t5x}/kernel",
               f"decoder.block.*.layer.1.EncDecAttention.{hf}.weight")
    for stack, mlp in (("encoder", 1), ("decoder", 2)):
        for wi in ("wi", "wi_0", "wi_1", "wo"):  # T5 1.0 has wi, T5 1.1 (gated) wi_0 and wi_1
            kernel(f"{stack}/layers_*/mlp/{wi}/kernel", f"{stack}.block.*.layer.{mlp}.DenseReluDense.{wi}.weight")
        rename.append((f"{prefix}{stack}/layers_*/pre_mlp_layer_norm/scale",
                       f"{stack}.block.*.layer.{mlp}.layer_norm.weight"))
    for t5x, hf in (("encoder/layers_*/pre_attention_layer_norm", "encoder.block.*.layer.0"),
                    ("decoder/layers_*/pre_self_attention_layer_norm", "decoder.block.*.layer.0"),
                    ("decoder/layers_*/pre_cross_attention_layer_norm", "decoder.block.*.layer.1")):
        rename.append((f"{prefix}{t5x}/scale", f"{hf}.layer_norm.weight"))
    kernel("decoder/logits_dense/kernel", "lm_head.weight")  # absent when tied to the embedding (T5 1.0)
    require = [f"{prefix}token_embedder/embedding"] + list(t5_tags)
    used = {g for g, _ in rename if any(glob_regex(g).match(n) for n in names)}
    rules = Rules(rename=[(g, t) for g, t in rename if g in used], transpose=[g for g in transpose if g in used],
                  require=require, tags=[(name, {"t5": tags}) for name, tags in t5_tags.items()], strict=True)
    return Preset(rules)


#: preset name -> builder
PRESETS = {"t5x-to-hf-t5": t5x_to_hf_t5}
