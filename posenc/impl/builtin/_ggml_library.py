"""ggml-python, imported once for the `ggml` built-ins (RoPE in ggml.py, ALiBi in ggml_alibi.py)."""

from __future__ import annotations

from ..implementation import ImplementationUnavailable

__all__ = ["load_ggml"]


def load_ggml():
    """The `ggml` module with `ggml.utils`; ImplementationUnavailable when ggml-python does not load (a
    missing build of its shared library is an OSError)."""
    try:
        import ggml
        import ggml.utils
    except (ImportError, OSError) as error:
        raise ImplementationUnavailable(f"--impl ggml: ggml-python does not load ({error}); "
                                        f"pip install ggml-python builds it from source") from error
    return ggml
