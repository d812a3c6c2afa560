"""The schedule sweep: every model type of the installed transformers against `rope_schedule_from_hf_config`.

For each model type whose default config (or its `text_config`) has rotary position keys, the reader
either returns a schedule, and then every RoPE layer's cos/sin must equal the model's own rotary
embedding class for that layer type (and, where the module's `apply_rotary_pos_emb(q, k, cos, sin)` has
the standard signature, its rotated q must equal `apply_rope`), or it raises a ValueError naming what it
cannot read. Only the rotary modules are built (no model weights). Used by
tests/reference/test_schedule_sweep.py and by `python tests/reference/schedule_sweep.py` (prints the
table for docs/schedules.md).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import warnings

import numpy as np

import posenc_np as pn

POSITIONS = np.array([0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144])
# multi-axis entries (Qwen-VL text, mrope_section): a different id per axis, so a wrong section or interleaving shows
MROPE_POSITIONS = np.stack([POSITIONS, POSITIONS[::-1], (3 * POSITIONS) % 151])
# transformers forms float32 angles p * inv_freq (relative error ~6e-8): at p <= 144 that is < 1e-5 rad.
ATOL = 2e-5


@functools.lru_cache(maxsize=None)
def _transformers():
    import torch  # noqa: F401
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    transformers.utils.logging.set_verbosity_error()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    return CONFIG_MAPPING, sorted(CONFIG_MAPPING_NAMES)


def model_types():
    return _transformers()[1]


def _default_config(model_type):
    mapping, _ = _transformers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mapping[model_type]()


def _position_config(config):
    """The config whose keys the reader reads: the top level, else the text sub-config."""
    from posenc_np.schedule import _has_positions

    if _has_positions(config.to_dict()):
        return config
    text = getattr(config, "text_config", None)
    if text is not None and not isinstance(text, dict) and _has_positions(text.to_dict()):
        return text
    return None


def _modeling_module(config):
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    package = type(config).__module__.rsplit(".", 1)[0]
    name = package.rsplit(".", 1)[1]
    try:
        return importlib.import_module(f"{package}.modeling_{name}")
    except Exception:  # noqa: BLE001 - optional dependency of that family (torchaudio...)
        try:
            name = model_type_to_module_name(config.model_type)
            return importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        except Exception:  # noqa: BLE001
            return None


def _rotary_class(module, config):
    """The module's rotary class built for this config class (by its `config` annotation, else by name)."""
    candidates = [v for k, v in vars(module).items()
                  if inspect.isclass(v) and k.endswith("RotaryEmbedding") and v.__module__ == module.__name__]
    typed = []
    for cls in candidates:
        annotation = inspect.signature(cls.__init__).parameters.get("config")
        annotation = None if annotation is None else annotation.annotation
        if annotation is type(config) or (isinstance(annotation, str) and annotation == type(config).__name__):
            typed.append(cls)
    if len(typed) == 1:
        return typed[0]
    named = [c for c in candidates if "Vision" not in c.__name__ or "Vision" in type(config).__name__]
    return named[0] if len(named) == 1 else None


def _pair_table(t, width):
    """HF's cos or sin `[..., R]` (half or interleaved pattern) as per-pair values `[..., R/2]`."""
    t = np.asarray(t, dtype=np.float64)
    half = width // 2
    if np.allclose(t[..., :half], t[..., half:width], atol=1e-7, rtol=0):
        return t[..., :half]
    if np.allclose(t[..., 0:width:2], t[..., 1:width:2], atol=1e-7, rtol=0):
        return t[..., 0:width:2]
    raise AssertionError(f"rotary output of width {width} is neither half nor interleaved duplicated")


def _multi_axis(entry):
    return entry.get("mrope_section") is not None or entry.get("mrope_axes") is not None


def _positions(entry):
    return MROPE_POSITIONS if _multi_axis(entry) else POSITIONS


