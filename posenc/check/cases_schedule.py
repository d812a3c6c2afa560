"""Suite cases for per-layer position schedules: Gemma-style local/global RoPE, Llama-4-style NoPE
layers with the query temperature, and the decoupled RoPE of multi-head latent attention (MLA).

Families (`posenc check --encoding schedule,temperature,mla`):
* "schedule" (`rope_schedule_from_hf_config`): a tiny config of a real family is read *by the package under
  test* (each backend re-exports the spec's reader; a port that reads the config differently is what the
  planted tests put there), then its entries drive that package's `apply_rope`.
  - "gemma3-sliding" / "gemma3-global": one layer of each type (local base 1e4, global base 1e6 with linear
    scaling, as Gemma 3 4B+), `[2, 2, 8, 16]` queries;
  - "gemma3", "gemma4", "cohere2": the whole schedule, one output per layer (a NoPE layer returns its input):
    Gemma 4's global layers use `proportional` (partial_rotary_factor 0.25) on a wider head (per_layer_config
    head_dim 32, sliding 16), Cohere2 rotates interleaved pairs on sliding layers only;
  - "gemma3-shipped", "granite-swa", "ministral3": configs as checkpoints ship them (Gemma 3's transformers-4
    keys `rope_local_base_freq` / `rope_scaling` / `sliding_window_pattern`; Granite SWA's `layer_rope_theta`
    with a NoPE layer; Ministral 3's YaRN whose rotated queries every layer scales by `llama_4_scaling`);
  - "llama4-nope-temperature": Llama 4 (`no_rope_layers` [1, 1, 1, 0], interleaved llama3 scaling with
    low_freq_factor == high_freq_factor, Scout's), RoPE on layers 0-2 and on layer 3 the queries times
    `llama4_attn_scale` (`attn_temperature_tuning`). float32 only: the temperature is float32 in every
    backend, as in HF, and a bf16 query times a float32 scale is a promotion TF does not do implicitly.
* "temperature" (`llama4_attn_scale`): positions across floor_scale boundaries up to 2**20;
  (`llama_4_scaling`): Ministral 3's `1 + 0.1 ln(1 + floor(p / 16384))` across the same range, its `beta` and
  length read from the config's `rope_parameters`.
* "mla" (`apply_mla_rope`): q `[2, 4, 8, 8 + 8]` and the single-head `k_pe [2, 1, 8, 8]`, from DeepSeek-style
  configs read by the spec: "deepseek-v3" (`rope_interleave`, YaRN mscale == mscale_all_dim: cos/sin
  unscaled), "mla-mscale-split" (half layout, mscale 0.707 != mscale_all_dim 1.0: cos/sin carry the ratio);
  their "logits" sets read the config through the package, rotate, and form the attention logits
  `mla_softmax_scale * [q_nope | R q_rope] . [k_nope_h | R k_pe]` (float32: sums of products).
Case sets: "long" (positions up to 2**20, eager), "kv-offset" (1000..1007, eager and jit), "layers" (a whole
schedule at positions up to 2**20, eager and jit), "logits" (positions 0..7 past a 4090-token cache).
"""

from __future__ import annotations

import math

import numpy as np

from posenc_np.backend import numpy_dtype
from posenc_np.mla import mla_softmax_scale
from posenc_np.rope import rope_plan
from posenc_np.schedule import rope_schedule_from_hf_config
from posenc_np.testing import ROPE_ANGLE_GOAL, tolerance

from .registry import Case, register

__all__ = ["CONFIGS", "POSITIONS"]

LONG = 2**20
POSITIONS = {
    "long": np.array([0, 255, 4097, 8191, 65537, 300001, LONG - 3, LONG - 1]),
    "kv-offset": np.arange(8) + 1000,
    "layers": np.array([0, 1, 8190, 8191, 65537, 300001, LONG - 3, LONG - 1]),
    "logits": np.arange(8) + 4090,
}
EAGER, JIT = ("eager",), ("eager", "jit")

