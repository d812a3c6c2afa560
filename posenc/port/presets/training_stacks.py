"""Presets between Hugging Face Llama checkpoints and the training stacks' checkpoint directories:
`hf-llama-to-torchtitan` / `torchtitan-to-hf-llama` (torch DCP), `hf-llama-to-maxtext` / `maxtext-to-hf-llama`
(Orbax), `hf-llama-to-megatron` / `megatron-to-hf-llama` (Megatron-core `torch_dist`).

The tensor layouts are `posenc.port.stacks`; the configs are `posenc.port.stack_config` (`target_config` writes the
stack's config from the HF config, `source_hf_config` the HF config from the stack's, each proven to keep the RoPE
angles at every layer before any weight is written). The q/k row order of each side is its config's reading
(`ModelSpec.row_order`: "meta" = interleaved pairs as Meta's checkpoints, "hf" = halves): torchtitan's Llama 3
(`ComplexRoPE`) and MaxText's `rope_type: llama3.1` (`LLaMARotaryEmbedding`) store Meta's order, MaxText's
`default` rope and Megatron (`rotary_interleaved: False`) HF's. The port permutes q/k rows between the two
(`posenc_np.permute_qk_rows`, k with the kv heads, partial rotary keeping the pass-through rows) and checks the
q . k logits of every layer (`rope-logits`).

Refused with exit 2 before anything is written: a setting the target's config cannot express (torchtitan and
MaxText rotate the whole head; MaxText's llama3 scaling has fixed constants; Megatron's `rope_scaling` fixes
low/high/original; ...: the reason is stack_config's), and a config whose shapes disagree with the tensors.

Written beside the tensors: torchtitan `job_config.json` (the job-config dump `{"model_spec": {"name": "llama3",
"model": {...}}}` with each layer's `attention.rope` = `RoPE.Config`, plus the sizes torchtitan's `to_dict()` also
carries: `norm.eps`, `feed_forward.hidden_dim`, `enable_weight_tying`); MaxText `maxtext.yml` (base.yml keys, with
`decoder_block: llama2`, `scan_layers: true`; the checkpoint is TARGET/items, MaxText's `load_parameters_path`);
Megatron `transformer_config.json` (TransformerConfig / GPTModel fields).
"""

from __future__ import annotations

import math

from ...errors import UsageError
from ...modelspec.readers import read_hf_config
from ..checks import Check
from ..hf_config import config_beside, schedule
from ..mapping import Rules
from ..preset import Preset, rope_sidecar
from ..stack_config import angle_differences, read_stack_config, source_hf_config, target_config
from ..stacks import LAYOUTS, TOP, canonical_names, dims_of, read_stack_config_file

__all__ = ["PRESETS", "hf_llama_to_stack", "stack_to_hf_llama", "STACK_CONFIG_EXTRAS"]

#: keys each stack's config gets beyond the RoPE and sizes stack_config writes: what makes it a Llama there
STACK_CONFIG_EXTRAS = {
    "maxtext": {"decoder_block": "llama2", "mlp_activations": ["silu", "linear"], "scan_layers": True,
                "param_scan_axis": 1},
    "megatron": {"normalization": "RMSNorm", "gated_linear_unit": True, "activation_func": "torch.nn.functional.silu",
                 "add_bias_linear": False, "add_qkv_bias": False},
}
_Q, _K = "model.layers.*.self_attn.q_proj.weight", "model.layers.*.self_attn.k_proj.weight"


def _layout_of(row_order):
    return "interleaved" if row_order == "meta" else "half"


def _translate(fn, what, *args):
    """stack_config's translation; its ValueError (a setting the target cannot express) is exit 2."""
    try:
        return fn(*args)
    except (ValueError, KeyError, TypeError) as error:
        raise UsageError(f"{what}: {error}") from None


def _rope_settings(config, what, source, target):
    """The `rope` dict of the port (base, scaling, rotary_dim of the one RoPE setting every layer shares)."""
    layers = schedule(config, what)
    first = layers[0]
    if first is None or any(entry != first for entry in layers):
        raise UsageError(f"{what}: the layers do not share one RoPE setting (NoPE or per-layer RoPE)")
    return dict(base=first["base"], scaling=first["scaling"], rotary_dim=first["rotary_dim"], source=source,
                target=target)


