"""`posenc experiment`: train one small causal Transformer LM per positional encoding, then test extrapolation.

Every model is the same pre-LayerNorm decoder (byte vocabulary, untied output head, GELU MLP) trained on
the same batches in the same order (seeded); only the position encoding differs:

    none        no position information (a causal mask still leaks some: Haviv et al. 2022)
    sinusoidal  posenc_torch.SinusoidalEncoding added to the token embeddings (Vaswani)
    learned     posenc_torch.LearnedEncoding [train_len, d_model], initialised N(0, 1) like the token
                embeddings (not BERT's N(0, 0.02), see docs/experiment.md); longer evaluations use
                posenc_torch.resize_table (linear) to stretch it to the evaluation length
    rope        posenc_torch.RotaryEmbedding on queries and keys (half layout, base 10000)
    rope-pi / rope-ntk / rope-yarn
                the rope model evaluated with HF-format scaling dicts, factor = eval_len / train_len:
                {"rope_type": "linear"} (position interpolation), {"rope_type": "ntk"},
                {"rope_type": "yarn", "original_max_position_embeddings": train_len}; no fine-tuning
    alibi       posenc_torch.alibi_bias, form "causal" (Press et al.), added to the logits
    t5          posenc_torch.T5RelativeBias, unidirectional (T5 decoder: 32 buckets, max_distance 128),
                one table shared by all layers as in T5

The documents' schemes and the research encodings (issue 17):

    dynamic     posenc_torch.DynamicPositionEncoding: x + Linear(sinusoidal(arange(seq))), trainable Linear
    hybrid      a per-layer stack (--stack, default "sinusoidal:half,learned:half": sinusoidal in the lower
                half of the layers, learned in the upper half, each added to the residual stream at its
                group's first layer) plus a relative bias in every layer (--stack-bias: t5 (default) or
                shaw, Shaw et al.'s q . a_ij^K with max_distance 16, or none)
    xpos        posenc_torch.apply_xpos on q and k (scale_base 512, gamma 0.4)
    kerple-log / kerple-power
                posenc_torch.KERPLEBias (trainable r1, r2 per head), shared by the layers
    sandwich    posenc_torch.sandwich_bias (dim = head_dim), fixed
    fire        posenc_torch.FIREBias (an MLP of the log-normalised distance), shared by the layers
    randomized  RoPE whose training positions are posenc_torch.sample_randomized_positions(train_len, L),
                L the longest evaluation length (Ruoss et al. 2023); arange at evaluation
    cope        posenc_torch.CoPE(head_dim, 64) in every layer, no other encoding (attention written out)

The none row is NoPE (posenc_torch.nope). Training tricks, for any trained encoding, as row suffixes
("+crop", "+prog", e.g. "learned+crop") or as options applying to every row: --random-crop (each window
is a crop of an L-byte sequence at a uniform offset and keeps its positions there, so absolute encodings
see every position up to L at the cost of train_len; learned tables get L rows) and --progressive (a
quarter of the steps at train_len/4 with 4x the batch, a quarter at train_len/2 with 2x, the rest at
train_len: the same tokens per step). --seeds 0,1,2 trains every model once per seed and reports
mean ± standard deviation.

Attention runs through posenc_torch.sdpa_attention (torch SDPA with the bias as a float mask and the
causal mask folded in). Perplexity is per byte: exp(mean cross-entropy) over non-overlapping windows
of the evaluation length covering the same first `eval_tokens` validation bytes at every length.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from ..errors import UsageError

__all__ = ["Config", "DEFAULT", "QUICK", "TRAINED", "VARIANTS", "ROPE_SCALING", "run_experiment", "markdown_table",
           "terminal_table", "plot_perplexity"]

TRAINED = ("none", "sinusoidal", "learned", "rope", "alibi", "t5")
#: the research encodings and the documents' dynamic and hybrid schemes (issue 17), each a trained model
RESEARCH = ("dynamic", "hybrid", "xpos", "kerple-log", "kerple-power", "sandwich", "fire", "randomized", "cope")
ROPE_SCALING = {"rope-pi": "linear", "rope-ntk": "ntk", "rope-yarn": "yarn"}
BASELINE = ("none", "sinusoidal", "learned", "rope", "rope-pi", "rope-ntk", "rope-yarn", "alibi", "t5")
#: the training tricks, as row-name suffixes ("rope+crop") or as the options --random-crop / --progressive
TRICKS = {"+crop": "random_crop", "+prog": "progressive"}
_TRICK_BASES = ("none", "sinusoidal", "learned", "rope", "alibi", "t5") + RESEARCH
VARIANTS = BASELINE + RESEARCH + tuple(f"{b}{t}" for t in TRICKS for b in _TRICK_BASES)
T5_BUCKETS, T5_MAX_DISTANCE = 32, 128
#: the hybrid scheme's default stack: "sinusoidal in the lower layers, learned in the upper layers, a relative
#: position bias in attention"; `--stack` / `--stack-bias` choose another
HYBRID_STACK, HYBRID_BIAS = "sinusoidal:half,learned:half", "t5"
STACK_ENCODINGS = ("none", "sinusoidal", "learned", "dynamic", "rope")
STACK_BIASES = ("t5", "shaw", "none")
COPE_MAX_POS = 64       # CoPE's npos_max: positions counted by the gates are clipped here (paper: 64 for LM)
SHAW_MAX_DISTANCE = 16  # Shaw et al.'s clipping distance k (they found 16 enough)
XPOS_SCALE_BASE = 512.0


def split_variant(name: str):
    """`"rope+crop+prog"` -> `("rope", {"random_crop": True, "progressive": False})`."""
    tricks = dict.fromkeys(TRICKS.values(), False)
    for suffix, key in TRICKS.items():
        if suffix in name:
            tricks[key], name = True, name.replace(suffix, "")
    return name, tricks


def parse_stack(text: str, layers: int) -> tuple:
    """`"sinusoidal:2,learned:2"` -> `(("sinusoidal", 2), ("learned", 2))`, bottom layer first; counts must sum to
    `layers`. `half` stands for `layers // 2` (the first `half` gets the rest when `layers` is odd)."""
    parts = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        name, _, count = item.partition(":")
        if name not in STACK_ENCODINGS:
            raise UsageError(f"--stack {text!r}: {name!r} is not one of {', '.join(STACK_ENCODINGS)}")
        parts.append([name, count or "half"])
    halves = [p for p in parts if p[1] == "half"]
    for i, p in enumerate(halves):
        p[1] = str(layers - layers // 2 if i == 0 else layers // 2)
    try:
        stack = tuple((name, int(count)) for name, count in parts)
    except ValueError:
        raise UsageError(f"--stack {text!r}: layer counts must be integers or 'half'") from None
    if not stack or min(c for _, c in stack) < 1 or sum(c for _, c in stack) != layers:
        raise UsageError(f"--stack {text!r}: positive layer counts summing to --layers={layers}")
    return stack


@dataclass(frozen=True)
class Config:
    """Model, training and evaluation sizes. `DEFAULT` fits 30 min on a 2-core CPU, `QUICK` 60 s."""

    train_len: int = 128
    eval_factors: tuple = (1, 2, 4, 8)
    d_model: int = 128
    layers: int = 4
    heads: int = 4
    d_ff: int = 512
    batch: int = 16
    steps: int = 500
    lr: float = 2e-3
    warmup: int = 40
    eval_tokens: int = 32768
    seed: int = 0
    stack: str = HYBRID_STACK
    stack_bias: str = HYBRID_BIAS

    @property
    def eval_lengths(self):
        return [self.train_len * f for f in self.eval_factors]

    @property
    def span(self):
        """The longest evaluation length: the range random crops and randomized positions draw from."""
        return self.train_len * max(self.eval_factors)


DEFAULT = Config()
QUICK = Config(train_len=32, d_model=32, layers=2, heads=2, d_ff=64, batch=16, steps=150, lr=4e-3, warmup=5,
               eval_tokens=2048)


def progressive_schedule(cfg: Config):
    """`--progressive`: `[(first_step, length, batch)]`: a quarter of the steps at train_len / 4, a quarter at
    train_len / 2, the second half at train_len, the batch scaled so every step trains on the same number
    of tokens (lengths rounded down, at least 1)."""
    n = cfg.train_len
    stages = [(0, max(1, n // 4)), (cfg.steps // 4, max(1, n // 2)), (cfg.steps // 2, n)]
    return [(first, length, cfg.batch * n // length) for first, length in stages]


# --- the model ----------------------------------------------------------------------------------------

def _attend(q, k, v, *, bias=None, cope=None, shaw=None):
    """Causal softmax attention written out, for the encodings that read the logits (CoPE) or the queries
    (Shaw): logits `q k^T / sqrt(d)` + bias, future keys at -1e9 (CoPE's gates then count nothing),
    `cope(q, logits)` added, softmax."""
    import torch

    t = q.shape[-2]
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if shaw is not None:  # Shaw et al. eq. (5): q_i . a_ij^K, a [.., q, k, head_dim] shared by the heads
        logits = logits + (torch.einsum("bhqd,qkd->bhqk", q, shaw) if shaw.ndim == 3
                           else torch.einsum("bhqd,bqkd->bhqk", q, shaw)) / math.sqrt(q.shape[-1])
    if bias is not None:
        logits = logits + bias
    future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    logits = logits.masked_fill(future, -1e9)
    if cope is not None:
        logits = logits + cope(q, logits)
    return torch.softmax(logits, dim=-1) @ v


def _build_model(encoding: str, cfg: Config, *, random_crop: bool = False):
    import torch
    from torch import nn

    import posenc_torch as pt
    from posenc_torch.attention import sdpa_attention

    head_dim = cfg.d_model // cfg.heads
    # learned tables cover every position training shows: the crop range with --random-crop
    table_rows = cfg.span if random_crop else cfg.train_len
    if encoding == "hybrid":
        stack = parse_stack(cfg.stack, cfg.layers)
        layer_encodings = [name for name, count in stack for _ in range(count)]
        group_starts = np.cumsum([0] + [c for _, c in stack])[:-1].tolist()
    else:
        stack, layer_encodings, group_starts = (), [None] * cfg.layers, []

    def absolute_module(name):
        if name == "sinusoidal":
            return pt.SinusoidalEncoding(cfg.d_model, max_len=cfg.train_len)
        if name == "learned":
            module = pt.LearnedEncoding(table_rows, cfg.d_model)
            # the token embeddings' scale (nn.Embedding: N(0, 1)), not BERT's N(0, 0.02): against
            # unit-scale tokens a 0.02 table stayed unused in 500 steps (docs/experiment.md)
            nn.init.normal_(module.table, std=1.0)
            return module
        if name == "dynamic":
            return pt.DynamicPositionEncoding(cfg.d_model)
        return None

    def add_absolute(module, name, x, positions, table):
        if module is None:
            return x
        if name == "dynamic":
            if positions.ndim == 1:  # arange(seq): the module itself
                return module(x)
            # crop offsets / sampled positions: the same formula at those positions (module's weights)
            return x + module.proj(pt.sinusoidal(positions, cfg.d_model))
        if name == "learned" and table is not None:
            return x + pt.learned(table, positions)
        return x + module(positions)

    class Block(nn.Module):
        def __init__(self, index):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
            self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
            self.proj = nn.Linear(cfg.d_model, cfg.d_model)
            self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))
            self.cope = pt.CoPE(head_dim, COPE_MAX_POS) if encoding == "cope" else None

        def forward(self, x, positions, rope, bias, shaw):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, cfg.heads, head_dim).permute(2, 0, 3, 1, 4)
            rope_positions = positions if positions.ndim == 1 else positions[:, None, :]  # [b, 1, t] per head
            if rope is not None:
                q, k = rope(q, rope_positions), rope(k, rope_positions)
            elif encoding == "xpos":
                q = pt.apply_xpos(q, rope_positions, kind="query", layout="half", scale_base=XPOS_SCALE_BASE)
                k = pt.apply_xpos(k, rope_positions, kind="key", layout="half", scale_base=XPOS_SCALE_BASE)
            if self.cope is not None or shaw is not None:
                a = _attend(q, k, v, bias=bias, cope=self.cope, shaw=shaw)
            else:
                a = sdpa_attention(q, k, v, bias=bias, causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoding = encoding
            self.embed = nn.Embedding(256, cfg.d_model)
            self.blocks = nn.ModuleList(Block(i) for i in range(cfg.layers))
            self.ln = nn.LayerNorm(cfg.d_model)
            self.head = nn.Linear(cfg.d_model, 256)
            if encoding in ("sinusoidal", "learned", "dynamic"):
                self.absolute = absolute_module(encoding)
            elif encoding == "hybrid":
                # one absolute encoding per group of layers, added to the residual stream at the group's first
                # layer; per-layer RoPE for "rope" groups; one relative bias shared by all layers
                self.stack_modules = nn.ModuleList(
                    absolute_module(name) or nn.Identity() for name, _ in stack)
                if "rope" in layer_encodings:
                    self.rope = pt.RotaryEmbedding(head_dim, max_len=cfg.train_len)
            if encoding in ("rope", "randomized"):  # randomized: RoPE at sampled positions (Ruoss et al.)
                self.rope = pt.RotaryEmbedding(head_dim, max_len=cfg.train_len)
            bias_kind = cfg.stack_bias if encoding == "hybrid" else encoding
            if bias_kind == "t5":
                self.t5 = pt.T5RelativeBias(cfg.heads, bidirectional=False, num_buckets=T5_BUCKETS,
                                            max_distance=T5_MAX_DISTANCE)
            elif bias_kind == "shaw":
                self.shaw = pt.RelativePositionEmbedding(SHAW_MAX_DISTANCE, head_dim)
            elif encoding in ("kerple-log", "kerple-power"):
                self.kerple = pt.KERPLEBias(cfg.heads, kernel=encoding.split("-")[1])
            elif encoding == "fire":
                self.fire = pt.FIREBias(cfg.heads)

        def forward(self, tokens, *, positions=None, rope=None, table=None):
            """`positions`: `[seq]` (default arange) or `[batch, seq]` (crops, randomized); `rope` replaces the
            rotary module (evaluation-time scaling); `table` the learned table."""
            t = tokens.shape[-1]
            if positions is None:
                positions = torch.arange(t, device=tokens.device)
            x = self.embed(tokens)
            if self.encoding == "none":
                x = pt.nope(x)
            if hasattr(self, "absolute"):
                x = add_absolute(self.absolute, self.encoding, x, positions, table)
            pair = (positions, positions)
            bias = shaw = None
            if self.encoding == "alibi":
                bias = pt.alibi_bias(cfg.heads, *pair, form="causal")
            elif self.encoding == "sandwich":
                bias = pt.sandwich_bias(cfg.heads, *pair, dim=head_dim)
            elif hasattr(self, "t5"):
                bias = self.t5(*pair)
            elif hasattr(self, "kerple"):
                bias = self.kerple(*pair)
            elif hasattr(self, "fire"):
                bias = self.fire(*pair)
            elif hasattr(self, "shaw"):
                shaw = self.shaw(*pair)
            if bias is not None and bias.ndim == 4 and bias.shape[0] != x.shape[0]:
                bias = bias.expand(x.shape[0], -1, -1, -1)
            rope = rope if rope is not None else getattr(self, "rope", None)
            for i, block in enumerate(self.blocks):
                if self.encoding == "hybrid" and i in group_starts:
                    g = group_starts.index(i)
                    x = add_absolute(self.stack_modules[g], stack[g][0], x, positions, table)
                layer_rope = rope if self.encoding != "hybrid" or layer_encodings[i] == "rope" else None
                x = block(x, positions, layer_rope, bias, shaw)
            return self.head(self.ln(x))

    return TinyLM()


# --- measuring ------------------------------------------------------------------------------------------

class PeakMemory:
    """Peak memory of one training run.

    CUDA: `torch.cuda.max_memory_allocated` after a reset (tensor memory only). CPU on Linux: the
    process's resident-set high-water mark (`VmHWM`), reset by writing 5 to `/proc/self/clear_refs`
    before the run (after returning freed heap pages with glibc's `malloc_trim`), so each encoding gets
    its own peak; `growth_mib` is that peak minus the resident size at the start (the peak itself still
    includes the interpreter, torch and the corpus). Elsewhere `ru_maxrss`, the peak of the whole
    process so far. `method` says which.
    """

    def __init__(self, device: str):
        self.device, self.method, self.start_mib = device, None, None

    def __enter__(self):
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(self.device)
            self.method = "torch.cuda.max_memory_allocated"
            return self
        try:
            _release_freed_memory()
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.start_mib = self._status("VmRSS:") / 1024
            self.method = "peak RSS (VmHWM, reset per run)"
        except OSError:
            self.method = "ru_maxrss (process peak so far)"
        return self

    def __exit__(self, *exc):
        import torch

        if self.method.startswith("torch.cuda"):
            self.mib = torch.cuda.max_memory_allocated(self.device) / 2**20
        elif self.method.startswith("peak RSS"):
            self.mib = self._status("VmHWM:") / 1024
        else:
            scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes, Linux KiB
            self.mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20
        return False

    @staticmethod
    def _status(key) -> int:
        """A `/proc/self/status` field in KiB."""
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
        raise OSError(f"no {key} in /proc/self/status")

    @property
    def growth_mib(self):
        """Peak minus the resident size when training started (None where unknown)."""
        if self.method.startswith("torch.cuda"):
            return self.mib
        return None if self.start_mib is None else self.mib - self.start_mib


def _release_freed_memory() -> None:
    """glibc keeps freed heap pages resident; `malloc_trim(0)` hands them back, so that the resident size
    at the start of a run is not inflated by the previous run and the growth measured is this run's."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the growth is then a lower bound
        pass


class Progress:
    """A one-line progress bar: redrawn with `\\r` on a terminal, a line per 10% otherwise."""

    def __init__(self, total: int, label: str, stream=None, enabled: bool = True):
        self.total, self.label, self.enabled = total, label, enabled
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.started, self.shown = time.perf_counter(), -1

    def update(self, step: int, loss: float) -> None:
        if not self.enabled:
            return
        done = step / self.total
        rate = step / max(time.perf_counter() - self.started, 1e-9)
        eta = (self.total - step) / max(rate, 1e-9)
        text = f"{self.label:<11} {step:>5}/{self.total} loss {loss:6.3f}  eta {eta:5.0f} s"
        if self.tty:
            bar = "#" * int(24 * done)
            self.stream.write(f"\r{text} [{bar:<24}]")
            if step == self.total:
                self.stream.write("\n")
            self.stream.flush()
        elif int(10 * done) > self.shown:
            self.shown = int(10 * done)
            print(text, file=self.stream, flush=True)


# --- training and evaluation ----------------------------------------------------------------------------

def _learning_rate(step: int, cfg: Config) -> float:
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
    import torch

    import posenc_torch as pt

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
    import torch
    import torch.nn.functional as F

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
            group["lr"] = _learning_rate(step, cfg)
        opt.step()
        losses.append(loss.item())
        bar.update(step + 1, losses[-1])
    return losses, time.perf_counter() - started


def evaluate(model, valid_tokens: np.ndarray, length: int, cfg: Config, *, device: str, rope=None, table=None):
    """Per-byte perplexity over non-overlapping `length`-windows of the first `eval_tokens` validation bytes."""
    import torch
    import torch.nn.functional as F

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


def _rope_scaling(variant: str, factor: int, train_len: int):
    if factor == 1:
        return None  # every scaling type reduces to plain RoPE at factor 1
    scaling = {"rope_type": ROPE_SCALING[variant], "factor": float(factor)}
    if variant == "rope-yarn":
        scaling["original_max_position_embeddings"] = train_len
    return scaling


def learned_module(model):
    """The model's LearnedEncoding (the `learned` row's, or the hybrid stack's learned group), or None."""
    import posenc_torch as pt

    candidates = [getattr(model, "absolute", None), *getattr(model, "stack_modules", ())]
    return next((m for m in candidates if isinstance(m, pt.LearnedEncoding)), None)


def _evaluate_variants(model, encoding, variants, corpus, cfg, device):
    """{variant: (ppl by length, note)} for the variants evaluated on this trained model."""
    import posenc_torch as pt

    head_dim = cfg.d_model // cfg.heads
    learned = learned_module(model)
    out = {}
    for variant in variants:
        ppl, note = {}, NOTES.get(split_variant(variant)[0], "")
        for factor, length in zip(cfg.eval_factors, cfg.eval_lengths):
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


def run_experiment(cfg: Config, corpus, *, encodings=BASELINE, device="cpu", progress=True, save_weights=None,
                   log=print, seeds=None):
    """Train each needed model (once per seed), evaluate every requested variant; returns the JSON-ready report.

    With several `seeds`, a row's `ppl` is the mean over seeds, `ppl_std` the sample standard deviation and
    `ppl_seeds` the values; the training losses are the first seed's, loss_first/last their means.
    """
    import torch

    _check_lengths(corpus, cfg)
    seeds = list(seeds) if seeds else [cfg.seed]
    groups = {}
    for name in encodings:
        base, tricks = split_variant(name)
        model_name = "rope" if base in ROPE_SCALING else base
        suffix = "".join(s for s, key in TRICKS.items() if tricks[key])
        groups.setdefault(model_name + suffix, []).append(name)
    rows = []
    memory_method = None
    for key, variants in groups.items():
        encoding, tricks = split_variant(key)
        per_seed = []
        for seed in seeds:
            run_cfg = replace(cfg, seed=seed)
            torch.manual_seed(seed)
            model = _build_model(encoding, run_cfg, random_crop=tricks["random_crop"])
            params = sum(p.numel() for p in model.parameters())
            label = key if len(seeds) == 1 else f"{key} s{seed}"
            with PeakMemory(device) as memory:
                losses, seconds = train(model, corpus.train, run_cfg, device=device, label=label, progress=progress,
                                        **tricks)
            memory_method = memory.method
            if save_weights and seed == seeds[0]:
                _save_weights(model, key, save_weights)
            per_seed.append(dict(params=params, seconds=seconds, memory=memory, losses=losses,
                                 evaluated=_evaluate_variants(model, encoding, variants, corpus, run_cfg, device)))
        head = max(1, min(10, cfg.steps // 10))
        first = per_seed[0]
        for variant in variants:
            values = {n: [s["evaluated"][variant][0][n] for s in per_seed] for n in cfg.eval_lengths}
            note = first["evaluated"][variant][1]
            if encoding == "hybrid":
                note = _hybrid_note(cfg) + (f"; {note}" if note else "")
            tricks_note = [TRICK_NOTES[k] for k in TRICK_NOTES if tricks[k]]
            row = {"encoding": variant, "trained_as": key, "note": "; ".join([note, *tricks_note] if note
                                                                            else tricks_note),
                   "ppl": {n: float(np.mean(v)) for n, v in values.items()},
                   "seeds": seeds, "params": first["params"],
                   "tokens_per_s": float(np.mean([cfg.steps * cfg.batch * cfg.train_len / s["seconds"]
                                                  for s in per_seed])),
                   "peak_mem_mib": first["memory"].mib, "peak_growth_mib": first["memory"].growth_mib,
                   "train_seconds": float(np.mean([s["seconds"] for s in per_seed])),
                   "loss_first": float(np.mean([np.mean(s["losses"][:head]) for s in per_seed])),
                   "loss_last": float(np.mean([np.mean(s["losses"][-head:]) for s in per_seed])),
                   "losses": first["losses"]}
            if len(seeds) > 1:
                row["ppl_std"] = {n: float(np.std(v, ddof=1)) for n, v in values.items()}
                row["ppl_seeds"] = {n: [float(x) for x in v] for n, v in values.items()}
            rows.append(row)
            shown = ", ".join(f"{k}: {v:.3f}" for k, v in row["ppl"].items())
            log(f"  {row['encoding']:<11} ppl {shown}")
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


# --- reports --------------------------------------------------------------------------------------------

def _cell(ppl, std, n):
    """`mean` or, over several seeds, `mean ± sample std` (JSON round trips make the keys strings)."""
    value = ppl[n] if n in ppl else ppl[str(n)]
    if std is None:
        return f"{value:.3f}"
    return f"{value:.3f} ± {std[n] if n in std else std[str(n)]:.3f}"


def _columns(report):
    lengths = report["eval_lengths"]
    head = ["encoding"] + [f"ppl@{n}" for n in lengths] + ["train tok/s", "peak MiB", "+MiB", "params"]
    body = []
    for row in report["rows"]:
        ppl = row["ppl"]
        growth = row["peak_growth_mib"]
        std = row.get("ppl_std")
        body.append([row["encoding"]] + [_cell(ppl, std, n) for n in lengths]
                    + [f"{row['tokens_per_s']:,.0f}", f"{row['peak_mem_mib']:,.0f}",
                       "-" if growth is None else f"{growth:,.0f}", f"{row['params']:,}"])
    return head, body


def _notes(report):
    notes = [f"- {r['encoding']}: {r['note']}" for r in report["rows"] if r["note"]]
    seeds = report.get("seeds", [report["config"]["seed"]])
    if len(seeds) > 1:
        notes.append(f"- ppl: mean ± sample standard deviation over seeds {seeds} (initialisation and data "
                     f"order)")
    return notes + [f"- peak memory: {report['memory_method']}; +MiB: the peak minus the resident size when "
                    f"training started; rope-pi/ntk/yarn share the rope model's training "
                    f"(same speed, memory, parameters)"]


def terminal_table(report) -> str:
    head, body = _columns(report)
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    out = [line(head), "  ".join("-" * w for w in widths)] + [line(r) for r in body]
    return "\n".join(out + [""] + [n[2:] for n in _notes(report)])


def markdown_table(report) -> str:
    head, body = _columns(report)
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(out + [""] + _notes(report)) + "\n"


def json_text(report, argv) -> str:
    return json.dumps({"argv": list(argv), **report}, indent=1, default=float) + "\n"


_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354",
            "#756bb1", "#636363")


def plot_perplexity(report, figure):
    """Perplexity against evaluation length, one line per encoding, on `figure` (a matplotlib Figure).

    `report` is `run_experiment`'s dict or the `--json` file read back (its length keys are strings).
    """
    ax = figure.add_subplot(1, 1, 1)
    lengths = report["eval_lengths"]
    styles = {"rope-pi": ":", "rope-ntk": "-.", "rope-yarn": (0, (5, 1))}
    research = set(RESEARCH)
    for i, row in enumerate(report["rows"]):
        name = row["encoding"]
        ppl = [row["ppl"].get(n, row["ppl"].get(str(n))) for n in lengths]
        # baseline rows solid, research rows dashed, training tricks dotted; 20 colours so rows stay apart
        style = styles.get(name, ":" if "+" in name else "--" if name in research else "-")
        colour = _COLOURS[i % len(_COLOURS)]
        ax.plot(lengths, ppl, marker="o", markersize=3, linestyle=style, label=name, color=colour)
        std = row.get("ppl_std")
        if std is not None:  # the spread over seeds: +- one sample standard deviation
            err = [std.get(n, std.get(str(n))) for n in lengths]
            ax.errorbar(lengths, ppl, yerr=err, fmt="none", capsize=2, color=colour, linewidth=0.8)
    train_len = report["config"]["train_len"]
    ax.axvline(train_len, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    from matplotlib.ticker import ScalarFormatter

    for axis in (ax.yaxis,):
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_formatter(ScalarFormatter())
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.set_xlabel(f"evaluation length (bytes); trained at {train_len}")
    ax.set_ylabel("validation perplexity per byte (log)")
    seeds = report.get("seeds", [])
    spread = f"; mean ± std over seeds {seeds}" if len(seeds) > 1 else ""
    ax.set_title(f"Extrapolation: perplexity vs evaluation length{spread}", fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    if len(report["rows"]) > 10:  # the research run's 20 rows: the legend beside the axes
        ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    else:
        ax.legend(fontsize="small", ncol=2)
    return figure


def with_overrides(cfg: Config, **overrides) -> Config:
    return replace(cfg, **{k: v for k, v in overrides.items() if v is not None})
