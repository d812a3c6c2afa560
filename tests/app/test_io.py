"""posenc.io: the one atomic writer, output check and comma-list parser every command uses."""

from __future__ import annotations

import doctest
import os
import stat

import pytest

import posenc.io
from posenc.errors import UsageError
from posenc.io import atomic_output, check_output, parse_choices, write_atomic


@pytest.fixture
def umask():
    """Set the process umask for one test, restored after it."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield os.umask
    os.umask(saved)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_doctests():
    assert doctest.testmod(posenc.io).failed == 0


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
@pytest.mark.parametrize("content", ["text\n", b"\x00bytes", lambda f: f.write(b"callback")])
def test_written_file_has_the_mode_of_an_ordinary_file(tmp_path, umask, mask, expected, content):
    umask(mask)
    path = tmp_path / "out.bin"
    write_atomic(path, content)
    assert mode(path) == expected  # not mkstemp's 0600
    assert path.read_bytes() in (b"text\n", b"\x00bytes", b"callback")
    assert os.listdir(tmp_path) == ["out.bin"]


def test_replaces_an_existing_file_whole(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    write_atomic(path, "new")
    assert path.read_text() == "new"


def test_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")

    def broken(f):
        f.write(b"half")
        raise RuntimeError("writer failed")

    with pytest.raises(RuntimeError, match="writer failed"):
        write_atomic(path, broken)
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["r.json"]


def test_oserror_is_usage_error_naming_the_path(tmp_path):
    path = tmp_path / "missing" / "r.json"
    with pytest.raises(UsageError, match="missing/r.json"):
        write_atomic(path, "x")

    def full(f):
        raise OSError(28, "No space left on device")

    with pytest.raises(UsageError, match=r"r\.json.*No space left"):
        write_atomic(tmp_path / "r.json", full)
    assert os.listdir(tmp_path) == []


def test_atomic_output_commits_by_name_or_not_at_all(tmp_path):
    target = tmp_path / "model.weights.h5"
    with atomic_output(target) as out:
        assert out.path.endswith(".weights.h5")  # Keras' loader insists on the suffix
        with open(out.path, "wb") as f:
            f.write(b"w")
        out.commit(str(target) + ".unverified")
    assert sorted(os.listdir(tmp_path)) == ["model.weights.h5.unverified"]
    with atomic_output(target) as out:  # no commit: nothing written, nothing left
        with open(out.path, "wb") as f:
            f.write(b"w")
    assert sorted(os.listdir(tmp_path)) == ["model.weights.h5.unverified"]


def test_check_output(tmp_path):
    assert check_output(tmp_path / "a.PNG", formats=("png", "svg")) == "png"
    with pytest.raises(UsageError, match=r"\.png, \.svg"):
        check_output(tmp_path / "a.jpg", formats=("png", "svg"))
    with pytest.raises(UsageError, match="does not exist"):
        check_output(tmp_path / "no" / "a.json")
    with pytest.raises(UsageError, match="is a directory"):
        check_output(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_check_output_read_only_directory(tmp_path):
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(UsageError, match="not writable"):
            check_output(tmp_path / "a.json")
    finally:
        tmp_path.chmod(0o755)


def test_parse_choices():
    allowed = ("torch", "tf", "jax")
    assert parse_choices(None, allowed, "--backend", default=["tf"]) == ["tf"]
    assert parse_choices("jax, torch", allowed, "--backend") == ["jax", "torch"]
    assert parse_choices(["tf,jax", "tf"], allowed, "--backend") == ["tf", "jax"]
    with pytest.raises(UsageError, match=r"unknown --backend 'mxnet'; choose from torch, tf, jax"):
        parse_choices(["torch,mxnet"], allowed, "--backend")
    with pytest.raises(UsageError, match="--backend ',' names nothing"):
        parse_choices([","], allowed, "--backend")
