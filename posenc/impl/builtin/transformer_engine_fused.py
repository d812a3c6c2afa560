"""Transformer Engine's fused rotary path: `transformer_engine/pytorch/attention/rope.py`
`apply_rotary_pos_emb(t, freqs, tensor_format, start_positions, interleaved, fused=True, cu_seqlens, cp_size,
cp_rank)`, i.e. `FusedRoPEFunc` over the CUDA kernels `tex.fused_rope_forward` / `tex.fused_rope_backward` of
TE's core library (written against transformer-engine 2.20.2). A GPU-only built-in: it runs only where torch
sees a CUDA device, `import transformer_engine.pytorch.attention.rope` succeeds with its core library
(`transformer_engine_torch`) and `posenc check --device cuda` places the inputs there; elsewhere every case is a
skip naming what is missing (`pip install --no-deps transformer-engine`, the Python wheel alone, runs only the
unfused path: the built-in "transformer-engine").

Mapping of the contract: the unfused built-in's (`transformer_engine.make_apply_rope`, `apply_rope_thd_cp`) with
`fused=True` and every table and index tensor on x's device:

* "transformer-engine-fused": `tensor_format="bshd"`, `start_positions [b]`;
  "transformer-engine-fused-thd": `tensor_format="thd"` with `cu_seqlens` and `start_positions` per sequence;
  "transformer-engine-fused-thd-cp": a zigzag context-parallel shard with `cp_size` / `cp_rank`.
* `freqs [TABLE_ROWS, 1, 1, rotary_dim]`: the float64 spec's angles in the layout's channel order, which
  `FusedRoPEFunc.forward` casts to float32 (`if freqs.dtype != torch.float32: freqs = freqs.float()`): the
  kernel reads float32-rounded angles, precision class "float32" (not "table": the unfused path computes
  `cos(freqs)` of the float64 angles). No magnitude factor: YaRN / LongRoPE are skips.
* backward: `FusedRoPEFunc.backward` returns None for `freqs` (the research notes: "by design"), so the angle
  table gradient case reports what it finds; the angle kernel is the fused `sbhd` call.
"""

from __future__ import annotations

import functools

from ...adapters import NotSupported, current_device
from ..implementation import TABLE_ROWS, Implementation
from . import transformer_engine as _te

DISTRIBUTION = "transformer-engine"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ("transformer-engine-fused", "transformer-engine-fused-thd", "transformer-engine-fused-thd-cp")


@functools.cache
def kernel_refusal() -> str | None:
    """Why TE's fused RoPE kernel cannot run in this process (None: it can): no CUDA device, or TE's rope
    module does not import with its core library (the CUDA extension `transformer_engine_torch`)."""
    import torch

    if not torch.cuda.is_available():
        return ("Transformer Engine's fused RoPE (tex.fused_rope_forward) is a CUDA kernel and torch sees no CUDA "
                "device (torch.cuda.is_available() is False); run `posenc check --device cuda --impl "
                "transformer-engine-fused` on a GPU machine")
    try:
        import transformer_engine.pytorch.attention.rope  # noqa: F401 - imports transformer_engine_torch
    except (ImportError, RuntimeError) as error:  # the Python wheel without its core library refuses to import
        return ("transformer_engine.pytorch does not import: the fused path needs TE's core library and its "
                f"CUDA extension transformer_engine_torch (pip install transformer-engine[pytorch]) ({error})")
    return None


def _guarded(fn):
    """`fn` (a contract `apply_rope`) that is a skip, with the reason, where the fused kernel cannot run."""

    @functools.wraps(fn)
    def apply_rope(x, positions, **kwargs):
        reason = kernel_refusal()
        if reason:
            raise NotSupported(reason)
        if x.device.type != "cuda":
            raise NotSupported(f"TE's fused RoPE takes CUDA tensors; these are on {x.device} (run with "
                               f"--device cuda; now {current_device()})")
        return fn(x, positions, **kwargs)

    return apply_rope


def fused_apply_rope(tensor_format: str):
    """The contract's `apply_rope` through `apply_rotary_pos_emb(fused=True)` in `tensor_format` ("bshd", "thd")."""
    return _guarded(_te.make_apply_rope(tensor_format, fused=True))


def fused_apply_rope_thd_cp():
    """The contract's `apply_rope` through the fused thd path with `cp_size` / `cp_rank`."""
    return _guarded(functools.partial(_te.apply_rope_thd_cp, fused=True))


def angle_kernel(t, freqs):
    """`apply_rotary_pos_emb(t, freqs, "sbhd", fused=True)`: the angle table's gradient (the fused backward's)."""
    reason = kernel_refusal()
    if reason:
        raise NotSupported(reason)
    if t.device.type != "cuda":
        raise NotSupported(f"TE's fused RoPE takes CUDA tensors; these are on {t.device} (run with --device cuda)")
    return _te.rope_module().apply_rotary_pos_emb(t, freqs.to(t.device), tensor_format="sbhd", fused=True)


def load() -> tuple[Implementation, ...]:
    import importlib.metadata

    reason = kernel_refusal()
    where = "CUDA" if reason is None else "not runnable here: " + reason.split(";")[0]
    common = dict(version=importlib.metadata.version(DISTRIBUTION), dtypes=("float32", "bfloat16", "float16"),
                  angles="float32", max_positions=TABLE_ROWS, refusals=(AssertionError,))
    bshd = Implementation("transformer-engine-fused", "torch", {"apply_rope": fused_apply_rope("bshd")},
                          description=f"apply_rotary_pos_emb(fused=True), bshd with start_positions ({where})",
                          **common)
    bshd.angle_kernel = (angle_kernel, "half")
    return (bshd,
            Implementation("transformer-engine-fused-thd", "torch", {"apply_rope": fused_apply_rope("thd")},
                           description=f"apply_rotary_pos_emb(fused=True), thd with cu_seqlens and start_positions "
                                       f"({where})", **common),
            Implementation("transformer-engine-fused-thd-cp", "torch", {"apply_rope": fused_apply_rope_thd_cp()},
                           description=f"apply_rotary_pos_emb(fused=True), thd, a zigzag context-parallel shard "
                                       f"({where})", **common))


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ("`pip install transformer-engine[pytorch]` on a CUDA machine (the core library and its CUDA extension; "
           "GPU-only)")
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = ()
#: the verdicts at the pinned version, as data (not run where the suite runs: no CUDA device)
EXPECTED = None
