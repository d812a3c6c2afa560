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
ROPE_SCALING = {"rope-pi": "linear", "rope-ntk": "ntk", "rope-yarn": "yarn"}
VARIANTS = ("none", "sinusoidal", "learned", "rope", "rope-pi", "rope-ntk", "rope-yarn", "alibi", "t5")
T5_BUCKETS, T5_MAX_DISTANCE = 32, 128


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

    @property
    def eval_lengths(self):
        return [self.train_len * f for f in self.eval_factors]


DEFAULT = Config()
QUICK = Config(train_len=32, d_model=32, layers=2, heads=2, d_ff=64, batch=16, steps=150, lr=4e-3, warmup=5,
               eval_tokens=2048)


# --- the model ----------------------------------------------------------------------------------------

def _build_model(encoding: str, cfg: Config):
    import torch
    from torch import nn

    import posenc_torch as pt
    from posenc_torch.attention import sdpa_attention

    head_dim = cfg.d_model // cfg.heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
            self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
            self.proj = nn.Linear(cfg.d_model, cfg.d_model)
            self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))

        def forward(self, x, positions, rope, bias):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, cfg.heads, head_dim).permute(2, 0, 3, 1, 4)
            if rope is not None:
                q, k = rope(q, positions), rope(k, positions)
            a = sdpa_attention(q, k, v, bias=bias, causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoding = encoding
            self.embed = nn.Embedding(256, cfg.d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.ln = nn.LayerNorm(cfg.d_model)
            self.head = nn.Linear(cfg.d_model, 256)
            if encoding == "sinusoidal":
                self.absolute = pt.SinusoidalEncoding(cfg.d_model, max_len=cfg.train_len)
            elif encoding == "learned":
                self.absolute = pt.LearnedEncoding(cfg.train_len, cfg.d_model)
                # the token embeddings' scale (nn.Embedding: N(0, 1)), not BERT's N(0, 0.02): against
                # unit-scale tokens a 0.02 table stayed unused in 500 steps (docs/experiment.md)
                nn.init.normal_(self.absolute.table, std=1.0)
            elif encoding == "rope":
                self.rope = pt.RotaryEmbedding(head_dim, max_len=cfg.train_len)
            elif encoding == "t5":
                self.t5 = pt.T5RelativeBias(cfg.heads, bidirectional=False, num_buckets=T5_BUCKETS,
                                            max_distance=T5_MAX_DISTANCE)

        def forward(self, tokens, *, rope=None, table=None):
            """`rope` replaces the rotary module (evaluation-time scaling); `table` the learned table."""
            t = tokens.shape[-1]
            positions = torch.arange(t, device=tokens.device)
            x = self.embed(tokens)
            if self.encoding == "sinusoidal":
                x = x + self.absolute(positions)
            elif self.encoding == "learned":
                x = x + (self.absolute(positions) if table is None else pt.learned(table, positions))
            bias = None
            if self.encoding == "alibi":
                bias = pt.alibi_bias(cfg.heads, positions, positions, form="causal")
            elif self.encoding == "t5":
                bias = self.t5(positions, positions)
            rope = rope if rope is not None else getattr(self, "rope", None)
            for block in self.blocks:
                x = block(x, positions, rope, bias)
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


def train(model, train_tokens: np.ndarray, cfg: Config, *, device: str, label: str, progress: bool):
    """Train `model` in place; returns (losses per step, seconds)."""
    import torch
    import torch.nn.functional as F

    model.to(device).train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "table" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "table" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.95))
    offsets = np.arange(cfg.train_len + 1)
    bar = Progress(cfg.steps, label, enabled=progress)
    losses = []
    started = time.perf_counter()
    for step, starts in enumerate(training_starts(train_tokens.size, cfg)):
        window = torch.from_numpy(train_tokens[starts[:, None] + offsets].astype(np.int64)).to(device)
        logits = model(window[:, :-1])
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


def _evaluate_variants(model, encoding, variants, corpus, cfg, device):
    """Rows for the variants evaluated on this trained model."""
    import posenc_torch as pt

    head_dim = cfg.d_model // cfg.heads
    rows = []
    for variant in variants:
        ppl, note = {}, ""
        for factor, length in zip(cfg.eval_factors, cfg.eval_lengths):
            rope = table = None
            if variant in ROPE_SCALING:
                scaling = _rope_scaling(variant, factor, cfg.train_len)
                rope = pt.RotaryEmbedding(head_dim, scaling=scaling).to(device)
                note = f"rope model, scaling {{'rope_type': {ROPE_SCALING[variant]!r}, factor: eval/train}} at eval"
            elif variant == "learned" and length > cfg.train_len:
                table = pt.resize_table(model.absolute.table.detach(), length, method="linear")
                note = f"table [{cfg.train_len}] stretched by posenc_torch.resize_table (linear) beyond {cfg.train_len}"
            ppl[length] = evaluate(model, corpus.valid, length, cfg, device=device, rope=rope, table=table)
        rows.append({"encoding": variant, "trained_as": encoding, "ppl": ppl, "note": note})
    return rows