def _angle_check(hf_config, dialect, stack_config):
    """Extra verification: the written config's reading against the HF config's, per layer (the angles)."""

    def run(source, target):
        diffs, report = angle_differences(read_hf_config(hf_config, source="HF config"),
                                          read_stack_config(dialect, stack_config, source=f"{dialect} config"))
        worst = max(report.max_rel_inv_freq, report.max_rel_attention)
        note = "; ".join(diffs) or (f"{report.rotary_layers}/{report.layers} rotary layers: inv_freq max rel "
                                    f"{report.max_rel_inv_freq:.3g}, attention factor max rel "
                                    f"{report.max_rel_attention:.3g}")
        return [Check("angles", f"{dialect} config vs HF config", worst if not diffs else math.inf, 1e-12,
                      "relative 1e-12 (posenc.port.stack_config.ANGLE_RTOL)", not diffs, note)]

    run.__name__ = "angle_check"
    return run


def _torchtitan_extras(stack_config, hf_config, dims):
    """The job-config dump's sizes beyond RoPE (torchtitan `Decoder.Config.to_dict()`): norms, FFN, tying."""
    model = stack_config["model_spec"]["model"]
    eps = float(hf_config.get("rms_norm_eps", 1e-5))
    model.update(norm={"normalized_shape": dims.hidden, "eps": eps}, enable_weight_tying=dims.tied)
    for layer in model["layers"]:
        layer.update(attention_norm={"normalized_shape": dims.hidden, "eps": eps},
                     ffn_norm={"normalized_shape": dims.hidden, "eps": eps},
                     feed_forward={"dim": dims.hidden, "hidden_dim": dims.ffn})
    return stack_config


def _no_overrides(options, what):
    """The stack presets take every setting from the configs (and prove them): a flag that would override one is bad
    usage, never ignored."""
    given = [f"--{name.replace('_', '-')}" for name in ("heads", "kv_heads", "rope_theta", "rotary_dim", "rope_scaling")
             if getattr(options, name, None) is not None]
    if given:
        raise UsageError(f"{what} reads the model's settings from its config (and checks them); {', '.join(given)} "
                         "would override them: edit the config instead")


def hf_llama_to_stack(dialect, reader, options):
    """HF Llama (config.json beside SOURCE) -> the stack's checkpoint directory and config."""
    what = f"hf-llama-to-{dialect}"
    _no_overrides(options, what)
    config = config_beside(reader, what)
    if config.get("model_type") != "llama":
        raise UsageError(f"{what} ports model_type 'llama'; config.json says {config.get('model_type')!r}")
    stack_config = _translate(target_config, what, dialect, config)
    dims = dims_of(config)
    if dialect == "torchtitan":
        stack_config = _torchtitan_extras(stack_config, config, dims)
    else:
        stack_config = {**stack_config, **STACK_CONFIG_EXTRAS[dialect]}
    target_order = read_stack_config(dialect, stack_config).row_order
    rope = _rope_settings(config, what, "half", _layout_of(target_order))
    names = canonical_names(dims)
    drop = [n for n in reader.names() if n.endswith("rotary_emb.inv_freq")]
    if dims.tied and TOP["head"] in reader:
        drop.append(TOP["head"])
    rules = Rules(rename=[("*", "*")], drop=drop, strict=True, require=names, rope_q=[_Q], rope_k=[_K],
                  heads=dims.heads, kv_heads=dims.kv_heads, rope_from="half", rope_to=rope["target"],
                  rotary_dim=rope["rotary_dim"] if rope["rotary_dim"] != dims.head_dim else None)
    unknown = [n for n in reader.names() if n not in names and n not in drop]
    if unknown:
        raise UsageError(f"{what}: SOURCE tensor(s) {', '.join(unknown[:5])} have no place in a {dialect} Llama "
                         "checkpoint (biases, extra modules)")
    layout = LAYOUTS[dialect](dims)
    sidecar = rope_sidecar(layout=rope["target"], base=rope["base"], rotary_dim=rope["rotary_dim"],
                           scaling=rope["scaling"], num_heads=dims.heads, num_kv_heads=dims.kv_heads,
                           source_layout="half")
    sidecar["stack"] = {"dialect": dialect, "config_file": layout.config_name, "config": stack_config}
    return Preset(rules, target_format=layout.fmt, rope=rope, sidecar=sidecar,
                  extra=[_angle_check(config, dialect, stack_config)], layout=layout, stack_config=stack_config)