def hf_cos_sin(rotary, layer_type, config, positions=POSITIONS):
    import torch

    x = torch.zeros(1, positions.shape[-1], 8, dtype=torch.float32)
    position_ids = torch.tensor(positions)[..., None, :]  # [1, seq], or [axes, 1, seq] (Qwen-VL mrope)
    params = inspect.signature(rotary.forward).parameters
    with torch.no_grad():
        if "layer_type" in params:
            out = rotary(x, position_ids, layer_type=layer_type)
        else:
            out = rotary(x, position_ids)
    if isinstance(out, torch.Tensor) and out.is_complex():  # Llama 4 freqs_cis [b, s, r/2]
        return out.real.double().numpy()[0], out.imag.double().numpy()[0], True
    cos, sin = out[0], out[1]
    return cos.double().numpy()[0], sin.double().numpy()[0], False


def _layer_rotary(cls, config, index):
    """The rotary module HF's decoder runs at layer `index`: one per `layer_rope_theta` base (Granite SWA's
    `theta_config`), the unscaled one outside `rope_scaling_layers` (Molmo2), else the model's one module."""
    import copy

    thetas = getattr(config, "layer_rope_theta", None)
    if thetas is not None:
        theta_config = copy.deepcopy(config)
        theta_config.rope_parameters = {**config.rope_parameters, "rope_theta": thetas[index]}
        return cls(theta_config), ("theta", thetas[index])
    layers = getattr(config, "rope_scaling_layers", None)
    if layers is not None:
        scaled = index in layers
        return cls(config, scaled=scaled), ("scaled", scaled)
    return cls(config), ()


def _rope_label(module, config, index, layer_type):
    """The key the model passes as `layer_type` to its rotary module at layer `index`: the layer type, or, for
    configs whose rope_parameters are keyed by rope labels (`_rope_type_labels`, DeepSeek-V4), the
    `rope_layer_type` of the family's attention module built for that layer (on the meta device)."""
    if not getattr(config, "_rope_type_labels", None):
        return layer_type
    import torch

    attention = next((v for k, v in vars(module).items() if k.endswith("Attention") and isinstance(v, type)
                      and "rope_layer_type" in inspect.getsource(v.__init__)), None)
    if attention is None:  # labels that are layer types (LFM3): the model passes its layer type
        return layer_type
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return attention(config, index).rope_layer_type


def _multi_axis_module(rotary, layer_type, config):
    """Does the module take `[3, batch, seq]` ids and give each axis its own pairs? (Then a schedule entry without
    `mrope_section` would silently be 1-D.)"""
    try:
        cos3, _, _ = hf_cos_sin(rotary, layer_type, config, MROPE_POSITIONS)
        cos1, _, _ = hf_cos_sin(rotary, layer_type, config, np.stack([POSITIONS] * 3))
    except Exception:  # noqa: BLE001 - a 1-D module refuses or mis-broadcasts 3-axis ids
        return False
    return cos3.shape == cos1.shape and cos3.ndim == 2 and not np.allclose(cos3, cos1, atol=1e-6)


def _mla_layout(module, config):
    """The MLA rope-slice layout the family's attention applies: interleaved when a forward calls
    `apply_rotary_pos_emb_interleave` unconditionally, or under `rope_interleave` when the config sets it."""
    calls = [inspect.getsource(v.forward) for v in vars(module).values()
             if inspect.isclass(v) and v.__module__ == module.__name__ and hasattr(v, "forward")
             and "apply_rotary_pos_emb_interleave(q_rot" in inspect.getsource(v.forward)]
    if not calls:  # the family's apply_rotary_pos_emb, compared below, is the whole story
        return None
    if all("rope_interleave" in src for src in calls):
        return "interleaved" if getattr(config, "rope_interleave", False) else "half"
    return "interleaved"


