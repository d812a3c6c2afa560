"""Checking an implementation that is not one of posenc's backends (`posenc check --impl`).

`Implementation` declares what it provides; `posenc.impl.builtin` holds the adapters of libraries users
run (transformers, keras-hub, ONNX Runtime, MLX, ...); `posenc.impl.resolve` turns a `--impl` SPEC into
Implementations; `posenc.impl.precision` holds the precision classes' tolerances and the angle error,
`posenc.impl.diagnosis` the known mismatches. `posenc.check.run_impl.run_implementations` runs the suite's
cases through them. See docs/impl.md.
"""

from .implementation import ANGLE_CLASSES, Implementation, ImplementationUnavailable, NotSupported, accepts_keyword
from .rotary_kernel import hf_tables

__all__ = ["Implementation", "ANGLE_CLASSES", "NotSupported", "ImplementationUnavailable", "accepts_keyword",
           "hf_tables"]
