"""Training and evaluation of `posenc experiment`'s models: the batches every encoding sees, AdamW with warm-up
and cosine decay, per-byte perplexity."""

from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.nn.functional as F

import posenc_torch as pt

from .config import Config, progressive_schedule
from .progress import Progress

__all__ = ["learning_rate", "training_starts", "training_batches", "train", "evaluate"]


def learning_rate(step: int, cfg: Config) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(cfg.steps - cfg.warmup, 1)
    return cfg.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def training_starts(n_tokens: int, cfg: Config) -> np.ndarray:
    """`[steps, batch]` window starts: the same for every encoding, fixed by the seed."""
    rng = np.random.default_rng(cfg.seed)
    return rng.integers(0, n_tokens - cfg.train_len - 1, size=(cfg.steps, cfg.batch))


def training_batches(n_tokens: int, cfg: Config, *, progressive=False, random_crop=False, randomized=False):
    """Per step `(starts [batch], positions)`: window starts in the training bytes and the positions the model
    is given (None: `arange(length)`).

    Plain: `training_starts`, the windows every encoding trains on. `progressive`: the lengths and batches
    of `progressive_schedule` (starts from a second stream of the seed). `random_crop`: each window is a
    crop of a longer sequence of `cfg.span` bytes (the longest evaluation length) at a uniform offset o,
    and keeps its positions in that sequence, `o .. o + length - 1`: absolute encodings then see every
    position up to the evaluation length while a step costs what a `train_len` step costs (relative
    encodings are unchanged by the shift). `randomized`: positions are
    `posenc_torch.sample_randomized_positions(length, cfg.span)`, a sorted uniform subset (Ruoss et al.).
    """
    plain = None if progressive else training_starts(n_tokens, cfg)
    rng = np.random.default_rng([cfg.seed, 1])
    crop_rng = np.random.default_rng([cfg.seed, 2])
    stages = progressive_schedule(cfg) if progressive else [(0, cfg.train_len, cfg.batch)]
    for step in range(cfg.steps):
        _, length, batch = [s for s in stages if s[0] <= step][-1]
        starts = plain[step] if plain is not None else rng.integers(0, n_tokens - length - 1, size=batch)
        positions = None
        if randomized:
            positions = pt.sample_randomized_positions(length, cfg.span, seed=cfg.seed * 1_000_003 + step,
                                                       batch_shape=(batch,)).long()
        elif random_crop:
            offsets = crop_rng.integers(0, cfg.span - length + 1, size=batch)
            positions = torch.from_numpy(offsets[:, None] + np.arange(length))
        yield starts, length, positions


def train(model, train_tokens: np.ndarray, cfg: Config, *, device: str, label: str, progress: bool,
          progressive=False, random_crop=False):
    """Train `model` in place; returns (losses per step, seconds)."""
    model.to(device).train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "table" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "table" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.95))
    bar = Progress(cfg.steps, label, enabled=progress)
    losses = []
    started = time.perf_counter()
    batches = training_batches(train_tokens.size, cfg, progressive=progressive, random_crop=random_crop,
                               randomized=getattr(model, "encoding", None) == "randomized")
    for step, (starts, length, positions) in enumerate(batches):
        offsets = np.arange(length + 1)
        window = torch.from_numpy(train_tokens[starts[:, None] + offsets].astype(np.int64)).to(device)
        if positions is not None:
            positions = positions.to(device)
        logits = model(window[:, :-1], positions=positions)
        loss = F.cross_entropy(logits.reshape(-1, 256), window[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, cfg)
        opt.step()
        losses.append(loss.item())
        bar.update(step + 1, losses[-1])
    return losses, time.perf_counter() - started


def evaluate(model, valid_tokens: np.ndarray, length: int, cfg: Config, *, device: str, rope=None, table=None):
    """Per-byte perplexity over non-overlapping `length`-windows of the first `eval_tokens` validation bytes."""
    windows = min(max(cfg.eval_tokens // length, 1), (valid_tokens.size - 1) // length)
    batch = max(1, 8192 // length)
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for first in range(0, windows, batch):
            starts = np.arange(first, min(first + batch, windows)) * length
            window = torch.from_numpy(valid_tokens[starts[:, None] + np.arange(length + 1)].astype(np.int64))
            window = window.to(device)
            logits = model(window[:, :-1], rope=rope, table=table)
            loss = F.cross_entropy(logits.reshape(-1, 256).float(), window[:, 1:].reshape(-1), reduction="sum")
            total, count = total + float(loss), count + window[:, 1:].numel()
    return math.exp(total / count)
