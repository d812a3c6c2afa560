"""keras 3's `keras.ops.image.resize(images, size, interpolation, antialias)` (keras 3.15.1) as the contract's
`resize_table` and `resize_grid`, on one keras backend per built-in: `keras-numpy`, `keras-jax`,
`keras-tensorflow`, `keras-torch` (modules keras_numpy.py ... here; this module holds what they share).

keras reads `KERAS_BACKEND` once, when it is imported, so choosing it is the process owner's business:
each built-in declares `PROCESS_ENVIRON = {"KERAS_BACKEND": name}`, which the worker process `posenc check
--impl` runs each SPEC in applies before anything imports keras, and the functions then call the public
`keras.ops.image.resize`. `load()` itself never changes the environment: in a process where keras runs
another backend (a test session, a user's program), it calls that backend's own
`keras.src.backend.<name>.image.resize`: the function `keras.ops.image.resize` hands eager arrays to on that
backend after checking the shapes (keras/src/ops/image.py `resize` -> `_resize` -> `backend.image.resize`);
the description says which.

Mapping of the contract (channels_last images; float32 numpy in and out):
* `resize_table(table [L, dim], new_len)` -> the image `[1, 1, L, dim]` resized to `(1, new_len)`: the wide
  orientation (torch's antialiased kernel gets a `[.., L, 1]` image wrong, torch-interpolate's finding);
* `resize_grid` -> the grid rows as `[1, old_h, old_w, dim]` resized to `new_grid`; prefix rows copied;
* `method` "linear" / "cubic" / "nearest" -> "bilinear" / "bicubic" / "nearest"; `antialias` passed on.
  keras has no `align_corners` and no scale factor: `align_corners=True` and `scale` are skips.
* The kernel is the backend's, which the case must name (else a skip, NotSupported, with the reason):
  - torch backend (`F.interpolate`): bicubic a = -0.75 with clamped borders; antialiased a = -0.5;
  - numpy, jax (`jax.image.scale_and_translate`), tensorflow (`tf.image.resize`): a = -0.5 with
    `border="renormalize"` (taps outside dropped, weights renormalised, no widening); antialiased a = -0.5.
  "linear" is the same on every backend and border (see `posenc_np.resize_weights`).

Precision: float32 sums (keras' image ops run in the input dtype). TensorFlow's bicubic without antialias
(core/kernels/image/resize_bicubic_op.cc, TF 2.21) reads the kernel from a 1024-entry table at
`lrintf(frac * 1024)`, so its weights are off by up to |W'| / 2048 (a few 1e-4): it fails float32 tolerance
by design, which the expected verdicts record.
"""

from __future__ import annotations

import importlib
import os

import numpy as np

from ...adapters import NotSupported
from ..implementation import Implementation, ImplementationUnavailable