def check_model_type(model_type):
    """('read', detail) | ('refused', reason) | ('no-positions', '') | ('mismatch', detail) | ('skipped', why)."""
    try:
        config = _default_config(model_type)
    except Exception as error:  # noqa: BLE001 - a default config transformers itself cannot build
        return "skipped", f"transformers cannot build the default config: {type(error).__name__}"
    config = _position_config(config)
    if config is None:
        return "no-positions", ""
    try:
        schedule = pn.rope_schedule_from_hf_config(config)
    except ValueError as error:
        return "refused", str(error)
    return compare_schedule(schedule, config)


def compare_schedule(schedule, config):
    """('read', detail) when every RoPE layer of `schedule` equals HF's rotary module of `config` for that layer
    (and NoPE layers are NoPE in HF's layer list where the config says so), else ('mismatch', detail)."""
    module = _modeling_module(config)
    if module is None:
        return "no-reference", "read; transformers has no modeling code for it (configuration only)"
    cls = None if module is None else _rotary_class(module, config)
    if cls is None:
        return "mismatch", "read, but no single rotary embedding class in its modeling module to compare with"
    types = list(getattr(config, "layer_types", None) or ["full_attention"] * len(schedule))
    if len(types) != len(schedule):
        return "mismatch", f"{len(schedule)} schedule entries for {len(types)} HF layer types"
    thetas = getattr(config, "layer_rope_theta", None)
    if thetas is not None and [e is None for e in schedule] != [not t for t in thetas]:
        return "mismatch", f"NoPE layers {[e is None for e in schedule]} != layer_rope_theta {thetas}"
    seen = {}
    for i, entry in enumerate(schedule):
        if entry is None:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rotary, variant = _layer_rotary(cls, config, i)
        except Exception as error:  # noqa: BLE001
            return "mismatch", f"read, but {cls.__name__}(config) fails: {type(error).__name__}: {error}"[:300]
        key = _rope_label(module, config, i, types[i])
        if (key, variant) in seen:
            if seen[key, variant] != entry:
                return "mismatch", f"layer type {key!r} has two different entries"
            continue
        seen[key, variant] = entry
        if getattr(config, "qk_rope_head_dim", None) and _mla_layout(module, config) not in (None, entry["layout"]):
            return "mismatch", (f"layer {i}: MLA layout {entry['layout']!r}, the family's attention applies "
                                f"{_mla_layout(module, config)!r}")
        if not _multi_axis(entry) and _multi_axis_module(rotary, key, config):
            return "mismatch", f"layer {i} ({key}): the rotary module is multi-axis, the entry 1-D"
        try:
            cos, sin, complex_form = hf_cos_sin(rotary, key, config, _positions(entry))
        except Exception as error:  # noqa: BLE001
            return "mismatch", f"read, but {cls.__name__}.forward fails: {type(error).__name__}: {error}"[:300]
        width = entry["rotary_dim"]
        kwargs = {k: v for k, v in entry.items() if k != "layout"}
        ref_cos, ref_sin = pn.rope_cos_sin(_positions(entry), **kwargs, layout="half")
        ref_cos, ref_sin = ref_cos[..., : width // 2], ref_sin[..., : width // 2]
        if complex_form:
            got_cos, got_sin = cos, sin
        else:
            if cos.shape[-1] == width // 2:  # modules that return per-pair tables (gpt-oss)
                cos, sin, complex_form = np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1), False
            if cos.shape[-1] != width:
                return "mismatch", f"layer {i} ({key}): rotary width {cos.shape[-1]} != schedule rotary_dim {width}"
            try:
                got_cos, got_sin = _pair_table(cos, width), _pair_table(sin, width)
            except AssertionError as error:
                return "mismatch", f"layer {i} ({key}): {error}"
        if got_cos.shape != ref_cos.shape:
            return "mismatch", f"layer {i} ({key}): shape {got_cos.shape} != {ref_cos.shape}"
        err = max(np.abs(got_cos - ref_cos).max(), np.abs(got_sin - ref_sin).max())
        if not err <= ATOL:
            return "mismatch", f"layer {i} ({key}): max |cos/sin - spec| = {err:.3g} (entry {entry})"
        if not complex_form:
            problem = _check_apply(module, cos, sin, entry)
            if problem:
                return "mismatch", f"layer {i} ({key}): {problem}"
    nope = sum(e is None for e in schedule)
    return "read", f"{len(schedule)} layers, {nope} without RoPE, {len(seen)} rotary setting(s)"


