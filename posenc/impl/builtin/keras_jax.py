"""keras.ops.image.resize on keras' jax backend (`--impl keras-jax`): see keras_resize.py for the mapping,
the kernel this backend computes and the precision."""

from __future__ import annotations

from .keras_resize import install, load_backend, names, process_environ

DISTRIBUTION = "keras"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = names("jax")
INSTALL = install("jax")
#: set by the worker process that runs this SPEC alone, before keras is imported
PROCESS_ENVIRON = process_environ("jax")
#: upstream behaviour the checks found (posenc.ecosystem's findings)
FINDINGS = ()
#: the verdicts at the pinned version: every float32 comparison that fails or errors
EXPECTED = {}


def load():
    return load_backend("jax")
