"""Verification of the GGUF presets (`gguf_logits_check`): per layer, attention logits `q . k` at probe
positions chosen per frequency band up to the context length (`posenc.port.checks.probe_positions`),
computed on the source from its own convention and on the written target from its own: an HF side from
its config.json through `posenc_np.rope_schedule_from_hf_config` (per-layer), a GGUF side from the
metadata and tensors the `gguf` reader reads back (`rope_type` of `general.architecture`,
`rope.dimension_count`, `rope.freq_base`, `rope.scaling.*`, `rope_freqs`, `rope_factors_*`), q and k taken
from the separate or fused tensors of each side, biases included.
"""

from __future__ import annotations

import numpy as np

from posenc_np.rope import rope_frequencies
from posenc_np.testing import compare, tolerance

from ...formats.gguf import ROPE_LAYOUT_OF_TYPE, rope_type
from ...formats.gguf_quant import rounded
from .. import hf_config
from ..checks import Check, probe_positions

__all__ = ["gguf_logits_check", "llamacpp_swa_layers", "LLAMACPP_SWA_PATTERN"]


class _Side:
    """q/k projections and the rope of one checkpoint, read in its own convention."""

    def __init__(self, family, convention, reader, config, rounding=None):
        self.family, self.convention, self.reader = family, convention, reader
        self.rounding = rounding or {}  # name -> GGUF type its weight is written in (--outtype): rounded here too
        if convention == "gguf":
            md = reader.metadata
            arch = md.get("general.architecture")
            self.arch = arch
            a = lambda key, default=None: md.get(f"{arch}.{key}", default)  # noqa: E731
            self.heads = int(a("attention.head_count"))
            self.kv_heads = int(a("attention.head_count_kv", self.heads))
            hidden = int(a("embedding_length"))
            self.head_dim = int(a("attention.key_length", hidden // self.heads))
            self.layers = int(a("block_count"))
            self.context = int(a("context_length"))
            self.layout = ROPE_LAYOUT_OF_TYPE.get(rope_type(arch))
            if self.layout is None:
                raise ValueError(f"GGUF architecture {arch!r} has llama.cpp rope type {rope_type(arch)}")
            self.n_rot = int(a("rope.dimension_count", self.head_dim))
            self.base = float(a("rope.freq_base", 10000.0))
            self.md = md
            self.swa = llamacpp_swa_layers(md, arch, self.layers)
        else:
            self.heads, self.kv_heads, self.head_dim = hf_config.heads(config)
            self.layers = int(config["num_hidden_layers"])
            self.context = int(config["max_position_embeddings"])
            self.schedule = hf_config.schedule(config, "verification")

    # the q and k rows (and biases) of layer i, float64, rows in this side's own order
    def qk(self, i, x):
        r, f = self.reader, self.family
        q_rows, k_rows = self.heads * self.head_dim, self.kv_heads * self.head_dim

        def proj(name_w, name_b, rows=None):
            w = r.get(name_w)
            # rounding acts per row (blocks along the input axis), so it commutes with the row orders compared
            w = np.asarray(rounded(w, self.rounding[name_w]) if name_w in self.rounding else w, np.float64)
            b = np.asarray(r.get(name_b), np.float64) if name_b in r else None
            if rows is not None:
                w, b = w[rows], (b[rows] if b is not None else None)
            out = x @ w.T
            return out + b if b is not None else out

        if self.convention == "gguf":
            p = f"blk.{i}."
            if f.qkv == "separate":
                return proj(p + "attn_q.weight", p + "attn_q.bias"), proj(p + "attn_k.weight", p + "attn_k.bias")
            return (proj(p + "attn_qkv.weight", p + "attn_qkv.bias", slice(0, q_rows)),
                    proj(p + "attn_qkv.weight", p + "attn_qkv.bias", slice(q_rows, q_rows + k_rows)))
        p = f.hf_layer.format(i=i)
        if f.qkv == "separate":
            return (proj(p + "self_attn.q_proj.weight", p + "self_attn.q_proj.bias"),
                    proj(p + "self_attn.k_proj.weight", p + "self_attn.k_proj.bias"))
        if f.qkv == "blocks":
            return (proj(p + "self_attn.qkv_proj.weight", p + "self_attn.qkv_proj.bias", slice(0, q_rows)),
                    proj(p + "self_attn.qkv_proj.weight", p + "self_attn.qkv_proj.bias",
                         slice(q_rows, q_rows + k_rows)))
        rows = np.arange(3 * q_rows).reshape(self.heads, 3, self.head_dim)  # HF GPT-NeoX: per head [q; k; v]
        name = p + "attention.query_key_value."
        return (proj(name + "weight", name + "bias", rows[:, 0].ravel()),
                proj(name + "weight", name + "bias", rows[:, 1].ravel()))

    def rope(self, i, seq_len):
        """(layout, rotary_dim, inv_freq, attention_scale, float32_factors) of layer i at `seq_len`."""
        if self.convention == "hf":
            entry = self.schedule[i]
            if entry is None:
                return None
            inv, scale = rope_frequencies(entry["rotary_dim"], base=entry["base"], scaling=entry["scaling"],
                                          seq_len=seq_len)
            return entry["layout"], entry["rotary_dim"], inv, scale, False
        md, a, r = self.md, self.arch, self.reader
        base, linear = self.base, md.get(f"{a}.rope.scaling.type", "none") == "linear"
        if self.swa[i]:  # llama.cpp's sliding layers: their own base; gemma3 never scales them
            base = float(md.get(f"{a}.rope.freq_base_swa", self.base if a == "gemma2" else 10000.0))
            linear = linear and a == "gemma2"
        inv = base ** (-np.arange(0, self.n_rot, 2, dtype=np.float64) / self.n_rot)
        f32 = False
        if linear:
            inv = inv / float(md[f"{a}.rope.scaling.factor"])
        if "rope_freqs.weight" in r:  # llama.cpp divides theta by the per-pair factors (ggml_rope_ext freq_factors)
            inv, f32 = inv / np.asarray(r.get("rope_freqs.weight"), np.float64), True
        if "rope_factors_long.weight" in r:
            original = int(md.get(f"{a}.rope.scaling.original_context_length") or self.context)
            which = "rope_factors_long.weight" if seq_len > original else "rope_factors_short.weight"
            inv, f32 = inv / np.asarray(r.get(which), np.float64), True
        scale = float(md.get(f"{a}.rope.scaling.attn_factor", 1.0))
        return self.layout, self.n_rot, inv, scale, f32

    def boundaries(self):
        if self.convention == "gguf":
            original = self.md.get(f"{self.arch}.rope.scaling.original_context_length")
            return [original - 1, original] if original else []
        entry = next((e for e in self.schedule if e is not None), None)
        original = ((entry or {}).get("scaling") or {}).get("original_max_position_embeddings")
        return [original - 1, original] if original else []


#: llama.cpp's pattern of sliding layers when a file names none (`load_swa_pattern(ml, n)` in
#: src/models/gemma2.cpp and gemma3.cpp; gemma3 slides only when `attention.sliding_window` is positive)
LLAMACPP_SWA_PATTERN = {"gemma2": 2, "gemma3": 6}


def llamacpp_swa_layers(md, arch, layers):
    """Which layers llama.cpp treats as sliding-window layers (`llama_model_base::load_swa_pattern`,
    `llama_hparams::set_swa_pattern`, src/llama-model.cpp / llama-hparams.cpp of llama-cpp-python 0.3.36):
    the `attention.sliding_window_pattern` array when the file has one, else layer i slides when
    `i % n < n - 1` for the integer key or the architecture's default n."""
    if arch not in LLAMACPP_SWA_PATTERN or (arch == "gemma3" and not md.get(f"{arch}.attention.sliding_window")):
        return [False] * layers
    pattern = md.get(f"{arch}.attention.sliding_window_pattern", LLAMACPP_SWA_PATTERN[arch])
    if isinstance(pattern, (list, tuple)):
        return [bool(v) for v in pattern][:layers] + [False] * max(0, layers - len(pattern))
    n = int(pattern)
    return [n == 0 or i % n < n - 1 for i in range(layers)]


def _rotate(x, positions, layout, rotary_dim, inv_freq, scale):
    """x `[heads, seq, head_dim]` rotated in float64 with explicit frequencies (GGUF factors included)."""
    angles = positions[:, None].astype(np.float64) * inv_freq[None, :]
    cos, sin = np.cos(angles) * scale, np.sin(angles) * scale
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if layout == "half":
        a, b = rot[..., : rotary_dim // 2], rot[..., rotary_dim // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos, rest], -1)
    a, b = rot[..., 0::2], rot[..., 1::2]
    out = np.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(rot.shape)
    return np.concatenate([out, rest], -1)


def gguf_logits_check(family, *, source, target, seed=11, hf_rounding=None):
    """Extra verification: per layer, logits of the source in its convention vs the written target in
    its own (GGUF metadata + tensors read back through gguf.GGUFReader), at `probe_positions`.
    `hf_rounding`: HF name -> the GGUF type its tensor is written in (`--outtype`), applied to the HF side's
    q/k weights too, so that the layouts are compared at float64 precision on the same values."""

    def run(src_reader, tgt_reader):
        sides = []
        for (convention, config), reader in ((source, src_reader), (target, tgt_reader)):
            sides.append(_Side(family, convention, reader, config, hf_rounding if convention == "hf" else None))
        src, tgt = sides
        hidden_name = "token_embd.weight" if src.convention == "gguf" else family.global_names[0][0]
        hidden = src_reader.shape(hidden_name)[1]
        rng = np.random.default_rng(seed)
        context = min(src.context, tgt.context)
        checks = []
        for i in range(src.layers):
            first = src.rope(i, 1)
            if first is None:
                continue
            boundaries = src.boundaries() + tgt.boundaries()
            regimes = [probe_positions(first[2], context, boundaries=boundaries)]
            if boundaries:  # seq-dependent factors (longrope): a run that stays below the original context too
                short = [p for p in regimes[0] if p < min(boundaries)]
                regimes.insert(0, np.array(short))
            for positions in regimes:
                x = rng.standard_normal((len(positions), hidden))
                logits = []
                used_f32 = False
                for side in (src, tgt):
                    layout, rotary_dim, inv, scale, f32 = side.rope(i, int(positions.max()) + 1)
                    used_f32 |= f32
                    q, k = side.qk(i, x)
                    q = q.reshape(len(positions), side.heads, side.head_dim).transpose(1, 0, 2)
                    k = k.reshape(len(positions), side.kv_heads, side.head_dim).transpose(1, 0, 2)
                    q, k = (_rotate(t, positions, layout, rotary_dim, inv, scale) for t in (q, k))
                    k = np.repeat(k, side.heads // side.kv_heads, axis=0)
                    logits.append(q @ k.transpose(0, 2, 1))
                desired, actual = logits
                scale = float(np.abs(desired).max())
                max_angle = float(positions.max()) * float(np.max(src.rope(i, int(positions.max()) + 1)[2]))
                tol = (tolerance("float32", max_angle=max_angle, scale=scale) if used_f32
                       else tolerance("float64", scale=scale))
                result = compare(actual, desired, tol)
                checks.append(Check("gguf-logits", f"layer {i} ({src.convention} -> {tgt.convention})",
                                    result.max_abs_err, result.atol, result.tol_why, result.passed,
                                    f"{len(positions)} probe positions per frequency band up to {positions.max()}"
                                    + (" (float32 rope factors of the GGUF)" if used_f32 else "")))
        if not checks:
            checks.append(Check("gguf-logits", "no rotary layer", float("inf"), 0.0, "", False, "nothing compared"))
        return checks

    run.__name__ = "gguf_logits_check"
    return run
