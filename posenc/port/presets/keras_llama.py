"""Presets HF `LlamaForCausalLM` <-> keras-hub `LlamaBackbone` (`hf-llama-to-keras`, `keras-to-hf-llama`).

The Keras side is the `.weights.h5` that keras-hub 0.32.0's `LlamaBackbone.save_weights` writes (Keras 3
H5IOStore: one group per layer, named after the layer's class in snake case with `_1`, `_2`... for
repeats, its variables as `vars/0`, `vars/1`, and the layer's name as the `name` attribute of `vars`):

    layers/reversible_embedding/vars/0          token_embedding.embeddings          [vocab, hidden]
    layers/reversible_embedding/vars/1          token_embedding.reverse_embeddings  [hidden, vocab] (untied)
    layers/llama_transformer_decoder[_i]/...    transformer_layer_i:
        _self_attention_layer/_query_dense/vars/0     EinsumDense "bqm,muh->bquh"   [hidden, heads, head_dim]
        _self_attention_layer/_key_dense/vars/0       EinsumDense "bkm,mvh->bkvh"   [hidden, kv_heads, head_dim]
        _self_attention_layer/_value_dense/vars/0     (as key)
        _self_attention_layer/_output_dense/vars/0    EinsumDense "bquh,uhm->bqm"   [heads, head_dim, hidden]
        _self_attention_layernorm/vars/0, _feedforward_layernorm/vars/0            [hidden] (RMSNorm scale)
        _feedforward_gate_dense / _intermediate_dense / _output_dense /vars/0      Dense [in, out]
    layers/llama_layer_norm/vars/0              sequence_output_layernorm.scale     [hidden]

The rule is keras-hub's own HF converter (keras_hub/src/utils/transformers/convert_llama3.py, 0.32.0,
`convert_weights`): q/k/v/o are `np.reshape(np.transpose(w), variable.shape)`, the MLP kernels and
`lm_head` are transposed, embeddings and RMSNorm scales are copied. No q/k row permutation: keras-hub's
`RotaryEmbedding._apply_rotary_pos_emb` (layers/modeling/rotary_embedding.py) splits the head in two
halves and rotates `(-x2, x1)` with `cos`/`sin` of `[freq, freq]`, which is HF's `rotate_half` layout.

The backbone's constructor arguments are the converter's `convert_backbone_config` (rope_max_wavelength
from rope_theta; llama3 scaling as rope_frequency_adjustment_factor, rope_low/high_freq_factor,
rope_pretraining_sequence_length) plus `layer_norm_epsilon = rms_norm_eps`, which the converter leaves
out (keras-hub's default 1e-6 then applies, where Llama 2 / 3 configs say 1e-5). The llama3 factors are
read from the RoPE settings wherever the config keeps them (`posenc_np.rope_schedule_from_hf_config`):
the converter reads them only from a top-level `rope_scaling`, so a transformers 5 config.json, which
keeps them in `rope_parameters`, loses them there silently (rope_theta it does read from
`rope_parameters`). They are written to
the sidecar (`TARGET.rope.json`, key `keras_hub`): `keras_hub.models.LlamaBackbone(**config)` then
`load_weights(TARGET)` loads the port. What a LlamaBackbone cannot express is refused (exit 2) rather
than dropped: `head_dim` other than `hidden_size // num_attention_heads` (LlamaAttention derives it),
attention or MLP biases (its EinsumDense/Dense layers have none), partial rotary, an activation other
than SiLU, and RoPE scaling other than llama3 (linear would be `rope_position_scaling_factor`, which
keras-hub 0.32.0's `LlamaRotaryEmbedding._get_inverse_freq` never applies).

Verification (`keras_logits_check`, besides the exact `written` and `dense` checks): per layer,
attention logits `q . k` at probe positions per frequency band up to the context length
(`posenc.port.checks.probe_positions`), HF side from its tensors and config.json (`rope_schedule_from_hf_config`),
Keras side from the written EinsumDense kernels (`einsum("pm,muh->puh")`) and the RoPE that the written
keras-hub config builds, read by `posenc.modelspec.read_keras_hub`; and per layer the v and o projections
computed both ways. All in float64.
"""

from __future__ import annotations

import json
import os

import numpy as np

from posenc_np.rope import rope_frequencies
from posenc_np.testing import compare, tolerance

