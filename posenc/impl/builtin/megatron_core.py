"""Megatron-core's unfused rotary path: `megatron/core/models/common/embeddings/rope_utils.py`
`_apply_rotary_pos_emb_bshd(t, freqs, rotary_interleaved=False, multi_latent_attention=False, mscale=1.0)` and
`_apply_rotary_pos_emb_thd(t, cu_seqlens, freqs, ..., cp_group)` (checked on megatron-core 0.16.1, the newest
release for Python 3.11; `pip install --no-deps megatron-core==0.16.1`).

`apply_rotary_pos_emb` picks these when `apply_rope_fusion` is off; the fused paths are Transformer Engine's
CUDA kernels. Importing megatron.core with the Python-only Transformer Engine wheel present fails inside TE
(a RuntimeError), so the import runs with `transformer_engine` hidden (megatron then takes its non-TE
branches) and `sys.modules` is put back afterwards. Mapping of the contract:

* "megatron-core": `t` is x with its sequence axis first (`[s, b, h, d]`, the "sbhd" order Megatron calls
  bshd), `freqs` one angle per token and channel (`[s, b, h, r]`, broadcast as Megatron's `[s, 1, 1, r]` is),
  so any positions work; `mscale` carries the scaling's attention factor (as YaRN / MLA pass it).
* "megatron-core-thd": the packed `t [tokens, 1, d]` of rows that each start at 0 with `cu_seqlens`, or the
  zigzag context-parallel shard of rank `cp_rank` of `cp_size` (`cu_seqlens` then count the whole sequences,
  and `cp_group` is an object with `size()` and `rank()`, all `_apply_rotary_pos_emb_thd` reads of it);
  `freqs [TABLE_ROWS, 1, 1, r]`. Rows at other offsets are skips: this path restarts every sequence at 0
  unless the table has exactly `cu_seqlens[-1]` rows (its "exact mapping" mode, a finding below).
* `freqs` are the float64 spec's angles in the layout's channel order (`cat(f, f)`, or each repeated for
  `rotary_interleaved`), as `RotaryEmbedding.forward` lays them out (it allocates on a CUDA device, so it does
  not run here); Megatron takes `cos` / `sin` of them in their dtype and casts to `t.dtype`: class "table".
"""

from __future__ import annotations

import functools
import sys

import numpy as np

from ..implementation import TABLE_ROWS, Implementation, ImplementationUnavailable
from ._kernel_inputs import rotary_width, sequence_rows, spec_table, token_angles, token_positions, zigzag_shard

DISTRIBUTION = "megatron-core"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ("megatron-core", "megatron-core-thd")


@functools.cache
def rope_utils():
    """megatron-core's rope_utils module, imported once with Transformer Engine hidden."""
    hidden = "transformer_engine" not in sys.modules
    if hidden:
        sys.modules["transformer_engine"] = None  # import fails fast: megatron takes its non-TE branches
    try:
        import megatron.core.models.common.embeddings.rope_utils as module
    except ImportError as error:
        raise ImplementationUnavailable(f"--impl megatron-core: megatron.core does not import ({error}); "
                                        "pip install --no-deps megatron-core==0.16.1") from error
    finally:
        if hidden:
            del sys.modules["transformer_engine"]
    return module


def _channels(half: np.ndarray, layout: str) -> np.ndarray:
    """`[..., r/2]` angles in Megatron's channel order: `cat(f, f)`, or each repeated (`rotary_interleaved`)."""
    return np.concatenate([half, half], -1) if layout == "half" else np.repeat(half, 2, axis=-1)


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None):
    """The contract's `apply_rope` through `_apply_rotary_pos_emb_bshd` (torch in, torch out)."""
    import torch

    r = rotary_width(x.shape[-1], rotary_dim, rotary_pct)
    angles, attention_scale = token_angles(r, token_positions(tuple(x.shape), positions.numpy()), base=base,
                                           scaling=scaling)
    freqs = torch.from_numpy(_channels(angles, layout))
    out = rope_utils()._apply_rotary_pos_emb_bshd(x.movedim(-2, 0), freqs.movedim(-2, 0),
                                                  rotary_interleaved=layout == "interleaved",
                                                  mscale=attention_scale)
    return out.movedim(0, -2)


