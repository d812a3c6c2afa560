"""Loading a library's module files by path, once: for libraries whose package `__init__` needs a CUDA
extension, a heavy dependency or a CUDA torchvision (flash-attn, Transformer Engine, torchtune, gemma, timm),
the adapter executes only the files it needs."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

from ..implementation import ImplementationUnavailable

__all__ = ["package_dir", "module_file", "exec_file"]


def package_dir(package: str, *, missing: str) -> Path:
    """The directory of installed top-level `package`, found without importing it (an `__init__` that needs
    a CUDA extension or a heavy dependency is never run); ImplementationUnavailable(`missing`) if absent."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImplementationUnavailable(missing)
    return Path(list(spec.submodule_search_locations)[0])


@functools.cache
def module_file(package: str, *parts: str, missing: str):
    """The module file `package/parts...` executed once as a module of its own (not entered in `sys.modules`,
    so it never shadows the package); ImplementationUnavailable(`missing`) when the package is absent."""
    path = package_dir(package, missing=missing).joinpath(*parts)
    return exec_file(path, "_posenc_" + "_".join((package, *parts)).removesuffix(".py").replace(".", "_"))


def exec_file(path, name: str):
    """Execute the Python file `path` as a module called `name` (not entered in `sys.modules`)."""
    loader = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module
