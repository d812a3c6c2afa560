"""The environment of a `posenc check` run: the device every framework's inputs are placed on and the
backends' persistent compilation caches, both set for the run only and inherited by its workers."""

from __future__ import annotations

import contextlib
import os

from ..adapters import adapter, check_device_name
from ..errors import UsageError

__all__ = ["resolve_device", "run_environ", "compile_cache", "default_compile_cache"]


def resolve_device(name, backends, *, impls) -> str:
    """The `--device` every framework's inputs go to; UsageError when it is not a device name, or a selected
    backend (with `--impl`: every installed framework) cannot place arrays there, naming it and why."""
    try:
        device = check_device_name(name)
    except ValueError as error:
        raise UsageError(f"--device {name!r}: {error}") from None
    if device == "cpu":
        return device
    frameworks = list(backends) + ([b for b in ("torch", "jax", "tf", "mlx") if b not in backends] if impls else [])
    installed = [b for b in frameworks if adapter(b).available()]
    reasons = {b: adapter(b).device_refusal(device) for b in installed}
    missing = {b: why for b, why in reasons.items() if why}
    if not installed or (backends and missing) or (not backends and len(missing) == len(installed)):
        detail = "; ".join(f"{b}: {why}" for b, why in missing.items()) or "no framework that could place it is installed"
        raise UsageError(f"--device {device} is not available: {detail}")
    return device


@contextlib.contextmanager
def run_environ(values):
    """`values` in the environment for the run only (the workers it spawns inherit them)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def default_compile_cache() -> str:
    """`$POSENC_COMPILE_CACHE`, else `$XDG_CACHE_HOME/posenc/compile` (`~/.cache/posenc/compile`)."""
    if os.environ.get("POSENC_COMPILE_CACHE"):
        return os.environ["POSENC_COMPILE_CACHE"]
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "posenc", "compile")


@contextlib.contextmanager
def compile_cache(directory, backends):
    """Each backend's persistent compilation cache under `directory` ("none": off) in the environment the
    suite's workers start with (and an in-process run's first framework import reads), for the run only;
    a variable the user set already is kept."""
    added = {}
    if directory != "none":
        for name in backends:
            for key, value in adapter(name).compile_cache_environ(directory).items():
                if key not in os.environ:
                    added[key] = os.environ[key] = value
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


