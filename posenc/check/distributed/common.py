"""What the sharded-runtime checks share: their sizes and strategies, the Qwen-VL position ids, the record
format and the HLO collective count. NumPy only: the frameworks are imported by the runtime modules."""

from __future__ import annotations

import re

import numpy as np

import posenc_np
from posenc_np.conventions import conventions

__all__ = ["JAX_DEVICES", "RUNTIMES", "TORCH_WORLD", "STRATEGIES", "MROPE_CONVENTIONS", "DATA_COLLECTIVES",
           "mrope_ids", "mrope_params", "record", "collectives"]

JAX_DEVICES = 8
#: the runtimes `run_distributed` knows, named as `posenc check --backend` names them
RUNTIMES = ("jax", "torch")
TORCH_WORLD = 4
STRATEGIES = ("contiguous", "striped", "zigzag")
#: multi-axis RoPE conventions run sharded: contiguous (Qwen2-VL) and interleaved (Qwen3-VL) sections
MROPE_CONVENTIONS = ("qwen2-vl", "qwen3-vl")
#: collectives that would move sequence data between devices
DATA_COLLECTIVES = ("all-gather", "all-to-all", "collective-permute", "reduce-scatter", "all-reduce")


def mrope_ids(seq: int) -> np.ndarray:
    """int32 `[3, seq]` Qwen-VL position ids (temporal, height, width) of one row: 8 text tokens, a 1x8x8
    image (16 tokens after the 2x2 merge), text to the end; `posenc_np.mrope_position_ids` (HF get_rope_index)."""
    types = [0] * 8 + [1] * 16 + [0] * (seq - 24)
    ids, _ = posenc_np.mrope_position_ids([types], image_grid_thw=[[1, 8, 8]])
    return ids[:, 0].astype(np.int32)


def mrope_params(convention):
    """`(apply_rope keywords, head_dim)` of a registered multi-axis convention (qwen2-vl, qwen3-vl)."""
    c = conventions[convention]
    return dict(c.params), c.extra["head_dim"]


def record(name, runtime, passed, **fields):
    """One check's JSON record: `{"check", "runtime", "status": "pass" | "fail", **fields}`."""
    return {"check": name, "runtime": runtime, "status": "pass" if passed else "fail", **fields}


def collectives(hlo: str) -> dict:
    """Count the collectives of compiled HLO text; all-reduces are listed with their result shapes."""
    counts = {op: len(re.findall(rf"= [^=]*\b{op}(?:-start)?\(", hlo)) for op in DATA_COLLECTIVES}
    reduce_shapes = re.findall(r"= (\S+) all-reduce(?:-start)?\(", hlo)
    return {"counts": counts, "all_reduce_shapes": reduce_shapes}