from ...errors import UsageError
from ...modelspec.readers import read_keras_hub
from ..checks import Check, probe_positions, rope_logits
from ..hf_config import config_beside
from ..hf_config import heads as config_heads
from ..hf_config import schedule as config_schedule
from ..mapping import Op, Rules
from ..preset import Preset

__all__ = ["hf_llama_to_keras", "keras_to_hf_llama", "keras_hub_llama_config", "keras_llama_names",
           "keras_logits_check", "PRESETS"]

_ATTN = (("self_attn.q_proj.weight", "_self_attention_layer/_query_dense", "query", "in"),
         ("self_attn.k_proj.weight", "_self_attention_layer/_key_dense", "key", "in"),
         ("self_attn.v_proj.weight", "_self_attention_layer/_value_dense", "value", "in"),
         ("self_attn.o_proj.weight", "_self_attention_layer/_output_dense", "attention_output", "out"))
_LAYER = (("input_layernorm.weight", "_self_attention_layernorm", "self_attention_layernorm", "copy"),
          ("post_attention_layernorm.weight", "_feedforward_layernorm", "feedforward_layernorm", "copy"),
          ("mlp.gate_proj.weight", "_feedforward_gate_dense", "feedforward_gate_dense", "dense"),
          ("mlp.up_proj.weight", "_feedforward_intermediate_dense", "feedforward_intermediate_dense", "dense"),
          ("mlp.down_proj.weight", "_feedforward_output_dense", "feedforward_output_dense", "dense"))


def _decoder(i):
    return "layers/llama_transformer_decoder" + (f"_{i}" if i else "")


def keras_llama_names(num_layers, tie_word_embeddings):
    """`[(hf_name, keras_dataset, kind)]` for a LlamaBackbone of `num_layers` and the `.weights.h5` group
    attributes `{group/vars: {"name": layer name}}`; kind: copy, dense (transpose), heads-in (transpose,
    reshape to `[hidden, heads, head_dim]`), heads-out (transpose, reshape to `[heads, head_dim, hidden]`)."""
    names = [("model.embed_tokens.weight", "layers/reversible_embedding/vars/0", "copy")]
    if not tie_word_embeddings:
        names.append(("lm_head.weight", "layers/reversible_embedding/vars/1", "dense"))
    attrs = {"vars": {"name": "llama_backbone"}, "layers/input_layer/vars": {"name": "token_ids"},
             "layers/input_layer_1/vars": {"name": "padding_mask"},
             "layers/reversible_embedding/vars": {"name": "token_embedding"},
             "layers/llama_layer_norm/vars": {"name": "sequence_output_layernorm"}}
    for i in range(num_layers):
        group = _decoder(i)
        attrs[f"{group}/vars"] = {"name": f"transformer_layer_{i}"}
        attrs[f"{group}/_self_attention_layer/vars"] = {"name": "self_attention"}
        for hf, sub, layer_name, kind in _ATTN:
            names.append((f"model.layers.{i}.{hf}", f"{group}/{sub}/vars/0", "heads-" + kind))
            attrs[f"{group}/{sub}/vars"] = {"name": layer_name}
        for hf, sub, layer_name, kind in _LAYER:
            names.append((f"model.layers.{i}.{hf}", f"{group}/{sub}/vars/0", kind))
            attrs[f"{group}/{sub}/vars"] = {"name": layer_name}
    names.append(("model.norm.weight", "layers/llama_layer_norm/vars/0", "copy"))
    return names, attrs


