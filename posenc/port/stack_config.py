"""Config translation between Hugging Face and the training stacks that keeps the angles.

Every translation goes through the canonical reading (`posenc.modelspec.ModelSpec`): read the source config
with its dialect's reader, write the target's keys from that reading, read the written config back with the
target's reader, and prove that both readings give the same rotation at every layer (`verify_angles`) before
any weight is written. A setting the target cannot express raises `ValueError` with the reason; nothing is
dropped.

    target_config(dialect, hf_config)        HF config.json dict -> the stack's config dict (verified)
    source_hf_config(dialect, stack_config)  the stack's config dict -> HF config.json dict (verified)
    read_stack_config(dialect, config)       the stack's config -> ModelSpec (its reader)
    verify_angles(source_spec, target_spec)  per layer: inv_freq, attention factor, rotary/head dim, layout in
                                             HF row order, softmax multiplier; ValueError naming the first layers
                                             that differ, else the report
    qk_row_map(source_spec, target_spec)     the q/k row permutation the weights need (identity or Meta <-> HF)
    check_qk_row_map(source, target, map_rows, ...)  q . k logits on random weights through a row map

Dialects and the file each writes (key names from the sources cited in each reader's docstring):
    torchtitan  the job-config dump `{"model_spec": {"name", "flavor", "model": {"dim", "vocab_size", "layers":
                [{"attention": {"n_heads", "n_kv_heads", "head_dim", "rope": RoPE.Config}}]}}}` (torchtitan 0.3.0)
    maxtext     MaxText model YAML keys (base.yml names: base_emb_dim, base_num_query_heads, rope_type, ...)
    megatron    megatron-core 0.16.1 TransformerConfig / GPTModel keys as Megatron-Bridge providers name them
    nemo        NeMo 2 `context/model.yaml` (`_target_` LlamaModel with a LlamaConfig / Llama31Config node)
    hf          transformers `config.json` (LlamaForCausalLM; DeepSeek-V3 keys for Megatron MLA)

Tolerance: both readings are evaluated by the same float64 functions of `posenc_np` (`RopePlan.turns`,
`attention_scale`); a faithful translation gives the same dict and differences of 0. Where the two dialects
parametrise a value differently (Megatron's yarn concentration factor m(f, mscale) / m(f, mscale_all_dim)
against HF's `attention_factor`; a float `rotary_percent`), the values differ by float64 rounding of a few
operations: relative 1e-12 (~4500 ulps) holds them and is far below any translation error (a dropped factor
changes inv_freq by a factor >= 1.0001 in some band).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from posenc_np.rope import apply_rope, permute_qk_rows, rope_frequencies

from ..modelspec.canonical import ModelSpec
from ..modelspec.compare import probe_positions, softmax_multiplier
from ..modelspec.readers import read_hf_config, read_maxtext, read_megatron, read_nemo, read_torchtitan
from ..modelspec.readers.megatron import megatron_sizes, yarn_mscale
from ..modelspec.readers.torchtitan import TORCHTITAN_MODELS
from .hf_config import heads

__all__ = ["STACK_DIALECTS", "StackShape", "AngleReport", "target_config", "source_hf_config", "read_stack_config",
           "verify_angles", "angle_differences", "qk_row_map", "check_qk_row_map", "ANGLE_RTOL"]

#: The dialects `target_config` / `source_hf_config` translate.
STACK_DIALECTS = ("torchtitan", "maxtext", "megatron", "nemo")
#: Relative tolerance of `verify_angles` (module docstring).
ANGLE_RTOL = 1e-12
_READERS = {"torchtitan": read_torchtitan, "maxtext": read_maxtext, "megatron": read_megatron, "nemo": read_nemo,
            "hf": read_hf_config}


@dataclass(frozen=True)
class StackShape:
    """The non-position sizes a config carries, in HF names (None where a dialect has no such key)."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    num_hidden_layers: int
    intermediate_size: int | None = None
    vocab_size: int | None = None
    rms_norm_eps: float | None = None
    tie_word_embeddings: bool | None = None
    max_position_embeddings: int | None = None
    mla: dict | None = None  # qk_rope_head_dim, qk_nope_head_dim, v_head_dim, kv_lora_rank, q_lora_rank


def _check_dialect(dialect):
    if dialect not in STACK_DIALECTS:
        raise ValueError(f"dialect={dialect!r} is not one of {STACK_DIALECTS}")


def read_stack_config(dialect: str, config: dict, *, source: str = "<dict>") -> ModelSpec:
    """The canonical reading of a stack's config dict (the dialect's reader; `hf` too)."""
    if dialect != "hf":
        _check_dialect(dialect)
    return _READERS[dialect](config, source=source)


# --- verification ---------------------------------------------------------------------------------------

@dataclass
class AngleReport:
    """What `verify_angles` compared: layers, rotary layers, the largest relative differences found."""

    layers: int
    rotary_layers: int
    max_rel_inv_freq: float
    max_rel_attention: float
    softmax_multiplier: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = np.maximum(np.abs(a), np.abs(b))
    diff = np.abs(a - b)
    return float(np.max(np.where(scale > 0, diff / np.where(scale > 0, scale, 1.0), 0.0), initial=0.0))


