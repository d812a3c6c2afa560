"""Output files of the tools: checked before any work starts, written whole or not at all."""

from __future__ import annotations

import os
import tempfile

from ..errors import UsageError

__all__ = ["FIGURE_FORMATS", "check_output", "write_text", "save_figure", "new_figure", "require_matplotlib",
           "suptitle"]

FIGURE_FORMATS = ("png", "svg", "pdf")


def check_output(path: str, *, formats=None, what: str = "output") -> str:
    """Fail early (UsageError) when `path` cannot be written: missing or read-only directory, a directory
    at the path, or (with `formats`) a suffix that is not one of them. Returns the suffix without the dot."""
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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _replace_atomically(path: str, write) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".posenc-", suffix=os.path.splitext(path)[1])
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a saved figure is an ordinary file
        os.replace(tmp, path)
    except OSError as error:
        raise UsageError(f"cannot write {path!r}: {error.strerror}") from error
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path: str, text: str) -> None:
    _replace_atomically(path, lambda f: f.write(text.encode()))


def require_matplotlib() -> None:
    """UsageError, before any work, when matplotlib (or one of its own dependencies) does not import."""
    try:
        import matplotlib.backends.backend_agg  # noqa: F401
    except ImportError as error:
        raise UsageError(f"figures need matplotlib, which does not import here ({error}); install the plot "
                         f"extra: pip install 'posenc[plot]'") from error


def new_figure(width: float, height: float):
    """A matplotlib Figure on the Agg canvas: no pyplot, no global state, no display needed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def suptitle(figure, text: str):
    figure.suptitle(text, fontsize="medium")


def save_figure(figure, path: str, *, dpi: int = 150) -> None:
    fmt = check_output(path, formats=FIGURE_FORMATS, what="figure")
    # svgs stay reproducible byte for byte: no creation date, fixed hash salt for element ids
    metadata = {"Date": None} if fmt == "svg" else {"Software": None} if fmt == "png" else {"CreationDate": None}
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "posenc"}):
        _replace_atomically(path, lambda f: figure.savefig(f, format=fmt, dpi=dpi, metadata=metadata))