def keras_hub_llama_config(config, what="hf-llama-to-keras"):
    """LlamaBackbone constructor arguments for an HF Llama config.json (convert_llama3.py
    `convert_backbone_config`, keras-hub 0.32.0, plus `layer_norm_epsilon`); UsageError for what a
    LlamaBackbone cannot express."""
    if config.get("model_type", "llama") != "llama":
        raise UsageError(f"{what} ports model_type llama; config.json says {config.get('model_type')!r}")
    heads, kv, head_dim = config_heads(config)
    hidden = int(config["hidden_size"])
    if head_dim != hidden // heads:
        raise UsageError(f"{what}: head_dim {head_dim} != hidden_size // num_attention_heads = {hidden // heads}; "
                         "keras-hub's LlamaAttention derives head_dim = hidden_dim // num_query_heads")
    for key in ("attention_bias", "mlp_bias"):
        if config.get(key):
            raise UsageError(f"{what}: {key}=true, but keras-hub's LlamaBackbone projections have no bias")
    if config.get("hidden_act", "silu") != "silu":
        raise UsageError(f"{what}: hidden_act {config['hidden_act']!r}; keras-hub's LlamaBackbone uses SiLU")
    schedule = config_schedule(config, what)
    used = [e for e in schedule if e is not None]
    if len(used) != len(schedule) or any(e != used[0] for e in used):
        raise UsageError(f"{what}: per-layer RoPE settings differ; a LlamaBackbone has one rope for every layer")
    entry = used[0]
    if entry["rotary_dim"] != head_dim:
        raise UsageError(f"{what}: rotary_dim {entry['rotary_dim']} of head_dim {head_dim} (partial rotary); "
                         "keras-hub's LlamaRotaryEmbedding rotates the whole head")
    out = {"vocabulary_size": int(config["vocab_size"]), "num_layers": int(config["num_hidden_layers"]),
           "num_query_heads": heads, "hidden_dim": hidden, "intermediate_dim": int(config["intermediate_size"]),
           "num_key_value_heads": kv, "tie_word_embeddings": bool(config.get("tie_word_embeddings", False)),
           "rope_max_wavelength": entry["base"], "layer_norm_epsilon": float(config.get("rms_norm_eps", 1e-6))}
    scaling = entry["scaling"] or {}
    kind = scaling.get("rope_type", "default")
    if kind == "llama3":
        out.update(rope_frequency_adjustment_factor=float(scaling["factor"]),
                   rope_low_freq_factor=float(scaling["low_freq_factor"]),
                   rope_high_freq_factor=float(scaling["high_freq_factor"]),
                   rope_pretraining_sequence_length=int(scaling["original_max_position_embeddings"]))
    elif kind != "default":
        raise UsageError(f"{what}: rope_type {kind!r} has no LlamaBackbone form (default and llama3 only; keras-hub "
                         "0.32.0's LlamaRotaryEmbedding never applies rope_position_scaling_factor)")
    return out


def hf_llama_to_keras(reader, options):
    """HF LlamaForCausalLM (safetensors, single or sharded, config.json beside) -> keras-hub LlamaBackbone
    `.weights.h5`; the backbone's arguments in the sidecar."""
    what = "hf-llama-to-keras"
    config = config_beside(reader, what)
    keras_config = keras_hub_llama_config(config, what)
    heads, kv, head_dim = config_heads(config)
    hidden = keras_config["hidden_dim"]
    tied = keras_config["tie_word_embeddings"]
    names, attrs = keras_llama_names(keras_config["num_layers"], tied)
    rename, transpose, ops = [], [], []
    for hf, keras_name, kind in names:
        rename.append((hf, keras_name))
        if kind != "copy":
            transpose.append(hf)
        if kind == "heads-in":
            count = heads if ".q_proj." in hf else kv
            ops.append((hf, Op("reshape", (hidden, count, head_dim))))
        elif kind == "heads-out":
            ops.append((hf, Op("reshape", (heads, head_dim, hidden))))
    drop = [n for n in reader.names() if n.endswith("rotary_emb.inv_freq")]
    if tied and "lm_head.weight" in reader:  # the same tensor as the embedding; the backbone ties them
        drop.append("lm_head.weight")
    rules = Rules(rename=rename, transpose=transpose, ops=ops, drop=drop, strict=True,
                  require=[hf for hf, _, _ in names])
    entry = config_schedule(config, what)[0]
    sidecar = {"rope": {"layout": "half", "base": entry["base"], "rotary_dim": entry["rotary_dim"],
                        "scaling": entry["scaling"], "num_heads": heads, "num_kv_heads": kv, "source_layout": "half"},
               "hf_config": config,
               "keras_hub": {"class_name": "LlamaBackbone", "version": "0.32.0", "config": keras_config}}
    extra = [keras_logits_check(config, keras_config, source="hf")]
    return Preset(rules, target_format="keras-h5", sidecar=sidecar, extra=extra, metadata={"h5_attrs": attrs})


