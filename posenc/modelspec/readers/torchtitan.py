"""`read_torchtitan`: torchtitan's model config (its `RoPE.Config` per layer) to a `ModelSpec`.

torchtitan 0.3.0 builds models from Python dataclasses; the file form is the job config it dumps
(`Trainer.Config.to_dict()`, trainer.py l.212-247, written by `debug.save_config_file` or logged by
`debug.print_config`): `{"model_spec": {"name", "flavor", "model": Model.Config.to_dict()}, ...}`, where
`model.layers[i].attention` holds `n_heads`, `n_kv_heads`, `head_dim` (`GQAttention.Config`,
models/common/attention.py l.938-947) and `rope` (`RoPE.Config`, models/common/rope.py l.93-108: `dim`,
`max_seq_len`, `theta`, `scaling` "none" | "llama" | "yarn", `scaling_factor`, `low_freq_factor`,
`high_freq_factor`, `original_max_position_embeddings`, `rope_factor`, `beta_fast`, `beta_slow`,
`original_seq_len`, `truncate`). The dump is read as JSON or TOML (the same tables), or the model dict
alone (`{"dim", "layers": [...]}`, model name then from a top-level `"name"`). torchtitan 0.2.x's flat llama3
`TransformerModelArgs` (`dim`, `n_layers`, `n_heads`, `n_kv_heads`, `rope_theta`, `rope_scaling_args`,
`max_seq_len`) is read too (`_read_legacy`).

The dump loses the RoPE class, so it comes from the model name, as torchtitan's registries build them:
`llama3` uses `ComplexRoPE` (adjacent pairs on Meta-ordered q/k rows: the state-dict adapter
models/llama3/state_dict_adapter.py l.46-66 permutes HF rows with HF's `_permute`), `qwen3` and `gpt_oss`
use `CosSinRoPE` (rotate-half on HF rows; `CosSinRoPE` refuses "llama" scaling, rope.py l.284-285). The rope
itself is a pure rotation: YaRN's mscale is not applied by it (`_yarn_inv_freq` docstring); gpt_oss folds
0.1 ln(rope_factor) + 1 into its softmax scale (models/gpt_oss/model.py l.73-78), llama3 and qwen3 fold
nothing. YaRN applies only when `rope_factor > 1` (rope.py, `ComplexRoPE._precompute_cache`).
"""

from __future__ import annotations

import math

from ..canonical import Finding, LayerSpec, ModelSpec

__all__ = ["read_torchtitan", "TORCHTITAN_ROPE_DEFAULTS", "TORCHTITAN_MODELS", "LEGACY_ARGS"]

_TT = "torchtitan 0.3.0 models/common/rope.py (RoPE.Config, ComplexRoPE, CosSinRoPE, _yarn_inv_freq)"
#: `RoPE.Config` defaults (models/common/rope.py l.93-108, torchtitan 0.3.0); `dim`, `max_seq_len` have none.
TORCHTITAN_ROPE_DEFAULTS = {"theta": 10000.0, "scaling": "none", "scaling_factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_factor": 1.0,
                            "beta_fast": 32.0, "beta_slow": 1.0, "original_seq_len": 4096, "truncate": True}
#: model name -> (RoPE class, q/k row order, YaRN mscale folded into the softmax scale).
TORCHTITAN_MODELS = {"llama3": ("ComplexRoPE", "meta", False), "qwen3": ("CosSinRoPE", "hf", False),
                     "gpt_oss": ("CosSinRoPE", "hf", True)}
#: `RoPE.Config` fields: its own plus `Module.Config`'s `param_init`, `sharding_config` (protocols/module.py l.57-59),
#: which `to_dict()` writes too.
_ROPE_KEYS = set(TORCHTITAN_ROPE_DEFAULTS) | {"dim", "max_seq_len", "param_init", "sharding_config"}


#: torchtitan 0.2.0-0.2.2 `models/llama3/model/args.py` `TransformerModelArgs` fields (the flat form).
LEGACY_ARGS = {"dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "multiple_of", "ffn_dim_multiplier",
               "norm_eps", "rope_theta", "rope_scaling_args", "max_seq_len", "depth_init", "attn_type",
               "attn_mask_type", "eos_id", "use_flex_attn"}
