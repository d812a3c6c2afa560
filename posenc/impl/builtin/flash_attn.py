"""flash-attn's Triton rotary kernel `flash_attn/ops/triton/rotary.py` `apply_rotary(x, cos, sin,
seqlen_offsets=0, cu_seqlens=None, max_seqlen=None, interleaved=False, inplace=False, conjugate=False)`
(the function `flash_attn.layers.rotary.apply_rotary_emb` calls; checked on flash-attn 2.8.3.post2 with
triton 3.9.0 under `TRITON_INTERPRET=1`).

flash-attn ships as an sdist whose setup builds CUDA extensions; `scripts/install_flash_attn_cpu.sh`
installs its Python files alone (`FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE`). `import flash_attn` then fails
(its `__init__` imports the CUDA extension), so the kernel file, which imports only torch and triton, is
loaded by path from the installed package. Mapping of the contract:

* `x (batch, seqlen, nheads, headdim)`: rows of consecutive positions along a sequence axis, with heads
  kept as `nheads` (a view, no copy) when every head shares the row's offset; other positions are skips.
* `cos`, `sin` `(seqlen_ro, rotary_dim / 2)`: built from the float64 spec (the case's scaling at its
  sequence length, the attention factor folded in as transformers does) over `TABLE_ROWS` rows and
  cast to x's dtype, as flash-attn's `RotaryEmbedding` caches them; class "table".
* offsets: "flash-attn" passes `seqlen_offsets` as a `[batch]` tensor (the path of batched decoding),
  "flash-attn-int-offset" as one int (rows starting at different positions are skips there).

Without a GPU the kernel runs in Triton's interpreter: float32 and float16 only.
"""

from __future__ import annotations

import contextlib
import functools
import re

import numpy as np

from ...adapters import NotSupported
from ..implementation import TABLE_ROWS, Implementation, ImplementationUnavailable
from ._kernel_inputs import offset_rows, rotary_width, spec_table
from ._loading import module_file, package_dir
from ._triton import INTERPRETER_DTYPES, triton_mode

DISTRIBUTION = "flash-attn"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ('flash-attn', 'flash-attn-int-offset')

_MISSING = "--impl flash-attn: flash_attn is not installed (scripts/install_flash_attn_cpu.sh installs its Python files)"


def _package_dir():
    return package_dir("flash_attn", missing=_MISSING)


@functools.cache
def rotary_module():
    """flash-attn's `ops/triton/rotary.py`, loaded by path once."""
    mode = triton_mode()  # before the kernel's module is executed: triton.jit reads TRITON_INTERPRET
    try:
        module = module_file("flash_attn", "ops", "triton", "rotary.py", missing=_MISSING)
    except ImportError as error:
        if isinstance(error, ImplementationUnavailable):
            raise
        raise ImplementationUnavailable(f"--impl flash-attn: ops/triton/rotary.py does not import ({error}); it "
                                        f"needs triton (pip install triton)") from error
    if mode == "interpreter":
        # apply_rotary enters torch.cuda.device(x.device.index); there is no CUDA device to enter
        module.torch = _CpuTorch(module.torch)
    return module


class _CpuTorch:
    """The kernel module's `torch` with `torch.cuda.device` a no-op context (CPU tensors, interpreter)."""

    def __init__(self, torch):
        self._torch = torch
        self.cuda = type("cuda", (), {"device": staticmethod(lambda index: contextlib.nullcontext())})

    def __getattr__(self, name):
        return getattr(self._torch, name)


def spec_tables(rotary_dim, *, base, scaling, positions, dtype, rows):
    """cos, sin `(rows, rotary_dim / 2)` torch tensors in `dtype` from the float64 spec (attention factor folded in)."""
    import torch

    angles, attention_scale = spec_table(rotary_dim, rows, base=base, scaling=scaling, positions=positions)
    return tuple(torch.from_numpy(attention_scale * f(angles)).to(dtype) for f in (np.cos, np.sin))


