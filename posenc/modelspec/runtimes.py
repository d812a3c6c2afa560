"""What each runtime computes for an HF config: the same file re-read the way vLLM, mlx-lm, llama.cpp,
keras-hub or Transformer Engine read it, as named scaling variants of `posenc_np.scaling`.

The same dict means different frequencies in different runtimes (docs/spec.md has the matrix with
sources). `runtime_spec(config, name)` returns the `ModelSpec` of what runtime `name` computes, with a
finding for every key it drops or reinterprets; settings a runtime cannot compute raise `ValueError`
(never a silent fallback). Sources, per runtime:

    hf            transformers 5.24 (the file's own meaning)
    vllm          vLLM 0.33.0 vllm/model_executor/layers/rotary_embedding/__init__.py `get_rope`: forwards YaRN's
                  `attention_factor` and `truncate` to YaRNScalingRotaryEmbedding (the wheel's yarn branch)
    vllm-0.32     the same file at commit 07b12f1b (vLLM <= 0.32) and the classes it builds:
                  dynamic_ntk_scaling_rope.py (3cfbaf33), ntk_scaling_rope.py (03587f55),
                  phi3_long_rope_scaled_rope.py (17d618b0), yarn_scaling_rope.py (0cd57848)
    mlx           mlx-lm 0.32.2 mlx_lm/models/rope_utils.py `initialize_rope` (yarn kwargs :326-345 without
                  attention_factor or truncate; "mrope" :366-371 a plain nn.RoPE), models/llama.py, models/phi3.py
    llama.cpp (multi-axis)  ggml src/ggml-cpu/ops.cpp:5897-5906 at d99724f (IMROPE: T only where
                  pair % 3 == 0 and pair < 3 s_t, unmatched pairs read the 4th stream) and src/llama-graph.cpp
                  `llm_graph_input_pos::set_input` ("4th dim is all 0" for text tokens)
    llama.cpp     what a GGUF converted from this config computes: convert_hf_to_gguf.py (rope_freqs for llama3),
                  ggml `ggml_rope_yarn_corr_dims` (always floor/ceil), long/short factors chosen per context
    keras-hub     keras-hub 0.32.0 `RotaryEmbedding` (layers/modeling/rotary_embedding.py, PR #2981 merged)
    keras-hub-0.31  keras-hub 0.31.x (truncate False, high clamped to r/2 - 1)
    transformer-engine  transformer_engine/pytorch/attention/rope.py `RotaryPositionEmbedding` (default and
                  linear `seq_len_interpolation_factor` only; its "dynamic" is positional interpolation)
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import numpy as np

from posenc_np.rope import rope_frequencies

from .canonical import Finding
from .readers import read_hf_config

__all__ = ["RUNTIMES", "runtime_spec", "MLX_READS_ROPE_PARAMETERS", "MLX_DEFAULT_THETA"]

RUNTIMES = {
    "hf": "transformers 5.24 modeling_rope_utils.py",
    "vllm": "vLLM 0.33.0 rotary_embedding/__init__.py get_rope",
    "vllm-0.32": "vLLM rotary_embedding/__init__.py get_rope (07b12f1b, vLLM <= 0.32)",
    "mlx": "mlx-lm 0.32.2 models/rope_utils.py initialize_rope",
    "llama.cpp": "llama.cpp convert_hf_to_gguf.py + ggml rope (GGUF of this config)",
    "keras-hub": "keras-hub 0.32.0 layers/modeling/rotary_embedding.py",
    "keras-hub-0.31": "keras-hub 0.31.x layers/modeling/rotary_embedding.py",
    "transformer-engine": "TransformerEngine pytorch/attention/rope.py RotaryPositionEmbedding",
}

#: mlx-lm model files that read `rope_parameters` (git grep at d78bf58e); every other family reads only the
#: top-level `rope_theta` (its dataclass default when absent) and `rope_scaling`, as models/llama.py does.
MLX_READS_ROPE_PARAMETERS = frozenset({"exaone_moe", "gemma4_text", "glm_moe_dsa", "laguna", "lfm2", "lfm2_moe",
                                       "mellum", "ministral3", "qwen3_5"})
#: `rope_theta` dataclass defaults of mlx-lm ModelArgs (models/<family>.py at d78bf58e).
MLX_DEFAULT_THETA = {"llama": 10000.0, "mistral": 10000.0, "phi3": 10000.0, "qwen2": 1000000.0}


def _note(findings, key, message, lint=False):
    findings.append(Finding(key, message, lint))


#: config keys mlx-lm's ModelArgs read and transformers does not: `rope_traditional` (mlx-lm 0.32.2
#: models/llama.py, qwen2.py: `traditional=` of `initialize_rope`, True = interleaved pairs)
MLX_ONLY_KEYS = ("rope_traditional",)


def _mlx_config(raw: dict, findings: list) -> dict:
    cfg = copy.deepcopy(raw)
    model_type = cfg.get("model_type")
    if model_type in MLX_READS_ROPE_PARAMETERS or "rope_parameters" not in cfg:
        if "rope_theta" not in cfg and "rope_theta" not in (cfg.get("rope_parameters") or {}):
            if model_type not in MLX_DEFAULT_THETA:
                raise ValueError(f"mlx-lm: no rope_theta and no known ModelArgs default for model_type={model_type!r}")
            cfg["rope_theta"] = MLX_DEFAULT_THETA[model_type]
            _note(findings, "rope_theta", f"absent: mlx-lm's ModelArgs default {cfg['rope_theta']:g} applies", True)
        return cfg
    params = cfg.pop("rope_parameters")
    if "rope_theta" not in cfg:
        if model_type not in MLX_DEFAULT_THETA:
            raise ValueError(f"mlx-lm: model_type={model_type!r} reads no rope_parameters and its rope_theta "
                             "default is not listed")
        cfg["rope_theta"] = MLX_DEFAULT_THETA[model_type]
        _note(findings, "rope_parameters", f"mlx-lm models/{model_type}.py never reads rope_parameters: base "
              f"{cfg['rope_theta']:g} (its default) instead of the file's {params.get('rope_theta')}", True)
    kind = (params or {}).get("rope_type", "default") if isinstance(params, dict) else None
    if kind not in (None, "default") and not cfg.get("rope_scaling"):
        _note(findings, "rope_parameters", f"mlx-lm models/{model_type}.py reads only rope_scaling: the "
              f"file's {kind} scaling in rope_parameters is dropped", True)
    return cfg


def _vllm_layer(layer, cfg, opts, findings, version="0.33"):
    s = dict(layer.scaling or {"rope_type": "default"})
    kind = s["rope_type"]
    if kind == "dynamic":
        _note(findings, "rope_type", "vLLM DynamicNTKScalingRotaryEmbedding: base * (factor * L / L - (factor - 1)) "
              "** (r/(r-2)) = base: unscaled frequencies with a cache of L * factor rows")
        return replace(layer, scaling=None)
    if kind == "ntk":
        return replace(layer, scaling={"rope_type": "vllm-ntk", "factor": s["factor"]})
    if kind == "yarn":
        if version == "0.33":  # 0.33.0 get_rope forwards attention_factor and truncate, not the two mscales
            dropped = [k for k in ("mscale", "mscale_all_dim") if s.get(k) is not None and
                       s.get("attention_factor") is None]
        else:
            dropped = [k for k in ("attention_factor", "mscale", "mscale_all_dim") if s.get(k) is not None]
        if dropped:
            _note(findings, "rope_parameters", f"vLLM {version} get_rope does not forward {dropped} to "
                  "YaRNScalingRotaryEmbedding: attention scale 0.1 ln(factor) + 1 (PR #46280)")
        return replace(layer, scaling={k: v for k, v in s.items() if k not in dropped})
    if kind == "longrope":
        max_pos = cfg.get("max_position_embeddings")
        max_model_len = opts.get("max_model_len") or max_pos
        original = s["original_max_position_embeddings"]
        if s.get("attention_factor") is not None:
            _note(findings, "attention_factor", "not read by vLLM Phi3LongRoPEScaledRotaryEmbedding")
        _note(findings, "long_factor", f"vLLM uses the {'long' if max_model_len > original else 'short'} factors "
              f"for every position (max_model_len={max_model_len} vs original {original})")
        return replace(layer, scaling={"rope_type": "vllm-longrope", "short_factor": s["short_factor"],
                                       "long_factor": s["long_factor"], "original_max_position_embeddings": original,
                                       "factor": (max_pos or original) / original, "max_model_len": int(max_model_len),
                                       "short_mscale": s.get("short_mscale"), "long_mscale": s.get("long_mscale")})
    if kind == "proportional" and s.get("factor", 1.0) != 1.0:
        _note(findings, "factor", "vLLM Gemma4RotaryEmbedding omits HF's / factor")
        return replace(layer, scaling={**s, "factor": 1.0})
    return layer


def _mlx_layer(layer, raw_params, cfg, findings):
    if layer.mrope_section is not None or layer.mrope_axes is not None:
        _note(findings, "mrope_section", "mlx-lm 0.32.2 initialize_rope (models/rope_utils.py:366-371) builds a "
              "plain nn.RoPE for mrope: sections ignored, every pair turns by the temporal position", True)
        layer = replace(layer, mrope_section=None, mrope_interleaved=False, mrope_axes=None)
    if cfg.get("rope_traditional"):
        layer = replace(layer, layout="interleaved")
    s = dict(layer.scaling or {"rope_type": "default"})
    kind = s["rope_type"]
    raw = raw_params or {}
    if kind == "yarn":
        original = raw.get("original_max_position_embeddings", 4096)
        if "original_max_position_embeddings" not in raw:
            _note(findings, "original_max_position_embeddings", "absent from the yarn dict: mlx-lm YarnRoPE uses 4096",
                  True)
        dropped = [k for k in ("attention_factor", "truncate") if k in raw]
        if dropped:
            _note(findings, "rope_scaling", f"mlx-lm 0.32.2 YarnRoPE does not read {dropped} (always truncates; "
                  "models/rope_utils.py:326-345 passes neither)")
        return replace(layer, scaling={"rope_type": "mlx-yarn", "factor": s["factor"],
                                       "original_max_position_embeddings": int(original),
                                       "beta_fast": float(raw.get("beta_fast", 32)),
                                       "beta_slow": float(raw.get("beta_slow", 1)),
                                       "mscale": float(raw.get("mscale", 1)),
                                       "mscale_all_dim": float(raw.get("mscale_all_dim", 0))})
    if kind == "longrope":
        model_type = cfg.get("model_type")
        if model_type == "phi3":  # models/phi3.py: top-level keys, defaults 131072 / 4096
            max_pos = cfg.get("max_position_embeddings", 131072)
            original = cfg.get("original_max_position_embeddings", 4096)
        else:
            max_pos = cfg.get("max_position_embeddings")
            original = raw["original_max_position_embeddings"]
        _note(findings, "long_factor", "mlx-lm SuScaledRoPE uses the long factors at every length")
        return replace(layer, scaling={"rope_type": "mlx-longrope", "long_factor": s["long_factor"],
                                       "short_factor": s["short_factor"], "original_max_position_embeddings": original,
                                       "factor": max_pos / original})
    if kind == "llama3":
        original = raw.get("original_max_position_embeddings", 8192)
        return replace(layer, scaling={**s, "low_freq_factor": float(raw.get("low_freq_factor", 1.0)),
                                       "high_freq_factor": float(raw.get("high_freq_factor", 4.0)),
                                       "original_max_position_embeddings": int(original)})
    if kind in ("default", "linear", "dynamic", "proportional"):
        return layer
    raise ValueError(f"mlx-lm initialize_rope raises 'Unsupported RoPE type {kind}'")


def imrope_unrotated_pairs(section, num_pairs):
    """Pairs llama.cpp's IMROPE leaves to the 4th position stream (0 for text tokens) where HF's Qwen3-VL map
    turns them by the temporal position: `j % 3 == a` and `j >= 3 * section[a]` (ggml-cpu/ops.cpp:5897-5906)."""
    return [j for j in range(num_pairs) if j >= 3 * section[j % 3]] if len(section) == 3 else []


def _llamacpp_layer(layer, opts, cfg, findings):
    if layer.mrope_section is not None and layer.mrope_interleaved:
        pairs = imrope_unrotated_pairs(list(layer.mrope_section), layer.rotary_dim // 2)
        if pairs:
            _note(findings, "mrope_section", f"llama.cpp IMROPE (ggml-cpu/ops.cpp:5897-5906 at d99724f) takes pairs "
                  f"{pairs} of mrope_section={list(layer.mrope_section)} from the 4th position stream, which "
                  "llama-graph.cpp llm_graph_input_pos::set_input sets to 0 for text tokens: unrotated, where HF "
                  "turns them by the temporal position", True)
    s = dict(layer.scaling or {"rope_type": "default"})
    kind = s["rope_type"]
    if kind == "llama3":
        default, _ = rope_frequencies(layer.rotary_dim, base=layer.base)
        scaled, _ = rope_frequencies(layer.rotary_dim, base=layer.base, scaling=s)
        factors = (default / scaled).astype(np.float32).astype(np.float64)  # rope_freqs is an F32 tensor
        return replace(layer, scaling={"rope_type": "llamacpp-freq-factors", "freq_factors": factors.tolist()})
    if kind == "yarn":
        if s.get("truncate") is False:
            _note(findings, "truncate", "ggml_rope_yarn_corr_dims always floors and ceils: truncate=False is lost", True)
        keep = {k: s[k] for k in ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow") if k in s}
        return replace(layer, scaling={"rope_type": "yarn", **keep, "truncate": True})
    if kind == "longrope":
        original = s["original_max_position_embeddings"]
        n_ctx = opts.get("max_model_len") or cfg.get("max_position_embeddings")
        _, scale = rope_frequencies(layer.rotary_dim, base=layer.base, scaling=s)
        return replace(layer, scaling={"rope_type": "vllm-longrope", "short_factor": s["short_factor"],
                                       "long_factor": s["long_factor"], "original_max_position_embeddings": original,
                                       "factor": (cfg.get("max_position_embeddings") or original) / original,
                                       "max_model_len": int(n_ctx), "short_mscale": scale, "long_mscale": scale})
    if kind in ("default", "linear"):
        return layer
    raise ValueError(f"llama.cpp has no rope scaling type for {kind!r} (its GGUF keys know none, linear, yarn, "
                     "longrope and the rope_freqs tensor)")


def _keras_layer(layer, version, findings):
    s = dict(layer.scaling or {"rope_type": "default"})
    kind = s["rope_type"]
    if kind == "dynamic":
        _note(findings, "rope_type", "keras-hub rope_type='dynamic' divides by factor ** (r/(r-2)) at every length")
        return replace(layer, scaling={"rope_type": "keras-hub-dynamic", "factor": s["factor"]})
    if kind == "yarn":
        factor = s["factor"]
        if version == "0.31":
            if s.get("truncate", False):
                raise ValueError("keras-hub <= 0.31 with truncate=True clips positions to "
                                 "original_max_position_embeddings; posenc does not model that")
            return replace(layer, scaling={"rope_type": "keras-hub-yarn", "factor": factor,
                                           "original_max_position_embeddings": s["original_max_position_embeddings"],
                                           "beta_fast": s.get("beta_fast") or 32.0, "beta_slow": s.get("beta_slow") or 1.0,
                                           "truncate": False})
        if any(s.get(k) is not None for k in ("attention_factor", "mscale", "mscale_all_dim")):
            _note(findings, "attention_factor", "keras-hub RotaryEmbedding always scales by 0.1 ln(factor) + 1")
        return replace(layer, scaling={**{k: v for k, v in s.items() if k not in ("mscale", "mscale_all_dim")},
                                       "attention_factor": 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0})
    if kind in ("default", "linear", "llama3", "longrope"):
        return layer
    raise ValueError(f"keras-hub RotaryEmbedding has no {kind!r} (rope_type linear, dynamic, yarn; llama3 and "
                     "longrope in the Llama / Phi-3 models)")


def _te_layer(layer, findings):
    kind = (layer.scaling or {}).get("rope_type", "default")
    if kind in ("default", "linear"):
        return layer
    raise ValueError(f"Transformer Engine's RotaryPositionEmbedding computes default RoPE and linear "
                     f"interpolation (seq_len_interpolation_factor) only; {kind!r} needs caller-built frequencies")


def runtime_spec(config: dict, runtime: str, *, source: str = "<dict>", max_model_len=None, hf_overrides=None,
                 **_ignored):
    """The `ModelSpec` of what `runtime` computes for this HF config (see the module docstring).

    Args:
        config: the HF config.json as a dict.
        runtime: a key of `RUNTIMES`.
        max_model_len: vLLM's `--max-model-len` / llama.cpp's context size (LongRoPE's factor set is chosen
            once from it); default `max_position_embeddings`.
        hf_overrides: vLLM's `hf_overrides` dict, merged into the config's top level first.

    Raises:
        ValueError: an unknown runtime, or settings the runtime cannot compute.
    """
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime={runtime!r} is not one of {sorted(RUNTIMES)}")
    findings = []
    raw = copy.deepcopy(dict(config))
    if hf_overrides:
        if not runtime.startswith("vllm"):
            raise ValueError("hf_overrides is vLLM's option; use it with runtime='vllm'")
        raw.update(copy.deepcopy(dict(hf_overrides)))
        _note(findings, "hf_overrides", f"merged into the config: {sorted(hf_overrides)}")
    if runtime == "mlx":
        raw = _mlx_config(raw, findings)
    # keys only mlx-lm reads are read by _mlx_layer below; the HF reading refuses keys HF does not read
    hf_raw = {k: v for k, v in raw.items() if k not in MLX_ONLY_KEYS} if runtime == "mlx" else raw
    spec = read_hf_config(hf_raw, source=source)
    spec.findings.extend(findings)
    cfg = raw.get("text_config") if isinstance(raw.get("text_config"), dict) and "rope_theta" not in raw and \
        "rope_parameters" not in raw and "rope_scaling" not in raw else raw
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    opts = {"max_model_len": max_model_len}
    out = []
    for layer in spec.layers:
        if not layer.rope:
            out.append(layer)
            continue
        if runtime == "hf":
            out.append(layer)
        elif runtime.startswith("vllm"):
            out.append(_vllm_layer(layer, cfg, opts, spec.findings, "0.32" if runtime == "vllm-0.32" else "0.33"))
        elif runtime == "mlx":
            nested = params and all(isinstance(v, dict) or v is None for v in params.values())
            raw_params = None if nested else params
            out.append(_mlx_layer(layer, raw_params, cfg, spec.findings))
        elif runtime == "llama.cpp":
            out.append(_llamacpp_layer(layer, opts, cfg, spec.findings))
        elif runtime in ("keras-hub", "keras-hub-0.31"):
            out.append(_keras_layer(layer, "0.31" if runtime.endswith("0.31") else "0.32", spec.findings))
        else:
            out.append(_te_layer(layer, spec.findings))
        out[-1].plan()  # the runtime's settings must be computable
    # one note per message (per-layer translations repeat them)
    seen, unique = set(), []
    for f in spec.findings:
        if (f.key, f.message) not in seen:
            seen.add((f.key, f.message))
            unique.append(f)
    spec.findings = unique
    spec.layers = out
    spec.runtime = runtime
    spec.follows = RUNTIMES[runtime]
    return spec