def _check_apply(module, cos, sin, entry):
    """The family's own `apply_rotary_pos_emb(q, k, cos, sin)` against `apply_rope` with the entry's layout."""
    import torch

    fn = getattr(module, "apply_rotary_pos_emb", None)
    perm = None
    if config_interleave(module, entry):  # DeepSeek MLA: de-interleaves, then rotates halves (output in half order)
        fn = module.apply_rotary_pos_emb_interleave
        perm = pn.rope_permutation(entry["rotary_dim"], source="interleaved", target="half")
    if fn is None:
        return None
    params = list(inspect.signature(fn).parameters)
    if params[:4] != ["q", "k", "cos", "sin"]:
        return None
    width = entry["rotary_dim"]
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, _positions(entry).shape[-1], width))
    tq = torch.tensor(q, dtype=torch.float32)
    try:
        with torch.no_grad():
            out_q, _ = fn(tq, tq.clone(), torch.tensor(cos, dtype=torch.float32)[None],
                          torch.tensor(sin, dtype=torch.float32)[None])
    except Exception:  # noqa: BLE001 - a non-standard apply function (shapes of its own)
        return None
    ref = pn.apply_rope(q, _positions(entry), **entry)
    if perm is not None:
        ref = ref[..., perm]
    err = np.abs(out_q.double().numpy() - ref).max()
    if not err <= 1e-4:
        return f"apply_rotary_pos_emb differs from apply_rope(layout={entry['layout']!r}) by {err:.3g}"
    return None


def config_interleave(module, entry):
    return entry["layout"] == "interleaved" and hasattr(module, "apply_rotary_pos_emb_interleave")


def sweep():
    return {mt: check_model_type(mt) for mt in model_types()}


# Families whose config class maps the transformers-4 "type": "mrope" to default frequencies
# (configuration_qwen2_vl.py / configuration_qwen2_5_vl.py convert_rope_params_to_dict).
_V4_MROPE_TYPE = ("qwen2_vl", "qwen2_5_vl")