class _ContextParallelGroup:
    """What `_apply_rotary_pos_emb_thd` reads of a process group: its size and this rank."""

    def __init__(self, size: int, rank: int):
        self._size, self._rank = size, rank

    def size(self):
        return self._size

    def rank(self):
        return self._rank


def apply_rope_thd(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None):
    """The contract's `apply_rope` through `_apply_rotary_pos_emb_thd` (see the module docstring)."""
    import torch

    what = "megatron-core's _apply_rotary_pos_emb_thd"
    r = rotary_width(x.shape[-1], rotary_dim, rotary_pct)
    seq_axis, row_positions = sequence_rows(tuple(x.shape), positions.numpy(), what=what)
    cp_size, cp_rank = zigzag_shard(row_positions, what=what)
    moved = x.movedim(seq_axis, -2)
    count, (seq, dim) = row_positions.shape[0], moved.shape[-2:]
    table, attention_scale = spec_table(r, TABLE_ROWS, base=base, scaling=scaling, positions=row_positions)
    freqs = torch.from_numpy(_channels(table, layout)).reshape(TABLE_ROWS, 1, 1, r)
    cu_seqlens = torch.arange(count + 1, dtype=torch.int32) * seq * cp_size  # whole sequences, all ranks
    out = rope_utils()._apply_rotary_pos_emb_thd(moved.reshape(count * seq, 1, dim), cu_seqlens, freqs,
                                                 rotary_interleaved=layout == "interleaved", mscale=attention_scale,
                                                 cp_group=_ContextParallelGroup(cp_size, cp_rank))
    return out.reshape(moved.shape).movedim(-2, seq_axis)


def angle_kernel(t, freqs):
    """`_apply_rotary_pos_emb_bshd(t [s, b, h, r], freqs [s, 1, 1, r])`: the angle table's gradient."""
    return rope_utils()._apply_rotary_pos_emb_bshd(t, freqs)


def load() -> tuple[Implementation, ...]:
    import importlib.metadata

    rope_utils()
    version = importlib.metadata.version(DISTRIBUTION)
    bshd = Implementation("megatron-core", "torch", {"apply_rope": apply_rope}, version=version, angles="table",
                          description="_apply_rotary_pos_emb_bshd (unfused), one angle per token, mscale")
    bshd.angle_kernel = (angle_kernel, "half")
    thd = Implementation("megatron-core-thd", "torch", {"apply_rope": apply_rope_thd}, version=version,
                         angles="table", max_positions=TABLE_ROWS,
                         description="_apply_rotary_pos_emb_thd (unfused), packed rows or a zigzag CP shard")
    return bshd, thd


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ("`pip install --no-deps megatron-core==0.16.1` (the newest release for Python 3.11; its unfused "
           "rotary path is plain torch)")
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = (
    {
        "implementation": "megatron-core-thd",
        "title": "the packed (thd) path switches position mode on the table's length",
        "text": ("`_apply_rotary_pos_emb_thd` reads `freqs.size(0) == cu_seqlens[-1]` as \"exact mapping\": each "
                 "sequence then takes the table rows of its global token index, not positions from 0. The same "
                 "`cu_seqlens` and tokens rotate differently when the table happens to have `cu_seqlens[-1]` "
                 "rows (rope_utils.py l.211 in 0.16.1). Harmless for 1-D RoPE inside document-masked attention "
                 "(only differences matter); wrong for absolute uses and multi-axis positions."),
        "reproduction": ("import sys, torch\n"
                         'sys.modules["transformer_engine"] = None  # megatron then takes its plain-torch branches\n'
                         "from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_thd\n"
                         "class G:  # what the function reads of a process group\n"
                         "    size = staticmethod(lambda: 1); rank = staticmethod(lambda: 0)\n"
                         "t, cu = torch.randn(20, 1, 8), torch.tensor([0, 8, 20], dtype=torch.int32)\n"
                         "f = torch.arange(64.)[:, None, None, None] * torch.ones(1, 1, 1, 8) * 0.1\n"
                         "a = _apply_rotary_pos_emb_thd(t, cu, f, cp_group=G())\n"
                         "b = _apply_rotary_pos_emb_thd(t, cu, f[:20], cp_group=G())\n"
                         "print((a - b).abs().max())  # > 0: the second sequence starts at 8, not 0"),
        "still": "float((a - b).abs().max()) > 0.1",
    },
)

#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
EXPECTED = {}