def _seq_lens(plan):
    """Sequence lengths at which a length-dependent plan is evaluated: around its switch and beyond."""
    if not plan.seq_dependent:
        return [None]
    return [None, plan.original, plan.original + 1, 2 * plan.original, 8 * plan.original]


def _layer_differences(la, lb, oa, ob, rtol):
    if la.rope != lb.rope:
        return [f"rope: {'rotary' if la.rope else 'NoPE'} vs {'rotary' if lb.rope else 'NoPE'}"], 0.0, 0.0
    if not la.rope:
        return [], 0.0, 0.0
    out = []
    for name, va, vb in (("rotary_dim", la.rotary_dim, lb.rotary_dim), ("head_dim", la.head_dim, lb.head_dim),
                         ("layout in HF row order", la.hf_layout(oa), lb.hf_layout(ob)),
                         ("mrope_section", la.mrope_section, lb.mrope_section),
                         ("mrope_interleaved", la.mrope_interleaved, lb.mrope_interleaved),
                         ("mrope_axes", la.mrope_axes, lb.mrope_axes)):
        if va != vb:
            out.append(f"{name}: {va} vs {vb}")
    if out:
        return out, 0.0, 0.0
    pa, pb = la.plan(), lb.plan()
    lengths = sorted(set(_seq_lens(pa) + _seq_lens(pb)), key=lambda n: -1 if n is None else n)
    freq, at = max((_rel(pa.turns_at(n), pb.turns_at(n)), i) for i, n in enumerate(lengths))
    attention = _rel(pa.attention_scale, pb.attention_scale)
    if freq > rtol:
        n = lengths[at]
        inv_a, inv_b = pa.turns_at(n) * 2 * math.pi, pb.turns_at(n) * 2 * math.pi
        j = int(np.argmax(np.abs(inv_a - inv_b) / np.maximum(np.maximum(abs(inv_a), abs(inv_b)), 1e-300)))
        when = "" if n is None else f" at seq_len {n}"
        out.append(f"inv_freq{when}: max relative difference {freq:.3g} (pair {j}: {inv_a[j]:.9g} vs {inv_b[j]:.9g}; "
                   f"base {la.base:g} vs {lb.base:g}, scaling {la.rope_type} vs {lb.rope_type})")
    if attention > rtol:
        out.append(f"attention factor: {pa.attention_scale:.12g} vs {pb.attention_scale:.12g}")
    return out, freq, attention


def angle_differences(source: ModelSpec, target: ModelSpec, *, rtol: float = ANGLE_RTOL) -> tuple[list, AngleReport]:
    """`(differences, report)`: each difference names its layers; empty when the angles agree everywhere."""
    if len(source.layers) != len(target.layers):
        report = AngleReport(len(source.layers), 0, math.inf, math.inf, math.nan)
        return [f"num_layers: {len(source.layers)} vs {len(target.layers)}"], report
    grouped, cache, worst_f, worst_a = {}, {}, 0.0, 0.0
    for i, (la, lb) in enumerate(zip(source.layers, target.layers, strict=True)):
        key = (repr(la), repr(lb))
        if key not in cache:
            cache[key] = _layer_differences(la, lb, source.row_order, target.row_order, rtol)
        diffs, freq, attention = cache[key]
        worst_f, worst_a = max(worst_f, freq), max(worst_a, attention)
        for d in diffs:
            grouped.setdefault(d, []).append(i)
    out = [f"layers {_span(v)}: {d}" for d, v in grouped.items()]
    ma, mb = softmax_multiplier(source), softmax_multiplier(target)
    if not math.isclose(ma, mb, rel_tol=rtol):
        out.append(f"softmax scale multiplier (MLA mscale^2): {ma:.12g} vs {mb:.12g}")
    report = AngleReport(len(source.layers), sum(la.rope for la in source.layers), worst_f, worst_a, ma)
    return out, report


def _span(indices) -> str:
    """`[0, 1, 2, 5]` -> "0-2,5"."""
    runs = []
    for i in indices:
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def verify_angles(source: ModelSpec, target: ModelSpec, *, rtol: float = ANGLE_RTOL) -> AngleReport:
    """Prove that two readings rotate q and k alike at every layer, or raise.

    Compared per layer: RoPE vs NoPE, rotary dim, head dim, the layout on HF-ordered rows
    (`LayerSpec.hf_layout`), the frequencies `RopePlan.turns_at(n)` (at the initial state and, for
    length-dependent scaling, at the original length, one past it and beyond) and the attention factor
    that multiplies cos and sin; per model the softmax multiplier (`softmax_multiplier`, DeepSeek's
    mscale^2). Relative tolerance `rtol` (module docstring).

    Raises:
        ValueError: naming every difference with its layers (the translation must not be written).
    """
    diffs, report = angle_differences(source, target, rtol=rtol)
    if diffs:
        raise ValueError(f"{target.dialect} config does not keep the angles of the {source.dialect} config: "
                         + "; ".join(diffs))
    return report


