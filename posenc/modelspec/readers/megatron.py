"""`read_megatron`: Megatron-core `TransformerConfig` / `GPTModel` position keys (as Megatron-Bridge's model
providers and run configs spell them) to a `ModelSpec`; `read_nemo`: NeMo 2 `context/model.yaml` and NeMo 1
`model_config.yaml`, through the same reading.

Source read (megatron-core 0.16.1, the wheel `megatron_core-0.16.1-cp311`):
    transformer/transformer_config.py  `TransformerConfig` (num_attention_heads, num_query_groups, kv_channels
        = hidden_size // num_attention_heads when None, rotary_interleaved, apply_rope_fusion, no_rope_freq,
        mrope_section) and `MLATransformerConfig` l.2005-2080 (qk_pos_emb_head_dim 64, rope_type "yarn",
        rotary_base, rotary_percent, rotary_scaling_factor 40, original_max_position_embeddings 4096,
        beta_fast 32, beta_slow 1, mscale 1.0, mscale_all_dim 0.0)
    models/gpt/gpt_model.py l.99-107, l.159-190  GPTModel(position_embedding_type, rotary_percent, rotary_base,
        rope_scaling, rope_scaling_factor, seq_len_interpolation_factor) and the yarn_* config attributes
    models/common/embeddings/rotary_pos_embedding.py l.58-140  `RotaryEmbedding`: dim = int(kv_channels *
        rotary_percent), inv = base^(-2j/dim), `_apply_scaling` = llama3 with low 1, high 4, original 8192
        fixed (only the factor is a parameter), positions *= 1 / seq_len_interpolation_factor (= linear)
    models/common/embeddings/yarn_rotary_pos_embedding.py  `YarnRotaryEmbedding`: frequencies over the whole
        kv_channels (rotary_percent is not applied to them), `correction_range_round_to_int` (= HF truncate),
        high clamped to dim - 1, no interleave, seq_len_interpolation_factor ignored, cos/sin times
        `_yarn_get_concentration_factor` = m(f, mscale) / m(f, mscale_all_dim), m(f, s) = 0.1 s ln f + 1
    transformer/multi_latent_attention.py l.113-150  MLA: RoPE on qk_pos_emb_head_dim (`RotaryEmbedding` with
        rotary_percent for rope_type "rope", `YarnRotaryEmbedding` for "yarn") and softmax_scale =
        m(rotary_scaling_factor, mscale_all_dim)^2 / sqrt(q_head_dim) whatever rope_type says
    transformer/attention.py l.1097-1116  q and k rotations times `_yarn_get_concentration_factor_from_config`
        whenever the config carries `yarn_rotary_scaling_factor` (whatever position_embedding_type says)
"""

from __future__ import annotations

import math

from ..canonical import Finding, LayerSpec, ModelSpec

__all__ = ["read_megatron", "read_nemo", "megatron_sizes", "MEGATRON_KEYS", "MLA_DEFAULTS", "NEMO2_CLASS_DEFAULTS",
           "yarn_mscale"]

_MC = "megatron-core 0.16.1 models/common/embeddings/rotary_pos_embedding.py, yarn_rotary_pos_embedding.py"