def _hf_from_stack(dialect, stack_config, stack_reader, what):
    """The HF config of a stack checkpoint: stack_config's translation, sizes the stack config lacks from shapes."""
    config = _translate(source_hf_config, what, dialect, stack_config)
    if dialect == "nemo":
        stack_config = stack_config.get("config") or stack_config
        dialect = "megatron"
    if dialect == "torchtitan":
        model = stack_config.get("model_spec", {}).get("model", stack_config)
        config.setdefault("rms_norm_eps", float((model.get("norm") or {}).get("eps", 1e-5)))  # RMSNorm.Config default
        layer = (model.get("layers") or [{}])[0]
        if (layer.get("feed_forward") or {}).get("hidden_dim"):
            config.setdefault("intermediate_size", int(layer["feed_forward"]["hidden_dim"]))
        config.setdefault("tie_word_embeddings", bool(model.get("enable_weight_tying", False)))
    shapes = {n: stack_reader.shape(n) for n in stack_reader.names()}
    if "vocab_size" not in config or "intermediate_size" not in config:
        embed = next((s for n, s in shapes.items() if n.endswith(("tok_embeddings.weight", "token_embedder/embedding",
                                                                   "word_embeddings.weight"))), None)
        ffn = next((s for n, s in shapes.items() if n.endswith(("feed_forward.w1.weight", "mlp/wi_0/kernel",
                                                                 "mlp.linear_fc1.weight"))), None)
        if embed is not None:
            config.setdefault("vocab_size", int(embed[0]))
        if ffn is not None:
            config.setdefault("intermediate_size", int(ffn[-1] if dialect == "maxtext" else
                                                       ffn[-2] // 2 if dialect == "megatron" else ffn[0]))
    if "tie_word_embeddings" not in config:
        head = {"maxtext": "decoder/logits_dense/kernel", "megatron": "output_layer.weight"}.get(dialect)
        config["tie_word_embeddings"] = not any(n.endswith(head) for n in shapes) if head else False
    config.setdefault("rms_norm_eps", 1e-5)
    return config


def stack_to_hf_llama(dialect, reader, options):
    """The stack's checkpoint directory (its config beside it) -> an HF Llama checkpoint directory."""
    what = f"{dialect}-to-hf-llama"
    _no_overrides(options, what)
    stack_reader = getattr(reader, "stack_reader", reader)
    directory = stack_reader.path
    stack_config, config_path = read_stack_config_file(dialect, directory)
    config_dialect = dialect
    if dialect == "megatron" and str(stack_config.get("_target_", "")).startswith("nemo."):
        config_dialect = "nemo"  # NeMo 2's context/model.yaml: the TransformerConfig under `config`
    config = _hf_from_stack(config_dialect, stack_config, stack_reader, what)
    dims = dims_of(config)
    layout = LAYOUTS[dialect](dims)
    source_order = read_stack_config(config_dialect, stack_config, source=config_path).row_order
    rope = _rope_settings(config, what, _layout_of(source_order), "half")
    names = canonical_names(dims)
    rules = Rules(rename=[("*", "*")], strict=True, require=names, rope_q=[_Q], rope_k=[_K], heads=dims.heads,
                  kv_heads=dims.kv_heads, rope_from=rope["source"], rope_to="half",
                  rotary_dim=rope["rotary_dim"] if rope["rotary_dim"] != dims.head_dim else None)
    hf_config = config
    sidecar = rope_sidecar(layout="half", base=rope["base"], rotary_dim=rope["rotary_dim"], scaling=rope["scaling"],
                           num_heads=dims.heads, num_kv_heads=dims.kv_heads, source_layout=rope["source"])
    sidecar["hf_config"] = hf_config
    sidecar["stack"] = {"dialect": dialect, "config_file": config_path}
    return Preset(rules, target_format="safetensors-dir", rope=rope, sidecar=sidecar,
                  extra=[_angle_check(hf_config, config_dialect, stack_config)], layout=layout,
                  stack_config=stack_config)


def _builder(fn, dialect, name):
    def build(reader, options):
        return fn(dialect, reader, options)
    build.__name__ = name.replace("-", "_")
    return build


#: preset name -> builder
PRESETS = {}
for _dialect in ("torchtitan", "maxtext", "megatron"):
    PRESETS[f"{_dialect}-to-hf-llama"] = _builder(stack_to_hf_llama, _dialect, f"{_dialect}-to-hf-llama")
    PRESETS[f"hf-llama-to-{_dialect}"] = _builder(hf_llama_to_stack, _dialect, f"hf-llama-to-{_dialect}")