# --- q/k rows ------------------------------------------------------------------------------------------

def qk_row_map(source: ModelSpec, target: ModelSpec):
    """`map_rows(weight, num_heads) -> weight` taking q/k rows stored for `source` to rows for `target`.

    Rows are either in HF order or Meta's (`ModelSpec.row_order`); HF -> Meta is `convert_llama_weights_to_hf.py`'s
    inverse permute (`posenc_np.permute_qk_rows(source="half", target="interleaved")`), Meta -> HF its
    forward; equal orders need none. The rotary dim is the first rotary layer's (partial rotary keeps the
    pass-through rows in place).
    """
    layer = next((la for la in source.layers if la.rope), None)
    if layer is None or source.row_order == target.row_order:
        return lambda weight, num_heads: np.asarray(weight)
    src, dst = ("half", "interleaved") if source.row_order == "hf" else ("interleaved", "half")
    return lambda weight, num_heads: permute_qk_rows(weight, num_heads, source=src, target=dst,
                                                     rotary_dim=layer.rotary_dim)


def _project(x, weight, num_heads):
    """`[heads, T, d]`: x `[T, hidden]` through a torch-oriented `[heads * d, hidden]` weight."""
    return np.einsum("tc,hdc->htd", x, np.asarray(weight).reshape(num_heads, -1, x.shape[1]))


def _logits(q, k, layer, positions, group):
    """`[heads, T, T]` logits of rotated q (per head) and k (per kv head, shared by `group` q heads)."""
    extra = dict(base=layer.base, layout=layer.layout, rotary_dim=layer.rotary_dim, scaling=layer.scaling)
    qr = apply_rope(q, positions, **extra)  # [H, T, d]
    kr = apply_rope(k, positions, **extra)  # [KV, T, d]
    return np.einsum("htd,hsd->hts", qr, np.repeat(kr, group, axis=0))


def check_qk_row_map(source: ModelSpec, target: ModelSpec, map_rows, *, num_heads: int, num_kv_heads: int,
                     hidden: int = 16, seed: int = 0, rtol: float = 1e-9) -> float:
    """q . k logits of random weights under `source`, and under `target` after `map_rows`; raise if they differ.

    For each distinct pair of rotary layers: float64 random `W_q [H * d, hidden]`, `W_k [KV * d, hidden]`
    and inputs at `probe_positions(source)` (each band's quarter and half turn, up to 4096), rotated with
    each spec's own stored-row layout and settings. `map_rows(weight, num_heads)` is the translation's
    row map (`qk_row_map` gives the right one). Tolerance: relative `rtol` = 1e-9 of the largest logit
    (float64 sums of `hidden * d` products; a wrong row order changes logits by O(1)).

    Returns:
        the largest relative logit difference.

    Raises:
        ValueError: the logits differ (the row map and the target config disagree).
    """
    rng = np.random.default_rng(seed)
    worst = 0.0
    seen = set()
    positions = probe_positions(source, limit=min(source.max_position_embeddings or 4096, 4096))
    for i, (la, lb) in enumerate(zip(source.layers, target.layers, strict=True)):
        if not (la.rope and lb.rope) or (repr(la), repr(lb)) in seen:
            continue
        seen.add((repr(la), repr(lb)))
        d = la.head_dim
        wq, wk = rng.standard_normal((num_heads * d, hidden)), rng.standard_normal((num_kv_heads * d, hidden))
        x = rng.standard_normal((positions.size, hidden))

        group = num_heads // num_kv_heads
        ref = _logits(_project(x, wq, num_heads), _project(x, wk, num_kv_heads), la, positions, group)
        got = _logits(_project(x, map_rows(wq, num_heads), num_heads),
                      _project(x, map_rows(wk, num_kv_heads), num_kv_heads), lb, positions, group)
        err = float(np.max(np.abs(ref - got)) / np.max(np.abs(ref)))
        worst = max(worst, err)
        if err > rtol:
            raise ValueError(f"layer {i}: q . k logits differ after the row map by {err:.3g} of the largest logit "
                             f"(source {source.dialect} rows {source.row_order} layout {la.layout}, target "
                             f"{target.dialect} rows {target.row_order} layout {lb.layout})")
    return worst


# --- shapes --------------------------------------------------------------------------------------------

def _hf_shape(cfg: dict) -> StackShape:
    try:
        count, kv, head_dim = heads(cfg)  # the port's one reading of HF head counts
        layers, hidden = int(cfg["num_hidden_layers"]), int(cfg["hidden_size"])
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"the HF config lacks or mistypes a size: {error}") from None
    mla = None
    if cfg.get("qk_rope_head_dim"):
        mla = {k: cfg.get(k) for k in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "kv_lora_rank",
                                       "q_lora_rank")}
    return StackShape(hidden_size=hidden, num_attention_heads=count, num_key_value_heads=kv, head_dim=head_dim,
                      num_hidden_layers=layers, intermediate_size=cfg.get("intermediate_size"),
                      vocab_size=cfg.get("vocab_size"), rms_norm_eps=cfg.get("rms_norm_eps"),
                      tie_word_embeddings=cfg.get("tie_word_embeddings"),
                      max_position_embeddings=cfg.get("max_position_embeddings"), mla=mla)


