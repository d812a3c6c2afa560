"""posenc: the application on top of the specification and its backends.

`posenc check` (the cross-framework equivalence suite), `posenc port` / `posenc doctor` (checkpoints
moved between frameworks, verified), `posenc plot` and `posenc experiment`. The layers, imports
pointing one way only:

    posenc_np (spec)  <-  posenc_torch | posenc_tf | posenc_jax (backends)  <-  posenc (this package)

Nothing here is imported by the spec or the backends; frameworks are imported lazily, by the
functions that need them (`posenc.adapters` is the only module that names them).
"""

__version__ = "0.1.0"