#: torchtitan 0.2.x `RoPEScalingArgs` defaults (args.py l.19-24).
LEGACY_SCALING = {"scaling_factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}
_TT02 = ("torchtitan 0.2.2 models/llama3/model/args.py TransformerModelArgs + model.py precompute_freqs_cis "
         "(llama3 scaling applied unconditionally)")


def _read_legacy(args: dict, source: str) -> ModelSpec:
    """torchtitan 0.2.x llama3 `TransformerModelArgs` (as train.py l.145 logs `asdict(model_args)`).

    `precompute_freqs_cis(dim // n_heads, max_seq_len, rope_theta, rope_scaling_args)` (model.py l.34-88,
    torchtitan 0.2.0-0.2.2) applies llama3 scaling to every llama3 flavour, with `RoPEScalingArgs`' defaults
    8 / 1 / 4 / 8192 when the flavour sets none: an unscaled HF Llama 3 is not what it computes.
    """
    unknown = sorted(set(args) - LEGACY_ARGS)
    if unknown:
        raise ValueError(f"{source}: keys {unknown} are not torchtitan 0.2 TransformerModelArgs fields")
    findings = []
    for key in ("dim", "n_layers", "n_heads"):
        if isinstance(args.get(key), bool) or not isinstance(args.get(key), int) or args[key] < 1:
            raise ValueError(f"{source}: {key}={args.get(key)!r} must be a positive integer")
    if "rope_theta" not in args:
        findings.append(Finding("rope_theta", "not set: TransformerModelArgs' default 10000 applies"))
    given = args.get("rope_scaling_args")
    if given is None:
        findings.append(Finding("rope_scaling_args", "not set: RoPEScalingArgs' defaults (factor 8, low 1, high 4, "
                                "original 8192) apply: torchtitan 0.2 scales every llama3 model", lint=False))
    elif not isinstance(given, dict) or set(given) - set(LEGACY_SCALING):
        raise ValueError(f"{source}: rope_scaling_args={given!r} must hold only {sorted(LEGACY_SCALING)}")
    values = {**LEGACY_SCALING, **(given or {})}
    scaling = {"rope_type": "llama3", "factor": float(values["scaling_factor"]),
               "low_freq_factor": float(values["low_freq_factor"]), "high_freq_factor": float(values["high_freq_factor"]),
               "original_max_position_embeddings": int(values["original_max_position_embeddings"])}
    head_dim = args["dim"] // args["n_heads"]
    layer = LayerSpec(rope=True, layout="interleaved", rotary_dim=head_dim, head_dim=head_dim,
                      base=float(args.get("rope_theta", 10000.0)), scaling=scaling)
    layer.plan()
    return ModelSpec(source=source, dialect="torchtitan", follows=_TT02, layers=[layer] * args["n_layers"],
                     row_order="meta", max_position_embeddings=args.get("max_seq_len", 131072),
                     original_max_position_embeddings=scaling["original_max_position_embeddings"], findings=findings)


def _model_dict(data: dict, source: str) -> tuple[str | None, dict]:
    spec = data.get("model_spec")
    if isinstance(spec, dict) and isinstance(spec.get("model"), dict):
        return spec.get("name"), spec["model"]
    if isinstance(data.get("layers"), list):
        return data.get("name"), data
    raise ValueError(f"{source}: not a torchtitan config: expected model_spec.model.layers (Trainer.Config.to_dict())"
                     " or a model dict with 'layers'")


def _number(rope: dict, key: str, where: str) -> float:
    value = rope.get(key, TORCHTITAN_ROPE_DEFAULTS.get(key))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where}: rope.{key}={value!r} must be a positive finite number")
    return float(value)


def _scaling(rope: dict, where: str, folds_mscale: bool):
    kind = rope.get("scaling", "none")
    if kind == "none":
        return None
    if kind == "llama":
        return {"rope_type": "llama3", "factor": _number(rope, "scaling_factor", where),
                "low_freq_factor": _number(rope, "low_freq_factor", where),
                "high_freq_factor": _number(rope, "high_freq_factor", where),
                "original_max_position_embeddings": int(_number(rope, "original_max_position_embeddings", where))}
    if kind == "yarn":
        factor = _number(rope, "rope_factor", where)
        if factor <= 1.0:
            return None  # `elif cfg.scaling == "yarn" and cfg.rope_factor > 1.0`: unscaled otherwise
        truncate = rope.get("truncate", True)
        if not isinstance(truncate, bool):
            raise ValueError(f"{where}: rope.truncate={truncate!r} must be true or false")
        return {"rope_type": "yarn", "factor": factor,
                "original_max_position_embeddings": int(_number(rope, "original_seq_len", where)),
                "beta_fast": _number(rope, "beta_fast", where), "beta_slow": _number(rope, "beta_slow", where),
                "truncate": truncate, "attention_factor": 0.1 * math.log(factor) + 1.0 if folds_mscale else 1.0}
    raise ValueError(f"{where}: rope.scaling={kind!r} is not one of 'none', 'llama', 'yarn' (RoPE.Config)")


