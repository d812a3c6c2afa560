"""Checking an implementation that is not one of posenc's backends (`posenc check --impl`).

`Implementation` declares what it provides; `posenc.impl.builtin` holds the adapters of libraries users
run (transformers, keras-hub, ONNX Runtime, MLX, ...); `resolve` turns a `--impl` SPEC into
Implementations; `posenc.impl.run` runs the suite's cases through them with the precision class's
tolerance, the angle error and a diagnosis of every failure. See docs/impl.md.
"""

from .implementation import ANGLE_CLASSES, Implementation, ImplementationUnavailable, NotSupported, accepts_keyword
from .rotary_kernel import hf_tables

__all__ = ["Implementation", "ANGLE_CLASSES", "NotSupported", "ImplementationUnavailable", "accepts_keyword",
           "hf_tables"]
