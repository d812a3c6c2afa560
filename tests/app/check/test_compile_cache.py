"""`posenc check --compile-cache DIR`: JAX's persistent compilation cache under DIR, reused by the next run;
`none` keeps nothing. (docs/performance.md: a warm cache saves most of JAX's share of the default run.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from posenc import adapters

RUN = [sys.executable, "-m", "posenc", "check", "--encoding", "alibi", "--backend", "jax", "--dtype", "float32",
       "--quiet", "--jobs", "1"]


def _check(*extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION", "JAX_PERSISTENT"))}
    proc = subprocess.run([*RUN, *extra], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


def test_compile_cache_is_written_and_reused(tmp_path):
    if not adapters.adapter("jax").available():
        pytest.skip("jax is not installed")
    cache = tmp_path / "cache"
    first = _check("--compile-cache", str(cache))
    entries = sorted(p.name for p in (cache / "jax").iterdir())
    assert entries, "JAX wrote no compiled program into the cache"
    assert _check("--compile-cache", str(cache)) == first  # the same verdicts from the reused programs
    assert sorted(p.name for p in (cache / "jax").iterdir()) == entries  # nothing compiled anew


def test_compile_cache_none_keeps_nothing(tmp_path, monkeypatch):
    if not adapters.adapter("jax").available():
        pytest.skip("jax is not installed")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("POSENC_COMPILE_CACHE", raising=False)
    _check("--compile-cache", "none")
    assert not (tmp_path / "posenc").exists()
    _check()  # the default: under $XDG_CACHE_HOME
    assert any((tmp_path / "posenc" / "compile" / "jax").iterdir())


def test_the_cache_settings_do_not_outlive_the_run(tmp_path, monkeypatch):
    """An in-process `posenc check` sets the cache variables for its run only (a later framework import in the
    same process, e.g. the next test, must not inherit them)."""
    from posenc.cli import main

    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    assert main(RUN[3:] + ["--compile-cache", str(tmp_path / "cache")]) == 0
    assert "JAX_COMPILATION_CACHE_DIR" not in os.environ
