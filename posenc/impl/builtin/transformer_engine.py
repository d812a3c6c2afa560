"""Transformer Engine's unfused rotary path: `transformer_engine/pytorch/attention/rope.py`
`apply_rotary_pos_emb(t, freqs, tensor_format="sbhd", start_positions=None, interleaved=False, fused=False,
cu_seqlens=None, cp_size=1, cp_rank=0)` (checked on transformer-engine 2.20.2, the Python wheel alone).

`pip install --no-deps transformer-engine` installs the Python package without its CUDA core library, and
`import transformer_engine` then refuses to run. The rope module's unfused path is pure torch; it imports
the extension `transformer_engine_torch` and `QKVFormat` only for the fused path, so the module file is
loaded by path with those two names stubbed (the stubs are removed from `sys.modules` afterwards; the
fused path raises). With the full library installed, the real module is imported. Mapping of the contract:

* "transformer-engine": `tensor_format="bshd"`, `t [b, s, h, d]` rows of consecutive positions (heads kept
  when they share the row's offset), `start_positions [b]`;
  "transformer-engine-thd": `tensor_format="thd"`, every row one sequence of the packed `t [tokens, 1, d]`
  with `cu_seqlens` and `start_positions` per sequence; "transformer-engine-thd-cp": rows that are one
  rank's zigzag context-parallel shard of sequences from 0, with `cp_size` and `cp_rank` (other rows are skips).
* `freqs [TABLE_ROWS, 1, 1, rotary_dim]`: the angles of the float64 spec (the case's scaling at its
  sequence length) in the layout's channel order (`cat(f, f)`, or each repeated for `interleaved`), as
  `RotaryPositionEmbedding.forward` lays them out; class "table" (TE's own module forms them in float32 and
  allocates on a CUDA device, so it does not run here). TE has no magnitude factor: YaRN / LongRoPE are skips.
* TE computes `cos(freqs)` and `sin(freqs)`, casts them to `t.dtype`, and multiplies in that dtype.
"""

from __future__ import annotations

import functools
import sys
import types

import numpy as np

from ...adapters import NotSupported
from ..implementation import TABLE_ROWS, Implementation
from ._kernel_inputs import offset_rows, rotary_width, sequence_rows, spec_table, zigzag_shard
from ._loading import exec_file, package_dir

DISTRIBUTION = "transformer-engine"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ('transformer-engine', 'transformer-engine-thd', 'transformer-engine-thd-cp')

_STUBBED = ("transformer_engine_torch", "transformer_engine", "transformer_engine.pytorch",
            "transformer_engine.pytorch.cpp_extensions", "transformer_engine.pytorch.cpp_extensions.fused_attn")


class _FusedPathUnavailable(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):  # module protocol lookups (inspect, pickle) see a plain module
            raise AttributeError(name)

        def fused(*args, **kwargs):
            raise NotSupported(f"Transformer Engine's fused path needs its CUDA extension ({self.__name__}.{name})")

        return fused


def _load_unfused(path):
    """Execute rope.py with the fused path's two imports stubbed, leaving `sys.modules` as it was."""
    added = [name for name in _STUBBED if name not in sys.modules]
    for name in added:
        sys.modules[name] = _FusedPathUnavailable(name)
    sys.modules["transformer_engine.pytorch.cpp_extensions.fused_attn"].QKVFormat = {}
    try:
        module = exec_file(path, "_posenc_transformer_engine_rope")
    finally:
        for name in added:
            del sys.modules[name]
    return module


@functools.cache
def rope_module():
    """TE's `pytorch/attention/rope.py`: the installed module when TE imports, else its file unfused (once)."""
    root = package_dir("transformer_engine", missing="--impl transformer-engine: transformer_engine is not "
                                                     "installed (pip install --no-deps transformer-engine)")
    try:
        import transformer_engine.pytorch.attention.rope as module
    except (ImportError, RuntimeError):  # the Python wheel without its core library refuses to import
        module = _load_unfused(root / "pytorch" / "attention" / "rope.py")
    return module


def freqs_table(rotary_dim, *, base, scaling, positions, layout, rows):
    """float64 `[rows, 1, 1, rotary_dim]` angles in the layout's channel order (RotaryPositionEmbedding's)."""
    import torch

    half, attention_scale = spec_table(rotary_dim, rows, base=base, scaling=scaling, positions=positions)
    if attention_scale != 1.0:
        raise NotSupported(f"Transformer Engine's freqs carry angles only, no magnitude factor "
                           f"({attention_scale:.4g} here)")
    emb = np.concatenate([half, half], -1) if layout == "half" else np.repeat(half, 2, axis=-1)
    return torch.from_numpy(emb).reshape(rows, 1, 1, rotary_dim)


