"""keras.ops.image.resize on keras' tensorflow backend (`--impl keras-tensorflow`): see keras_resize.py for the mapping,
the kernel this backend computes and the precision."""

from __future__ import annotations

from .keras_resize import install, load_backend, names, process_environ

DISTRIBUTION = "keras"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = names("tensorflow")
INSTALL = install("tensorflow")
#: set by the worker process that runs this SPEC alone, before keras is imported
PROCESS_ENVIRON = process_environ("tensorflow")
#: upstream behaviour the checks found (posenc.ecosystem's findings)
FINDINGS = ()
#: the verdicts at the pinned version: every float32 comparison that fails or errors. TF's bicubic reads
#: Keys' kernel from a 1024-entry table (resize_bicubic_op.cc, `lrintf(frac * 1024)`): where the source
#: fractions are not multiples of 1/1024 (64 -> 24: 2/3 steps; 7 -> 10: 0.7 steps) its weights are off by up to
#: ~5e-4, past float32 tolerance; 24 -> 64 (1/8 steps) is exact. No spec setting is a quantised kernel: the
#: diagnosis `kernel-table` (posenc/impl/family_diagnosis.py) names it.
EXPECTED = {
    "keras-tensorflow cubic-renormalize/64->24": "kernel-table",
    "keras-tensorflow keras-jax/7x7->10x10": "kernel-table",
}


def load():
    return load_backend("tensorflow")