def _required(cfg, keys, dialect):
    missing = [k for k in keys if cfg.get(k) is None]
    if missing:
        raise ValueError(f"{dialect} config needs {missing} to write the HF config")


def _torchtitan_shape(cfg: dict) -> StackShape:
    if "n_layers" in cfg:  # torchtitan 0.2 TransformerModelArgs
        heads = int(cfg["n_heads"])
        return StackShape(hidden_size=int(cfg["dim"]), num_attention_heads=heads,
                          num_key_value_heads=int(cfg.get("n_kv_heads") or heads), head_dim=int(cfg["dim"]) // heads,
                          num_hidden_layers=int(cfg["n_layers"]), vocab_size=cfg.get("vocab_size"),
                          rms_norm_eps=cfg.get("norm_eps"), max_position_embeddings=cfg.get("max_seq_len"))
    model = cfg["model_spec"]["model"] if "model_spec" in cfg else cfg
    attn = model["layers"][0]["attention"]
    heads = int(attn["n_heads"])
    return StackShape(hidden_size=int(model["dim"]), num_attention_heads=heads,
                      num_key_value_heads=int(attn.get("n_kv_heads") or heads),
                      head_dim=int(attn.get("head_dim") or model["dim"] // heads), num_hidden_layers=len(model["layers"]),
                      vocab_size=model.get("vocab_size"), max_position_embeddings=attn["rope"].get("max_seq_len"))


def _maxtext_shape(cfg: dict) -> StackShape:
    _required(cfg, ("base_emb_dim", "base_num_query_heads", "base_num_decoder_layers"), "maxtext")
    heads = int(cfg["base_num_query_heads"])
    return StackShape(hidden_size=int(cfg["base_emb_dim"]), num_attention_heads=heads,
                      num_key_value_heads=int(cfg.get("base_num_kv_heads") or heads),
                      head_dim=int(cfg.get("head_dim") or 128), num_hidden_layers=int(cfg["base_num_decoder_layers"]),
                      intermediate_size=cfg.get("base_mlp_dim"), vocab_size=cfg.get("vocab_size"),
                      rms_norm_eps=cfg.get("normalization_layer_epsilon"),
                      tie_word_embeddings=cfg.get("logits_via_embedding"),
                      max_position_embeddings=cfg.get("max_position_embeddings"))


def _megatron_node(dialect, cfg):
    """The dict holding the sizes: NeMo 2's `config:` node, Megatron-Bridge's `model:` node, else the dict."""
    for key in ("config", "model"):
        if dialect in ("nemo", "megatron") and isinstance(cfg.get(key), dict):
            return cfg[key]
    return cfg


def _megatron_shape(cfg: dict) -> StackShape:
    return StackShape(**megatron_sizes(cfg))


# --- what a target can express ---------------------------------------------------------------------------

def _one_rotary_setting(spec: ModelSpec, dialect: str):
    """The single rotary LayerSpec all rotary layers share (dialects with one RoPE setting per model)."""
    rotary = [la for la in spec.layers if la.rope]
    if not rotary:
        raise ValueError(f"{dialect}: the model has no rotary layer; this translation writes RoPE settings")
    first = rotary[0]
    for i, la in enumerate(spec.layers):
        if la.rope and la != first:
            raise ValueError(f"{dialect} has one RoPE setting per model; layer {i} differs from the first rotary "
                             f"layer ({la.base:g}/{la.rope_type} vs {first.base:g}/{first.rope_type})")
    if first.mrope_section is not None or first.mrope_axes is not None:
        raise ValueError(f"{dialect}: multi-axis RoPE (mrope) is not translated")
    return first


def _refuse_nope(spec, dialect, why):
    nope = [i for i, la in enumerate(spec.layers) if not la.rope]
    if nope:
        raise ValueError(f"{dialect} cannot express NoPE layers {nope[:8]}{'...' if len(nope) > 8 else ''}: {why}")


def _num(value):
    """An integral float as int (bases, lengths: the stacks type several as int), else the float."""
    return int(value) if float(value).is_integer() else float(value)


def _yarn_default_attention(scaling) -> float:
    return yarn_mscale(float(scaling["factor"]))


# --- writers: HF -> stack -------------------------------------------------------------------------------

def _write_torchtitan(spec: ModelSpec, shape: StackShape, model_name: str | None = None) -> dict:
    name = model_name or "llama3"
    if name not in TORCHTITAN_MODELS:
        raise ValueError(f"model_name={name!r} is not one of {sorted(TORCHTITAN_MODELS)}")
    _refuse_nope(spec, "torchtitan", "its GQAttention always applies its RoPE")
    cls, _, folds = TORCHTITAN_MODELS[name]
    if shape.mla:
        raise ValueError("torchtitan: MLA (DeepSeek-V3 / Kimi) configs are not translated")
    layers = []
    for i, la in enumerate(spec.layers):
        if la.rotary_dim != la.head_dim:
            raise ValueError(f"torchtitan rotates the whole head (RoPE.Config.dim = head_dim); layer {i} rotates "
                             f"{la.rotary_dim} of {la.head_dim} channels (partial rotary)")
        rope = {"dim": la.rotary_dim, "max_seq_len": shape.max_position_embeddings or 4096, "theta": _num(la.base)}
        kind = la.rope_type
        s = la.scaling or {}
        if kind == "default":
            rope["scaling"] = "none"
        elif kind == "llama3":
            if cls != "ComplexRoPE":
                raise ValueError(f"torchtitan {name} uses CosSinRoPE, which refuses llama scaling")
            rope.update(scaling="llama", scaling_factor=float(s["factor"]), low_freq_factor=float(s["low_freq_factor"]),
                        high_freq_factor=float(s["high_freq_factor"]),
                        original_max_position_embeddings=int(s["original_max_position_embeddings"]))
        elif kind == "yarn":
            attention = la.plan().attention_scale
            want = _yarn_default_attention(s) if folds else 1.0
            if not math.isclose(attention, want, rel_tol=ANGLE_RTOL):
                raise ValueError(f"torchtitan {name}: its RoPE applies no YaRN attention factor and the model folds "
                                 f"{want:.6g} into the softmax; the config's attention factor is {attention:.6g}")
            if float(s["factor"]) <= 1.0:
                raise ValueError("torchtitan applies YaRN only when rope_factor > 1")
            rope.update(scaling="yarn", rope_factor=float(s["factor"]), beta_fast=float(s.get("beta_fast") or 32),
                        beta_slow=float(s.get("beta_slow") or 1),
                        original_seq_len=int(s["original_max_position_embeddings"]),
                        truncate=bool(s.get("truncate", True)))
        else:
            raise ValueError(f"torchtitan RoPE.Config.scaling is 'none', 'llama' or 'yarn'; rope_type={kind!r} "
                             f"(layer {i}) has no equivalent")
        layers.append({"attention": {"n_heads": shape.num_attention_heads, "n_kv_heads": shape.num_key_value_heads,
                                     "head_dim": la.head_dim, "rope": rope}})
    model = {"dim": shape.hidden_size, "vocab_size": shape.vocab_size, "layers": layers}
    return {"model_spec": {"name": name, "flavor": "posenc", "model": model}}


def _write_maxtext(spec: ModelSpec, shape: StackShape) -> dict:
    la = _one_rotary_setting(spec, "maxtext")
    if shape.mla:
        raise ValueError("maxtext: MLA configs are not translated")
    if la.rotary_dim != la.head_dim:
        raise ValueError(f"maxtext: partial rotary ({la.rotary_dim} of {la.head_dim}) is not translated "
                         "(posenc's MaxText reader does not model partial_rotary_factor)")
    nope = [not layer.rope for layer in spec.layers]
    interval = -1
    if any(nope):
        interval = nope.index(True) + 1
        if nope != [(i + 1) % interval == 0 for i in range(len(nope))]:
            raise ValueError(f"maxtext: NoPE layers {[i for i, v in enumerate(nope) if v]} are not every "
                             "nope_layer_interval-th layer")
    out = {"base_emb_dim": shape.hidden_size, "base_num_query_heads": shape.num_attention_heads,
           "base_num_kv_heads": shape.num_key_value_heads, "head_dim": la.head_dim,
           "base_num_decoder_layers": shape.num_hidden_layers, "rope_min_timescale": 1,
           "rope_max_timescale": _num(la.base), "nope_layer_interval": interval}
    for key, value in (("base_mlp_dim", shape.intermediate_size), ("vocab_size", shape.vocab_size),
                       ("normalization_layer_epsilon", shape.rms_norm_eps),
                       ("logits_via_embedding", shape.tie_word_embeddings),
                       ("max_position_embeddings", shape.max_position_embeddings)):
        if value is not None:
            out[key] = value
    kind, s, layout = la.rope_type, la.scaling or {}, la.hf_layout(spec.row_order)
    if kind == "llama3":
        fixed = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
        if any(float(s[k]) != v for k, v in fixed.items()) or layout != "half":
            raise ValueError(f"maxtext: LLaMARotaryEmbedding fixes llama3 scaling at {fixed} on HF half-layout "
                             f"models; this config has {dict((k, s[k]) for k in fixed)}, layout {layout}")
        out.update(rope_type="llama3.1", rope_use_scale=True)
    elif kind == "yarn":
        attention = la.plan().attention_scale
        if math.isclose(attention, 1.0, rel_tol=ANGLE_RTOL):
            scaled = False
        elif math.isclose(attention, 0.1 * math.log(float(s["factor"])) + 1.0, rel_tol=ANGLE_RTOL):
            scaled = True
        else:
            raise ValueError(f"maxtext: YarnRotaryEmbedding's attention factor is 1 or 0.1 ln(factor) + 1 "
                             f"(rope_attention_scaling); this config's is {attention:.9g}")
        out.update(rope_type="yarn", rope_factor=_num(s["factor"]),
                   original_max_position_embeddings=int(s["original_max_position_embeddings"]),
                   beta_fast=_num(s.get("beta_fast") or 32), beta_slow=_num(s.get("beta_slow") or 1),
                   rope_truncate=bool(s.get("truncate", True)), rope_interleave=layout == "interleaved",
                   rope_attention_scaling=scaled)
    elif kind in ("default", "linear"):
        if layout != "half":
            raise ValueError("maxtext: rope_type 'default' rotates halves of HF-ordered rows; this config's layout "
                             "on HF rows is interleaved")
        out.update(rope_type="default", rope_linear_scaling_factor=_num(s.get("factor", 1.0)))
    else:
        raise ValueError(f"maxtext rope_type is 'default' (with rope_linear_scaling_factor), 'llama3.1' or 'yarn'; "
                         f"rope_type={kind!r} has no equivalent")
    return out


def _megatron_yarn_keys(s: dict, attention: float, prefix: str, where: str) -> dict:
    """yarn keys whose concentration factor m(f, mscale) / m(f, mscale_all_dim) (megatron-core
    `_yarn_get_concentration_factor`) equals the attention factor: the config's own mscale keys when they
    give it, else mscale solved from m(f, mscale) = attention * m(f, mscale_all_dim) (m(f, s) = 0.1 s ln f + 1)."""
    factor = float(s["factor"])
    mscale = 1.0 if s.get("mscale") is None else float(s["mscale"])
    all_dim = 0.0 if s.get("mscale_all_dim") is None else float(s["mscale_all_dim"])
    if not math.isclose(yarn_mscale(factor, mscale) / yarn_mscale(factor, all_dim), attention, rel_tol=ANGLE_RTOL):
        if factor <= 1.0:
            raise ValueError(f"{where}: yarn factor {factor} <= 1 makes megatron-core's concentration factor 1; "
                             f"the config's attention factor is {attention:.9g}")
        mscale = (attention * yarn_mscale(factor, all_dim) - 1.0) / (0.1 * math.log(factor))
    names = {"factor": "rotary_scaling_factor", "original": "original_max_position_embeddings"}
    if prefix:
        names = {"factor": "yarn_rotary_scaling_factor", "original": "yarn_original_max_position_embeddings"}
    return {names["factor"]: _num(factor), names["original"]: int(s["original_max_position_embeddings"]),
            f"{prefix}beta_fast": _num(s.get("beta_fast") or 32), f"{prefix}beta_slow": _num(s.get("beta_slow") or 1),
            f"{prefix}mscale": mscale, f"{prefix}mscale_all_dim": all_dim}


def _megatron_mla(spec, la, shape) -> dict:
    mla = shape.mla
    width = int(mla["qk_rope_head_dim"])
    out = {"multi_latent_attention": True, "qk_pos_emb_head_dim": width, "qk_head_dim": mla["qk_nope_head_dim"],
           "v_head_dim": mla["v_head_dim"], "kv_lora_rank": mla["kv_lora_rank"], "q_lora_rank": mla["q_lora_rank"],
           "rotary_base": _num(la.base), "rotary_percent": la.rotary_dim / width}
    if la.rope_type == "yarn":
        if la.rotary_dim != width:
            raise ValueError("megatron MLA yarn rotates the whole qk_pos_emb_head_dim (no rotary_percent)")
        s = la.scaling
        if not s.get("truncate", True):
            raise ValueError("megatron MLA YarnRotaryEmbedding always rounds the correction range (truncate=True)")
        out.update(rope_type="yarn", **_megatron_yarn_keys(s, la.plan().attention_scale, "", "megatron MLA"))
        all_dim = spec.attention_terms.get("softmax_mscale_all_dim") or 0.0
        if float(out["mscale_all_dim"]) != float(all_dim):
            raise ValueError(f"megatron MLA takes one mscale_all_dim for the rope and the softmax; the config's rope "
                             f"needs {out['mscale_all_dim']} and its softmax {all_dim}")
    elif la.rope_type == "default":
        # rotary_scaling_factor 1 keeps MLA's softmax mscale at 1 (the class default 40 does not: Bridge PR #2791)
        out.update(rope_type="rope", rotary_scaling_factor=1.0, mscale=1.0, mscale_all_dim=0.0)
    else:
        raise ValueError(f"megatron MLA rope_type is 'rope' or 'yarn'; rope_type={la.rope_type!r} has no equivalent")
    return out


def _write_megatron(spec: ModelSpec, shape: StackShape, nemo: bool = False) -> dict:
    dialect = "nemo" if nemo else "megatron"
    la = _one_rotary_setting(spec, dialect)
    out = {"num_layers": shape.num_hidden_layers, "hidden_size": shape.hidden_size,
           "num_attention_heads": shape.num_attention_heads, "num_query_groups": shape.num_key_value_heads}
    for key, value in (("ffn_hidden_size", shape.intermediate_size), ("vocab_size", shape.vocab_size),
                       ("layernorm_epsilon", shape.rms_norm_eps),
                       ("share_embeddings_and_output_weights", shape.tie_word_embeddings),
                       ("seq_length", shape.max_position_embeddings)):
        if value is not None:
            out[key] = value
    nope = [not layer.rope for layer in spec.layers]
    if any(nope):
        out["no_rope_freq"] = [int(v) for v in nope]
    if shape.mla:
        if nemo:
            raise ValueError("nemo: MLA configs are not translated (use the megatron dialect)")
        out.update(_megatron_mla(spec, la, shape))
        return out
    out["kv_channels"] = la.head_dim
    layout = la.hf_layout(spec.row_order)
    kind, s = la.rope_type, la.scaling or {}
    percent = la.rotary_dim / la.head_dim
    if la.rotary_dim != la.head_dim and int(la.head_dim * percent) != la.rotary_dim:
        raise ValueError(f"{dialect}: no float rotary_percent gives int(kv_channels * p) = {la.rotary_dim}")
    out.update(rotary_base=_num(la.base), rotary_percent=percent, rotary_interleaved=layout == "interleaved")
    if kind == "yarn":
        if la.rotary_dim != la.head_dim:
            raise ValueError(f"{dialect}: YarnRotaryEmbedding rotates the whole kv_channels (it ignores rotary_percent);"
                             f" this config rotates {la.rotary_dim} of {la.head_dim}")
        if layout == "interleaved":
            raise ValueError(f"{dialect}: YarnRotaryEmbedding does not support interleaved rotary embeddings")
        out.update(position_embedding_type="yarn", **_megatron_yarn_keys(s, la.plan().attention_scale, "yarn_",
                                                                          dialect),
                   yarn_correction_range_round_to_int=bool(s.get("truncate", True)))
        return out
    out["position_embedding_type"] = "rope"
    if kind == "linear":
        out["seq_len_interpolation_factor"] = _num(s["factor"])
    elif kind == "llama3":
        if nemo:
            out.update(scale_factor=_num(s["factor"]), low_freq_factor=_num(s["low_freq_factor"]),
                       high_freq_factor=_num(s["high_freq_factor"]),
                       old_context_len=int(s["original_max_position_embeddings"]))
        else:
            fixed = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
            if any(float(s[k]) != v for k, v in fixed.items()):
                raise ValueError(f"megatron: RotaryEmbedding._apply_scaling takes only the factor (low 1, high 4, "
                                 f"original 8192 fixed); this config has {dict((k, s[k]) for k in fixed)} "
                                 "(NeMo 2's Llama31Config takes them: use the nemo dialect)")
            out.update(rope_scaling=True, rope_scaling_factor=_num(s["factor"]))
    elif kind != "default":
        raise ValueError(f"{dialect}: megatron-core rotary embeddings are rope (with linear interpolation or llama3 "
                         f"scaling) and yarn; rope_type={kind!r} has no equivalent")
    return out


def _write_nemo(spec: ModelSpec, shape: StackShape) -> dict:
    """NeMo 2's model.yaml tree. Its GPTConfig (nemo/collections/llm/gpt/model/base.py, NeMo 0175f4c6) passes
    position_embedding_type 'learned_absolute' | 'rope', rotary_base, rotary_percent and
    seq_len_interpolation_factor to GPTModel and has no yarn keys; llama3 goes through Llama31Config."""
    rotary = next((la for la in spec.layers if la.rope), None)
    if rotary is not None and rotary.rope_type == "yarn":
        raise ValueError("nemo: NeMo 2's GPTConfig has no yarn keys (position_embedding_type is 'learned_absolute' "
                         "or 'rope', nemo/collections/llm/gpt/model/base.py); use the megatron dialect")
    node = _write_megatron(spec, shape, nemo=True)
    llama31 = "scale_factor" in node
    cls = "Llama31Config" if llama31 else "LlamaConfig"
    node = {"_target_": f"nemo.collections.llm.gpt.model.llama.{cls}", **node}
    return {"_target_": "nemo.collections.llm.gpt.model.llama.LlamaModel", "config": node}


_WRITERS = {"torchtitan": _write_torchtitan, "maxtext": _write_maxtext, "megatron": _write_megatron,
            "nemo": _write_nemo}


def target_config(dialect: str, hf_config: dict, *, model_name: str | None = None) -> dict:
    """The stack's config for an HF `config.json` dict, proven to keep the angles.

    Args:
        dialect: one of `STACK_DIALECTS`.
        hf_config: the HF config dict (v4 flat keys or v5 `rope_parameters`).
        model_name: torchtitan only: the model whose RoPE class to write for ("llama3" default, "qwen3",
            "gpt_oss").

    Returns:
        the config dict (the torchtitan dump, the MaxText/Megatron keys, the NeMo 2 model.yaml tree).

    Raises:
        ValueError: a setting the target cannot express (the reason named), or a translation whose read-back
            does not keep the angles (`verify_angles`).
    """
    _check_dialect(dialect)
    if model_name is not None and dialect != "torchtitan":
        raise ValueError(f"model_name applies to the torchtitan dialect, not {dialect!r}")
    source = read_hf_config(hf_config, source="hf config")
    shape = _hf_shape(hf_config.get("text_config") or hf_config)
    extra = {"model_name": model_name} if dialect == "torchtitan" else {}
    out = _WRITERS[dialect](source, shape, **extra)
    verify_angles(source, _READERS[dialect](out, source=f"written {dialect} config"))
    return out


# --- writer: stack -> HF --------------------------------------------------------------------------------

def _hf_scaling(la) -> dict | None:
    """The layer's scaling dict for HF; yarn's `attention_factor` only where HF's own default differs."""
    s = dict(la.scaling or {})
    if not s:
        return None
    if s.get("rope_type") == "yarn":
        attention = s.pop("attention_factor", None)
        _, default_attention = rope_frequencies(la.rotary_dim, base=la.base, scaling=dict(s))
        if attention is not None and not math.isclose(attention, default_attention, rel_tol=ANGLE_RTOL):
            s["attention_factor"] = attention  # HF reads it before mscale / mscale_all_dim
    return s


def source_hf_config(dialect: str, stack_config: dict) -> dict:
    """An HF `config.json` dict (LlamaForCausalLM; DeepseekV3ForCausalLM keys for Megatron MLA) for a stack's
    config, proven to keep the angles.

    Written: the sizes the stack config carries (`StackShape`), `rope_theta`, `rope_scaling` (v4 form, never
    null when the stack scales), `partial_rotary_factor` when it rotates part of the head. Per-layer
    differences, NoPE layers and interleaved rotation of HF-ordered rows have no LlamaForCausalLM key and are
    refused.

    Raises:
        ValueError: the stack config is unreadable, or a setting HF Llama cannot express.
    """
    _check_dialect(dialect)
    source = _READERS[dialect](stack_config, source=f"{dialect} config")
    shape = {"torchtitan": _torchtitan_shape, "maxtext": _maxtext_shape,
             "megatron": _megatron_shape}.get(dialect, _megatron_shape)(_megatron_node(dialect, stack_config))
    la = _one_rotary_setting(source, "hf")
    _refuse_nope(source, "hf LlamaForCausalLM", "every Llama layer applies its RoPE")
    if la.hf_layout(source.row_order) != "half":
        raise ValueError("hf: LlamaForCausalLM rotates halves of its q/k rows; this config rotates interleaved pairs "
                         "of HF-ordered rows (no Llama config key expresses it)")
    out = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": shape.hidden_size,
           "num_attention_heads": shape.num_attention_heads, "num_key_value_heads": shape.num_key_value_heads,
           "head_dim": shape.head_dim, "num_hidden_layers": shape.num_hidden_layers, "rope_theta": _num(la.base)}
    for key in ("intermediate_size", "vocab_size", "rms_norm_eps", "tie_word_embeddings", "max_position_embeddings"):
        if getattr(shape, key) is not None:
            out[key] = getattr(shape, key)
    if shape.mla:
        out.update(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", head_dim=la.head_dim,
                   **{k: v for k, v in shape.mla.items()})
        if source.attention_terms.get("softmax_scale_multiplier"):
            raise ValueError("hf: megatron MLA applies a softmax mscale^2 without yarn scaling (rope_type 'rope' with "
                             "rotary_scaling_factor > 1 and mscale_all_dim > 0); DeepSeek-V3's config cannot express it")
        if la.rotary_dim != la.head_dim:
            raise ValueError("hf: DeepSeek-V3 rotates the whole qk_rope_head_dim (no partial rotary)")
    elif la.rotary_dim != la.head_dim:
        out["partial_rotary_factor"] = la.rotary_dim / la.head_dim
    scaling = _hf_scaling(la)
    all_dim = source.attention_terms.get("softmax_mscale_all_dim")
    if scaling is not None and shape.mla and all_dim:
        # DeepSeek's keys: HF computes m(f, mscale) / m(f, mscale_all_dim) itself and squares m(f, mscale_all_dim)
        # into the softmax; mscale solved from the attention factor as in _megatron_yarn_keys
        factor = float(scaling["factor"])
        scaling.pop("attention_factor", None)
        scaling.update(mscale=(la.plan().attention_scale * yarn_mscale(factor, all_dim) - 1.0) / (0.1 * math.log(factor)),
                       mscale_all_dim=all_dim)
    if scaling is not None:
        out["rope_scaling"] = scaling
    verify_angles(source, read_hf_config(out, source="written hf config"))
    return out
