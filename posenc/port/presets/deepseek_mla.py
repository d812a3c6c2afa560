"""The DeepSeek MLA preset.

* `hf-deepseek-mla-to-half`: a DeepSeek-V2/V3-style MLA checkpoint whose rope slice is stored as interleaved
  pairs (`rope_interleave: true`, HF `apply_rotary_pos_emb_interleave`) -> the same model for a rotate_half
  runtime (`rope_interleave: false`): per query head, the trailing `qk_rope_head_dim` rows of `q_b_proj`
  (`q_proj` without `q_lora_rank`) and the trailing `qk_rope_head_dim` rows of `kv_a_proj_with_mqa` (the single
  shared rope key after the `kv_lora_rank` latent rows) are permuted evens-then-odds
  (`posenc_np.mla_rope_permutation`, Megatron's `t[0::2], t[1::2]`). Reads `config.json` beside SOURCE.
  Verified by `mla_logits_check`: per layer, `mla_softmax_scale * [q_nope | R q_rope] . [k_nope_h | R k_pe]`
  on the source (interleaved rotation) and on the target (half rotation), float64, at the probe positions of the layer's rope frequencies up to 8191
  (`posenc.port.checks.rope_probe_positions`).
"""

from __future__ import annotations

import os
import re

import numpy as np

from posenc_np.mla import apply_mla_rope, mla_softmax_scale
from posenc_np.schedule import rope_schedule_from_hf_config
from posenc_np.testing import compare, tolerance

from ...errors import UsageError
from ..checks import Check, rope_probe_positions
from ..hf_config import config_dict, layer_types, sidecar_layers
from ..mapping import Op, Rules
from ..preset import Preset, rope_sidecar

__all__ = ["deepseek_mla_to_half", "mla_logits_check", "PRESETS"]


_LAYER = re.compile(r"model\.layers\.(\d+)\.self_attn\.")


def _mla_config(reader):
    path = os.path.join(os.path.dirname(os.path.abspath(reader.path)), "config.json")
    if not os.path.exists(path):
        raise UsageError(f"hf-deepseek-mla-to-half reads config.json beside SOURCE; {path!r} does not exist")
    cfg = config_dict(path)
    missing = [k for k in ("num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim", "kv_lora_rank",
                           "num_hidden_layers") if not cfg.get(k)]
    if missing:
        raise UsageError(f"{path!r} is not a DeepSeek MLA config: no {', '.join(missing)}")
    if not cfg.get("rope_interleave"):
        raise UsageError(f"{path!r} has rope_interleave={cfg.get('rope_interleave')!r}: the rope slice is already "
                         "in half (rotate_half) order; nothing to convert")
    return path, cfg


def deepseek_mla_to_half(reader, options):
    """The `hf-deepseek-mla-to-half` preset (see the module docstring)."""
    path, cfg = _mla_config(reader)
    heads, nope, rope = (int(cfg[k]) for k in ("num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim"))
    latent = int(cfg["kv_lora_rank"])
    q_name = "q_b_proj" if cfg.get("q_lora_rank") else "q_proj"
    layers = sorted({int(m.group(1)) for n in reader.names() if (m := _LAYER.match(n))})
    if not layers:
        raise UsageError(f"SOURCE {reader.path!r} has no model.layers.N.self_attn.* tensors")
    for i in layers:
        for name, rows in ((q_name, heads * (nope + rope)), ("kv_a_proj_with_mqa", latent + rope)):
            tensor = f"model.layers.{i}.self_attn.{name}.weight"
            if tensor not in reader:
                raise UsageError(f"SOURCE lacks {tensor} (config {path!r}: q_lora_rank={cfg.get('q_lora_rank')})")
            if reader.shape(tensor)[0] != rows:
                raise UsageError(f"{tensor} has shape {reader.shape(tensor)}; the config implies {rows} rows")
    try:
        schedule = rope_schedule_from_hf_config(cfg)
    except (TypeError, ValueError) as error:
        raise UsageError(f"{path}: {error}") from None
    rules = Rules(rename=[("*", "*")], ops=[
        (f"model.layers.*.self_attn.{q_name}.*", Op("mla-rope", (heads, nope + rope, rope, "interleaved", "half"))),
        ("model.layers.*.self_attn.kv_a_proj_with_mqa.*", Op("mla-rope", (1, latent + rope, rope, "interleaved",
                                                                          "half")))])
    first = next(e for e in schedule if e is not None)
    hf_config = {**cfg, "rope_interleave": False}
    sidecar = rope_sidecar(layout="half", base=first["base"], rotary_dim=rope, scaling=first["scaling"],
                           num_heads=heads, num_kv_heads=1, source_layout="interleaved")
    sidecar["rope"]["layers"] = sidecar_layers(schedule, layer_types(cfg, schedule), "half")
    sidecar["rope"]["mla"] = {"qk_nope_head_dim": nope, "qk_rope_head_dim": rope, "kv_lora_rank": latent,
                              "softmax_scale": mla_softmax_scale(nope + rope, first["scaling"])}
    sidecar["hf_config"] = hf_config
    check = mla_logits_check(layers, schedule, heads=heads, nope=nope, rope=rope, latent=latent, q_name=q_name)
    return Preset(rules, sidecar=sidecar, extra=[check])


