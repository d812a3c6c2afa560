"""flash-attn's rotary embedding `flash_attn/layers/rotary.py` `apply_rotary_emb(x, cos, sin, interleaved=False,
inplace=False, seqlen_offsets=0, cu_seqlens=None, max_seqlen=None)`: the `ApplyRotaryEmb` autograd Function
models call, over the Triton kernel `flash_attn/ops/triton/rotary.py` `apply_rotary` (checked on flash-attn
2.8.3.post2 with triton 3.9.0 under `TRITON_INTERPRET=1`).

flash-attn ships as an sdist whose setup builds CUDA extensions; `scripts/install_flash_attn_cpu.sh`
installs its Python files alone (`FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE`). `import flash_attn` then fails
(its `__init__` imports the CUDA extension), so the kernel file, which imports only torch and triton, and
layers/rotary.py (torch, einops and that kernel) are loaded by path from the installed package. Mapping of
the contract:

* `x (batch, seqlen, nheads, headdim)`: rows of consecutive positions along a sequence axis, with heads
  kept as `nheads` (a view, no copy) when every head shares the row's offset; other positions are skips.
* `cos`, `sin` `(seqlen_ro, rotary_dim / 2)`: built from the float64 spec (the case's scaling at its
  sequence length, the attention factor folded in as transformers does) over `TABLE_ROWS` rows and
  cast to x's dtype, as flash-attn's `RotaryEmbedding` caches them; class "table".
* offsets: "flash-attn" passes `seqlen_offsets` as a `[batch]` tensor (the path of batched decoding),
  "flash-attn-int-offset" as one int (rows starting at different positions are skips there);
  "flash-attn-inplace" is "flash-attn" with `inplace=True` (declared: the forward writes into x), and
  "flash-attn-varlen" packs the rows as `(total_seqlen, nheads, headdim)` with `cu_seqlens` / `max_seqlen`.
* table gradients: "flash-attn" also exposes a kernel with transformers' signature that hands the first half
  of one table `(seq, rotary_dim / 2)` to `apply_rotary_emb`, so d/dcos and d/dsin can be asked for.

Without a GPU the kernel runs in Triton's interpreter: float32 and float16 only.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys

import numpy as np

from ...adapters import NotSupported
from ..implementation import TABLE_ROWS, Implementation, ImplementationUnavailable
from ._kernel_inputs import offset_rows, rotary_width, spec_table
from ._loading import module_file, package_dir
from ._triton import INTERPRETER_DTYPES, triton_mode

DISTRIBUTION = "flash-attn"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ('flash-attn', 'flash-attn-int-offset', 'flash-attn-inplace', 'flash-attn-varlen')

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


@functools.cache
def rotary_layers():
    """flash-attn's `layers/rotary.py` (`apply_rotary_emb`: the `ApplyRotaryEmb` autograd Function models call),
    loaded by path once, its one flash_attn import answered by the kernel module loaded above."""
    name = "flash_attn.ops.triton.rotary"
    added = name not in sys.modules
    if added:
        sys.modules[name] = rotary_module()
    try:
        return module_file("flash_attn", "layers", "rotary.py", missing=_MISSING)
    except ImportError as error:
        if isinstance(error, ImplementationUnavailable):
            raise
        raise ImplementationUnavailable(f"--impl flash-attn: layers/rotary.py does not import ({error}); it needs "
                                        "einops (pip install einops)") from error
    finally:
        if added:
            del sys.modules[name]


def make_apply_rope(*, tensor_offsets: bool = True, inplace: bool = False, varlen: bool = False):
    """The contract's `apply_rope` through `apply_rotary_emb` (torch in, torch out; see the module docstring)."""

    def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None):
        import torch

        r = rotary_width(x.shape[-1], rotary_dim, rotary_pct)
        pos = positions.cpu().numpy()  # the case's positions are placed on --device too
        rows = offset_rows(tuple(x.shape), pos, what="flash-attn's apply_rotary_emb")
        moved = x.movedim(rows.seq_axis, -2)  # [*lead, seq, dim]
        offsets = rows.offsets
        heads_kept = moved.ndim == 4 and bool((offsets == offsets[:, :1]).all())
        if heads_kept:
            kernel_x, offsets = moved.transpose(1, 2), offsets[:, 0]  # (batch, seq, heads, dim), a view
        else:
            kernel_x, offsets = moved.reshape(-1, *moved.shape[-2:]).unsqueeze(2), offsets.reshape(-1)
        if tensor_offsets:
            seqlen_offsets = torch.from_numpy(np.ascontiguousarray(offsets, dtype=np.int64)).to(x.device)
        elif rows.uniform:
            seqlen_offsets = int(offsets.flat[0]) if offsets.size else 0
        else:
            raise NotSupported("flash-attn's int seqlen_offsets is one offset for the batch; these rows start at "
                               f"{sorted(set(offsets.tolist()))[:4]}")
        cos, sin = (t.to(x.device) for t in spec_tables(r, base=base, scaling=scaling, positions=pos, dtype=x.dtype,
                                                         rows=TABLE_ROWS))  # the kernel reads them on x's device
        interleaved = layout == "interleaved"
        if varlen:  # the packed (total_seqlen, nheads, headdim) form: every row one sequence
            batch, seq = kernel_x.shape[:2]
            cu_seqlens = (torch.arange(batch + 1, dtype=torch.int32) * seq).to(x.device)
            out = rotary_layers().apply_rotary_emb(kernel_x.reshape(batch * seq, *kernel_x.shape[2:]), cos, sin,
                                                   interleaved=interleaved, inplace=inplace,
                                                   seqlen_offsets=seqlen_offsets, cu_seqlens=cu_seqlens,
                                                   max_seqlen=seq).reshape(kernel_x.shape)
        else:
            out = rotary_layers().apply_rotary_emb(kernel_x, cos, sin, interleaved=interleaved, inplace=inplace,
                                                   seqlen_offsets=seqlen_offsets)
        out = out.transpose(1, 2) if heads_kept else out.squeeze(2).reshape(moved.shape)
        return out.movedim(-2, rows.seq_axis)

    return apply_rope


