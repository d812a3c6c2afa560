"""Figure helpers of `posenc plot` and `posenc experiment --plot`: matplotlib without pyplot, saved atomically."""

from __future__ import annotations

from .errors import UsageError
from .io import check_output, write_atomic

__all__ = ["FIGURE_FORMATS", "save_figure", "new_figure", "require_matplotlib", "suptitle"]

FIGURE_FORMATS = ("png", "svg", "pdf")


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
    """Save `figure` as PNG, SVG or PDF by the suffix of `path`, written whole or not at all."""
    fmt = check_output(path, formats=FIGURE_FORMATS, what="figure")
    # svgs stay reproducible byte for byte: no creation date, fixed hash salt for element ids
    metadata = {"Date": None} if fmt == "svg" else {"Software": None} if fmt == "png" else {"CreationDate": None}
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "posenc"}):
        write_atomic(path, lambda f: figure.savefig(f, format=fmt, dpi=dpi, metadata=metadata), what="figure")