def _v4_scaling(params, model_type):
    """A flat v5 dict without its base as a transformers-4 `rope_scaling` (`type`, not `rope_type`), or None."""
    params = {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor", "type")}
    kind = params.pop("rope_type", "default")
    if kind == "default" and params.get("mrope_section") is not None and model_type.startswith(_V4_MROPE_TYPE):
        kind = "mrope"
    if kind == "default" and not params:
        return None
    return {"type": kind, **params}


def _v4_pattern(model_type, types):
    """`(key, period)` when the family's config class derives `types` from a period, else None."""
    from posenc_np.schedule import V4_LAYER_PATTERNS

    if model_type not in V4_LAYER_PATTERNS or not types:
        return None
    key, _, offset = V4_LAYER_PATTERNS[model_type]
    for period in range(1, len(types) + 1):
        if types == ["full_attention" if (i + offset) % period == 0 else "sliding_attention" for i in range(len(types))]:
            return key, period
    return None


def v4_form(config):
    """The config as a transformers-4 `config.json` holds it, or None when v4 had no form for it.

    `rope_parameters` goes back to a top-level `rope_theta` (and `partial_rotary_factor`) plus a
    `rope_scaling` dict with `"type"`; per-layer-type dicts go to the family's v4 keys
    (`posenc_np.schedule.V4_LAYER_TYPE_KEYS`: Gemma 3 `rope_local_base_freq`, ModernBERT
    `global_rope_theta` / `local_rope_theta`); `layer_types` goes to the period its config class derives
    them from (`sliding_window_pattern`, `global_attn_every_n_layers`). transformers' own conversion
    (`convert_rope_params_to_dict`) reads it back when `AutoConfig.for_model` builds the config."""
    import copy

    from posenc_np.schedule import V4_LAYER_TYPE_KEYS

    d = copy.deepcopy(config.to_dict())
    model_type = d.get("model_type") or ""
    params = d.pop("rope_parameters", None)
    if not params:  # no v5 dict: the config already is its v4 form
        return d
    labels = set(d.get("layer_types") or ()) | {"full_attention", "sliding_attention"}
    nested = all(k in labels for k in params)
    if nested:
        if model_type not in V4_LAYER_TYPE_KEYS or set(params) != {"full_attention", "sliding_attention"}:
            return None  # per-layer-type dicts exist only in v5 for this family
        (full_key, _), (local_key, _), scaled = V4_LAYER_TYPE_KEYS[model_type]
        full, local = params["full_attention"], params["sliding_attention"]
        if full_key == local_key and full["rope_theta"] != local["rope_theta"]:
            return None
        scaling = _v4_scaling(full, model_type)
        if _v4_scaling(local, model_type) != (scaling if "sliding_attention" in scaled else None):
            return None  # a v4 rope_scaling cannot say it
        d[full_key], d[local_key] = full["rope_theta"], local["rope_theta"]
    elif "rope_theta" not in params:
        return None
    else:
        d["rope_theta"] = params["rope_theta"]
        if params.get("partial_rotary_factor") is not None:
            d["partial_rotary_factor"] = params["partial_rotary_factor"]
        scaling = _v4_scaling(params, model_type)
    if scaling is not None:
        d["rope_scaling"] = scaling
    pattern = _v4_pattern(model_type, d.get("layer_types"))
    if pattern is not None:
        d.pop("layer_types")
        d[pattern[0]] = pattern[1]
    return d


def check_model_type_v4(model_type):
    """The v4 form of the model type's position config, read by the reader as a raw dict (inside its parent's
    `text_config` for multimodal models), against the rotary module of the config transformers builds from it."""
    import json

    try:
        config = _default_config(model_type)
    except Exception as error:  # noqa: BLE001
        return "skipped", f"transformers cannot build the default config: {type(error).__name__}"
    text = _position_config(config)
    if text is None:
        return "no-positions", ""
    shipped = v4_form(text)
    if shipped is None:
        return "no-v4-form", "per-layer-type rope_parameters exist only in transformers 5"
    kwargs = {k: v for k, v in shipped.items() if k not in ("model_type", "transformers_version")}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mapping, _ = _transformers()
            loaded = mapping[text.model_type](**kwargs)
    except Exception as error:  # noqa: BLE001 - transformers does not accept this v4 form
        return "skipped", f"transformers does not build the v4 form: {type(error).__name__}: {error}"[:300]
    raw = json.loads(json.dumps(shipped))
    if text is not config:  # a multimodal config: the decoder's v4 keys under the parent's text_config
        parent = json.loads(json.dumps(config.to_dict()))
        parent["text_config"] = raw
        raw = parent
    try:
        schedule = pn.rope_schedule_from_hf_config(raw)
    except ValueError as error:
        return "refused", str(error)
    return compare_schedule(schedule, loaded)


def sweep_v4():
    return {mt: check_model_type_v4(mt) for mt in model_types()}


if __name__ == "__main__":
    import collections
    import sys

    results = sweep_v4() if "--v4" in sys.argv else sweep()
    sys.argv = [a for a in sys.argv if a != "--v4"]
    counts = collections.Counter(status for status, _ in results.values())
    print(dict(counts))
    for mt, (status, detail) in results.items():
        if status != "no-positions" and (len(sys.argv) < 2 or status in sys.argv[1:]):
            print(f"{status:9s} {mt}: {detail}")
