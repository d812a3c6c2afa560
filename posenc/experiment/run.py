"""`run_experiment`: train the models the requested variants need (once per seed), evaluate every variant."""

from __future__ import annotations

import os
from dataclasses import asdict, replace

import numpy as np
import torch

import posenc_torch as pt

from ..errors import UsageError
from .config import (
    BASELINE,
    COPE_MAX_POS,
    ROPE_SCALING,
    SHAW_MAX_DISTANCE,
    TRICKS,
    VARIANTS,
    XPOS_SCALE_BASE,
    Config,
    parse_stack,
    split_variant,
)
from .memory import PeakMemory
from .models import TinyLM, learned_module
from .train import evaluate, train

__all__ = ["run_experiment", "use_device", "NOTES", "TRICK_NOTES"]


def _rope_scaling(variant: str, factor: int, train_len: int):
    if factor == 1:
        return None  # every scaling type reduces to plain RoPE at factor 1
    scaling = {"rope_type": ROPE_SCALING[variant], "factor": float(factor)}
    if variant == "rope-yarn":
        scaling["original_max_position_embeddings"] = train_len
    return scaling


def _evaluate_variants(model, encoding, variants, corpus, cfg, device):
    """{variant: (ppl by length, note)} for the variants evaluated on this trained model."""
    head_dim = cfg.d_model // cfg.heads
    learned = learned_module(model)
    out = {}
    for variant in variants:
        ppl, note = {}, NOTES.get(split_variant(variant)[0], "")
        for factor, length in zip(cfg.eval_factors, cfg.eval_lengths, strict=True):
            rope = table = None
            if variant in ROPE_SCALING:
                scaling = _rope_scaling(variant, factor, cfg.train_len)
                rope = pt.RotaryEmbedding(head_dim, scaling=scaling).to(device)
                note = f"rope model, scaling {{'rope_type': {ROPE_SCALING[variant]!r}, factor: eval/train}} at eval"
            elif learned is not None and length > learned.table.shape[0]:
                table = pt.resize_table(learned.table.detach(), length, method="linear")
            ppl[length] = evaluate(model, corpus.valid, length, cfg, device=device, rope=rope, table=table)
        if learned is not None and max(cfg.eval_lengths) > learned.table.shape[0]:
            rows = learned.table.shape[0]
            note = (f"{note}; " if note else "") + \
                f"table [{rows}] stretched by posenc_torch.resize_table (linear) beyond {rows}"
        out[variant] = (ppl, note)
    return out


def _notes_by_encoding():
    return {
        "none": "NoPE (posenc_torch.nope): the causal mask is the only position signal",
        "dynamic": "posenc_torch.DynamicPositionEncoding: x + Linear(sinusoidal(arange(seq)))",
        "xpos": f"posenc_torch.apply_xpos on q (kind query) and k (kind key), half layout, scale_base "
                f"{XPOS_SCALE_BASE:g}, gamma 0.4, center 0",
        "kerple-log": "posenc_torch.KERPLEBias(kernel='log'), one per model, shared by the layers",
        "kerple-power": "posenc_torch.KERPLEBias(kernel='power'), one per model, shared by the layers",
        "sandwich": "posenc_torch.sandwich_bias(dim=head_dim), fixed",
        "fire": "posenc_torch.FIREBias (width 32, init_L 512), one per model, shared by the layers",
        "randomized": "RoPE at training positions posenc_torch.sample_randomized_positions(train_len, "
                      "train_len x max eval factor) (sorted, per sequence); arange at evaluation",
        "cope": f"posenc_torch.CoPE(head_dim, max_pos={COPE_MAX_POS}) per layer, no other encoding",
    }


NOTES = _notes_by_encoding()


def _hybrid_note(cfg: Config) -> str:
    stack = " | ".join(f"{name} x{count}" for name, count in parse_stack(cfg.stack, cfg.layers))
    bias = {"t5": "T5RelativeBias (32 buckets, max_distance 128)", "none": "no relative bias",
            "shaw": f"Shaw RelativePositionEmbedding (max_distance {SHAW_MAX_DISTANCE}), q . a_ij^K"}[cfg.stack_bias]
    return (f"stack (bottom first) {stack}, each absolute encoding added to the residual stream at its group's "
            f"first layer; {bias} in every layer")