def _keras_config_beside(reader, what):
    """keras-hub's preset `config.json` beside SOURCE: `{"class_name": "LlamaBackbone" | "Llama3Backbone",
    "config": {...}}` (or the bare `get_config()` dict)."""
    path = os.path.join(os.path.dirname(os.path.abspath(reader.path)), "config.json")
    try:
        with open(path) as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise UsageError(f"{what} reads the keras-hub preset's config.json beside SOURCE; {path!r} does not exist") \
            from None
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"cannot read {path!r}: {error}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path!r} is not a JSON object")
    cls = data.get("class_name", "LlamaBackbone")
    if cls not in ("LlamaBackbone", "Llama3Backbone"):
        raise UsageError(f"{what} ports a keras-hub LlamaBackbone / Llama3Backbone; {path!r} names {cls!r}")
    cfg = dict(data["config"]) if isinstance(data.get("config"), dict) else dict(data)
    missing = [k for k in ("vocabulary_size", "num_layers", "num_query_heads", "hidden_dim", "intermediate_dim",
                           "num_key_value_heads") if k not in cfg]
    if missing:
        raise UsageError(f"{path!r} lacks {', '.join(missing)}")
    return cfg


def keras_to_hf_llama(reader, options):
    """keras-hub LlamaBackbone `.weights.h5` (preset config.json beside) -> HF LlamaForCausalLM
    safetensors (a directory TARGET gets config.json)."""
    what = "keras-to-hf-llama"
    cfg = _keras_config_beside(reader, what)
    heads, kv, hidden = int(cfg["num_query_heads"]), int(cfg["num_key_value_heads"]), int(cfg["hidden_dim"])
    head_dim = hidden // heads
    if cfg.get("rope_position_scaling_factor", 1.0) not in (None, 1, 1.0):
        raise UsageError(f"{what}: rope_position_scaling_factor={cfg['rope_position_scaling_factor']} is ignored by "
                         "keras-hub 0.32.0's LlamaRotaryEmbedding; the model never ran with it, so HF's linear "
                         "scaling would change it")
    tied = bool(cfg.get("tie_word_embeddings", "layers/reversible_embedding/vars/1" not in reader))
    scaling = None
    if cfg.get("rope_frequency_adjustment_factor") is not None:
        scaling = {"rope_type": "llama3", "factor": float(cfg["rope_frequency_adjustment_factor"]),
                   "low_freq_factor": float(cfg["rope_low_freq_factor"]),
                   "high_freq_factor": float(cfg["rope_high_freq_factor"]),
                   "original_max_position_embeddings": int(cfg["rope_pretraining_sequence_length"])}
    base = float(cfg.get("rope_max_wavelength", 10000))
    if "max_sequence_length" in cfg:
        context = int(cfg["max_sequence_length"])
    elif scaling:  # llama3: the scaled context the factor was trained for
        context = int(scaling["original_max_position_embeddings"] * scaling["factor"])
    else:
        raise UsageError(f"{what}: the keras-hub config has no max_sequence_length and no llama3 scaling; HF's "
                         "max_position_embeddings cannot be derived (add max_sequence_length to config.json)")
    hf_config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                 "vocab_size": int(cfg["vocabulary_size"]), "hidden_size": hidden, "intermediate_size": int(cfg["intermediate_dim"]),
                 "num_hidden_layers": int(cfg["num_layers"]), "num_attention_heads": heads,
                 "num_key_value_heads": kv, "head_dim": head_dim, "hidden_act": "silu",
                 "rms_norm_eps": float(cfg.get("layer_norm_epsilon", 1e-6)), "max_position_embeddings": context,
                 "tie_word_embeddings": tied, "attention_bias": False, "mlp_bias": False,
                 "rope_parameters": {"rope_theta": base, **(scaling or {"rope_type": "default"})}}
    names, _ = keras_llama_names(int(cfg["num_layers"]), tied)
    rename, ops = [], []
    for hf, keras_name, kind in names:
        rename.append((keras_name, hf))
        if kind == "heads-in":
            rows = (heads if ".q_proj." in hf else kv) * head_dim
            ops += [(keras_name, Op("reshape", (hidden, rows))), (keras_name, Op("transpose"))]
        elif kind == "heads-out":
            ops += [(keras_name, Op("reshape", (heads * head_dim, hidden))), (keras_name, Op("transpose"))]
    rules = Rules(rename=rename, transpose=[k for _, k, kind in names if kind == "dense"], ops=ops, strict=True,
                  require=[k for _, k, _ in names])
    keras_config = {k: v for k, v in cfg.items() if k not in ("name", "trainable", "dtype")}
    sidecar = {"rope": {"layout": "half", "base": base, "rotary_dim": head_dim, "scaling": scaling, "num_heads": heads,
                        "num_kv_heads": kv, "source_layout": "half"},
               "hf_config": hf_config}
    extra = [keras_logits_check(hf_config, keras_config, source="keras")]
    return Preset(rules, target_format="safetensors", sidecar=sidecar, extra=extra)