#: megatron-core 0.16.1 `MLATransformerConfig` defaults (transformer_config.py l.2013-2059).
MLA_DEFAULTS = {"qk_pos_emb_head_dim": 64, "rope_type": "yarn", "rotary_base": 10000.0, "rotary_percent": 1.0,
                "rotary_scaling_factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.0}
#: GPTModel / TransformerConfig / yarn_* defaults (gpt_model.py l.99-107, YarnRotaryEmbedding.__init__).
_GPT_DEFAULTS = {"rotary_percent": 1.0, "rotary_base": 10000, "rope_scaling": False, "rope_scaling_factor": 8.0,
                 "seq_len_interpolation_factor": None, "rotary_interleaved": False,
                 "yarn_original_max_position_embeddings": 4096, "yarn_beta_fast": 32.0, "yarn_beta_slow": 1.0,
                 "yarn_mscale": 1.0, "yarn_mscale_all_dim": 0.0, "yarn_correction_range_round_to_int": True}
#: Every key this reader uses (position keys outside it raise, see `_check_keys`).
MEGATRON_KEYS = frozenset({"num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
                           "position_embedding_type", "apply_rope_fusion", "fused_single_qkv_rope", "no_rope_freq",
                           "multi_latent_attention", "qk_head_dim", "v_head_dim", "q_lora_rank", "kv_lora_rank",
                           "seq_length", "max_position_embeddings", "rope_scaling", "rope_scaling_factor",
                           "yarn_rotary_scaling_factor", "mrope_section"} | set(_GPT_DEFAULTS) | set(MLA_DEFAULTS))
_POSITION_MARKERS = ("rope", "rotary", "yarn", "mscale", "position", "beta_", "pos_emb", "interpolation")


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """`_yarn_get_mscale(scale, mscale)` (yarn_rotary_pos_embedding.py): 1 for scale <= 1, else 0.1 mscale ln(scale) + 1."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _check_keys(cfg: dict, source: str, extra=()) -> None:
    unknown = sorted(k for k in cfg if any(m in k for m in _POSITION_MARKERS) and k not in MEGATRON_KEYS
                     and k not in extra)
    if unknown:
        raise ValueError(f"{source}: Megatron position key(s) {unknown} are not read by this reader "
                         f"(known: {sorted(k for k in MEGATRON_KEYS if any(m in k for m in _POSITION_MARKERS))})")


def _int(cfg, key, source):
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{source}: {key}={value!r} must be a positive integer")
    return value


def _number(value, key, source):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{source}: {key}={value!r} must be a finite number")
    return float(value)


def _getter(cfg, defaults, findings):
    def get(key, lint=True):
        if cfg.get(key) is None and defaults.get(key) is not None:
            findings.append(Finding(key, f"not set: megatron-core's default {defaults[key]!r} applies", lint))
            return defaults[key]
        return cfg.get(key)
    return get


def _rotary_dim(width: int, percent: float, key: str, source: str) -> int:
    """`int(width * rotary_percent)` (rotary_pos_embedding.py l.72-74), which must be even and positive."""
    if not 0 < percent <= 1:
        raise ValueError(f"{source}: {key}={percent!r} must be in (0, 1]")
    dim = int(width * percent) if percent < 1.0 else width
    if dim < 2 or dim % 2:
        raise ValueError(f"{source}: int({width} * {key}={percent}) = {dim} rotated channels: not a positive even "
                         "number")
    return dim


def _gqa_layer(cfg, get, head_dim, source, findings) -> LayerSpec:
    kind = cfg["position_embedding_type"]
    base = _number(get("rotary_base"), "rotary_base", source)
    percent = _number(get("rotary_percent", lint=False), "rotary_percent", source)
    interleaved = bool(get("rotary_interleaved", lint=False))
    interpolation = cfg.get("seq_len_interpolation_factor")
    if kind == "yarn":
        if interleaved:
            raise ValueError(f"{source}: position_embedding_type='yarn' with rotary_interleaved=True: "
                             "YarnRotaryEmbedding.get_emb asserts 'Yarn RoPE does not support interleaved'")
        if percent != 1.0:
            findings.append(Finding("rotary_percent", f"rotary_percent={percent} with yarn: YarnRotaryEmbedding "
                                    "computes its frequencies over the whole kv_channels and rotates all of them"))
        if interpolation not in (None, 1, 1.0):
            findings.append(Finding("seq_len_interpolation_factor", "ignored by YarnRotaryEmbedding.get_emb"))
        factor = _number(cfg.get("yarn_rotary_scaling_factor"), "yarn_rotary_scaling_factor", source)
        mscale, all_dim = get("yarn_mscale", lint=False), get("yarn_mscale_all_dim", lint=False)
        attention = (yarn_mscale(factor) if mscale is None or all_dim is None
                     else yarn_mscale(factor, mscale) / yarn_mscale(factor, all_dim))
        scaling = {"rope_type": "yarn", "factor": factor,
                   "original_max_position_embeddings": int(get("yarn_original_max_position_embeddings")),
                   "beta_fast": _number(get("yarn_beta_fast"), "yarn_beta_fast", source),
                   "beta_slow": _number(get("yarn_beta_slow"), "yarn_beta_slow", source),
                   "truncate": bool(get("yarn_correction_range_round_to_int", lint=False)),
                   "attention_factor": attention}
        return LayerSpec(rope=True, layout="half", rotary_dim=head_dim, head_dim=head_dim, base=base, scaling=scaling)
    rotary_dim = _rotary_dim(head_dim, percent, "rotary_percent", source)
    scaling = None
    if get("rope_scaling", lint=False):
        if interpolation not in (None, 1, 1.0):
            raise ValueError(f"{source}: rope_scaling (llama3) together with seq_len_interpolation_factor="
                             f"{interpolation} divides the llama3 frequencies again: not one rope type")
        factor = _number(get("rope_scaling_factor"), "rope_scaling_factor", source)
        scaling = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192}
    elif interpolation not in (None, 1, 1.0):
        factor = _number(interpolation, "seq_len_interpolation_factor", source)
        scaling = {"rope_type": "linear", "factor": factor}  # seq *= 1 / factor == inv_freq / factor
    return LayerSpec(rope=True, layout="interleaved" if interleaved else "half", rotary_dim=rotary_dim,
                     head_dim=head_dim, base=base, scaling=scaling)


def _mla_layer(cfg, source, findings) -> tuple[LayerSpec, dict]:
    get = _getter(cfg, MLA_DEFAULTS, findings)
    width = int(get("qk_pos_emb_head_dim"))
    kind = get("rope_type")
    base = _number(get("rotary_base"), "rotary_base", source)
    factor = _number(get("rotary_scaling_factor"), "rotary_scaling_factor", source)
    all_dim = _number(get("mscale_all_dim"), "mscale_all_dim", source)
    terms = {}
    if kind == "rope":
        rotary_dim = _rotary_dim(width, _number(get("rotary_percent", lint=False), "rotary_percent", source),
                                 "rotary_percent", source)
        layer = LayerSpec(rope=True, layout="half", rotary_dim=rotary_dim, head_dim=width, base=base)
        multiplier = yarn_mscale(factor, all_dim) ** 2  # multi_latent_attention.py l.125-126, whatever rope_type
        if multiplier != 1.0:
            findings.append(Finding("rotary_scaling_factor", f"rope_type='rope' but MLA's softmax scale still takes "
                                    f"m(rotary_scaling_factor={factor}, mscale_all_dim={all_dim})^2 = {multiplier:.6g}"))
            terms["softmax_scale_multiplier"] = multiplier
        return layer, terms
    if kind != "yarn":
        raise ValueError(f"{source}: MLA rope_type={kind!r} is not one of 'rope', 'yarn' (multi_latent_attention.py)")
    mscale = _number(get("mscale"), "mscale", source)
    scaling = {"rope_type": "yarn", "factor": factor,
               "original_max_position_embeddings": int(get("original_max_position_embeddings")),
               "beta_fast": _number(get("beta_fast"), "beta_fast", source),
               "beta_slow": _number(get("beta_slow"), "beta_slow", source), "truncate": True,
               "attention_factor": yarn_mscale(factor, mscale) / yarn_mscale(factor, all_dim)}
    if all_dim:
        terms["softmax_mscale_all_dim"] = all_dim  # the key read_hf_config uses for DeepSeek's softmax mscale^2
    return LayerSpec(rope=True, layout="half", rotary_dim=width, head_dim=width, base=base, scaling=scaling), terms


def _refuse_rope_concentration(cfg, source) -> None:
    """transformer/attention.py l.1097-1116: q and k rotations take `_yarn_get_concentration_factor_from_config`
    whenever the config has `yarn_rotary_scaling_factor`, even with position_embedding_type 'rope'."""
    factor = _number(cfg["yarn_rotary_scaling_factor"], "yarn_rotary_scaling_factor", source)
    mscale, all_dim = cfg.get("yarn_mscale"), cfg.get("yarn_mscale_all_dim")
    m = yarn_mscale(factor) if mscale is None or all_dim is None else yarn_mscale(factor, mscale) / yarn_mscale(
        factor, all_dim)
    if m != 1.0:
        raise ValueError(f"{source}: position_embedding_type='rope' with yarn_rotary_scaling_factor={factor}: "
                         f"megatron-core's attention (transformer/attention.py l.1097-1116) still multiplies the "
                         f"rotations by the yarn concentration factor {m:.6g}; no rope type is rope plus that factor")


def _nope_layers(cfg, num_layers, source) -> list:
    """`no_rope_freq` (transformer_config.py l.1963-1978): int N -> every N-th layer NoPE; list -> 1 = NoPE."""
    freq = cfg.get("no_rope_freq")
    if not freq:
        return [False] * num_layers
    if isinstance(freq, int) and not isinstance(freq, bool):
        if num_layers % freq:
            raise ValueError(f"{source}: no_rope_freq={freq} must divide num_layers={num_layers}")
        return [(i + 1) % freq == 0 for i in range(num_layers)]
    if isinstance(freq, list) and len(freq) == num_layers and all(v in (0, 1) for v in freq):
        return [bool(v) for v in freq]
    raise ValueError(f"{source}: no_rope_freq={freq!r} must be an int or a 0/1 list of num_layers={num_layers}")


def read_megatron(config, *, source: str = "<dict>", dialect: str = "megatron", follows: str = _MC) -> ModelSpec:
    """Read Megatron-core TransformerConfig / GPTModel keys into a `ModelSpec` (module docstring: the source).

    `position_embedding_type` must be given ("rope" or "yarn"; GPTModel's default is "learned_absolute", no
    rotary at all) unless `multi_latent_attention` is set (MLA reads `rope_type`). q/k rows are in HF order
    (Megatron-Bridge's `QKVMapping` groups heads per query group but does not permute within a head), so
    `rotary_interleaved=True` is an interleaved layout on HF rows. A key the file leaves to a default is a
    lint finding. A Megatron-Bridge `run_config.yaml` is read from its `model:` node.

    Raises:
        ValueError: a missing or bad size, a position type it cannot express (learned, mrope, none), or a
            position key it does not read.
    """
    cfg = dict(config)
    if isinstance(cfg.get("model"), dict) and "num_layers" in cfg["model"]:
        cfg = dict(cfg["model"])  # Megatron-Bridge run_config.yaml: the model provider under `model:`
    cfg.pop("_target_", None)
    _check_keys(cfg, source)
    findings = []
    num_layers = _int(cfg, "num_layers", source)
    heads = _int(cfg, "num_attention_heads", source)
    terms = {}
    if cfg.get("multi_latent_attention"):
        layer, terms = _mla_layer(cfg, source, findings)
    else:
        kind = cfg.get("position_embedding_type")
        if kind not in ("rope", "yarn"):
            raise ValueError(f"{source}: position_embedding_type={kind!r}: this reader reads 'rope' and 'yarn' "
                             "(GPTModel's default 'learned_absolute', 'mrope' and 'none' are not rotary settings it reads)")
        head_dim = cfg.get("kv_channels") or _int(cfg, "hidden_size", source) // heads
        if kind == "rope" and cfg.get("yarn_rotary_scaling_factor") is not None:
            _refuse_rope_concentration(cfg, source)
        layer = _gqa_layer(cfg, _getter(cfg, _GPT_DEFAULTS, findings), int(head_dim), source, findings)
    layer.plan()  # validates the values
    layers = [LayerSpec(rope=False) if nope else layer for nope in _nope_layers(cfg, num_layers, source)]
    scaling = layer.scaling or {}
    return ModelSpec(source=source, dialect=dialect, follows=follows, layers=layers, row_order="hf",
                     max_position_embeddings=cfg.get("max_position_embeddings") or cfg.get("seq_length"),
                     original_max_position_embeddings=scaling.get("original_max_position_embeddings"),
                     attention_terms=terms, findings=findings)


def megatron_sizes(config: dict, *, source: str = "megatron config") -> dict:
    """The sizes of a Megatron config in HF names (`posenc.port.stack_config.StackShape` fields): head counts
    (`num_query_groups` defaults to `num_attention_heads`, `kv_channels` to hidden_size // heads, as
    `TransformerConfig.__post_init__` l.933-937 does), FFN, vocab, norm eps, tying, length; MLA's dims with
    `MLATransformerConfig`'s defaults."""
    cfg = config
    if isinstance(cfg.get("model"), dict) and "num_layers" in cfg["model"]:
        cfg = cfg["model"]
    count, layers, hidden = (_int(cfg, k, source) for k in ("num_attention_heads", "num_layers", "hidden_size"))
    mla = None
    if cfg.get("multi_latent_attention"):
        mla = {"qk_rope_head_dim": cfg.get("qk_pos_emb_head_dim", 64), "qk_nope_head_dim": cfg.get("qk_head_dim", 128),
               "v_head_dim": cfg.get("v_head_dim", 128), "kv_lora_rank": cfg.get("kv_lora_rank", 512),
               "q_lora_rank": cfg.get("q_lora_rank", 512)}
    return dict(hidden_size=hidden, num_attention_heads=count, num_key_value_heads=int(cfg.get("num_query_groups") or count),
                head_dim=int(cfg.get("kv_channels") or hidden // count), num_hidden_layers=layers,
                intermediate_size=cfg.get("ffn_hidden_size"), vocab_size=cfg.get("vocab_size"),
                rms_norm_eps=cfg.get("layernorm_epsilon"), tie_word_embeddings=cfg.get("share_embeddings_and_output_weights"),
                max_position_embeddings=cfg.get("seq_length") or cfg.get("max_position_embeddings"), mla=mla)


#: NeMo 2 `nemo/collections/llm/gpt/model/llama.py` (NVIDIA/NeMo 008df615) rope defaults per config class:
#: LlamaConfig sets position_embedding_type "rope"; GPTConfig's rotary_base is 10000; Llama31Config applies
#: `apply_rope_scaling(inv_freq, factor=scale_factor, low_freq_factor, high_freq_factor, old_context_len)`
#: in `configure_model`.
_LLAMA31 = {"scale_factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "old_context_len": 8192}
NEMO2_CLASS_DEFAULTS = {
    "LlamaConfig": {"rotary_base": 10000, "seq_length": 4096},
    "Llama2Config7B": {"rotary_base": 10000, "seq_length": 4096},
    "Llama2Config13B": {"rotary_base": 10000, "seq_length": 4096},
    "Llama2Config70B": {"rotary_base": 10000, "seq_length": 4096},
    "Llama3Config": {"rotary_base": 10000, "seq_length": 4096},
    "Llama3Config8B": {"rotary_base": 500_000, "seq_length": 8192},
    "Llama3Config70B": {"rotary_base": 500_000, "seq_length": 8192},
    "Llama31Config": {"rotary_base": 10000, "seq_length": 4096, **_LLAMA31},
    "Llama31Config8B": {"rotary_base": 500_000, "seq_length": 131072, **_LLAMA31},
    "Llama31Config70B": {"rotary_base": 500_000, "seq_length": 131072, **_LLAMA31},
    "Llama31Config405B": {"rotary_base": 500_000, "seq_length": 131072, **_LLAMA31},
    "Llama32Config1B": {"rotary_base": 500_000, "seq_length": 4096, **_LLAMA31, "scale_factor": 32},
    "Llama32Config3B": {"rotary_base": 500_000, "seq_length": 4096, **_LLAMA31, "scale_factor": 32},
    "CodeLlamaConfig7B": {"rotary_base": 1_000_000, "seq_length": 16384},
    "CodeLlamaConfig13B": {"rotary_base": 1_000_000, "seq_length": 16384},
    "CodeLlamaConfig34B": {"rotary_base": 1_000_000, "seq_length": 16384},
}
_NEMO2 = "NeMo 2 nemo/collections/llm/gpt/model/llama.py (008df615) Llama*Config + " + _MC
_NEMO1 = "NeMo 1 megatron_gpt_model.py model_config.yaml keys + " + _MC
#: NeMo 1 `model_config.yaml` names -> megatron-core names.
_NEMO1_RENAMES = {"rotary_percentage": "rotary_percent", "scale_positional_embedding": "rope_scaling",
                  "encoder_seq_length": "seq_length"}


def _nemo2_llama31(cfg: dict, cls: str, source: str) -> dict | None:
    """The llama3 dict of a Llama31Config subclass (scale_factor / low / high / old_context_len), else None."""
    defaults = NEMO2_CLASS_DEFAULTS.get(cls, {})
    llama31 = "scale_factor" in defaults or any(k in cfg for k in _LLAMA31)
    if not llama31:
        return None
    values = {k: cfg.get(k, defaults.get(k)) for k in _LLAMA31}
    missing = sorted(k for k, v in values.items() if v is None)
    if missing:
        raise ValueError(f"{source}: NeMo 2 class {cls!r} with Llama 3.1 scaling needs {missing}")
    return {"rope_type": "llama3", "factor": float(values["scale_factor"]),
            "low_freq_factor": float(values["low_freq_factor"]), "high_freq_factor": float(values["high_freq_factor"]),
            "original_max_position_embeddings": int(values["old_context_len"])}


def _read_nemo2(model: dict, source: str) -> ModelSpec:
    cfg = dict(model["config"])
    cls = str(cfg.pop("_target_", "")).rsplit(".", 1)[-1]
    defaults = NEMO2_CLASS_DEFAULTS.get(cls)
    findings = []
    if defaults is None:
        findings.append(Finding("_target_", f"config class {cls!r} is not in posenc's table of NeMo 2 Llama "
                                "classes: only the keys written in the file are read"))
        defaults = {}
    for key in ("rotary_base", "seq_length"):
        if cfg.get(key) is None and key in defaults:
            cfg[key] = defaults[key]
            findings.append(Finding(key, f"not written: {cls}'s default {defaults[key]!r} applies", lint=False))
    if defaults or cls.startswith(("Llama", "CodeLlama")):
        cfg.setdefault("position_embedding_type", "rope")  # LlamaConfig's class default
    llama3 = _nemo2_llama31(cfg, cls, source)
    for key in _LLAMA31:
        cfg.pop(key, None)
    spec = read_megatron(cfg, source=source, dialect="nemo", follows=_NEMO2)
    if llama3 is not None:
        if any(layer.rope and layer.scaling for layer in spec.layers):
            raise ValueError(f"{source}: Llama31Config scaling on top of {spec.layers[0].scaling['rope_type']} "
                             "scaling: not one rope type")
        spec.layers = [LayerSpec(rope=True, layout=la.layout, rotary_dim=la.rotary_dim, head_dim=la.head_dim,
                                 base=la.base, scaling=dict(llama3)) if la.rope else la for la in spec.layers]
        spec.original_max_position_embeddings = llama3["original_max_position_embeddings"]
    spec.findings = findings + spec.findings
    return spec


def read_nemo(config, *, source: str = "<dict>") -> ModelSpec:
    """Read a NeMo model config: NeMo 2 `context/model.yaml` (`{_target_: ...LlamaModel, config: {_target_:
    ...Llama31Config8B, ...}}`, the fiddle serialization `io.dump` writes; keys not written take the class
    defaults of `NEMO2_CLASS_DEFAULTS`) or NeMo 1 `model_config.yaml` (flat keys: `rotary_percentage`,
    `rotary_base`, `seq_len_interpolation_factor`, `scale_positional_embedding` = megatron-core's
    `rope_scaling` with factor 8, `encoder_seq_length`; NeMo 1 passed them to megatron-core's GPTModel).

    Raises:
        ValueError: as `read_megatron`, or a config that is neither form.
    """
    data = dict(config)
    if isinstance(data.get("config"), dict):
        return _read_nemo2(data, source)
    if "_target_" in data and "num_layers" in data:  # the config node alone
        return _read_nemo2({"config": data}, source)
    cfg = {_NEMO1_RENAMES.get(k, k): v for k, v in data.items()
           if k not in ("tokenizer", "optim", "data", "nsys_profile")}
    nemo_only = {"max_position_embeddings"}
    _check_keys(cfg, source, extra=nemo_only)
    spec = read_megatron(cfg, source=source, dialect="nemo", follows=_NEMO1)
    return spec
