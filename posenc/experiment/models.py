"""The model of `posenc experiment`: a small pre-LayerNorm causal Transformer LM over bytes (PyTorch).

Every variant is the same `TinyLM` (byte vocabulary, untied head, GELU MLP); only its position modules differ:
absolute ones added to the token embeddings (or, in the hybrid stack, to the residual stream at a group's
first layer), RoPE / xPos on queries and keys in each `Block`, relative biases added to the logits.
Submodules are created in a fixed order, so a seed fixes the initialisation.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

import posenc_torch as pt
from posenc_torch.attention import sdpa_attention

from .config import COPE_MAX_POS, SHAW_MAX_DISTANCE, T5_BUCKETS, T5_MAX_DISTANCE, XPOS_SCALE_BASE, Config, parse_stack

__all__ = ["TinyLM", "Block", "learned_module", "attend", "absolute_module", "add_absolute"]


def attend(q, k, v, *, bias=None, cope=None, shaw=None):
    """Causal softmax attention written out, for the encodings that read the logits (CoPE) or the queries
    (Shaw): logits `q k^T / sqrt(d)` + bias, future keys at -1e9 (CoPE's gates then count nothing),
    `cope(q, logits)` added, softmax."""
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


def absolute_module(name: str, cfg: Config, table_rows: int):
    """The absolute encoding module of `name` ("sinusoidal", "learned", "dynamic"), None for the others."""
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


def add_absolute(module, name: str, x, positions, table, d_model: int):
    """`x` plus the absolute encoding `module` (of kind `name`) at `positions`; `table` replaces a learned
    module's table (a stretched one at evaluation)."""
    if module is None:
        return x
    if name == "dynamic":
        if positions.ndim == 1:  # arange(seq): the module itself
            return module(x)
        # crop offsets / sampled positions: the same formula at those positions (module's weights)
        return x + module.proj(pt.sinusoidal(positions, d_model))
    if name == "learned" and table is not None:
        return x + pt.learned(table, positions)
    return x + module(positions)


class Block(nn.Module):
    """One pre-LayerNorm decoder layer: attention with the rotary / xPos / CoPE / Shaw variants, then a GELU MLP."""

    def __init__(self, encoding: str, cfg: Config):
        super().__init__()
        self.encoding, self.heads, self.head_dim = encoding, cfg.heads, cfg.d_model // cfg.heads
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))
        self.cope = pt.CoPE(self.head_dim, COPE_MAX_POS) if encoding == "cope" else None

    def forward(self, x, positions, rope, bias, shaw):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        rope_positions = positions if positions.ndim == 1 else positions[:, None, :]  # [b, 1, t] per head
        if rope is not None:
            q, k = rope(q, rope_positions), rope(k, rope_positions)
        elif self.encoding == "xpos":
            q = pt.apply_xpos(q, rope_positions, kind="query", layout="half", scale_base=XPOS_SCALE_BASE)
            k = pt.apply_xpos(k, rope_positions, kind="key", layout="half", scale_base=XPOS_SCALE_BASE)
        if self.cope is not None or shaw is not None:
            a = attend(q, k, v, bias=bias, cope=self.cope, shaw=shaw)
        else:
            a = sdpa_attention(q, k, v, bias=bias, causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    """The byte LM of one variant's `encoding` (a `config.VARIANTS` base name, tricks split off).

    `random_crop`: learned tables cover every position training shows, the crop range (`cfg.span` rows).
    """

    def __init__(self, encoding: str, cfg: Config, *, random_crop: bool = False):
        super().__init__()
        head_dim = cfg.d_model // cfg.heads
        table_rows = cfg.span if random_crop else cfg.train_len
        self.cfg, self.head_dim = cfg, head_dim
        if encoding == "hybrid":
            self.stack = parse_stack(cfg.stack, cfg.layers)
            self.layer_encodings = [name for name, count in self.stack for _ in range(count)]
            self.group_starts = np.cumsum([0] + [c for _, c in self.stack])[:-1].tolist()
        else:
            self.stack, self.layer_encodings, self.group_starts = (), [None] * cfg.layers, []
        self.encoding = encoding
        self.embed = nn.Embedding(256, cfg.d_model)
        self.blocks = nn.ModuleList(Block(encoding, cfg) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, 256)
        if encoding in ("sinusoidal", "learned", "dynamic"):
            self.absolute = absolute_module(encoding, cfg, table_rows)
        elif encoding == "hybrid":
            # one absolute encoding per group of layers, added to the residual stream at the group's first
            # layer; per-layer RoPE for "rope" groups; one relative bias shared by all layers
            self.stack_modules = nn.ModuleList(
                absolute_module(name, cfg, table_rows) or nn.Identity() for name, _ in self.stack)
            if "rope" in self.layer_encodings:
                self.rope = pt.RotaryEmbedding(head_dim, max_len=cfg.train_len)
        if encoding in ("rope", "randomized"):  # randomized: RoPE at sampled positions (Ruoss et al.)
            self.rope = pt.RotaryEmbedding(head_dim, max_len=cfg.train_len)
        self._add_bias_module(encoding, cfg)

    def _add_bias_module(self, encoding: str, cfg: Config) -> None:
        bias_kind = cfg.stack_bias if encoding == "hybrid" else encoding
        if bias_kind == "t5":
            self.t5 = pt.T5RelativeBias(cfg.heads, bidirectional=False, num_buckets=T5_BUCKETS,
                                        max_distance=T5_MAX_DISTANCE)
        elif bias_kind == "shaw":
            self.shaw = pt.RelativePositionEmbedding(SHAW_MAX_DISTANCE, self.head_dim)
        elif encoding in ("kerple-log", "kerple-power"):
            self.kerple = pt.KERPLEBias(cfg.heads, kernel=encoding.split("-")[1])
        elif encoding == "fire":
            self.fire = pt.FIREBias(cfg.heads)

    def _biases(self, positions, batch: int):
        """`(bias, shaw)`: the additive logit bias `[.., heads, q, k]` and Shaw's per-pair vectors, or None."""
        pair = (positions, positions)
        bias = shaw = None
        if self.encoding == "alibi":
            bias = pt.alibi_bias(self.cfg.heads, *pair, form="causal")
        elif self.encoding == "sandwich":
            bias = pt.sandwich_bias(self.cfg.heads, *pair, dim=self.head_dim)
        elif hasattr(self, "t5"):
            bias = self.t5(*pair)
        elif hasattr(self, "kerple"):
            bias = self.kerple(*pair)
        elif hasattr(self, "fire"):
            bias = self.fire(*pair)
        elif hasattr(self, "shaw"):
            shaw = self.shaw(*pair)
        if bias is not None and bias.ndim == 4 and bias.shape[0] != batch:
            bias = bias.expand(batch, -1, -1, -1)
        return bias, shaw

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
            x = add_absolute(self.absolute, self.encoding, x, positions, table, self.cfg.d_model)
        bias, shaw = self._biases(positions, x.shape[0])
        rope = rope if rope is not None else getattr(self, "rope", None)
        for i, block in enumerate(self.blocks):
            if self.encoding == "hybrid" and i in self.group_starts:
                g = self.group_starts.index(i)
                x = add_absolute(self.stack_modules[g], self.stack[g][0], x, positions, table, self.cfg.d_model)
            layer_rope = rope if self.encoding != "hybrid" or self.layer_encodings[i] == "rope" else None
            x = block(x, positions, layer_rope, bias, shaw)
        return self.head(self.ln(x))


def learned_module(model):
    """The model's LearnedEncoding (the `learned` row's, or the hybrid stack's learned group), or None."""
    candidates = [getattr(model, "absolute", None), *getattr(model, "stack_modules", ())]
    return next((m for m in candidates if isinstance(m, pt.LearnedEncoding)), None)