def keras_logits_check(hf_config, keras_config, *, source, seed=13):
    """Extra verification: per layer, RoPE attention logits of the HF tensors rotated by the HF config's
    settings vs the keras-hub kernels rotated by the settings the keras-hub config builds (read by
    `posenc.modelspec.read_keras_hub`), at probe positions per frequency band; and the v / o projections
    computed both ways. `source` says which side ("hf" or "keras") is the SOURCE reader."""

    def run(src_reader, tgt_reader):
        hf, keras = (src_reader, tgt_reader) if source == "hf" else (tgt_reader, src_reader)
        heads, kv, head_dim = config_heads(hf_config)
        hidden = int(hf_config["hidden_size"])
        context = int(hf_config["max_position_embeddings"])
        hf_rope = config_schedule(hf_config, "verification")
        spec = read_keras_hub({"class_name": "LlamaBackbone", "config": keras_config}, source="keras-hub config")
        names, _ = keras_llama_names(int(hf_config["num_hidden_layers"]), False)
        kernel = {h: k for h, k, _ in names}
        rng = np.random.default_rng(seed)
        checks = []

        def check(kind, name, actual, desired, note=""):
            tol = tolerance("float64", scale=float(np.abs(desired).max()))
            r = compare(actual, desired, tol)
            checks.append(Check(kind, name, r.max_abs_err, r.atol, r.tol_why, r.passed, note))

        for i in range(int(hf_config["num_hidden_layers"])):
            p = f"model.layers.{i}.self_attn."
            w = {n: np.asarray(hf.get(p + f"{n}_proj.weight"), np.float64) for n in "qkvo"}
            k = {n: np.asarray(keras.get(kernel[p + f"{n}_proj.weight"]), np.float64) for n in "qkvo"}
            entry, layer = hf_rope[i], spec.layers[i]
            hf_settings = {"base": entry["base"], "scaling": entry["scaling"], "rotary_dim": entry["rotary_dim"]}
            keras_settings = {"base": layer.base, "scaling": layer.scaling, "rotary_dim": layer.rotary_dim}
            inv, _ = rope_frequencies(entry["rotary_dim"], base=entry["base"], scaling=entry["scaling"])
            original = (entry["scaling"] or {}).get("original_max_position_embeddings")
            positions = probe_positions(inv, context, boundaries=[original - 1, original] if original else [])
            x = rng.standard_normal((len(positions), hidden))
            desired = rope_logits(x @ w["q"].T, x @ w["k"].T, heads, kv, hf_settings, entry["layout"], positions)
            q = np.einsum("pm,muh->puh", x, k["q"]).reshape(len(positions), -1)
            kk = np.einsum("pm,mvh->pvh", x, k["k"]).reshape(len(positions), -1)
            actual = rope_logits(q, kk, heads, kv, keras_settings, layer.layout, positions)
            check("keras-logits", f"layer {i} (hf . keras-hub)", actual, desired,
                  f"{len(positions)} probe positions per frequency band up to {positions.max()}")
            check("keras-dense", f"layer {i} value", np.einsum("pm,mvh->pvh", x, k["v"]).reshape(len(x), -1),
                  x @ w["v"].T)
            y = rng.standard_normal((4, heads * head_dim))
            check("keras-dense", f"layer {i} attention_output",
                  np.einsum("puh,uhm->pm", y.reshape(4, heads, head_dim), k["o"]), y @ w["o"].T)
        return checks

    run.__name__ = "keras_logits_check"
    return run


#: preset name -> builder
PRESETS = {"hf-llama-to-keras": hf_llama_to_keras, "keras-to-hf-llama": keras_to_hf_llama}
