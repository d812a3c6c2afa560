"""`--impl SPEC` -> Implementations: a built-in's package name, `module:attr` or `path/to/file.py:attr`."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

from .builtin import BUILTINS, builtin_module, builtin_status, load_builtin
from .implementation import Implementation, ImplementationUnavailable

__all__ = ["resolve", "declared_names", "process_environ", "split_env", "ENV", "DEFAULT_ATTR", "ImplementationSpecError"]

#: The environment variable naming implementations, as `--impl` does (comma-separated).
ENV = "POSENC_IMPL"
DEFAULT_ATTR = "IMPL"


class ImplementationSpecError(ValueError):
    """A SPEC that names nothing usable: unimportable, a missing attribute, not an Implementation."""


def split_env(value: str | None) -> list[str]:
    """The SPECs of a `POSENC_IMPL` value: comma-separated, blanks dropped (":" belongs to a SPEC)."""
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _split(spec: str) -> tuple[str, str]:
    """`target, attr`: the last ':' separates an attribute when what follows is an identifier (so a
    Windows drive letter `C:\\x.py` stays whole)."""
    head, sep, tail = spec.rpartition(":")
    if sep and tail.isidentifier() and head and not (len(head) == 1 and head.isalpha()):
        return head, tail
    return spec, DEFAULT_ATTR


def _load_file(path: Path, spec: str):
    if not path.is_file():
        raise ImplementationSpecError(f"--impl {spec}: file {str(path)!r} does not exist")
    name = f"posenc_user_impl_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.resolve().parent))  # the user's file may import its neighbours
    try:
        loader_spec.loader.exec_module(module)
    except Exception as error:
        sys.modules.pop(name, None)
        raise ImplementationSpecError(f"--impl {spec}: importing {str(path)!r} failed: "
                                      f"{type(error).__name__}: {error}") from error
    finally:
        sys.path.remove(str(path.resolve().parent))
    return module


def _load_module(target: str, spec: str):
    try:
        return importlib.import_module(target)
    except Exception as error:
        raise ImplementationSpecError(f"--impl {spec}: cannot import module {target!r}: "
                                      f"{type(error).__name__}: {error}") from error


def declared_names(spec: str) -> tuple[str, ...] | None:
    """The implementation names a built-in SPEC declares (its module's `NAMES`), without importing its
    library; None for a SPEC that is not a built-in (only importing it names what it holds).

    Raises:
        posenc.impl.ImplementationUnavailable: a built-in whose library is not installed.
    """
    spec = spec.strip()
    if spec not in BUILTINS:
        return None
    module = builtin_module(spec)
    installed, _ = builtin_status(spec)
    if not installed:
        raise ImplementationUnavailable(f"--impl {spec}: {module.DISTRIBUTION} is not installed "
                                        f"(pip install {module.DISTRIBUTION})")
    names = getattr(module, "NAMES", None)
    names = names() if callable(names) else names  # a built-in whose names depend on the device
    return None if names is None else tuple(names)


def process_environ(spec: str) -> dict:
    """The environment a process that runs only `spec` sets before importing anything: a built-in's
    `PROCESS_ENVIRON` (keras' backend, read once at import), else nothing. A library's `load()` never sets
    process-wide state itself: in a shared process (a test session, a user's program) it takes what it finds."""
    spec = spec.strip()
    return dict(getattr(builtin_module(spec), "PROCESS_ENVIRON", {})) if spec in BUILTINS else {}


def resolve(spec: str) -> tuple[Implementation, ...]:
    """The Implementations `spec` names.

    * a key of `posenc.impl.builtin.BUILTINS` (`transformers`, `onnxruntime`, ...): its `load()`;
    * `path/to/file.py[:attr]` (a path ending in `.py`, or an existing file) or `module[:attr]`: the
      attribute (default `IMPL`), an `Implementation` or a list/tuple of them.

    Raises:
        ImplementationSpecError: the module or file does not import, the attribute is missing, or its
            value is not an Implementation (the message names the SPEC).
        posenc.impl.ImplementationUnavailable: a built-in whose library is not installed.
    """
    spec = spec.strip()
    if spec in BUILTINS:
        return load_builtin(spec)
    target, attr = _split(spec)
    if target.endswith(".py") or os.sep in target or (os.altsep and os.altsep in target):
        module = _load_file(Path(target), spec)
    else:
        module = _load_module(target, spec)
    if not hasattr(module, attr):
        raise ImplementationSpecError(f"--impl {spec}: {target!r} has no attribute {attr!r}")
    value = getattr(module, attr)
    values = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    bad = [v for v in values if not isinstance(v, Implementation)]
    if bad or not values:
        raise ImplementationSpecError(f"--impl {spec}: {target}:{attr} is {type(bad[0] if bad else value).__name__}"
                                      f", not a posenc.impl.Implementation")
    return values