def _layer(entry, i: int, dim: int, source: str, layout: str, folds_mscale: bool, findings: list) -> LayerSpec:
    where = f"{source}: layers[{i}]"
    attention = entry.get("attention") if isinstance(entry, dict) else None
    if not isinstance(attention, dict) or not isinstance(attention.get("rope"), dict):
        raise ValueError(f"{where}: no attention.rope (RoPE.Config) in this layer")
    rope = attention["rope"]
    unknown = sorted(set(rope) - _ROPE_KEYS)
    if unknown:
        raise ValueError(f"{where}: rope keys {unknown} are not RoPE.Config fields (torchtitan 0.3.0)")
    heads = attention.get("n_heads")
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
        raise ValueError(f"{where}: attention.n_heads={heads!r} must be a positive integer")
    head_dim = attention.get("head_dim") or dim // heads
    rotary = rope.get("dim")
    if rotary != head_dim:  # ComplexRoPE/CosSinRoPE caches are dim / 2 (or dim) wide and must match the head
        raise ValueError(f"{where}: rope.dim={rotary!r} != head_dim={head_dim}: torchtitan rotates the whole head "
                         "(its RoPE cache width must equal the query's last dim)")
    if "theta" not in rope:
        findings.append(Finding(f"layers[{i}].rope.theta", "not set: RoPE.Config's default 10000.0 applies"))
    layer = LayerSpec(rope=True, layout=layout, rotary_dim=int(rotary), head_dim=int(head_dim),
                      base=_number(rope, "theta", where), scaling=_scaling(rope, where, folds_mscale))
    layer.plan()
    return layer


def read_torchtitan(config, *, source: str = "<dict>") -> ModelSpec:
    """Read a torchtitan job-config dump (or model dict) into a `ModelSpec`, one layer per `layers[i]`.

    Raises:
        ValueError: a config without layers or rope, a model name whose RoPE class posenc does not know
            (`TORCHTITAN_MODELS`; DeepSeek-V3 / Kimi MLA are not read), llama scaling on a CosSinRoPE
            model, partial rotary (`rope.dim != head_dim`), unknown rope keys.
    """
    config = dict(config)
    if "rope_theta" in config or "rope_scaling_args" in config or "n_layers" in config:
        return _read_legacy(config, source)
    name, model = _model_dict(config, source)
    findings = []
    if name is None:
        findings.append(Finding("model_spec.name", "absent: read as 'llama3' (ComplexRoPE, Meta row order)"))
        name = "llama3"
    if name not in TORCHTITAN_MODELS:
        raise ValueError(f"{source}: model_spec.name={name!r}: posenc knows the RoPE class of "
                         f"{sorted(TORCHTITAN_MODELS)} only (the dump does not record it)")
    cls, row_order, folds = TORCHTITAN_MODELS[name]
    layout = "interleaved" if cls == "ComplexRoPE" else "half"
    dim = model.get("dim")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError(f"{source}: model.dim={dim!r} must be a positive integer")
    if not model["layers"]:
        raise ValueError(f"{source}: model.layers is empty")
    layers = [_layer(entry, i, dim, source, layout, folds, findings) for i, entry in enumerate(model["layers"])]
    for i, layer in enumerate(layers):
        if cls == "CosSinRoPE" and (layer.scaling or {}).get("rope_type") == "llama3":
            raise ValueError(f"{source}: layers[{i}]: scaling 'llama' on {name} (CosSinRoPE raises "
                             "NotImplementedError('Cos/sin RoPE does not support Llama scaling.'))")
    first_rope = model["layers"][0]["attention"]["rope"]
    scaling = layers[0].scaling or {}
    return ModelSpec(source=source, dialect="torchtitan", follows=f"{_TT}; model {name} ({cls})", layers=layers,
                     row_order=row_order, max_position_embeddings=first_rope.get("max_seq_len"),
                     original_max_position_embeddings=scaling.get("original_max_position_embeddings"),
                     findings=findings)
