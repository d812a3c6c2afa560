"""Backend selection for the test suite.

`--backends torch,tf,jax,mlx` (or POSENC_TEST_BACKENDS) names the backends to test. A backend named
explicitly that is not installed or fails to import FAILS the run (never a silent skip); without the
option every installed framework is tested, and a framework that is installed but broken fails too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Shared test helpers live in tests/helpers.py (`from helpers import ...`), importable under any
# --import-mode; conftest holds only hooks and fixtures.
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from posenc.adapters import BACKENDS as ALL_BACKENDS  # noqa: E402
from posenc.adapters import DEFAULT_TORCH_COMPILE_BACKEND, BackendUnavailable, adapter  # noqa: E402
from posenc.check.registry import DTYPES, MODES  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--backends", default=os.environ.get("POSENC_TEST_BACKENDS", ""),
                     help="comma-separated backends that must be tested (torch, tf, jax, mlx); default: all installed")


def _requested(config):
    raw = config.getoption("--backends")
    if not raw:
        return None
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in ALL_BACKENDS]
    if unknown:
        raise pytest.UsageError(f"--backends: unknown backend(s) {unknown}; choose from {list(ALL_BACKENDS)}")
    return names


def selected_backends(config):
    requested = _requested(config)
    return requested if requested is not None else [b for b in ALL_BACKENDS if adapter(b).available()]


def pytest_configure(config):
    requested = _requested(config) or []
    for name in selected_backends(config):
        try:
            _ = adapter(name).module
        except BackendUnavailable as error:
            raise pytest.UsageError(f"backend {name!r} was asked for but does not import: {error}") from error
    for name in requested:
        if not adapter(name).available():
            raise pytest.UsageError(f"backend {name!r} was asked for but its framework is not installed")


def pytest_generate_tests(metafunc):
    backends = selected_backends(metafunc.config)
    taken = {name.strip() for marker in metafunc.definition.iter_markers("parametrize")
             for name in (marker.args[0].split(",") if isinstance(marker.args[0], str) else marker.args[0])}
    if "backend" in metafunc.fixturenames and "backend" not in taken:
        metafunc.parametrize("backend", [adapter(b) for b in backends], ids=backends)
    if "dtype" in metafunc.fixturenames and "dtype" not in taken:
        metafunc.parametrize("dtype", DTYPES)
    if "mode" in metafunc.fixturenames and "mode" not in taken:
        metafunc.parametrize("mode", MODES)


@pytest.fixture(scope="module")
def aot_eager():
    """The torch.compile backend of this module's jit tests: aot_eager, the same fullgraph capture as
    Inductor without its C++ code generation (~2-20 s per graph on CI's CPUs). It is the adapters' default
    (`posenc.adapters.DEFAULT_TORCH_COMPILE_BACKEND`, passed down explicitly, never through the
    environment); this fixture guards the test time against a change of that default.
    tests/backends/test_compile.py runs Inductor by passing compile_backend="inductor"."""
    assert DEFAULT_TORCH_COMPILE_BACKEND == "aot_eager", DEFAULT_TORCH_COMPILE_BACKEND
    return DEFAULT_TORCH_COMPILE_BACKEND


@pytest.fixture(scope="session")
def jit_cache():
    """Compiled functions shared by every test in the session: compile once per signature."""
    return {}


@pytest.fixture(scope="session")
def backend_names(request):
    """The names of the backends this run tests (`--backends`, or every installed one)."""
    return selected_backends(request.config)


@pytest.fixture
def require_backend(backend_names):
    """`require_backend(name)` -> that backend's package (posenc_torch, ...) for a test of one framework's
    own idiom; the test is skipped, saying why, when `--backends` does not select it."""
    def need(name):
        if name not in backend_names:
            pytest.skip(f"backend {name!r} not selected (--backends {','.join(backend_names) or 'none'})")
        return adapter(name).module

    return need
