"""unsloth's fast RoPE: `unsloth/kernels/rope_embedding.py` `fast_rope_embedding(Q, K, cos, sin,
rope_embedding_indices=None)` (Triton kernels with their own backward; checked on unsloth 2026.10.9 with
unsloth-zoo 2026.10.9 and triton 3.9.0 under `TRITON_INTERPRET=1`).

`import unsloth` runs its model-patching machinery and needs a GPU, so the adapter imports only the kernel
module: the `unsloth` and `unsloth.kernels` packages are entered as bare namespace modules (their `__init__`s
are skipped), `UNSLOTH_ALLOW_CPU=1` (`unsloth/device_type.py`: "Test-only CPU fallback") and
`UNSLOTH_IS_PRESENT=1` are set, and `_eviction_hints_ok`, which asks `torch.cuda.current_device()`, is
answered for the CPU. Mapping of the contract (`Implementation.from_rotary_kernel`, half layout):

* "unsloth": `fast_rope_embedding(Q, K, cos, sin)`, `Q [batch, heads, seq, dim]` and one `cos`/`sin` table
  `[seq, dim]` for the batch (`Fast_RoPE_Embedding_QK_Positions`): rows at other positions per batch entry
  are skips;
* "unsloth-indices": the same with `rope_embedding_indices` (TRL's padding-free packed rows,
  `Fast_RoPE_Embedding_QK`): the tables are one row per token, `[batch * seq, dim]`, and the indices
  point each token at its row.
The tables come from the float64 spec cast to q's dtype (class "table"). Float32 and float16 on a CPU.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

from ...adapters import NotSupported
from ..implementation import Implementation, ImplementationUnavailable
from ._loading import package_dir
from ._triton import INTERPRETER_DTYPES, triton_mode

DISTRIBUTION = "unsloth"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ("unsloth", "unsloth-indices")

_MISSING = "--impl unsloth: unsloth is not installed (pip install --no-deps unsloth unsloth_zoo)"


@functools.cache
def rope_module():
    """unsloth's `kernels/rope_embedding.py`, imported once without the packages' `__init__`s."""
    mode = triton_mode()
    root = package_dir("unsloth", missing=_MISSING)
    package_dir("unsloth_zoo", missing=_MISSING)
    if mode == "interpreter":
        os.environ.setdefault("UNSLOTH_ALLOW_CPU", "1")
    os.environ.setdefault("UNSLOTH_IS_PRESENT", "1")
    # unsloth_zoo writes generated sources into ./unsloth_compiled_cache unless told where: not the user's cwd
    os.environ.setdefault("UNSLOTH_COMPILE_LOCATION", str(Path(tempfile.gettempdir()) / "posenc_unsloth_cache"))
    for name, path in (("unsloth", root), ("unsloth.kernels", root / "kernels")):
        if name not in sys.modules:
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(path)]
            package = importlib.util.module_from_spec(spec)
            sys.modules[name] = package
    try:
        import unsloth.kernels.rope_embedding as module
    except Exception as error:  # noqa: BLE001 - any import failure of a brittle stack means: not runnable here
        raise ImplementationUnavailable(f"--impl unsloth: unsloth.kernels.rope_embedding does not import "
                                        f"({type(error).__name__}: {error})") from error
    if mode == "interpreter":
        module._eviction_hints_ok = lambda device: True  # it asks torch.cuda.current_device()
    return module


def _shared_table(table, what):
    """`table [batch, seq, r]` as the one `[seq, r]` table the positions path takes (rows equal over batch)."""
    first = table[0]
    if table.shape[0] > 1 and not bool((table.detach() == first.detach()).all()):
        raise NotSupported(f"{what} takes one cos/sin table [seq, dim] for the batch; these rows differ")
    return first


def rotary_kernel(q, k, cos, sin, unsqueeze_dim=1):
    """transformers' signature over `fast_rope_embedding(Q, K, cos, sin)` (one table for the batch)."""
    if unsqueeze_dim != 1:
        raise NotSupported("fast_rope_embedding takes Q [batch, heads, seq, dim] (unsqueeze_dim=1)")
    what = "unsloth's fast_rope_embedding"
    return rope_module().fast_rope_embedding(q, k, _shared_table(cos, what), _shared_table(sin, what))


def rotary_kernel_indices(q, k, cos, sin, unsqueeze_dim=1):
    """transformers' signature over `fast_rope_embedding(..., rope_embedding_indices)`: a table row per token."""
    import torch

    if unsqueeze_dim != 1:
        raise NotSupported("fast_rope_embedding takes Q [batch, heads, seq, dim] (unsqueeze_dim=1)")
    batch, seq, r = cos.shape
    indices = torch.arange(batch * seq, dtype=torch.int32).reshape(batch, seq)
    return rope_module().fast_rope_embedding(q, k, cos.reshape(batch * seq, r), sin.reshape(batch * seq, r),
                                             rope_embedding_indices=indices)