def use_device(device: str, threads: int) -> int:
    """Check that `device` ("cpu", "cuda", "cuda:N") is there and give torch `threads` CPU threads; returns
    the thread count torch then reports."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device={device!r}: CUDA is not available")
    torch.set_num_threads(threads)
    return torch.get_num_threads()


def _model_groups(encodings) -> dict:
    """{model key: the variants evaluated on that model}: rope-pi/ntk/yarn share the rope model, and a
    variant with tricks ("learned+crop") is its own model."""
    groups = {}
    for name in encodings:
        base, tricks = split_variant(name)
        model_name = "rope" if base in ROPE_SCALING else base
        suffix = "".join(s for s, key in TRICKS.items() if tricks[key])
        groups.setdefault(model_name + suffix, []).append(name)
    return groups


def _train_and_evaluate(key, variants, cfg, corpus, *, seed, label, device, progress, save_weights):
    """One model of `key` trained with `seed`: its size, time, memory, losses and evaluated variants."""
    encoding, tricks = split_variant(key)
    run_cfg = replace(cfg, seed=seed)
    torch.manual_seed(seed)
    model = TinyLM(encoding, run_cfg, random_crop=tricks["random_crop"])
    params = sum(p.numel() for p in model.parameters())
    with PeakMemory(device) as memory:
        losses, seconds = train(model, corpus.train, run_cfg, device=device, label=label, progress=progress,
                                **tricks)
    if save_weights:
        _save_weights(model, key, save_weights)
    return dict(params=params, seconds=seconds, memory=memory, losses=losses,
                evaluated=_evaluate_variants(model, encoding, variants, corpus, run_cfg, device))


def _row(variant, key, per_seed, cfg: Config, seeds) -> dict:
    """The report row of `variant` (evaluated on the models of `key`, one per seed)."""
    encoding, tricks = split_variant(key)
    head = max(1, min(10, cfg.steps // 10))
    first = per_seed[0]
    values = {n: [s["evaluated"][variant][0][n] for s in per_seed] for n in cfg.eval_lengths}
    note = first["evaluated"][variant][1]
    if encoding == "hybrid":
        note = _hybrid_note(cfg) + (f"; {note}" if note else "")
    tricks_note = [TRICK_NOTES[k] for k in TRICK_NOTES if tricks[k]]
    row = {"encoding": variant, "trained_as": key, "note": "; ".join([note, *tricks_note] if note else tricks_note),
           "ppl": {n: float(np.mean(v)) for n, v in values.items()},
           "seeds": seeds, "params": first["params"],
           "tokens_per_s": float(np.mean([cfg.steps * cfg.batch * cfg.train_len / s["seconds"] for s in per_seed])),
           "peak_mem_mib": first["memory"].mib, "peak_growth_mib": first["memory"].growth_mib,
           "train_seconds": float(np.mean([s["seconds"] for s in per_seed])),
           "loss_first": float(np.mean([np.mean(s["losses"][:head]) for s in per_seed])),
           "loss_last": float(np.mean([np.mean(s["losses"][-head:]) for s in per_seed])),
           "losses": first["losses"]}
    if len(seeds) > 1:
        row["ppl_std"] = {n: float(np.std(v, ddof=1)) for n, v in values.items()}
        row["ppl_seeds"] = {n: [float(x) for x in v] for n, v in values.items()}
    return row


def run_experiment(cfg: Config, corpus, *, encodings=BASELINE, device="cpu", progress=True, save_weights=None,
                   log=print, seeds=None):
    """Train each needed model (once per seed), evaluate every requested variant; returns the JSON-ready report.

    With several `seeds`, a row's `ppl` is the mean over seeds, `ppl_std` the sample standard deviation and
    `ppl_seeds` the values; the training losses are the first seed's, loss_first/last their means.
    """
    _check_lengths(corpus, cfg)
    seeds = list(seeds) if seeds else [cfg.seed]
    rows = []
    memory_method = None
    for key, variants in _model_groups(encodings).items():
        per_seed = [_train_and_evaluate(key, variants, cfg, corpus, seed=seed, device=device, progress=progress,
                                        label=key if len(seeds) == 1 else f"{key} s{seed}",
                                        save_weights=save_weights if seed == seeds[0] else None)
                    for seed in seeds]
        memory_method = per_seed[-1]["memory"].method
        for variant in variants:
            rows.append(_row(variant, key, per_seed, cfg, seeds))
            shown = ", ".join(f"{k}: {v:.3f}" for k, v in rows[-1]["ppl"].items())
            log(f"  {variant:<11} ppl {shown}")
    order = {name: i for i, name in enumerate(VARIANTS)}
    rows.sort(key=lambda r: order[r["encoding"]])
    return {"config": asdict(cfg), "eval_lengths": cfg.eval_lengths, "seeds": seeds, "corpus": corpus.describe(),
            "valid_files": corpus.valid_files, "device": device, "threads": torch.get_num_threads(),
            "torch": torch.__version__, "memory_method": memory_method, "rows": rows}


TRICK_NOTES = {"random_crop": "--random-crop: crops at offsets up to the longest evaluation length keep their "
                              "positions there",
               "progressive": "--progressive: a quarter of the steps at train_len/4 (batch x4), a quarter at "
                              "train_len/2 (x2), the rest at train_len"}


def _check_lengths(corpus, cfg: Config) -> None:
    if corpus.train.size < cfg.train_len + 2:
        raise UsageError(f"--train-len={cfg.train_len} is longer than the training split "
                         f"({corpus.train.size} bytes) of corpus {corpus.name!r}")
    longest = max(cfg.eval_lengths)
    if corpus.valid.size < longest + 1:
        raise UsageError(f"the longest evaluation length {longest} (train length {cfg.train_len} x "
                         f"{max(cfg.eval_factors)}) is longer than the validation split ({corpus.valid.size} bytes)"
                         f" of corpus {corpus.name!r}; use a shorter --train-len or smaller --eval-factors")


def _save_weights(model, key, directory):
    """The trained tables, as .npy: `learned_table`, `t5_table` (the plain rows' names, as before) and, for
    the other models, `{key}_{what}.npy` (KERPLE r1/r2, CoPE pos_emb, the dynamic projection)."""
    def save(name, tensor):
        np.save(os.path.join(directory, name + ".npy"), tensor.detach().cpu().numpy())

    if key == "learned":
        save("learned_table", model.absolute.table)
    elif key == "t5":
        save("t5_table", model.t5.table)
    elif hasattr(model, "kerple"):
        save(f"{key}_r1", model.kerple.r1)
        save(f"{key}_r2", model.kerple.r2)
    elif key == "dynamic":
        save("dynamic_weight", model.absolute.proj.weight)
        save("dynamic_bias", model.absolute.proj.bias)
    elif key == "cope":
        save("cope_pos_emb", model.blocks[0].cope.pos_emb)