def make_apply_rope(tensor_format: str, *, fused: bool = False):
    """The contract's `apply_rope` through `apply_rotary_pos_emb(fused=fused)` in `tensor_format` (the tables and
    index tensors on x's device: the fused kernel reads them there; `transformer_engine_fused`)."""

    def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None):
        import torch

        r = rotary_width(x.shape[-1], rotary_dim, rotary_pct)
        pos = positions.cpu().numpy()  # the case's positions are placed on --device too
        rows = offset_rows(tuple(x.shape), pos, what="Transformer Engine's apply_rotary_pos_emb")
        freqs = freqs_table(r, base=base, scaling=scaling, positions=pos, layout=layout, rows=TABLE_ROWS).to(x.device)
        moved = x.movedim(rows.seq_axis, -2)  # [*lead, seq, dim]
        seq, dim = moved.shape[-2:]
        offsets = rows.offsets
        te = rope_module()
        if tensor_format == "bshd":
            heads_kept = moved.ndim == 4 and bool((offsets == offsets[:, :1]).all())
            t = moved.transpose(1, 2) if heads_kept else moved.reshape(-1, seq, 1, dim)
            starts = offsets[:, 0] if heads_kept else offsets.reshape(-1)
            out = te.apply_rotary_pos_emb(t, freqs, tensor_format="bshd", start_positions=torch.from_numpy(
                np.ascontiguousarray(starts)).to(x.device), interleaved=layout == "interleaved", fused=fused)
            out = out.transpose(1, 2) if heads_kept else out.reshape(moved.shape)
        else:
            count = int(np.prod(moved.shape[:-2]))
            t = moved.reshape(count * seq, 1, dim)
            cu_seqlens = (torch.arange(count + 1, dtype=torch.int32) * seq).to(x.device)
            out = te.apply_rotary_pos_emb(t, freqs, tensor_format="thd", cu_seqlens=cu_seqlens,
                                          start_positions=torch.from_numpy(offsets.reshape(-1).copy()).to(x.device),
                                          interleaved=layout == "interleaved", fused=fused)
            out = out.reshape(moved.shape)
        return out.movedim(-2, rows.seq_axis)

    return apply_rope


def apply_rope_thd_cp(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None,
                      fused=False):
    """The contract's `apply_rope` through `apply_rotary_pos_emb(tensor_format="thd", cp_size, cp_rank)`: rows
    that are one context-parallel rank's zigzag shard of sequences from 0 (`cu_seqlens` count whole sequences);
    `fused`: TE's fused kernel (`transformer_engine_fused`)."""
    import torch

    what = "Transformer Engine's thd path with cp_size / cp_rank"
    r = rotary_width(x.shape[-1], rotary_dim, rotary_pct)
    seq_axis, row_positions = sequence_rows(tuple(x.shape), positions.cpu().numpy(), what=what)
    cp_size, cp_rank = zigzag_shard(row_positions, what=what)
    if cp_size == 1:
        raise NotSupported(f"{what}: these rows are whole sequences (transformer-engine-thd checks those)")
    freqs = freqs_table(r, base=base, scaling=scaling, positions=row_positions, layout=layout,
                        rows=TABLE_ROWS).to(x.device)
    moved = x.movedim(seq_axis, -2)
    count, (seq, dim) = row_positions.shape[0], moved.shape[-2:]
    cu_seqlens = (torch.arange(count + 1, dtype=torch.int32) * seq * cp_size).to(x.device)
    out = rope_module().apply_rotary_pos_emb(moved.reshape(count * seq, 1, dim), freqs, tensor_format="thd",
                                             cu_seqlens=cu_seqlens, interleaved=layout == "interleaved",
                                             fused=fused, cp_size=cp_size, cp_rank=cp_rank)
    return out.reshape(moved.shape).movedim(-2, seq_axis)



def load() -> tuple[Implementation, ...]:
    import importlib.metadata

    rope_module()
    common = dict(version=importlib.metadata.version(DISTRIBUTION), dtypes=("float32", "bfloat16", "float16"),
                  angles="table", max_positions=TABLE_ROWS,
                  # RotaryPositionEmbedding asserts "only supported up to <max_seq_len> sequence length"
                  refusals=(AssertionError,))
    bshd = Implementation("transformer-engine", "torch", {"apply_rope": make_apply_rope("bshd")},
                          description="apply_rotary_pos_emb(fused=False), bshd with start_positions", **common)
    bshd.angle_kernel = (angle_kernel, "half")
    return (bshd,
            Implementation("transformer-engine-thd", "torch", {"apply_rope": make_apply_rope("thd")},
                           description="apply_rotary_pos_emb(fused=False), thd with cu_seqlens and start_positions",
                           **common),
            Implementation("transformer-engine-thd-cp", "torch", {"apply_rope": apply_rope_thd_cp},
                           description="apply_rotary_pos_emb(fused=False), thd, a zigzag context-parallel shard "
                                       "(cp_size, cp_rank)", **common))


def angle_kernel(t, freqs):
    """`apply_rotary_pos_emb(t, freqs)` in TE's default `sbhd` format, unfused: the angle table's gradient."""
    return rope_module().apply_rotary_pos_emb(t, freqs, tensor_format="sbhd", fused=False)


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ('`pip install --no-deps transformer-engine` (the Python wheel alone: the unfused path '
           'runs without the CUDA core library)')
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = ()

#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
EXPECTED = {
    'transformer-engine edge/negative-positions': 'error',
    'transformer-engine-thd edge/negative-positions': 'error',
    'transformer-engine-thd edge/past-table': 'error',
    'transformer-engine-thd edge/offset-past-table': 'error',
    'transformer-engine-thd edge/decode-past-table': 'error',
    'transformer-engine edge/negative-positions-interleaved': 'error',
    'transformer-engine-thd edge/negative-positions-interleaved': 'error',
    'transformer-engine-thd edge/past-table-interleaved': 'error',
    'transformer-engine-thd edge/offset-past-table-interleaved': 'error',
    'transformer-engine-thd edge/decode-past-table-interleaved': 'error',
}