def load() -> tuple[Implementation, ...]:
    import importlib.metadata

    rope_module()
    dtypes = INTERPRETER_DTYPES if os.environ.get("TRITON_INTERPRET") == "1" else None
    mode = "interpreter" if dtypes else "native"
    version = importlib.metadata.version(DISTRIBUTION)
    plain = Implementation.from_rotary_kernel(rotary_kernel, "unsloth", layout="half", version=version, dtypes=dtypes)
    plain.description = f"fast_rope_embedding (Triton, {mode}), one cos/sin table for the batch"
    indexed = Implementation.from_rotary_kernel(rotary_kernel_indices, "unsloth-indices", layout="half",
                                                version=version, dtypes=dtypes)
    indexed.description = f"fast_rope_embedding (Triton, {mode}) with rope_embedding_indices (packed rows)"
    return plain, indexed


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ("`pip install --no-deps unsloth==2026.10.9 unsloth_zoo==2026.10.9 triton` (the kernel module alone; "
           "Triton's interpreter runs it without a GPU, float32 and float16)")
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = (
    {
        "implementation": "unsloth",
        "title": "fast_rope_embedding rotates q in transformers' memory order in place, unseen by autograd",
        "text": ("With q a transposed view of a `[batch, seq, heads, dim]` projection (transformers' attention "
                 "layers), `Fast_RoPE_Embedding_QK_Positions` writes the rotation into q's storage (\"in place "
                 "where X.transpose(1, 2) is contiguous\", rope_embedding.py l.353) without bumping autograd's "
                 "version counter. An op before it that saved its output for the backward (tanh, a norm) then "
                 "differentiates the rotated values: the upstream gradient is wrong by O(1) and nothing raises "
                 "(unsloth #5001, closed; still in 2026.10.9). Its tables get no gradient either."),
        "reproduction": ("import importlib.machinery, importlib.util, os, sys, tempfile\n"
                         "# no GPU needed: Triton's interpreter (set before triton is imported); the kernel module "
                         "alone, without\n"
                         "# unsloth's package __init__ (it needs a GPU and patches transformers): empty packages "
                         "over its directories\n"
                         'os.environ.update(TRITON_INTERPRET="1", UNSLOTH_ALLOW_CPU="1", UNSLOTH_IS_PRESENT="1",\n'
                         "                  UNSLOTH_COMPILE_LOCATION=os.path.join(tempfile.gettempdir(), "
                         '"unsloth_compiled_cache"))\n'
                         'root = importlib.util.find_spec("unsloth").submodule_search_locations[0]\n'
                         'for name, path in (("unsloth", root), ("unsloth.kernels", os.path.join(root, "kernels"))):\n'
                         "    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)\n"
                         "    spec.submodule_search_locations = [path]\n"
                         "    sys.modules[name] = importlib.util.module_from_spec(spec)\n"
                         "import torch\n"
                         "import unsloth.kernels.rope_embedding as unsloth_rope\n"
                         "unsloth_rope._eviction_hints_ok = lambda device: True  # it asks "
                         "torch.cuda.current_device()\n"
                         "s, d = 4, 8\n"
                         "ang = torch.arange(s)[:, None] * 10000.0 ** (-torch.arange(0, d, 2) / d)\n"
                         "cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)\n"
                         "def rope(q):  # transformers' rotate_half form\n"
                         "    return q * cos + torch.cat([-q[..., d // 2:], q[..., :d // 2]], -1) * sin\n"
                         "x0, w = torch.randn(1, s, 2, d, requires_grad=True), torch.randn(1, 2, s, d)\n"
                         "q = torch.tanh(x0).transpose(1, 2)  # [b, h, s, d] view; tanh saves its output\n"
                         "k = torch.randn(1, 2, s, d).transpose(1, 2).contiguous().transpose(1, 2)\n"
                         "out, _ = unsloth_rope.fast_rope_embedding(q, k, cos, sin)\n"
                         "(got,) = torch.autograd.grad((out * w).sum(), x0)\n"
                         "(want,) = torch.autograd.grad((rope(torch.tanh(x0).transpose(1, 2)) * w).sum(), x0)\n"
                         "print((got - want).abs().max())  # O(1), not 1e-7"),
        "still": "float((got - want).abs().max()) > 1e-3",
    },
)
#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
EXPECTED = {
    "unsloth training/aliasing": "upstream-gradient-corrupted",
    "unsloth training/table-grad": "no-gradient",
    "unsloth-indices training/table-grad": "no-gradient",
}
