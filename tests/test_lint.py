"""`ruff check .` is clean (the rules in pyproject.toml's [tool.ruff]: pyflakes, bugbear, import order, width
120): CI runs it as part of the test suite, and .pre-commit-config.yaml runs the same before a commit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_is_clean():
    if shutil.which("ruff") is None and not os.environ.get("CI"):
        pytest.skip("ruff is not installed (pip install -c constraints.txt ruff)")
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