#: Tiny configs of the families the cases stand for (the keys and values transformers 5.x writes).
CONFIGS = {
    "gemma3": {"model_type": "gemma3_text", "num_hidden_layers": 4, "head_dim": 16, "sliding_window_pattern": 2,
               "max_position_embeddings": 131072,
               "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                   "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}},
    "gemma4": {"model_type": "gemma4_text", "num_hidden_layers": 4, "head_dim": 16, "max_position_embeddings": 131072,
               "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
               "per_layer_config": {"01": {"head_dim": 32}, "03": {"head_dim": 32}},
               "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                   "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                      "rope_theta": 1e6}}},
    # Gemma 3 as its config.json ships: transformers-4 keys (the global base and scaling at the top level, the
    # sliding base in rope_local_base_freq, the layer types from sliding_window_pattern)
    "gemma3-shipped": {"model_type": "gemma3_text", "num_hidden_layers": 4, "head_dim": 16, "sliding_window_pattern": 2,
                       "max_position_embeddings": 131072, "rope_theta": 1e6, "rope_local_base_freq": 10000.0,
                       "rope_scaling": {"factor": 8.0, "rope_type": "linear"}},
    # Granite SWA: one base per layer, 0 = no RoPE
    "granite-swa": {"model_type": "granitemoe_swa", "num_hidden_layers": 4, "head_dim": 16, "rope_theta": 1e4,
                    "layer_rope_theta": [10000.0, 50000.0, 10000.0, 0],
                    "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]},
    # Ministral 3: YaRN with the query scale llama_4_scaling_beta on every layer
    "ministral3": {"model_type": "ministral3", "num_hidden_layers": 2, "head_dim": 16, "max_position_embeddings": 262144,
                   "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 16.0,
                                       "original_max_position_embeddings": 16384, "max_position_embeddings": 262144,
                                       "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                       "llama_4_scaling_beta": 0.1}},
    "cohere2": {"model_type": "cohere2", "num_hidden_layers": 4, "head_dim": 16,
                "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
                "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
    "llama4": {"model_type": "llama4_text", "num_hidden_layers": 4, "head_dim": 16, "max_position_embeddings": 10485760,
               "no_rope_layers": [1, 1, 1, 0],
               "layer_types": ["chunked_attention", "chunked_attention", "chunked_attention", "full_attention"],
               "rope_parameters": {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 1.0, "original_max_position_embeddings": 8192,
                                   "rope_theta": 500000.0},
               "attn_temperature_tuning": True, "floor_scale": 8192, "attn_scale": 0.1},
    "deepseek-v3": {"model_type": "deepseek_v3", "num_hidden_layers": 1, "hidden_size": 64,
                    "num_attention_heads": 4, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "rope_interleave": True,
                    "max_position_embeddings": 163840,
                    "rope_parameters": {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                                        "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                        "rope_theta": 10000.0}},
    "mla-mscale-split": {"model_type": "deepseek_v2", "num_hidden_layers": 1, "hidden_size": 64,
                         "num_attention_heads": 4, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
                         "rope_interleave": False, "max_position_embeddings": 16384,
                         "rope_parameters": {"rope_type": "yarn", "factor": 4.0,
                                             "original_max_position_embeddings": 4096, "mscale": 0.707,
                                             "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                             "rope_theta": 10000.0}},
}
NOPE_DIM, ROPE_DIM, HEADS = 8, 8, 4


def _max_angle(entries, positions):
    """Largest angle any layer forms: max |p| times its largest frequency (radians)."""
    angles = [0.0]
    for e in entries:
        if e is not None:
            plan = rope_plan(e["rotary_dim"], base=e["base"], scaling=e["scaling"], layout=e["layout"])
            turns = plan.turns_at(int(np.max(positions)) + 1).max()
            angles.append(float(np.abs(positions).max() * turns * 2 * math.pi))
    return max(angles)


def _rope_tol(max_angle):
    # every rotary path reduces its angles in float64 (double-float32 in JAX): held to the RoPE angle goal,
    # so a layer rotated with the wrong base or a NoPE layer rotated stands out at any position
    def tol(desired, dtype, args):
        return tolerance(dtype, angle_error=ROPE_ANGLE_GOAL, scale=float(np.abs(desired).max()))
    return tol


# --- schedule: one layer type, and a whole schedule --------------------------------------------------------

def _layer(m, x, positions, *, config, layer):
    """Layer `layer` of `config` as the package reads it: its RoPE, or x unchanged on a NoPE layer."""
    entry = m.rope_schedule_from_hf_config(config)[layer]
    return x if entry is None else m.apply_rope(x, positions, **entry)


def _layers(m, *xs_and_positions, config):
    """Every layer of `config`: `apply_rope` with its entry, or the input of its head width unchanged (NoPE).

    `xs_and_positions` are queries of each head width the config uses (a layer takes the one whose width is its
    entry's `rotary_dim`, or the first for NoPE), then the positions. With `attn_temperature_tuning` (Llama 4) a
    NoPE layer's queries are multiplied by `llama4_attn_scale` of the positions (`[seq]` -> `[seq, 1]`).
    """
    *xs, positions = xs_and_positions
    outs = []
    for entry in m.rope_schedule_from_hf_config(config):
        if entry is None:
            x = xs[0]
            if config.get("attn_temperature_tuning"):
                x = x * m.llama4_attn_scale(positions, floor_scale=config["floor_scale"],
                                            attn_scale=config["attn_scale"])[..., None]
            outs.append(x)
            continue
        x = next(x for x in xs if x.shape[-1] == entry["rotary_dim"])
        out = m.apply_rope(x, positions, **entry)
        params = config.get("rope_parameters") or {}
        if params.get("llama_4_scaling_beta") is not None:  # Ministral 3: every layer's rotated queries scaled
            out = out * m.llama_4_scaling(positions, beta=params["llama_4_scaling_beta"], original_max_position_embeddings=
                                          params["original_max_position_embeddings"])[..., None]
        outs.append(out)
    return tuple(outs)


def _layer_case(name, layer, case_set, modes):
    config = CONFIGS[name]
    entry = rope_schedule_from_hf_config(config)[layer]
    positions = POSITIONS[case_set]

    def make(rng, dtype):
        x = rng.standard_normal((2, 2, 8, entry["rotary_dim"])).astype(numpy_dtype(dtype))
        return (x, positions), {"config": config, "layer": layer}

    kind = entry["scaling"]["rope_type"] if entry["scaling"] else "default"
    register(Case("rope_schedule_from_hf_config", f"{name}-{'sliding' if layer == 0 else 'global'}", case_set, make,
                  _rope_tol(_max_angle([entry], positions)), fn=_layer, modes=modes,
                  description=f"{config['model_type']} layer {layer}: base {entry['base']:g}, {kind} scaling, "
                              f"positions {positions[0]}..{positions[-1]}"))


for _set, _modes in (("long", EAGER), ("kv-offset", JIT)):
    _layer_case("gemma3", 0, _set, _modes)
    _layer_case("gemma3", 1, _set, _modes)


def _schedule_case(name, modes, dtypes=("float32", "bfloat16", "float16")):
    config = CONFIGS[name]
    entries = rope_schedule_from_hf_config(config)
    positions = POSITIONS["layers"]
    widths = sorted({e["rotary_dim"] for e in entries if e is not None}, key=lambda w: w != config["head_dim"])

    def make(rng, dtype):
        return tuple(rng.standard_normal((2, 2, 8, w)).astype(numpy_dtype(dtype)) for w in widths) + (positions,), \
            {"config": config}

    def tol(desired, dtype, args):
        # the temperature: log1p in float32, a few ulps of 1 + 0.1 ln(129), then the product with x
        return tolerance(dtype, max_angle=_max_angle(entries, positions), scale=float(np.abs(desired).max()))

    layers = ", ".join("NoPE" if e is None else f"{e['base']:g}/{(e['scaling'] or {}).get('rope_type', 'default')}"
                       f"/{e['layout']}" for e in entries)
    register(Case("rope_schedule_from_hf_config", name if name != "llama4" else "llama4-nope-temperature", "layers",
                  make, tol, fn=_layers, modes=modes, dtypes=dtypes,
                  description=f"{config['model_type']}, every layer ({layers})"))


_schedule_case("gemma3", JIT)
_schedule_case("gemma4", EAGER)
_schedule_case("cohere2", EAGER)
_schedule_case("llama4", JIT, dtypes=("float32",))
_schedule_case("gemma3-shipped", JIT)
_schedule_case("granite-swa", EAGER)
_schedule_case("ministral3", JIT, dtypes=("float32",))


# --- temperature ------------------------------------------------------------------------------------------

def _make_temperature(rng, dtype):
    config = CONFIGS["llama4"]
    positions = np.array([0, 8190, 8191, 16383, 3 * 8192 - 1, 65535, 300001, LONG - 1])
    return (positions,), {"floor_scale": config["floor_scale"], "attn_scale": config["attn_scale"]}


register(Case("llama4_attn_scale", "llama4", "long", _make_temperature,
              lambda desired, dtype, args: tolerance("float32", scale=float(np.abs(desired).max())),
              dtypes=("float32",), modes=JIT,
              description="1 + 0.1 log1p(floor((p + 1) / 8192)) at positions 0..2^20 (float32 in every backend)"))


#: Ministral 3's rope_parameters (transformers 5.24 Ministral3Config defaults).
MINISTRAL3_ROPE = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 16.0, "original_max_position_embeddings": 16384,
                   "max_position_embeddings": 262144, "beta_fast": 32.0, "beta_slow": 1.0, "mscale_all_dim": 1.0,
                   "mscale": 1.0, "llama_4_scaling_beta": 0.1}


def _make_llama_4_scaling(rng, dtype):
    positions = np.array([0, 16383, 16384, 32767, 3 * 16384, 65535, 300001, LONG - 1])
    return (positions,), {"beta": MINISTRAL3_ROPE["llama_4_scaling_beta"],
                          "original_max_position_embeddings": MINISTRAL3_ROPE["original_max_position_embeddings"]}


register(Case("llama_4_scaling", "ministral3", "long", _make_llama_4_scaling,
              lambda desired, dtype, args: tolerance("float32", scale=float(np.abs(desired).max())),
              dtypes=("float32",), modes=JIT,
              description="1 + 0.1 ln(1 + floor(p / 16384)) at positions 0..2^20 (float32 in every backend)"))


# --- MLA ------------------------------------------------------------------------------------------------

def _mla_entry(name):
    (entry,) = rope_schedule_from_hf_config(CONFIGS[name])
    return entry


def _mla_case(name, case_set, modes):
    entry = _mla_entry(name)
    positions = POSITIONS[case_set]

    def make(rng, dtype):
        q = rng.standard_normal((2, HEADS, 8, NOPE_DIM + ROPE_DIM)).astype(numpy_dtype(dtype))
        k_pe = rng.standard_normal((2, 1, 8, ROPE_DIM)).astype(numpy_dtype(dtype))
        return (q, k_pe, positions), {"qk_nope_head_dim": NOPE_DIM, **entry}

    register(Case("apply_mla_rope", name, case_set, make, _rope_tol(_max_angle([entry], positions)), modes=modes,
                  description=f"q [2,4,8,8+8], k_pe [2,1,8,8], {entry['layout']} rope slice, YaRN mscale "
                              f"{entry['scaling']['mscale']} / mscale_all_dim {entry['scaling']['mscale_all_dim']}, "
                              f"positions {positions[0]}..{positions[-1]}"))


def _mla_logits(m, q, k_nope, k_pe, positions, *, config):
    """Attention logits of one MLA layer as the package computes them (framework-neutral sums of products).

    `logits[b, h, i, j] = s * (sum_d q_nope[b,h,i,d] k_nope[b,h,j,d] + sum_d qr[b,h,i,d] kr[b,0,j,d])`, the dot
    product of `[q_nope | R q_rope]` with `[k_nope_h | R k_pe]` (the one rope key head shared by every head),
    `s = mla_softmax_scale(qk_nope + qk_rope, scaling)` (HF DeepseekV3Attention.scaling).
    """
    (entry,) = m.rope_schedule_from_hf_config(config)
    nope = config["qk_nope_head_dim"]
    q_rot, k_rot = m.apply_mla_rope(q, k_pe, positions, qk_nope_head_dim=nope, **entry)
    scale = m.mla_softmax_scale(nope + entry["rotary_dim"], entry["scaling"])
    logits = 0.0
    for d in range(nope):
        logits = logits + q_rot[..., :, None, d] * k_nope[..., None, :, d]
    for d in range(entry["rotary_dim"]):
        logits = logits + q_rot[..., :, None, nope + d] * k_rot[..., None, :, d]
    return logits * scale


def _mla_logits_case(name):
    config = CONFIGS[name]
    entry = _mla_entry(name)
    positions = POSITIONS["logits"]
    scale = mla_softmax_scale(NOPE_DIM + ROPE_DIM, entry["scaling"])

    def make(rng, dtype):
        q = rng.standard_normal((2, HEADS, 8, NOPE_DIM + ROPE_DIM)).astype(numpy_dtype(dtype))
        k_nope = rng.standard_normal((2, HEADS, 8, NOPE_DIM)).astype(numpy_dtype(dtype))
        k_pe = rng.standard_normal((2, 1, 8, ROPE_DIM)).astype(numpy_dtype(dtype))
        return (q, k_nope, k_pe, positions), {"config": config}

    def tol(desired, dtype, args):
        # each logit sums 16 float32 products: <= (16 + 2) eps32 * s * sum |q||k|; the rotated rope slice adds
        # the angle error 2 eps32 * angle of each |q||k| (|R x| = |x| times the YaRN cos/sin factor, <= 1.2)
        q, k_nope, k_pe = (np.abs(a.astype(np.float64)) for a in args[:3])
        bound = scale * float((q[..., :NOPE_DIM] @ np.swapaxes(k_nope, -1, -2)).max()
                              + 1.44 * (q[..., NOPE_DIM:] @ np.swapaxes(k_pe, -1, -2)).max())
        return tolerance(dtype, max_angle=_max_angle([entry], positions), scale=bound, slack_ulps=18.0)

    register(Case("apply_mla_rope", name, "logits", make, tol, fn=_mla_logits, dtypes=("float32",), modes=JIT,
                  description=f"q.k logits x mla_softmax_scale = {scale:.6g} ({config['model_type']} config read by "
                              f"the package; one rope key head shared by 4 query heads)"))


for _name in ("deepseek-v3", "mla-mscale-split"):
    _mla_case(_name, "long", EAGER)
    _mla_logits_case(_name)
_mla_case("deepseek-v3", "kv-offset", JIT)
