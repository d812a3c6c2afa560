"""Files the commands write, and the option lists they parse: one implementation of each.

* `check_output(path, formats=...)`: fail before any work (UsageError, exit 2) when an output path
  cannot be written.
* `atomic_output(path)` / `write_atomic(path, content)`: an output file is written whole or not at
  all: into a temporary file in the target's directory, renamed over the target (`os.replace`, atomic
  on POSIX) only when complete. The result gets the mode an ordinary `open(path, "w")` would give it,
  `0o666 & ~umask` (mkstemp's 0600 is for the temporary file only); any `OSError` becomes a
  `UsageError` naming the path; the temporary file is removed whatever happens.
* `parse_choices(values, allowed, flag)`: `--backend torch,jax --backend tf` -> `["torch", "jax", "tf"]`;
  an unknown or an empty value is a UsageError naming it.
"""

from __future__ import annotations

import os
import pathlib
import tempfile
from contextlib import contextmanager

from .errors import UsageError

__all__ = ["check_output", "atomic_output", "write_atomic", "parse_choices", "file_mode"]


def check_output(path, *, formats=None, what: str = "output") -> str:
    """Fail early (UsageError) when `path` cannot be written.

    Checks: the directory exists and is writable, `path` is not a directory, and (with `formats`, a
    sequence of suffixes without the dot) the suffix is one of them. Returns the suffix, lower case,
    without the dot.
    """
    path = str(path)
    directory = os.path.dirname(os.path.abspath(path))
    suffix = os.path.splitext(path)[1].lower().lstrip(".")
    if formats is not None and suffix not in formats:
        raise UsageError(f"cannot write {what} {path!r}: the suffix must be one of "
                         f"{', '.join('.' + f for f in formats)}")
    if not os.path.isdir(directory):
        raise UsageError(f"cannot write {what} {path!r}: directory {directory!r} does not exist")
    if os.path.isdir(path):
        raise UsageError(f"cannot write {what} {path!r}: it is a directory")
    if not os.access(directory, os.W_OK):
        raise UsageError(f"cannot write {what} {path!r}: directory {directory!r} is not writable")
    return suffix


def file_mode() -> int:
    """The mode `open(path, "w")` gives a new file: 0o666 minus the process's umask."""
    mask = os.umask(0)  # the only portable way to read the umask is to set it; restored at once
    os.umask(mask)
    return 0o666 & ~mask


class _Output:
    """The temporary file of one `atomic_output`: write to `.path`, then `commit()`."""

    def __init__(self, target: str, path: str):
        self.target, self.path, self.committed = target, path, None

    def commit(self, final=None) -> str:
        """Give the temporary file the ordinary mode and rename it to `final` (default: the target)."""
        final = self.target if final is None else str(final)
        os.chmod(self.path, file_mode())
        os.replace(self.path, final)
        self.committed = final
        return final


def _temp_suffix(path: str) -> str:
    # keep the target's (double) suffix: Keras' load_weights, used to verify a port, insists on
    # `.weights.h5`, and matplotlib picks nothing from it but a reader may
    return ".tmp" + "".join(pathlib.PurePath(path).suffixes[-2:])


@contextmanager
def atomic_output(path, *, what: str = "output"):
    """Context manager: yields an object whose `.path` is a temporary file beside `path`.

    Write to `.path` (by name: h5py, torch.save, safetensors...), then call `.commit()` to rename it to
    `path`, or `.commit(other)` to another name in the same directory (a port that failed verification
    keeps its output aside as `TARGET.unverified`). Leaving the block without a commit, normally or by
    an exception, deletes the temporary file. An `OSError` from any step is a UsageError naming `path`.
    """
    path = str(path)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".posenc-", suffix=_temp_suffix(path))
        os.close(fd)
        yield _Output(path, tmp)
    except OSError as error:
        raise UsageError(f"cannot write {what} {path!r}: {error.strerror or error}") from error
    finally:
        if tmp is not None and os.path.lexists(tmp):
            os.unlink(tmp)


def write_atomic(path, content, *, what: str = "output") -> None:
    """Write `content` to `path` atomically: a `str` (UTF-8), `bytes`, or a callback `write(binary_file)`.

    Example:
        >>> import os, tempfile
        >>> target = os.path.join(tempfile.mkdtemp(), "report.json")
        >>> write_atomic(target, '{"passed": 3}\\n')
        >>> open(target).read()
        '{"passed": 3}\\n'
    """
    with atomic_output(path, what=what) as out:
        with open(out.path, "wb") as f:
            if isinstance(content, str):
                f.write(content.encode("utf-8"))
            elif isinstance(content, (bytes, bytearray, memoryview)):
                f.write(content)
            else:
                content(f)
        out.commit()


def parse_choices(values, allowed, flag: str, *, default=None) -> list | None:
    """Comma-separated, repeatable option values -> the chosen names, in order, without repeats.

    `values` is a string or a list of strings (argparse's `action="append"`); None (the option not
    given) returns `default`. An unknown name, or a value that names nothing (`--backend ,`), is a
    UsageError naming it and the choices.

    Example:
        >>> parse_choices(["torch,jax", "tf", "jax"], ("torch", "tf", "jax"), "--backend")
        ['torch', 'jax', 'tf']
    """
    if values is None:
        return default
    if isinstance(values, str):
        values = [values]
    chosen = [v.strip() for value in values for v in value.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in allowed]
    if unknown:
        raise UsageError(f"unknown {flag} {', '.join(map(repr, unknown))}; choose from {', '.join(allowed)}")
    if not chosen:
        raise UsageError(f"{flag} {','.join(values)!r} names nothing; choose from {', '.join(allowed)}")
    return list(dict.fromkeys(chosen))
