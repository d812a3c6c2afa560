"""RoPE frequency scaling: one registry entry per `rope_type`, written once for every backend.

Each entry names the dict keys a Hugging Face `rope_scaling` / `rope_parameters` dict carries for that
type (required, optional with defaults), a validator that raises, and a float64 function returning
`(inv_freq, attention_scale)`, like transformers' `ROPE_INIT_FUNCTIONS` but validated. Backends never
re-derive these numbers: they convert the float64 arrays of `rope_plan` (the spec's `rope.py`).

Types and their source:
    default    inv_j = base ** (-2j / r)                                       (Su et al. 2021)
    linear     inv_j / factor   (position interpolation, Chen et al. 2023, kaiokendev)
    ntk        static NTK-aware base change: base' = base * factor ** (r / (r - 2))
    dynamic    dynamic NTK: base' = base * (factor * s / L - (factor - 1)) ** (r / (r - 2)),
               s = max(seq_len, L), L = original_max_position_embeddings; unscaled while s <= L
               (HF `_compute_dynamic_ntk_parameters`). Stateless: each call uses its own seq_len,
               where HF's rotary module keeps the frequencies of the longest sequence seen until a
               sequence shorter than L resets them (equal on a fresh module or a growing cache)
    yarn       Peng et al. 2023 (arXiv:2309.00071), HF `_compute_yarn_parameters` (truncate=True default,
               high clamped to r - 1)
    llama3     Meta llama-models `apply_scaling`, HF `_compute_llama3_parameters`
    longrope   Ding et al. 2024 (arXiv:2402.13753), HF `_compute_longrope_parameters`: short factors
               while s <= L, long factors above
    proportional  Gemma 4 full-attention layers (HF `_compute_proportional_rope_parameters`, transformers
               5.x): inv_j = base ** (-2j / r) / factor for j < k = int(partial_rotary_factor * r // 2),
               inv_j = 0 for k <= j < r/2. Here r is the whole head dim: the output always has r/2 pairs, so
               in half layout the rotated channels are [0, k) and [r/2, r/2 + k), not partial rotary's [0, 2k)
    keras-hub-dynamic  keras-hub RotaryEmbedding rope_type="dynamic": inv_j / factor ** (r / (r - 2)) at
               every length (NOT HF's length-triggered dynamic NTK)
    keras-hub-yarn     keras-hub RotaryEmbedding rope_type="yarn": truncate defaults to False, high is
               clamped to r/2 - 1, attention scale always 0.1 ln(factor) + 1

    keras-hub-yarn covers keras-hub <= 0.31.x. keras-hub 0.32.0 (PR #2981, merged 2026-08-24) defaults
               truncate to True, clamps high to r - 1 and no longer clips positions: its frequencies are
               HF's `yarn`; its attention scale is still always 0.1 ln(factor) + 1 (no attention_factor/mscale)

Runtime variants (what another runtime computes for the same HF dict; `posenc spec --runtime`):
    vllm-ntk   vLLM `NTKScalingRotaryEmbedding` (vllm/model_executor/layers/rotary_embedding/ntk_scaling_rope.py,
               commit 03587f55): inv_j = (base * factor) ** (-2j / r) / factor ** (2 / r); with `mixed_b`:
               inv_j = base ** (-2j / r) / exp(a * (j + 1) ** mixed_b), a = ln(factor) / (r / 2) ** mixed_b.
               NOT the static NTK-aware `ntk` (base * factor ** (r / (r - 2)))
    vllm-longrope  vLLM `Phi3LongRoPEScaledRotaryEmbedding` (phi3_long_rope_scaled_rope.py, commit 17d618b0):
               the long factors for EVERY position when the server's `max_model_len` > L, else the short ones
               (decided once, to keep the KV cache consistent); scale = long_mscale / short_mscale, default
               sqrt(1 + ln(factor) / ln L) with factor = max_position_embeddings / L; `attention_factor` is
               not read
    mlx-longrope   mlx-lm `SuScaledRoPE` (mlx_lm/models/rope_utils.py, commit d78bf58e, 2026-08-22): the long
               factors always; scale sqrt(1 + ln(factor) / ln L) (factor = max_position_embeddings / L)
               multiplies x, which is the same as multiplying cos and sin
    mlx-yarn   mlx-lm `YarnRoPE` (same file): correction range always floored and ceiled (no `truncate` key),
               attention scale m(factor, mscale) / m(factor, mscale_all_dim) with mscale = 1,
               mscale_all_dim = 0 by default (so `mscale` alone changes it, unlike HF), `attention_factor`
               not read
    llamacpp-freq-factors  llama.cpp's `rope_freqs` tensor (GGUF): inv_j = base ** (-2j / r) / freq_factors[j]
               (ggml `ggml_rope_ext` with freq_factors; what convert_hf_to_gguf.py writes for llama3 scaling)

Here r is the rotary dim, j = 0 .. r/2 - 1. The keras-hub variants are distinct names on purpose: the
same word ("dynamic", "yarn") means different frequencies in the two libraries.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping

import numpy as np

__all__ = ["ScalingType", "SCALING_TYPES", "resolve_scaling", "default_inv_freq", "dynamic_growth"]


@dataclass(frozen=True)
class ScalingType:
    """One `rope_type`: its keys, its validator and its float64 frequency function.

    Attributes:
        name: the `rope_type` string.
        required: keys the dict must hold (besides `rope_type`).
        optional: key -> default for keys the dict may hold.
        inv_freq: `(rotary_dim, base, params, seq_len) -> (inv_freq float64 [r/2], attention_scale)`;
            `params` holds every required and optional key (defaults filled).
        check: `(params, rotary_dim) -> None`, raises ValueError on bad values.
        seq_dependent: the frequencies depend on `seq_len = max(positions) + 1`.
        source: the codebase function it matches.
    """

    name: str
    required: tuple
    optional: Mapping
    inv_freq: Callable
    check: Callable | None = None
    seq_dependent: bool = False
    source: str = ""


def default_inv_freq(rotary_dim: int, base: float) -> np.ndarray:
    """`inv_j = base ** (-2j / r)`, j = 0 .. r/2 - 1, float64 (the exponent is exact: 2j/r)."""
    return np.power(float(base), -np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def dynamic_growth(seq_len, factor: float, original: int):
    """Dynamic NTK's base multiplier before the power: `g = factor * max(s, L) / L - (factor - 1)`.

    Written for NumPy scalars here; backends evaluate the same expression in-graph on a traced
    `seq_len`. Then `base' = base * g ** (r / (r - 2))`, i.e. `inv_j(s) = inv_j * g ** (-2j / (r - 2))`.
    """
    s = np.maximum(np.asarray(seq_len, dtype=np.float64), float(original))
    return factor * s / original - (factor - 1.0)


# --- validators ---------------------------------------------------------------------------------

def _number(params, key, *, positive=True):
    value = params[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"scaling[{key!r}]={value!r} must be a finite number")
    if positive and value <= 0:
        raise ValueError(f"scaling[{key!r}]={value!r} must be > 0")
    return float(value)


def _length(params, key):
    value = params[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"scaling[{key!r}]={value!r} must be a positive integer")
    return int(value)


def _check_factor(params, rotary_dim):
    _number(params, "factor")


def _check_ntk(params, rotary_dim):
    _number(params, "factor")
    if rotary_dim <= 2:
        raise ValueError(f"rotary_dim={rotary_dim} must be > 2 for rope_type={params['rope_type']!r} "
                         "(the base is raised to r / (r - 2))")


def _check_dynamic(params, rotary_dim):
    _check_ntk(params, rotary_dim)
    _length(params, "original_max_position_embeddings")


def _check_yarn(params, rotary_dim):
    _number(params, "factor")
    _length(params, "original_max_position_embeddings")
    for key in ("beta_fast", "beta_slow"):
        if params[key] is not None:
            _number(params, key)
    for key in ("mscale", "mscale_all_dim"):
        if params[key] is not None:
            _number(params, key, positive=False)
    if params["attention_factor"] is not None:
        _number(params, "attention_factor")
    if not isinstance(params["truncate"], bool):
        raise ValueError(f"scaling['truncate']={params['truncate']!r} must be True or False")
    fast, slow = params["beta_fast"] or 32, params["beta_slow"] or 1
    if fast < slow:
        raise ValueError(f"scaling['beta_fast']={fast} must be >= scaling['beta_slow']={slow}")


def _check_keras_yarn(params, rotary_dim):
    _check_yarn({"attention_factor": None, "mscale": None, "mscale_all_dim": None, **params}, rotary_dim)
    if params["truncate"]:
        raise ValueError("scaling['truncate']=True with rope_type='keras-hub-yarn' also clips positions to "
                         "original_max_position_embeddings in keras-hub; posenc does not model that: use "
                         "rope_type='yarn' (Hugging Face) or truncate=False")


def _check_llama3(params, rotary_dim):
    _number(params, "factor")
    low, high = _number(params, "low_freq_factor"), _number(params, "high_freq_factor")
    _length(params, "original_max_position_embeddings")
    if low > high:
        raise ValueError(f"scaling['low_freq_factor']={low} must be <= scaling['high_freq_factor']={high}")


def _check_proportional(params, rotary_dim):
    _number(params, "factor")
    fraction = _number(params, "partial_rotary_factor", positive=False)
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"scaling['partial_rotary_factor']={fraction!r} must be in [0, 1] for rope_type='proportional'")


def _check_longrope(params, rotary_dim):
    _length(params, "original_max_position_embeddings")
    _check_factor_lists(params, rotary_dim, ("short_factor", "long_factor"))
    if params["factor"] is None and params["attention_factor"] is None:
        raise ValueError("rope_type='longrope' needs scaling['factor'] (max_position_embeddings / "
                         "original_max_position_embeddings, what HF derives from the model config) or "
                         "scaling['attention_factor']; scaling_from_hf_config fills it in")
    for key in ("factor", "attention_factor"):
        if params[key] is not None:
            _number(params, key)


# --- frequency functions ------------------------------------------------------------------------

def _default(r, base, p, seq_len):
    return default_inv_freq(r, base), 1.0


def _linear(r, base, p, seq_len):
    return default_inv_freq(r, base) / p["factor"], 1.0


def _ntk(r, base, p, seq_len):
    return default_inv_freq(r, base * p["factor"] ** (r / (r - 2))), 1.0


def _dynamic(r, base, p, seq_len):
    g = float(dynamic_growth(p["original_max_position_embeddings"] if seq_len is None else seq_len,
                             p["factor"], p["original_max_position_embeddings"]))
    return default_inv_freq(r, base * g ** (r / (r - 2))), 1.0


def _keras_dynamic(r, base, p, seq_len):
    return default_inv_freq(r, base) / p["factor"] ** (r / (r - 2)), 1.0


def _yarn_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_ramp(r, base, p, *, high_limit):
    """Per-pair weight of the interpolated frequency: 0 below `low`, 1 above `high`, linear between."""
    fast, slow = p["beta_fast"] or 32, p["beta_slow"] or 1  # HF treats 0/None as unset
    original = p["original_max_position_embeddings"]

    def correction_dim(rotations):  # the pair index whose wavelength makes `rotations` turns in L
        return r * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(fast), correction_dim(slow)
    if p["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, high_limit)
    if low == high:
        high += 0.001  # HF's guard against a zero-width ramp
    return np.clip((np.arange(r // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)


def _yarn(r, base, p, seq_len, *, keras_hub=False):
    factor = p["factor"]
    extrapolated = default_inv_freq(r, base)
    ramp = _yarn_ramp(r, base, p, high_limit=r // 2 - 1 if keras_hub else r - 1)
    inv_freq = extrapolated / factor * ramp + extrapolated * (1.0 - ramp)
    if keras_hub:
        return inv_freq, 0.1 * math.log(factor) + 1.0
    if p["attention_factor"] is not None:
        scale = p["attention_factor"]
    elif p["mscale"] and p["mscale_all_dim"]:
        scale = _yarn_mscale(factor, p["mscale"]) / _yarn_mscale(factor, p["mscale_all_dim"])
    else:
        scale = _yarn_mscale(factor)
    return inv_freq, float(scale)


def _llama3(r, base, p, seq_len):
    inv_freq = default_inv_freq(r, base)
    factor, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
    original = p["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    if low == high:  # Llama 4 Scout (low = high = 1): the smoothed band [L/high, L/low] is one wavelength wide
        if np.any(wavelen == original / low):  # there HF's smooth factor is 0/0 = NaN; never silently pick a side
            raise ValueError(f"scaling low_freq_factor == high_freq_factor == {low} puts a wavelength exactly on "
                             f"original_max_position_embeddings / {low}, where HF's smooth factor is 0/0 (NaN)")
        return np.where(wavelen > original / low, inv_freq / factor, inv_freq), 1.0
    smooth = (original / wavelen - low) / (high - low)
    medium = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = np.where(wavelen > original / low, inv_freq / factor, np.where(wavelen < original / high, inv_freq, medium))
    return out, 1.0


def _proportional(r, base, p, seq_len):
    rotated = int(p["partial_rotary_factor"] * r // 2)  # HF's int(rope_proportion * head_dim // 2)
    inv_freq = np.zeros(r // 2, dtype=np.float64)
    inv_freq[:rotated] = default_inv_freq(r, base)[:rotated]  # exponent 2j / head_dim, not 2j / (2 * rotated)
    return inv_freq / p["factor"], 1.0


def _longrope(r, base, p, seq_len):
    original = p["original_max_position_embeddings"]
    long = seq_len is not None and seq_len > original
    ext = np.asarray(p["long_factor" if long else "short_factor"], dtype=np.float64)
    inv_freq = default_inv_freq(r, base) / ext
    if p["attention_factor"] is not None:
        scale = p["attention_factor"]
    else:
        factor = p["factor"]
        scale = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    return inv_freq, float(scale)


def _check_vllm_ntk(params, rotary_dim):
    _number(params, "factor")
    if params["mixed_b"] is not None:
        _number(params, "mixed_b")


def _vllm_ntk(r, base, p, seq_len):
    factor = p["factor"]
    if p["mixed_b"] is None:  # ntk_scaling_rope.py: base * factor, then / factor ** (2 / r)
        return default_inv_freq(r, base * factor) / factor ** (2.0 / r), 1.0
    a = math.log(factor) / (r / 2) ** p["mixed_b"]
    return default_inv_freq(r, base) / np.exp(a * np.arange(1, r // 2 + 1, dtype=np.float64) ** p["mixed_b"]), 1.0


def _check_factor_lists(params, rotary_dim, keys):
    for key in keys:
        value = params[key]
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
            raise ValueError(f"scaling[{key!r}] must be a list of rotary_dim/2 = {rotary_dim // 2} numbers, "
                             f"got {value!r}")
        array = np.asarray(value, dtype=np.float64) if len(value) else np.zeros(0)
        if array.shape != (rotary_dim // 2,):
            raise ValueError(f"scaling[{key!r}] has {len(value)} entries; rotary_dim={rotary_dim} needs "
                             f"rotary_dim/2 = {rotary_dim // 2}")
        if not np.all(np.isfinite(array)) or np.any(array <= 0):
            raise ValueError(f"scaling[{key!r}] must hold finite numbers > 0")


def _longrope_default_scale(factor, original):
    return 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))


def _check_vllm_longrope(params, rotary_dim):
    _check_factor_lists(params, rotary_dim, ("short_factor", "long_factor"))
    _length(params, "original_max_position_embeddings")
    _length(params, "max_model_len")
    _number(params, "factor")
    for key in ("short_mscale", "long_mscale"):
        if params[key] is not None:
            _number(params, key)


def _vllm_longrope(r, base, p, seq_len):
    long = p["max_model_len"] > p["original_max_position_embeddings"]
    ext = np.asarray(p["long_factor" if long else "short_factor"], dtype=np.float64)
    default = _longrope_default_scale(p["factor"], p["original_max_position_embeddings"])
    scale = p["long_mscale" if long else "short_mscale"]
    return default_inv_freq(r, base) / ext, float(default if scale is None else scale)


def _check_mlx_longrope(params, rotary_dim):
    _check_factor_lists(params, rotary_dim, ("long_factor",) + (("short_factor",) if params["short_factor"]
                                                                   is not None else ()))
    _length(params, "original_max_position_embeddings")
    _number(params, "factor")


def _mlx_longrope(r, base, p, seq_len):
    ext = np.asarray(p["long_factor"], dtype=np.float64)  # SuScaledRoPE: long factors at every length
    return default_inv_freq(r, base) / ext, _longrope_default_scale(p["factor"], p["original_max_position_embeddings"])


def _check_mlx_yarn(params, rotary_dim):
    _number(params, "factor")
    _length(params, "original_max_position_embeddings")
    for key in ("beta_fast", "beta_slow"):
        _number(params, key)
    for key in ("mscale", "mscale_all_dim"):
        _number(params, key, positive=False)
    if params["beta_fast"] < params["beta_slow"]:
        raise ValueError(f"scaling['beta_fast']={params['beta_fast']} must be >= "
                         f"scaling['beta_slow']={params['beta_slow']}")


def _mlx_yarn(r, base, p, seq_len):
    factor = p["factor"]
    extrapolated = default_inv_freq(r, base)
    ramp = _yarn_ramp(r, base, {**p, "truncate": True}, high_limit=r - 1)  # YarnRoPE always floors and ceils
    inv_freq = extrapolated / factor * ramp + extrapolated * (1.0 - ramp)
    return inv_freq, _yarn_mscale(factor, p["mscale"]) / _yarn_mscale(factor, p["mscale_all_dim"])


def _check_freq_factors(params, rotary_dim):
    _check_factor_lists(params, rotary_dim, ("freq_factors",))


def _freq_factors(r, base, p, seq_len):
    return default_inv_freq(r, base) / np.asarray(p["freq_factors"], dtype=np.float64), 1.0


_YARN_OPTIONAL = {"attention_factor": None, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": None,
                  "mscale_all_dim": None, "truncate": True}
_HF = "transformers/modeling_rope_utils.py"

SCALING_TYPES = MappingProxyType({t.name: t for t in [
    ScalingType("default", (), {}, _default, source=f"{_HF} / LlamaRotaryEmbedding.compute_default_rope_parameters"),
    ScalingType("linear", ("factor",), {}, _linear, _check_factor, source=f"{_HF} _compute_linear_scaling_rope_parameters"),
    ScalingType("ntk", ("factor",), {}, _ntk, _check_ntk,
                source="static NTK-aware scaling (bloc97); = HF dynamic at the length where its growth term equals factor"),
    ScalingType("dynamic", ("factor", "original_max_position_embeddings"), {}, _dynamic, _check_dynamic,
                seq_dependent=True, source=f"{_HF} _compute_dynamic_ntk_parameters"),
    ScalingType("yarn", ("factor", "original_max_position_embeddings"), _YARN_OPTIONAL, _yarn, _check_yarn,
                source=f"{_HF} _compute_yarn_parameters"),
    ScalingType("llama3", ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
                {}, _llama3, _check_llama3, source=f"{_HF} _compute_llama3_parameters; llama-models apply_scaling"),
    ScalingType("longrope", ("short_factor", "long_factor", "original_max_position_embeddings"),
                {"factor": None, "attention_factor": None}, _longrope, _check_longrope, seq_dependent=True,
                source=f"{_HF} _compute_longrope_parameters"),
    ScalingType("proportional", (), {"factor": 1.0, "partial_rotary_factor": 1.0}, _proportional, _check_proportional,
                source=f"{_HF} _compute_proportional_rope_parameters (5.24; Gemma 4)"),
    ScalingType("keras-hub-dynamic", ("factor",), {}, _keras_dynamic, _check_ntk,
                source="keras_hub/src/layers/modeling/rotary_embedding.py rope_type='dynamic'"),
    ScalingType("keras-hub-yarn", ("factor", "original_max_position_embeddings"),
                {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": False},
                lambda r, base, p, s: _yarn(r, base, p, s, keras_hub=True), _check_keras_yarn,
                source="keras_hub/src/layers/modeling/rotary_embedding.py rope_type='yarn' (keras-hub <= 0.31.x)"),
    ScalingType("vllm-ntk", ("factor",), {"mixed_b": None}, _vllm_ntk, _check_vllm_ntk,
                source="vllm/model_executor/layers/rotary_embedding/ntk_scaling_rope.py (commit 03587f55)"),
    ScalingType("vllm-longrope", ("short_factor", "long_factor", "original_max_position_embeddings", "factor",
                                  "max_model_len"), {"short_mscale": None, "long_mscale": None},
                _vllm_longrope, _check_vllm_longrope,
                source="vllm/model_executor/layers/rotary_embedding/phi3_long_rope_scaled_rope.py (commit 17d618b0)"),
    ScalingType("mlx-longrope", ("long_factor", "original_max_position_embeddings", "factor"),
                {"short_factor": None}, _mlx_longrope, _check_mlx_longrope,
                source="mlx_lm/models/rope_utils.py SuScaledRoPE (mlx-lm commit d78bf58e)"),
    ScalingType("mlx-yarn", ("factor", "original_max_position_embeddings"),
                {"beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.0}, _mlx_yarn,
                _check_mlx_yarn, source="mlx_lm/models/rope_utils.py YarnRoPE (mlx-lm commit d78bf58e)"),
    ScalingType("llamacpp-freq-factors", ("freq_factors",), {}, _freq_factors, _check_freq_factors,
                source="llama.cpp GGUF tensor rope_freqs (ggml_rope_ext freq_factors; convert_hf_to_gguf.py)"),
]})

def resolve_scaling(scaling, *, rotary_dim: int, base: float) -> tuple[ScalingType, dict]:
    """Validate a scaling dict and return its registry entry and its parameters with defaults filled.

    Accepts `None` (default RoPE) or an HF `rope_scaling` / `rope_parameters` dict verbatim: `rope_type`
    or the older `type`. `rope_theta`, if present, must equal `base`.

    Raises:
        TypeError: `scaling` is not a mapping.
        ValueError: unknown type, missing or unknown keys (all listed), bad values.
    """
    if scaling is None:
        return SCALING_TYPES["default"], {"rope_type": "default"}
    if not isinstance(scaling, Mapping):
        raise TypeError(f"scaling must be None or a dict like HF's rope_scaling, got {type(scaling).__name__}")
    params = dict(scaling)
    names = {params.pop(k) for k in ("rope_type", "type") if k in params}
    if len(names) > 1:
        raise ValueError(f"scaling has both 'rope_type' and 'type' with different values: {sorted(names)}")
    name = names.pop() if names else "default"
    if name not in SCALING_TYPES:
        raise ValueError(f"scaling rope_type={name!r} is not one of {list(SCALING_TYPES)}")
    kind = SCALING_TYPES[name]
    if "rope_theta" in params:
        theta = params.pop("rope_theta")
        if theta is not None and float(theta) != float(base):
            raise ValueError(f"scaling['rope_theta']={theta!r} disagrees with base={base!r}; pass it as base=")
    if "partial_rotary_factor" in params and "partial_rotary_factor" not in kind.optional:
        raise ValueError("scaling['partial_rotary_factor'] is not a scaling key: pass rotary_dim= or rotary_pct= "
                         "(scaling_from_hf_config does this)")
    missing = [k for k in kind.required if params.get(k) is None]
    unknown = sorted(set(params) - set(kind.required) - set(kind.optional))
    if missing or unknown:
        parts = [f"missing required keys {missing}"] if missing else []
        if unknown:
            parts.append(f"unknown keys {unknown}")
        hint = ""
        if "original_max_position_embeddings" in missing:
            hint = (" (HF keeps it in the model config's max_position_embeddings for some types; "
                    "scaling_from_hf_config(config) moves it into the dict)")
        raise ValueError(f"scaling for rope_type={name!r}: {'; '.join(parts)}; required {list(kind.required)}, "
                         f"optional {list(kind.optional)}{hint}")
    params = {**kind.optional, **{k: v for k, v in params.items() if v is not None or k not in kind.optional}}
    params["rope_type"] = name
    if kind.check is not None:
        kind.check(params, rotary_dim)
    return kind, params