DISTRIBUTION = "keras"
BACKENDS = ("numpy", "jax", "tensorflow", "torch")
_INTERPOLATION = {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest"}
#: the cubic kernel (cubic_a, border) each backend computes without antialias (probed: tests/reference/
#: test_keras_resize_reference.py); antialiased, every backend is torch's AA kernel with a = -0.5
_CUBIC = {"numpy": (-0.5, "renormalize"), "jax": (-0.5, "renormalize"), "tensorflow": (-0.5, "renormalize"),
          "torch": (-0.75, "clamp")}


def names(backend: str) -> tuple[str, ...]:
    return (f"keras-{backend}",)


def process_environ(backend: str) -> dict:
    """What a process that runs only `keras-<backend>` sets before importing keras."""
    return {"KERAS_BACKEND": backend}


def _resize_function(backend: str):
    """`(resize, how)`: `keras.ops.image.resize` with `KERAS_BACKEND=backend`, or that backend's own
    `keras.src.backend.<backend>.image.resize` when keras runs another backend in this process."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} must be one of {BACKENDS}")
    try:
        import keras
    except ImportError as error:  # keras itself, or the backend's framework (jax, tensorflow, torch)
        chosen = os.environ.get("KERAS_BACKEND", "its default")
        raise ImplementationUnavailable(f"--impl keras-{backend}: keras with KERAS_BACKEND={chosen} does not "
                                        f"import ({error}); {install(backend)}") from error
    active = keras.backend.backend()
    if active == backend:
        return keras.ops.image.resize, "keras.ops.image.resize"
    try:
        module = _import_other_backend(backend)
    except ImportError as error:
        raise ImplementationUnavailable(
            f"--impl keras-{backend}: keras was imported with KERAS_BACKEND={active!r} in this process and "
            f"its {backend} backend does not import ({error}); run it in a fresh process") from error
    return module.resize, f"keras.src.backend.{backend}.image.resize (keras runs {active} here)"


def _import_other_backend(backend: str):
    """`keras.src.backend.<backend>.image`, leaving the running backend's namespace as it was: importing the
    package `keras.src.backend.numpy` binds it as the attribute `numpy` of `keras.src.backend`, where keras
    keeps the running backend's numpy ops (`from keras.src.backend.tensorflow import numpy`), and every later
    `keras.ops` call in the process would fail ("module 'keras.src.backend.numpy' has no attribute 'ones'")."""
    parent = importlib.import_module("keras.src.backend")
    missing = object()
    before = parent.__dict__.get(backend, missing)
    try:
        return importlib.import_module(f"keras.src.backend.{backend}.image")
    finally:
        if before is missing:
            parent.__dict__.pop(backend, None)
        else:
            setattr(parent, backend, before)


def _check_kernel(backend, method, align_corners, cubic_a, antialias, scale, border):
    if method not in _INTERPOLATION:
        raise NotSupported(f"keras.ops.image.resize has no method={method!r}")
    if align_corners:
        raise NotSupported("keras.ops.image.resize has no align_corners (half-pixel centres only)")
    if scale is not None:
        raise NotSupported("keras.ops.image.resize takes a size, not a scale factor")
    if method != "cubic":
        return
    want = (-0.5, None) if antialias else _CUBIC[backend]
    if cubic_a != want[0] or (want[1] is not None and border != want[1]):
        raise NotSupported(f"keras' bicubic on the {backend} backend is cubic_a={want[0]}"
                           + ("" if antialias else f", border={want[1]!r}")
                           + f" (antialias={antialias}), not cubic_a={cubic_a}, border={border!r}")


def _to_numpy(value):
    if hasattr(value, "detach"):
        value = value.detach().cpu()
    return np.asarray(value)


def make_functions(backend: str, resize) -> dict:
    """The contract's `resize_table` and `resize_grid` through `resize` on `backend`."""

    def run(image, size, method, antialias):
        if backend == "torch":
            import torch

            image = torch.from_numpy(np.ascontiguousarray(image))
        out = resize(image, size, interpolation=_INTERPOLATION[method], antialias=antialias,
                     data_format="channels_last")
        return _to_numpy(out)

    def resize_table(table, new_len, *, method="linear", align_corners=False, cubic_a=-0.75, antialias=False,
                     scale=None, border="clamp"):
        _check_kernel(backend, method, align_corners, cubic_a, antialias, scale, border)
        table = np.asarray(table)
        out = run(table[None, None], (1, int(new_len)), method, antialias)
        return out[0, 0].astype(table.dtype)

    def resize_grid(table, old_grid, new_grid, *, method="cubic", align_corners=False, cubic_a=-0.75,
                    antialias=False, scale=None, prefix_tokens=0, border="clamp"):
        _check_kernel(backend, method, align_corners, cubic_a, antialias, scale, border)
        table = np.asarray(table)
        (old_h, old_w), (new_h, new_w) = old_grid, new_grid
        grid = table[prefix_tokens:].reshape(1, int(old_h), int(old_w), -1)
        out = run(grid, (int(new_h), int(new_w)), method, antialias)
        return np.concatenate([table[:prefix_tokens], out[0].reshape(int(new_h) * int(new_w), -1)]).astype(table.dtype)

    return {"resize_table": resize_table, "resize_grid": resize_grid}


def load_backend(backend: str) -> Implementation:
    """The Implementation `keras-<backend>`."""
    resize, how = _resize_function(backend)
    import keras

    return Implementation(f"keras-{backend}", "numpy", make_functions(backend, resize), version=keras.__version__,
                          dtypes=("float32",), angles="float32", differentiable=False,
                          description=f"{how} on keras' {backend} backend (bicubic, bilinear, nearest, antialias)")


def install(backend: str) -> str:
    extra = {"numpy": "", "jax": " jax==0.10.2", "tensorflow": " tensorflow-cpu==2.21.0",
             "torch": " torch==2.13.0"}[backend]
    return (f"`pip install keras==3.15.1{extra}`; `posenc check --impl keras-{backend}` runs keras with "
            f"KERAS_BACKEND={backend}")
