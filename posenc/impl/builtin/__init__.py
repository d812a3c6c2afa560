"""The built-in implementations: adapters of libraries users run, named by their package name.

Each is a module `posenc.impl.builtin.<name with underscores>` exposing

* `DISTRIBUTION`: the pip distribution whose presence and version `posenc check --impl list` reports;
* `NAMES`: the names of the Implementations `load()` returns (a tuple, or a function of none returning one
  where they depend on the device), so `posenc check` names a SPEC's records without importing its library:
  the library is imported once, in the SPEC's worker;
* `INSTALL`: the install recipe; `FINDINGS`: upstream behaviour the checks found, each a dict with
  `implementation`, `title`, `text`, a minimal `reproduction` and `still` (`posenc.ecosystem` gathers them).
  `reproduction` is a standalone script that needs only the library (and NumPy/torch), never posenc: its
  reference values are a few lines of plain math, and the lines a library needs to import on a CPU are in
  it (Triton's `TRITON_INTERPRET=1` set before triton is imported, a kernel file loaded by path, package
  stubs); it prints the telling number. `still` is a Python expression, evaluated in the namespace the
  script leaves, that is True while the upstream behaviour persists;
  tests/app/impl/test_findings_reproduce.py runs each in a fresh interpreter and fails once it is False;
* `load() -> Implementation | tuple[Implementation, ...]`: the adapter (several when the library has
  several entry points worth checking apart, e.g. two ops), raising `ImplementationUnavailable` (an
  ImportError) naming the distribution when it is not installed.

A module imports its library only in `load()`, so listing the built-ins imports none of them.
"""

from __future__ import annotations

import importlib
import importlib.metadata

from ..implementation import Implementation, ImplementationUnavailable

__all__ = ["BUILTINS", "builtin_module", "load_builtin", "builtin_status"]

#: package name -> module under posenc.impl.builtin, in `--impl list` order
BUILTINS = {
    "transformers": "transformers",
    "keras-hub": "keras_hub",
    "onnxruntime": "onnxruntime",
    "mlx": "mlx",
    "mlx-lm": "mlx_lm",
    "ggml": "ggml",
    "gemma": "gemma",
    "torchtune": "torchtune",
    "vllm": "vllm",
    "vllm-alibi": "vllm_alibi",
    "flash-attn": "flash_attn",
    "flash-attn-alibi": "flash_attn_alibi",
    "liger-kernel": "liger_kernel",
    "transformer-engine": "transformer_engine",
    "transformer-engine-fused": "transformer_engine_fused",
    "xformers": "xformers",
    "diffusers": "diffusers",
    "megatron-core": "megatron_core",
    "unsloth": "unsloth",
    "transformers-bias": "transformers_bias",
    "attn-gym": "attn_gym",
    "torch": "torch_interpolate",
    "timm": "timm",
    "open-clip": "open_clip",
    "keras-numpy": "keras_numpy",
    "keras-jax": "keras_jax",
    "keras-tensorflow": "keras_tensorflow",
    "keras-torch": "keras_torch",
}


def builtin_module(name: str):
    """The module of built-in `name` (a key of `BUILTINS`)."""
    if name not in BUILTINS:
        raise ValueError(f"{name!r} is not a built-in implementation; built-ins: {', '.join(BUILTINS)}")
    return importlib.import_module(f"{__name__}.{BUILTINS[name]}")


def builtin_status(name: str) -> tuple[bool, str | None]:
    """`(installed, version)` of built-in `name`'s distribution (version None when not installed)."""
    try:
        module = builtin_module(name)
    except ImportError:  # the adapter module itself is missing or broken: nothing can run
        return False, None
    try:
        return True, importlib.metadata.version(module.DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return False, None


def load_builtin(name: str) -> tuple[Implementation, ...]:
    """The Implementations of built-in `name`; ImplementationUnavailable when its library is missing."""
    module = builtin_module(name)
    installed, _ = builtin_status(name)
    if not installed:
        raise ImplementationUnavailable(f"--impl {name}: {module.DISTRIBUTION} is not installed "
                                        f"(pip install {module.DISTRIBUTION})")
    impls = module.load()
    impls = impls if isinstance(impls, (tuple, list)) else (impls,)
    for impl in impls:
        if not isinstance(impl, Implementation):
            raise TypeError(f"posenc.impl.builtin.{BUILTINS[name]}.load() returned {impl!r}, not an Implementation")
    return tuple(impls)
