"""`posenc check` and MLX's presence: a machine without MLX skips it with the reason, `--require mlx` makes
that a failure, and a Linux `mlx` without its CPU backend is a broken install reported with the fix.

The machine running the suite has MLX, so its absence is simulated on the adapter (`available()`, which
`posenc.check.run.run` asks before importing anything); the cases are the registry's own.
"""

from __future__ import annotations

import pytest

from posenc.adapters import BackendUnavailable, adapter
from posenc.check.registry import all_cases
from posenc.check.run import run


@pytest.fixture
def cases():
    return [c for c in all_cases() if c.family == "sinusoidal"][:2]


@pytest.fixture
def without_mlx(monkeypatch):
    mlx = adapter("mlx")
    monkeypatch.setattr(type(mlx), "available", lambda self: False)
    return mlx


def test_a_machine_without_mlx_skips_it_with_the_reason(cases, without_mlx):
    records = run(cases, backends=["mlx"], dtypes=["float32"], modes=["eager", "jit"])
    assert records and {r.status for r in records} == {"skip"}
    assert {r.message for r in records} == {"not installed"}


def test_require_mlx_makes_its_absence_a_failure(cases, without_mlx):
    records = run(cases, backends=["mlx"], dtypes=["float32"], modes=["eager"], require=["mlx"])
    assert records and {r.status for r in records} == {"error"}
    assert {r.message for r in records} == {"required backend is not installed"}


def test_installed_mlx_runs_eager_and_compiled(cases):
    pytest.importorskip("mlx.core")
    records = run(cases, backends=["mlx"], dtypes=["float32"], modes=["eager", "jit"], require=["mlx"])
    assert {(r.mode, r.status) for r in records} == {("eager", "pass"), ("jit", "pass")}


def test_linux_mlx_without_its_backend_library_names_the_fix(monkeypatch):
    """`pip install mlx` alone on Linux fails at import with a missing libmlx.so: the adapter's error says
    to install mlx[cpu] (simulated: the import error MLX 0.32 raises there)."""
    mlx = adapter("mlx")

    def broken(name):
        raise ImportError("libmlx.so: cannot open shared object file: No such file or directory")

    monkeypatch.setattr("importlib.import_module", broken)
    with pytest.raises(BackendUnavailable, match=r"mlx\[cpu\]"):
        mlx._load()