def rotary_kernel(q, k, cos, sin, unsqueeze_dim=1):
    """transformers' signature over `apply_rotary_emb` (one table for the batch, its first half: flash-attn's
    `(seqlen, rotary_dim / 2)`), so the table-gradient case can ask for d/dcos, d/dsin."""
    if unsqueeze_dim != 1:
        raise NotSupported("the table-gradient kernel takes q [batch, heads, seq, dim] (unsqueeze_dim=1)")
    half = cos.shape[-1] // 2
    if cos.shape[0] > 1 and not bool((cos.detach() == cos[:1].detach()).all()):
        raise NotSupported("apply_rotary_emb takes one cos/sin table for the batch; these rows differ")
    layers = rotary_layers()
    return tuple(layers.apply_rotary_emb(t.transpose(1, 2), cos[0, :, :half], sin[0, :, :half]).transpose(1, 2)
                 for t in (q, k))


def version() -> str:
    """flash-attn's version: its `__version__` line (the package itself does not import without CUDA)."""
    text = (_package_dir() / "__init__.py").read_text()
    found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", text)
    return found.group(1) if found else None


def load() -> tuple[Implementation, ...]:
    module = rotary_module()
    rotary_layers()
    dtypes = INTERPRETER_DTYPES if isinstance(module.torch, _CpuTorch) else None
    mode = "interpreter" if dtypes else "native"
    common = dict(version=version(), dtypes=dtypes, angles="table", max_positions=TABLE_ROWS)
    plain = Implementation("flash-attn", "torch", {"apply_rope": make_apply_rope()},
                           description=f"apply_rotary_emb (Triton, {mode}), [batch] tensor seqlen_offsets", **common)
    plain.kernel = (rotary_kernel, "half")
    return (plain,
            # the int path checks its table: `assert seqlen_offsets + seqlen <= seqlen_ro` (ops/triton/rotary.py)
            Implementation("flash-attn-int-offset", "torch", {"apply_rope": make_apply_rope(tensor_offsets=False)},
                           description=f"apply_rotary_emb (Triton, {mode}), int seqlen_offsets",
                           refusals=(AssertionError,), **common),
            Implementation("flash-attn-inplace", "torch", {"apply_rope": make_apply_rope(inplace=True)}, inplace=True,
                           description=f"apply_rotary_emb(inplace=True) (Triton, {mode})", **common),
            Implementation("flash-attn-varlen", "torch", {"apply_rope": make_apply_rope(varlen=True)},
                           description=f"apply_rotary_emb with cu_seqlens / max_seqlen (Triton, {mode}), packed "
                                       "rows", **common))


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
        'reproduction': ('import contextlib, importlib.util, os\n'
                         'os.environ["TRITON_INTERPRET"] = "1"  # no GPU needed: Triton\'s interpreter (set before '
                         'triton is imported)\n'
                         'import torch\n'
                         '# ops/triton/rotary.py by path: `import flash_attn` needs its CUDA extension\n'
                         'root = importlib.util.find_spec("flash_attn").submodule_search_locations[0]\n'
                         'loader = importlib.util.spec_from_file_location("rotary", os.path.join(root, "ops", '
                         '"triton", "rotary.py"))\n'
                         'rotary = importlib.util.module_from_spec(loader); loader.loader.exec_module(rotary)\n'
                         "torch.cuda.device = lambda index: contextlib.nullcontext()  # apply_rotary enters x's "
                         'device: CPU tensors here\n'
                         'x = torch.randn(2, 8, 2, 16)\n'
                         'cos, sin = torch.ones(64, 8), torch.zeros(64, 8); cos[:, 0] = 0.0; sin[:, 0] = 1.0  # '
                         'pair 0: 90 degrees\n'
                         'y = rotary.apply_rotary(x, cos, sin, seqlen_offsets=torch.tensor([60, 0]))\n'
                         'unrotated = torch.equal(y[0, 4:], x[0, 4:])\n'
                         'print(unrotated)  # True: positions 64..67 (past the 64 rows) come back as their input, '
                         'no error'),
        'still': 'unrotated and not torch.equal(y[0, :4], x[0, :4])',
    },
    {
        "implementation": "flash-attn-inplace",
        "title": "apply_rotary_emb(inplace=True) rotates the incoming gradient in place, wrong for an expanded one",
        "text": ("With `inplace=True`, `ApplyRotaryEmb.backward` rotates `do` in its own storage and returns it "
                 "(the caller's gradient tensor is overwritten). A zero-stride cotangent, as `out.sum()` or any "
                 "broadcast upstream produces, shares one storage row between heads, so every head's rotation is "
                 "written over the others: the input gradient is wrong by O(1) and nothing raises. The forward, "
                 "too, writes into its input unseen by autograd (the upstream-gradient case). `inplace=False` "
                 "gives the right gradient for the same inputs."),
        "reproduction": ("import contextlib, importlib.util, os, sys\n"
                         'os.environ["TRITON_INTERPRET"] = "1"  # no GPU needed: Triton\'s interpreter (set before '
                         "triton is imported)\n"
                         "import torch\n"
                         'root = importlib.util.find_spec("flash_attn").submodule_search_locations[0]\n'
                         "def load(name, *parts):  # a module file by path: `import flash_attn` needs its CUDA "
                         "extension\n"
                         "    loader = importlib.util.spec_from_file_location(name, os.path.join(root, *parts))\n"
                         "    module = sys.modules[name] = importlib.util.module_from_spec(loader)\n"
                         "    loader.loader.exec_module(module)\n"
                         "    return module\n"
                         'load("flash_attn.ops.triton.rotary", "ops", "triton", "rotary.py")  # the kernel '
                         "layers/rotary.py imports\n"
                         'apply_rotary_emb = load("flash_attn.layers.rotary", "layers", '
                         '"rotary.py").apply_rotary_emb  # needs einops\n'
                         "torch.cuda.device = lambda index: contextlib.nullcontext()  # apply_rotary enters x's "
                         "device: CPU tensors here\n"
                         "s, d = 4, 8\n"
                         "ang = torch.arange(s)[:, None] * 10000.0 ** (-torch.arange(0, d, 2) / d)\n"
                         "cos, sin = ang.cos(), ang.sin()\n"
                         "x0 = torch.randn(1, s, 2, d, requires_grad=True)\n"
                         "w = torch.randn(1, s, 1, d).expand(1, s, 2, d)  # stride 0 over the heads\n"
                         "(got,) = torch.autograd.grad(apply_rotary_emb(x0 * 1, cos, sin, inplace=True), x0, w)\n"
                         "(want,) = torch.autograd.grad(apply_rotary_emb(x0 * 1, cos, sin, inplace=False), x0, w)\n"
                         "print((got - want).abs().max())  # O(1), not 0"),
        "still": "float((got - want).abs().max()) > 1e-3",
    },
)

#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
#: (not installed where the suite runs: checked by hand in its own environment, docs/ecosystem.md)
EXPECTED = None