def _mla_logits(q, c_kv, w_kv_b, heads, nope, rope, latent, entry, layout, positions):
    seq = len(positions)
    q = q.reshape(seq, heads, nope + rope).transpose(1, 0, 2)
    k_pe = c_kv[:, latent:][None]
    k_nope = (c_kv[:, :latent] @ w_kv_b.T).reshape(seq, heads, -1).transpose(1, 0, 2)[..., :nope]
    kwargs = dict(base=entry["base"], scaling=entry["scaling"], rotary_dim=rope, layout=layout)
    q_rot, k_rot = apply_mla_rope(q, k_pe, positions, qk_nope_head_dim=nope, **kwargs)
    keys = np.concatenate([k_nope, np.broadcast_to(k_rot, (heads, seq, rope))], axis=-1)
    return q_rot @ keys.transpose(0, 2, 1) * mla_softmax_scale(nope + rope, entry["scaling"])


def mla_logits_check(layers, schedule, *, heads, nope, rope, latent, q_name, seed=0):
    """Extra verification of `hf-deepseek-mla-to-half`: per layer, the MLA attention logits of the source weights
    rotated as interleaved pairs vs the target weights rotated by halves (float64 spec, `rope_probe_positions`)."""

    def run(source, target):
        rng = np.random.default_rng(seed)
        out = []
        for i in layers:
            entry = schedule[i]
            names = [f"model.layers.{i}.self_attn.{n}.weight" for n in (q_name, "kv_a_proj_with_mqa", "kv_b_proj")]
            (wq_s, wkv_s, wb_s), (wq_t, wkv_t, wb_t) = (
                [np.asarray(reader.get(n), np.float64) for n in names] for reader in (source, target))
            positions = rope_probe_positions({**entry, "rotary_dim": rope}, rope)
            x_q = rng.standard_normal((len(positions), wq_s.shape[1]))
            x_kv = rng.standard_normal((len(positions), wkv_s.shape[1]))
            desired = _mla_logits(x_q @ wq_s.T, x_kv @ wkv_s.T, wb_s, heads, nope, rope, latent, entry,
                                  "interleaved", positions)
            actual = _mla_logits(x_q @ wq_t.T, x_kv @ wkv_t.T, wb_t, heads, nope, rope, latent, entry, "half",
                                 positions)
            r = compare(actual, desired, tolerance("float64", scale=float(np.abs(desired).max())))
            out.append(Check("mla-logits", f"layer {i}: {q_name} . [kv_b_proj | kv_a_proj_with_mqa rope rows]",
                             r.max_abs_err, r.atol, r.tol_why, r.passed,
                             f"interleaved rope slice on SOURCE vs half on TARGET, positions up to "
                             f"{positions.max()}, base {entry['base']:g}, "
                             f"{(entry['scaling'] or {}).get('rope_type', 'default')} scaling"))
        return out

    run.__name__ = "mla_logits_check"
    return run


PRESETS = {"hf-deepseek-mla-to-half": deepseek_mla_to_half}