def make_apply_rope(*, tensor_offsets: bool):
    """The contract's `apply_rope` through `apply_rotary` (torch in, torch out; see the module docstring)."""

    def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None):
        import torch

        r = rotary_width(x.shape[-1], rotary_dim, rotary_pct)
        pos = positions.numpy()
        rows = offset_rows(tuple(x.shape), pos, what="flash-attn's apply_rotary")
        moved = x.movedim(rows.seq_axis, -2)  # [*lead, seq, dim]
        offsets = rows.offsets
        heads_kept = moved.ndim == 4 and bool((offsets == offsets[:, :1]).all())
        if heads_kept:
            kernel_x, offsets = moved.transpose(1, 2), offsets[:, 0]  # (batch, seq, heads, dim), a view
        else:
            kernel_x, offsets = moved.reshape(-1, *moved.shape[-2:]).unsqueeze(2), offsets.reshape(-1)
        if tensor_offsets:
            seqlen_offsets = torch.from_numpy(np.ascontiguousarray(offsets, dtype=np.int64))
        elif rows.uniform:
            seqlen_offsets = int(offsets.flat[0]) if offsets.size else 0
        else:
            raise NotSupported("flash-attn's int seqlen_offsets is one offset for the batch; these rows start at "
                               f"{sorted(set(offsets.tolist()))[:4]}")
        cos, sin = spec_tables(r, base=base, scaling=scaling, positions=pos, dtype=x.dtype, rows=TABLE_ROWS)
        out = rotary_module().apply_rotary(kernel_x, cos, sin, seqlen_offsets=seqlen_offsets,
                                           interleaved=layout == "interleaved")
        out = out.transpose(1, 2) if heads_kept else out.squeeze(2).reshape(moved.shape)
        return out.movedim(-2, rows.seq_axis)

    return apply_rope


def version() -> str:
    """flash-attn's version: its `__version__` line (the package itself does not import without CUDA)."""
    text = (_package_dir() / "__init__.py").read_text()
    found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", text)
    return found.group(1) if found else None


def load() -> tuple[Implementation, ...]:
    module = rotary_module()
    dtypes = INTERPRETER_DTYPES if isinstance(module.torch, _CpuTorch) else None
    mode = "interpreter" if dtypes else "native"
    common = dict(version=version(), dtypes=dtypes, angles="table", max_positions=TABLE_ROWS)
    return (Implementation("flash-attn", "torch", {"apply_rope": make_apply_rope(tensor_offsets=True)},
                           description=f"apply_rotary (Triton, {mode}), [batch] tensor seqlen_offsets", **common),
            Implementation("flash-attn-int-offset", "torch", {"apply_rope": make_apply_rope(tensor_offsets=False)},
                           description=f"apply_rotary (Triton, {mode}), int seqlen_offsets", **common))


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ("`scripts/install_flash_attn_cpu.sh` (the sdist's Python files without the CUDA build, "
           "plus triton; the kernel runs in Triton's interpreter without a GPU)")
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = (
    {
        'implementation': ('flash-attn'),
        'title': ('rows past the cos/sin table come back unrotated with tensor offsets'),
        'text': ('With `seqlen_offsets` a `[batch]` tensor, positions at or past `seqlen_ro` load cos = '
            "1, sin = 0 (the masked loads' `other=`), so those rows are returned as their input, "
            'with no error; the int offset path asserts `offset + seqlen <= seqlen_ro`. Negative '
            'offsets read before the table on both paths (garbage or non-finite values, no error).'),
        'reproduction': ('x = torch.randn(2, 8, 2, 16)\n'
            'cos, sin = torch.ones(64, 8), torch.zeros(64, 8); cos[:, 0] = 0.0; sin[:, 0] = 1.0\n'
            'y = apply_rotary(x, cos, sin, seqlen_offsets=torch.tensor([60, 0]))\n'
            'assert torch.equal(y[0, 4:], x[0, 4:])  # positions 64..67: unrotated'),
    },
)

#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
#: (not installed where the suite runs: checked by hand in its own environment, docs/ecosystem.md)
EXPECTED = None
