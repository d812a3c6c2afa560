"""transformers' sinusoid table builders, as `--impl transformers` checks them (transformers 5.24.0):

* Whisper `models/whisper/modeling_whisper.py` `sinusoids(length, channels, max_timescale=10000)`:
  `[sin | cos]`, `inv_timescales = exp(-ln(max_timescale) / (channels/2 - 1) * i)` (tensor2tensor's
  denominator), float32 (the encoder's fixed `embed_positions`);
* Marian `models/marian/modeling_marian.py` `MarianSinusoidalPositionalEmbedding.create_weight`:
  `pos / 10000^(2 (j // 2) / dim)` in float64 NumPy, sin of the even columns into the first half and cos of
  the odd ones into the second (`[sin | cos]`, Vaswani's denominator), stored in float32;
* M2M100 `models/m2m_100/modeling_m2m_100.py` and XGLM `models/xglm/modeling_xglm.py`
  `*SinusoidalPositionalEmbedding.get_embedding(num_embeddings, embedding_dim, padding_idx)`: fairseq's
  `[sin | cos]` with the `half - 1` denominator, float32. The models look rows up at `padding_idx + 1 + i`
  (fairseq's offset, the registry's `fairseq` convention) and zero the `padding_idx` row, which only pads
  read; the adapter builds the table with `padding_idx=None`, so every row is a sinusoid.

Each builder makes a table of rows 0 .. N-1, which the adapter builds for `max(positions) + 1` rows and
gathers: integer positions >= 0 only, the builder's own layout, denominator and base (any other is a skip).
"""

from __future__ import annotations

import numpy as np

from ...adapters import NotSupported
from ..implementation import Implementation

__all__ = ["implementations", "NAMES"]

NAMES = ("transformers-whisper", "transformers-marian", "transformers-m2m100", "transformers-xglm")

#: Marian's `create_weight` is a Python loop over rows x channels: tables past this many rows are skips
MARIAN_ROWS = 1 << 14
#: name -> (layout, denominator, which bases the builder takes: "any" or the one it hard-codes)
_FORMS = {
    "transformers-whisper": ("concat", "half-1", "any"),
    "transformers-marian": ("concat", "dim", 10000.0),
    "transformers-m2m100": ("concat", "half-1", 10000.0),
    "transformers-xglm": ("concat", "half-1", 10000.0),
}


def _table(name: str, rows: int, dim: int, base: float):
    if name == "transformers-whisper":
        from transformers.models.whisper.modeling_whisper import sinusoids

        return sinusoids(rows, dim, max_timescale=base)
    if name == "transformers-marian":
        from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

        return MarianSinusoidalPositionalEmbedding(rows, dim).create_weight()
    if name == "transformers-m2m100":
        from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding as cls
    else:
        from transformers.models.xglm.modeling_xglm import XGLMSinusoidalPositionalEmbedding as cls
    return cls.get_embedding(rows, dim, None)


def _builder(name: str):
    bases = _FORMS[name][2]

    # the contract's defaults: a case leaves out a keyword that equals them
    def sinusoidal(positions, dim, *, base=10000.0, layout="interleaved", denominator="dim", dtype=None):
        """The contract's `sinusoidal` as rows of the builder's table (torch in, torch out)."""
        import torch

        wanted = _FORMS[name][:2]
        if (layout, denominator) != wanted:
            raise NotSupported(f"{name} builds layout={wanted[0]!r}, denominator={wanted[1]!r} tables, not "
                               f"layout={layout!r}, denominator={denominator!r}")
        if bases != "any" and float(base) != bases:
            raise NotSupported(f"{name} hard-codes base {bases:g}, not {base!r}")
        if positions.dtype.is_floating_point:
            raise NotSupported(f"{name} is a table of integer positions; these are float")
        pos = positions.numpy()
        if pos.size and pos.min() < 0:
            raise NotSupported(f"{name} is a table of rows from 0; position {int(pos.min())} has none")
        rows = int(pos.max()) + 1 if pos.size else 1
        if name == "transformers-marian" and rows > MARIAN_ROWS:
            raise NotSupported(f"Marian builds its table row by row in Python; {rows} rows are past the "
                               f"{MARIAN_ROWS} checked here")
        table = _table(name, rows, int(dim), float(base))
        out = table[torch.from_numpy(np.ascontiguousarray(pos, np.int64))]
        return out if dtype is None else out.to(getattr(torch, str(dtype)))

    return sinusoidal


def implementations(version: str) -> tuple[Implementation, ...]:
    """One `Implementation` per builder (float32 class: each forms its table in float32 or casts it there)."""
    return tuple(Implementation(name, "torch", {"sinusoidal": _builder(name)}, version=version, angles="float32",
                                differentiable=False, description=_DESCRIPTIONS[name]) for name in NAMES)


_DESCRIPTIONS = {
    "transformers-whisper": "Whisper sinusoids() ([sin | cos], tensor2tensor denominator)",
    "transformers-marian": "MarianSinusoidalPositionalEmbedding.create_weight ([sin | cos], Vaswani denominator)",
    "transformers-m2m100": "M2M100SinusoidalPositionalEmbedding.get_embedding (fairseq)",
    "transformers-xglm": "XGLMSinusoidalPositionalEmbedding.get_embedding (fairseq)",
}