def run_experiment(cfg: Config, corpus, *, encodings=VARIANTS, device="cpu", progress=True, save_weights=None,
                   log=print):
    """Train each needed model, evaluate every requested variant; returns the JSON-ready report dict."""
    import torch

    _check_lengths(corpus, cfg)
    groups = {}
    for name in encodings:
        groups.setdefault("rope" if name in ROPE_SCALING else name, []).append(name)
    rows = []
    memory_method = None
    for encoding in TRAINED:
        if encoding not in groups:
            continue
        torch.manual_seed(cfg.seed)
        model = _build_model(encoding, cfg)
        params = sum(p.numel() for p in model.parameters())
        with PeakMemory(device) as memory:
            losses, seconds = train(model, corpus.train, cfg, device=device, label=encoding, progress=progress)
        memory_method = memory.method
        tokens_per_s = cfg.steps * cfg.batch * cfg.train_len / seconds
        if save_weights:
            _save_weights(model, encoding, save_weights)
        head = max(1, min(10, cfg.steps // 10))
        for row in _evaluate_variants(model, encoding, groups[encoding], corpus, cfg, device):
            row.update(params=params, tokens_per_s=tokens_per_s, peak_mem_mib=memory.mib,
                       peak_growth_mib=memory.growth_mib, train_seconds=seconds,
                       loss_first=float(np.mean(losses[:head])), loss_last=float(np.mean(losses[-head:])),
                       losses=losses)
            rows.append(row)
            shown = ", ".join(f"{k}: {v:.3f}" for k, v in row["ppl"].items())
            log(f"  {row['encoding']:<11} ppl {shown}")
    order = {name: i for i, name in enumerate(VARIANTS)}
    rows.sort(key=lambda r: order[r["encoding"]])
    return {"config": asdict(cfg), "eval_lengths": cfg.eval_lengths, "corpus": corpus.describe(),
            "valid_files": corpus.valid_files, "device": device, "threads": torch.get_num_threads(),
            "torch": torch.__version__, "memory_method": memory_method, "rows": rows}


def _check_lengths(corpus, cfg: Config) -> None:
    if corpus.train.size < cfg.train_len + 2:
        raise UsageError(f"--train-len={cfg.train_len} is longer than the training split "
                         f"({corpus.train.size} bytes) of corpus {corpus.name!r}")
    longest = max(cfg.eval_lengths)
    if corpus.valid.size < longest + 1:
        raise UsageError(f"the longest evaluation length {longest} (train length {cfg.train_len} x "
                         f"{max(cfg.eval_factors)}) is longer than the validation split ({corpus.valid.size} bytes)"
                         f" of corpus {corpus.name!r}; use a shorter --train-len or smaller --eval-factors")


def _save_weights(model, encoding, directory):
    if encoding == "learned":
        np.save(os.path.join(directory, "learned_table.npy"), model.absolute.table.detach().cpu().numpy())
    elif encoding == "t5":
        np.save(os.path.join(directory, "t5_table.npy"), model.t5.table.detach().cpu().numpy())


# --- reports --------------------------------------------------------------------------------------------

def _columns(report):
    lengths = report["eval_lengths"]
    head = ["encoding"] + [f"ppl@{n}" for n in lengths] + ["train tok/s", "peak MiB", "+MiB", "params"]
    body = []
    for row in report["rows"]:
        ppl = row["ppl"]
        growth = row["peak_growth_mib"]
        body.append([row["encoding"]] + [f"{ppl[n] if n in ppl else ppl[str(n)]:.3f}" for n in lengths]
                    + [f"{row['tokens_per_s']:,.0f}", f"{row['peak_mem_mib']:,.0f}",
                       "-" if growth is None else f"{growth:,.0f}", f"{row['params']:,}"])
    return head, body


def _notes(report):
    notes = [f"- {r['encoding']}: {r['note']}" for r in report["rows"] if r["note"]]
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


def plot_perplexity(report, figure):
    """Perplexity against evaluation length, one line per encoding, on `figure` (a matplotlib Figure).

    `report` is `run_experiment`'s dict or the `--json` file read back (its length keys are strings).
    """
    ax = figure.add_subplot(1, 1, 1)
    lengths = report["eval_lengths"]
    styles = {"rope-pi": ":", "rope-ntk": "-.", "rope-yarn": (0, (5, 1))}
    for row in report["rows"]:
        ppl = [row["ppl"].get(n, row["ppl"].get(str(n))) for n in lengths]
        ax.plot(lengths, ppl, marker="o", linestyle=styles.get(row["encoding"], "-"), label=row["encoding"])
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
    ax.set_title("Extrapolation: perplexity vs evaluation length")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", ncol=2)
    return figure


def with_overrides(cfg: Config, **overrides) -> Config:
    return replace(cfg, **{k: v for k, v in overrides.items() if v is not None})
