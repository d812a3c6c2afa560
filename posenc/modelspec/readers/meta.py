"""`read_meta_params`: Meta's `params.json` (meta-llama/llama and llama-models reference code) to a `ModelSpec`."""

from __future__ import annotations

from ..canonical import Finding, LayerSpec, ModelSpec

__all__ = ["read_meta_params"]

_META_KEYS = {"dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "multiple_of", "ffn_dim_multiplier",
              "norm_eps", "rope_theta", "use_scaled_rope", "rope_scaling_factor", "rope_high_freq_factor",
              "max_seq_len", "max_batch_size", "use_qk_norm", "nope_layer_interval", "attn_temperature_tuning",
              "floor_scale", "attn_scale", "moe_args", "vision_args", "quantization_args", "lora_args",
              "vision_chunk_size", "vision_max_num_chunks", "vision_num_cross_attention_layers",
              "interleave_moe_layer_step", "num_experts", "head_dim"}


def read_meta_params(params, *, source: str = "<dict>") -> ModelSpec:
    """Read Meta's `params.json` (consolidated checkpoints).

    Follows meta-llama/llama-models `models/llama3/args.py` + `reference_impl/model.py`
    (`precompute_freqs_cis(dim, end, theta, use_scaled, scale_factor, high_freq_factor)`; `apply_scaling`
    with low_freq_factor 1 and old_context_len 8192 fixed) and meta-llama/llama `llama/model.py` (Llama 2,
    theta 10000). Layout: Meta's complex form, interleaved pairs on Meta-ordered rows. A file without
    `rope_theta` is ambiguous (Llama 2 reference 10000, llama-models default 500000): read as 10000 with a
    lint finding. Llama 4 `nope_layer_interval`: layer i is NoPE when (i + 1) % interval == 0.
    """
    params = dict(params)
    findings = []
    unknown = sorted(k for k in params if k not in _META_KEYS)
    if unknown:
        raise ValueError(f"{source}: params.json keys {unknown} are not read by this reader")
    for k in ("dim", "n_layers", "n_heads"):
        if not isinstance(params.get(k), int):
            raise ValueError(f"{source}: params.json needs integer {k!r}")
    head_dim = params.get("head_dim") or params["dim"] // params["n_heads"]
    base = params.get("rope_theta")
    if base is None:
        findings.append(Finding("rope_theta", "absent: Llama 2's reference uses 10000, llama-models' ModelArgs "
                                "defaults to 500000; read as 10000"))
        base = 10000.0
    scaling = None
    if params.get("use_scaled_rope"):
        factor = params.get("rope_scaling_factor")
        high = params.get("rope_high_freq_factor")
        if factor is None:
            findings.append(Finding("rope_scaling_factor", "use_scaled_rope without it: llama-models uses 8"))
            factor = 8.0
        if high is None:
            high = 4.0
        scaling = {"rope_type": "llama3", "factor": float(factor), "low_freq_factor": 1.0,
                   "high_freq_factor": float(high), "original_max_position_embeddings": 8192}
    layer = LayerSpec(rope=True, layout="interleaved", rotary_dim=int(head_dim), head_dim=int(head_dim),
                      base=float(base), scaling=scaling)
    interval = params.get("nope_layer_interval")
    layers = [LayerSpec(rope=False) if interval and (i + 1) % int(interval) == 0 else layer
              for i in range(params["n_layers"])]
    terms = {k: params[k] for k in ("attn_temperature_tuning", "floor_scale", "attn_scale") if params.get(k)}
    return ModelSpec(source=source, dialect="meta", follows="meta-llama/llama-models models/llama3/args.py, "
                     "reference_impl/model.py precompute_freqs_cis / apply_scaling", layers=layers,
                     row_order="meta", max_position_embeddings=params.get("max_seq_len"),
                     original_max_position_embeddings=8192 if scaling else None, attention_terms=terms,
                     findings=findings)
