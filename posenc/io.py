"""Files the commands write, and the option lists they parse: one implementation of each.

* `check_output(path, formats=...)`: fail before any work (UsageError, exit 2) when an output path
  cannot be written.
* `atomic_output(path)` / `write_atomic(path, content)`: an output file is written whole or not at
  all: into a temporary file in the target's directory, renamed over the target (`os.replace`, atomic
  on POSIX) only when complete. The result gets the mode an ordinary `open(path, "w")` would give it,
  `0o666 & ~umask` (mkstemp's 0600 is for the temporary file only); any `OSError` becomes a
  `UsageError` naming the path; the temporary file is removed whatever happens.
* Faults: a temporary file is named `.posenc-<pid>-...`; a process killed while writing (SIGKILL, the
  out-of-memory killer) cannot remove it, so the next `atomic_output` in that directory removes every
  temporary whose process is gone (`remove_stale_temporaries`). While a target is being written its
  `.posenc-lock-<name>` is locked (`flock`): a second posenc writing the same target at the same time
  fails at once with one message (UsageError) instead of racing it.
* `parse_choices(values, allowed, flag)`: `--backend torch,jax --backend tf` -> `["torch", "jax", "tf"]`;
  an unknown or an empty value is a UsageError naming it.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import tempfile
from contextlib import contextmanager, suppress

from .errors import UsageError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = ["check_output", "atomic_output", "write_atomic", "parse_choices", "parse_json_object", "file_mode", "target_lock",
           "remove_stale_temporaries", "temp_prefix"]


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


def temp_prefix(kind: str = "") -> str:
    """`.posenc-<pid>-` (or `.posenc-<kind>-<pid>-`): the prefix of this process's temporary files."""
    return f".posenc-{kind + '-' if kind else ''}{os.getpid()}-"


_TEMPORARY = re.compile(r"^\.posenc-(?:[a-z]+-)?(\d+)-")
_LOCK = ".posenc-lock-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_temporaries(directory) -> list:
    """Remove the temporary files and directories a killed posenc process left in `directory`, and
    unlocked lock files; a live process's temporaries are kept. Returns the removed paths."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in names:
        path = os.path.join(directory, name)
        match = _TEMPORARY.match(name)
        if match and int(match.group(1)) != os.getpid() and not _alive(int(match.group(1))):
            with suppress(OSError):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
                removed.append(path)
        elif name.startswith(_LOCK) and fcntl is not None:
            with suppress(OSError):
                fd = os.open(path, os.O_RDWR)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody holds it: left by a killed process
                    os.unlink(path)
                    removed.append(path)
                finally:
                    os.close(fd)
    return removed


@contextmanager
def target_lock(path, *, what: str = "output"):
    """Hold `.posenc-lock-<name>` beside `path` (flock, released by the kernel if the process dies) while
    the block writes `path`; UsageError at once if another process holds it."""
    path = str(path).rstrip(os.sep) or str(path)
    directory = os.path.dirname(os.path.abspath(path))
    lock_path = os.path.join(directory, _LOCK + os.path.basename(path))
    if fcntl is None:  # no flock (Windows): atomic renames still keep every output whole
        yield
        return
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"cannot write {what} {path!r}: another posenc process is writing it now") from None
        try:
            yield
        finally:
            with suppress(OSError):
                os.unlink(lock_path)
    finally:
        os.close(fd)


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
        with target_lock(path, what=what):
            remove_stale_temporaries(directory)
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=temp_prefix(), suffix=_temp_suffix(path))
            os.close(fd)
            yield _Output(path, tmp)
    except OSError as error:
        raise UsageError(f"cannot write {what} {path!r}: {error.strerror or error}") from error
    finally:
        if tmp is not None and os.path.lexists(tmp):
            os.unlink(tmp)


def write_atomic(path, content, *, what: str = "output") -> None:
    """Write `content` to `path` atomically: a `str` (UTF-8), `bytes`, or a callback `write(binary_file)`.

    Examples:
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

    Examples:
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


def parse_json_object(text: str, flag: str, *, what: str = "a JSON object", allow_null: bool = False):
    """A command-line option's JSON text -> the dict it holds (None for `null` when `allow_null`); a
    UsageError naming the option and the text when it is not JSON or not an object (`what` says which).

    Examples:
        >>> parse_json_object('{"rope_type": "linear", "factor": 2.0}', "--scaling")
        {'rope_type': 'linear', 'factor': 2.0}
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"{flag} {text!r} is not JSON: {error}") from None
    if not isinstance(value, dict) and not (allow_null and value is None):
        raise UsageError(f"{flag} {text!r} must be {what}")
    return value
