"""`read_maxtext`: MaxText YAML config keys (src/MaxText/configs/base.yml) to a `ModelSpec`."""

from __future__ import annotations

import math

from ..canonical import Finding, LayerSpec, ModelSpec

__all__ = ["read_maxtext", "MAXTEXT_DEFAULTS"]

#: MaxText src/MaxText/configs/base.yml (commit 003b4169) defaults of the keys this reader uses.
MAXTEXT_DEFAULTS = {"rope_type": "default", "rope_linear_scaling_factor": 1.0, "rope_use_scale": True,
                    "rope_min_timescale": 1, "rope_max_timescale": 10_000, "local_rope_max_timescale": -1,
                    "max_position_embeddings": 163840, "original_max_position_embeddings": 4096, "rope_factor": 40,
                    "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "rope_interleave": True, "rope_truncate": True,
                    "rope_attention_scaling": False, "head_dim": 128, "base_num_decoder_layers": 16,
                    "nope_layer_interval": -1}
_MAXTEXT_ROPE_KEYS = {k for k in MAXTEXT_DEFAULTS if "rope" in k} | {"rope_theta_for_vit"}


def read_maxtext(config, *, source: str = "<dict>") -> ModelSpec:
    """Read MaxText config keys (a model YAML over src/MaxText/configs/base.yml, commit 003b4169).

    Follows src/maxtext/layers/embeddings.py: `RotaryEmbedding` (timescale = min * (max / min) ** (2i / d),
    angle = position / timescale, half layout, `rope_linear_scaling_factor` multiplies the timescale),
    `LLaMARotaryEmbedding` (rope_type "llama3.1": interleaved pairs, llama3 scaling with factor 8, low 1,
    high 4, original 8192 fixed in `_apply_scaling_factor` when `rope_use_scale`), `YarnRotaryEmbedding`
    (rope_type "yarn": rope_factor, original_max_position_embeddings, beta_fast/slow, rope_truncate
    (clamp high to d - 1), rope_interleave: interleaved input pairs; the output is written in half order
    for q and k alike, which leaves q . k as interleaved RoPE; attention scale 0.1 ln(factor) + 1 only when
    rope_attention_scaling, else 1). Keys the file leaves to base.yml are lint findings. `nope_layer_interval`
    > 0: layer i is NoPE when (i + 1) % interval == 0.
    """
    cfg = dict(config)
    findings = []
    unknown = sorted(k for k in cfg if ("rope" in k or "timescale" in k) and k not in _MAXTEXT_ROPE_KEYS)
    if unknown:
        raise ValueError(f"{source}: MaxText rope keys {unknown} are not read by this reader")

    def get(k, lint=True):
        if k not in cfg:
            findings.append(Finding(k, f"not set: base.yml's {MAXTEXT_DEFAULTS[k]!r} applies", lint))
            return MAXTEXT_DEFAULTS[k]
        return cfg[k]

    if cfg.get("partial_rotary_factor") not in (None, 1, 1.0):  # base.yml l.1327; not modelled here
        raise ValueError(f"{source}: partial_rotary_factor={cfg['partial_rotary_factor']} is not read by this reader")
    kind = get("rope_type")
    if get("rope_min_timescale", lint=False) != 1:
        raise ValueError(f"{source}: rope_min_timescale={cfg['rope_min_timescale']} != 1 gives inv_j = "
                         "min^-1 (max/min)^(-2j/d), not a base^(-2j/d) RoPE")
    if get("local_rope_max_timescale", lint=False) not in (-1, None):
        raise ValueError(f"{source}: local_rope_max_timescale (per-layer bases) is not read by this reader")
    head_dim = int(cfg.get("head_dim", MAXTEXT_DEFAULTS["head_dim"]))
    base = float(get("rope_max_timescale"))
    if kind == "llama3.1":
        layout = "interleaved"
        scaling = ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192} if get("rope_use_scale", lint=False) else None)
    elif kind == "yarn":
        layout = "interleaved" if get("rope_interleave") else "half"
        factor = float(get("rope_factor"))
        scaling = {"rope_type": "yarn", "factor": factor,
                   "original_max_position_embeddings": int(get("original_max_position_embeddings")),
                   "beta_fast": float(get("beta_fast")), "beta_slow": float(get("beta_slow")),
                   "truncate": bool(get("rope_truncate")),
                   "attention_factor": (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)
                   if get("rope_attention_scaling") else 1.0}
    elif kind == "default":
        layout = "half"
        factor = float(get("rope_linear_scaling_factor"))
        scaling = None if factor == 1.0 else {"rope_type": "linear", "factor": factor}
    else:
        raise ValueError(f"{source}: rope_type={kind!r} is not one of MaxText's default, llama3.1, yarn")
    layer = LayerSpec(rope=True, layout=layout, rotary_dim=head_dim, head_dim=head_dim, base=base, scaling=scaling)
    layer.plan()
    num_layers = int(cfg.get("base_num_decoder_layers", MAXTEXT_DEFAULTS["base_num_decoder_layers"]))
    interval = get("nope_layer_interval", lint=False)
    layers = [LayerSpec(rope=False) if interval and interval > 0 and (i + 1) % interval == 0 else layer
              for i in range(num_layers)]
    return ModelSpec(source=source, dialect="maxtext", follows="MaxText base.yml (003b4169) + layers/embeddings.py",
                     layers=layers, row_order="meta" if kind == "llama3.1" else "hf",
                     max_position_embeddings=cfg.get("max_position_embeddings"),
                     original_max_position_embeddings=(scaling or {}).get("original_max_position_embeddings"),
                     findings=findings)
