"""Presets HF -> mlx-lm (`hf-llama-to-mlx`, `hf-qwen2-to-mlx`, `hf-gemma3-to-mlx`): a checkpoint directory
that mlx-lm 0.32.2's `mlx_lm.utils.load_model` loads: `model*.safetensors` (globbed, merged by `mx.load`)
and a `config.json` that its `ModelArgs.from_dict` reads (only the dataclass fields; every other key is
dropped silently, `mlx_lm/models/base.py` `BaseModelArgs.from_dict`).

What mlx-lm 0.32.2 reads (site-packages `mlx_lm/models/*.py`) and so what the written config.json says:

* `llama.py`: `rope_theta` (default 10000), `rope_traditional` (default False), `rope_scaling`, `head_dim`,
  `attention_bias`, `mlp_bias`, `layer_types`, `sliding_window`, and `tie_word_embeddings` with the default
  **True** (HF's LlamaConfig default is False: a config.json without the key would lose `lm_head`).
  SiLU gated MLP always (`swiglu`); `sanitize` drops `rotary_emb.inv_freq` and, when tied, `lm_head`.
* `qwen2.py`: `rope_theta` (default 1e6), `rope_traditional`, `rope_scaling`, `tie_word_embeddings`
  (default True); head dim always `hidden_size // num_attention_heads`, q/k/v biases always, o without,
  no sliding window.
* `gemma3_text.py`: `rope_theta` (full layers, with `rope_scaling` and `max_position_embeddings`),
  `rope_local_base_freq` (sliding layers, never scaled), `sliding_window_pattern` (layer i slides when
  `(i + 1) % pattern != 0`; the model indexes its cache list at `pattern - 1`, so a pattern above the layer
  count fails), `sliding_window`, `head_dim`, `query_pre_attn_scalar`, RMSNorm `1 + w` (as HF, weights
  copied), `gelu_approx` MLP, no soft-capping, tied embeddings when `lm_head.weight` is absent
  (`Model.sanitize`). The embedding scale is `sqrt(hidden_size)` rounded to bfloat16 in every dtype
  (`Gemma3Model.__call__`), where transformers rounds it to the weights' dtype: recorded in the sidecar
  when it is not exact.

None of the three reads `rope_parameters` (transformers 5's key): a config.json that keeps the model's base
there would run base 10000 (llama) / 1e6 (qwen2, gemma3). The port writes the settings in the keys above.

Row order: `rope_utils.initialize_rope` builds `nn.RoPE(dims, traditional=...)` / `Llama3RoPE` / ...;
`traditional=False` rotates halves (`mx.fast.rope`), HF's `rotate_half` layout. Llama and Qwen2 pass the
config's `rope_traditional` (written False), Gemma 3 hard-codes False: q/k rows (and Gemma 3's per-channel
`q_norm`/`k_norm`) stay in HF order, and every tensor keeps its HF name.

Refused (exit 2, the reason named) before anything is written: what mlx-lm's class cannot express (partial
rotary, head_dim other than Qwen2's derived one, missing Qwen2 biases, a non-SiLU Llama / Qwen2 or a Gemma 3
activation other than `gelu_pytorch_tanh`, soft-capping, Qwen2 sliding layers, a Gemma 3 layer pattern that
is not `sliding_window_pattern`'s), and any config whose written form `posenc.modelspec.runtime_spec(...,
"mlx")` reads as other frequencies than transformers' reading of the source config (YaRN `attention_factor`
or `truncate`, multi-axis rope, ...).
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ...errors import UsageError
from ...modelspec.readers import read_hf_config
from ...modelspec.runtimes import runtime_spec
from ..checks import Check
from ..hf_config import config_beside, heads, layer_types, schedule, sidecar_layers
from ..mapping import Rules
from ..preset import Preset, rope_sidecar

__all__ = ["MLX_LM_VERSION", "MlxFamily", "MLX_FAMILIES", "mlx_lm_config", "mlx_reading_differences",
           "hf_to_mlx", "PRESETS"]

#: The mlx-lm release whose loader and model classes these presets write for.
MLX_LM_VERSION = "0.32.2"


@dataclass(frozen=True)
class MlxFamily:
    """One HF family and the mlx-lm module that runs it.

    Attributes:
        model_type: HF `model_type` (also mlx-lm's module name, `mlx_lm/models/<model_type>.py`).
        activation: the config key and value of the only MLP activation mlx-lm's class computes.
    """

    model_type: str
    activation: tuple


MLX_FAMILIES = {
    "llama": MlxFamily("llama", ("hidden_act", "silu")),
    "qwen2": MlxFamily("qwen2", ("hidden_act", "silu")),
    "gemma3": MlxFamily("gemma3_text", ("hidden_activation", "gelu_pytorch_tanh")),
}


def _fail(what, message):
    raise UsageError(f"{what}: {message}")


def _scaling_dict(params, what):
    """The HF rope dict as mlx-lm's `rope_scaling` (without `rope_theta`), None for default RoPE."""
    params = {k: v for k, v in (params or {}).items() if k != "rope_theta"}
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        _fail(what, f"partial_rotary_factor={params['partial_rotary_factor']}; mlx-lm rotates the whole head")
    params.pop("partial_rotary_factor", None)
    kind = params.get("rope_type", params.get("type", "default"))
    return None if kind == "default" else params


def _rope_params(config):
    """`rope_parameters` of a transformers 5 config, else the v4 `rope_scaling` + `rope_theta`."""
    if isinstance(config.get("rope_parameters"), dict):
        return config["rope_parameters"]
    return {**(config.get("rope_scaling") or {}), "rope_theta": config.get("rope_theta")}


def _gemma_pattern(config, what):
    """The `sliding_window_pattern` n that reproduces config.json's `layer_types` (layer i full iff
    `(i + 1) % n == 0`), n <= num_hidden_layers; UsageError when none does."""
    layers = int(config["num_hidden_layers"])
    types = config.get("layer_types")
    if types is None:  # a v4 config: the pattern itself (transformers' default 6)
        types = ["sliding_attention" if (i + 1) % int(config.get("sliding_window_pattern") or 6) else "full_attention"
                 for i in range(layers)]
    for n in range(1, layers + 1):
        if all((t == "sliding_attention") == ((i + 1) % n != 0) for i, t in enumerate(types)):
            return n
    _fail(what, f"layer_types {types} is not a sliding_window_pattern of mlx-lm gemma3_text.py (layer i full iff "
          "(i + 1) % n == 0, n at most num_hidden_layers)")


def _refuse_unexpressible(family, config, what):
    key, value = family.activation
    if config.get(key, value) != value:
        _fail(what, f"{key}={config[key]!r}; mlx-lm models/{family.model_type}.py computes {value}")
    count, _, head_dim = heads(config)
    if family.model_type == "qwen2":
        if head_dim != int(config["hidden_size"]) // count:
            _fail(what, f"head_dim {head_dim} != hidden_size // num_attention_heads; mlx-lm qwen2.py derives it")
        if config.get("use_sliding_window") or "sliding_attention" in (config.get("layer_types") or ()):
            _fail(what, "sliding-window layers; mlx-lm qwen2.py attends to every position")
    if family.model_type == "gemma3_text":
        for key in ("attn_logit_softcapping", "final_logit_softcapping"):
            if config.get(key) is not None:
                _fail(what, f"{key}={config[key]}; mlx-lm gemma3_text.py has no soft-capping")
        for key in ("attention_bias", "use_bidirectional_attention"):
            if config.get(key):
                _fail(what, f"{key}=true; mlx-lm gemma3_text.py has neither")


def mlx_lm_config(config, family: MlxFamily, what="hf-to-mlx") -> dict:
    """The config.json mlx-lm reads for the HF `config`: the HF keys, with the RoPE settings in the keys
    mlx-lm's `ModelArgs` reads instead of `rope_parameters` (see the module docstring)."""
    _refuse_unexpressible(family, config, what)
    out = copy.deepcopy(config)
    params = _rope_params(out)
    for key in ("rope_parameters", "rope_scaling", "rope_theta"):
        out.pop(key, None)
    if family.model_type == "gemma3_text":
        nested = params if isinstance(params.get("full_attention"), dict) else \
            {"full_attention": params, "sliding_attention": {"rope_theta": config.get("rope_local_base_freq", 1e4)}}
        full, sliding = nested["full_attention"], nested.get("sliding_attention") or {}
        if _scaling_dict(sliding, what) is not None:
            _fail(what, f"sliding layers' rope_type {sliding.get('rope_type')!r}; mlx-lm gemma3_text.py builds "
                  "their RoPE unscaled")
        out.update(rope_theta=float(full["rope_theta"]), rope_local_base_freq=float(sliding.get("rope_theta", 1e4)),
                   sliding_window_pattern=_gemma_pattern(config, what))
        scaling = _scaling_dict(full, what)
    else:
        if params.get("rope_theta") is None:  # mlx-lm would take its ModelArgs default (qwen2: 1e6)
            _fail(what, "config.json names no rope_theta; mlx-lm would take its ModelArgs default")
        out.update(rope_theta=float(params["rope_theta"]), rope_traditional=False)
        scaling = _scaling_dict(params, what)
        out["tie_word_embeddings"] = bool(config.get("tie_word_embeddings", False))
    if scaling is not None:
        out["rope_scaling"] = scaling
    return out


def _layer_fields(hf, mlx):
    """The named fields in which the mlx-lm reading `mlx` of one layer differs from transformers' `hf`."""
    if hf.rope != mlx.rope:
        return ["rope"]
    if not hf.rope:
        return []
    fields = [n for n in ("layout", "rotary_dim", "head_dim", "mrope_section", "mrope_axes")
              if getattr(hf, n) != getattr(mlx, n)]
    a, b = hf.plan(), mlx.plan()
    for name in ("turns", "turns_long", "dynamic_exponent"):
        va, vb = getattr(a, name), getattr(b, name)
        if (va is None) != (vb is None) or (va is not None and not np.allclose(va, vb, rtol=1e-12, atol=0)):
            fields.append(name)
    for name in ("attention_scale", "seq_dependent", "original", "factor"):
        if getattr(a, name) != getattr(b, name):
            fields.append(f"{name} {getattr(a, name)!r} vs {getattr(b, name)!r}")
    return fields


def mlx_reading_differences(hf_config, mlx_config) -> list:
    """Where mlx-lm's reading of `mlx_config` (`runtime_spec(mlx_config, "mlx")`) differs from transformers'
    reading of `hf_config` (`read_hf_config`): `["layers 0,1: turns differ", ..., "mlx-lm: its findings"]`, empty
    when the frequencies (rtol 1e-12), attention scale and layout agree on every layer. A written config mlx-lm's
    reading raises on is one entry with its message.

    Raises:
        ValueError: transformers' reading of `hf_config` fails (`read_hf_config`).
    """
    try:
        mlx = runtime_spec(mlx_config, "mlx", source="written config.json")
    except ValueError as error:
        return [str(error)]
    hf = read_hf_config(hf_config, source="SOURCE config.json")
    if len(mlx.layers) != len(hf.layers):
        return [f"num_layers: {len(hf.layers)} vs {len(mlx.layers)}"]
    by_fields = {}
    for i, (a, b) in enumerate(zip(hf.layers, mlx.layers, strict=True)):
        fields = _layer_fields(a, b)
        if fields:
            by_fields.setdefault(", ".join(fields), []).append(str(i))
    out = [f"layers {','.join(layers)}: {fields} differ" for fields, layers in by_fields.items()]
    if out and mlx.findings:
        out.append("mlx-lm: " + "; ".join(f"{f.key}: {f.message}" for f in mlx.findings))
    return out


def _config_check(hf_config):
    """Extra verification: the config.json written beside TARGET's weights, read as mlx-lm reads it, gives
    transformers' rotary settings on every layer."""

    def run(source, target):
        path = os.path.join(os.path.dirname(os.path.abspath(target.path)), "config.json")
        try:
            with open(path) as handle:
                written = json.load(handle)
        except (OSError, json.JSONDecodeError) as error:
            return [Check("mlx-config", path, math.inf, 0.0, "exact", False, f"unreadable: {error}")]
        diffs = mlx_reading_differences(hf_config, written)
        note = "; ".join(diffs) or f"runtime_spec(config.json, 'mlx') equals the source's reading on every layer " \
                                    f"(mlx-lm {MLX_LM_VERSION})"
        return [Check("mlx-config", "config.json", 0.0 if not diffs else math.inf, 0.0, "float64 frequencies",
                      not diffs, note)]

    run.__name__ = "mlx_config_check"
    return run


def _embed_scale_note(config, family):
    """mlx-lm gemma3_text.py multiplies the embeddings by `sqrt(hidden)` rounded to bfloat16; None if exact."""
    if family.model_type != "gemma3_text":
        return None
    exact = math.sqrt(int(config["hidden_size"]))
    rounded = float(np.float32(exact).astype(ml_dtypes.bfloat16))
    if rounded == float(np.float32(exact)):
        return None
    return (f"mlx-lm gemma3_text.py scales embeddings by bfloat16(sqrt({config['hidden_size']})) = {rounded} in every "
            f"dtype, transformers by sqrt in the weights' dtype ({float(np.float32(exact)):.9g} in float32): a float32 "
            "model's logits differ beyond float32 rounding")


def hf_to_mlx(family_name, reader, options):
    """HF checkpoint (config.json beside SOURCE) -> an mlx-lm checkpoint directory: the same tensor names and
    q/k rows, config.json in mlx-lm's keys; refused when mlx-lm would compute other RoPE frequencies."""
    family = MLX_FAMILIES[family_name]
    what = f"hf-{family_name}-to-mlx"
    config = config_beside(reader, what)
    if config.get("model_type") != family.model_type:
        _fail(what, f"ports model_type {family.model_type!r}; config.json says {config.get('model_type')!r}")
    layers = schedule(config, what)  # transformers' reading; a config it refuses is a UsageError here
    mlx_config = mlx_lm_config(config, family, what)
    diffs = mlx_reading_differences(config, mlx_config)
    if diffs:
        _fail(what, f"mlx-lm {MLX_LM_VERSION} would read the written config.json as other RoPE settings: "
              + "; ".join(diffs))
    count, kv, head_dim = heads(config)
    if any(e is None or e["rotary_dim"] != head_dim for e in layers):
        _fail(what, "a NoPE or partially rotated layer; mlx-lm builds RoPE over the whole head on every layer")
    if family.model_type == "qwen2":
        missing = [n for n in ("q", "k", "v") if f"model.layers.0.self_attn.{n}_proj.bias" not in reader]
        if missing:
            _fail(what, f"no {', '.join(missing)}_proj biases; mlx-lm qwen2.py's q/k/v projections have them")
    tied = bool(config.get("tie_word_embeddings", family.model_type == "gemma3_text"))
    drop = [n for n in reader.names() if n.endswith("rotary_emb.inv_freq") or (tied and n == "lm_head.weight")]
    rules = Rules(rename=[("*", "*")], drop=drop, strict=True, require=["model.embed_tokens.weight"],
                  rope_q=["model.layers.*.self_attn.q_proj.weight"], rope_k=["model.layers.*.self_attn.k_proj.weight"],
                  heads=count, kv_heads=kv, rope_from="half", rope_to="half")
    first = layers[0]
    uniform = all(e == first for e in layers)
    rope = dict(base=first["base"], scaling=first["scaling"], rotary_dim=head_dim, source="half", target="half")
    sidecar = rope_sidecar(layout="half", base=first["base"] if uniform else None, rotary_dim=head_dim,
                           scaling=first["scaling"] if uniform else None, num_heads=count, num_kv_heads=kv,
                           source_layout="half")
    if not uniform:  # Gemma 3's two bases: the sidecar and the rope-logits check per layer
        sidecar["rope"]["layers"] = rope["layers"] = sidecar_layers(layers, layer_types(config, layers), "half")
    sidecar["hf_config"] = mlx_config  # written into the TARGET directory as config.json
    sidecar["mlx_lm"] = {"version": MLX_LM_VERSION, "module": f"mlx_lm/models/{family.model_type}.py",
                         "traditional": False, "findings": [n for n in [_embed_scale_note(config, family)] if n]}
    return Preset(rules, target_format="safetensors-dir", rope=rope, sidecar=sidecar, extra=[_config_check(config)])


def _preset(family_name):
    def build(reader, options):
        return hf_to_mlx(family_name, reader, options)
    build.__name__ = f"hf_{family_name}_to_mlx"
    return build


#: preset name -> builder
PRESETS = {f"hf-{name}-to-mlx": _preset(name) for name in MLX_FAMILIES}
