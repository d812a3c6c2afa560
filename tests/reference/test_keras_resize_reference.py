"""keras 3.15.1 `keras.ops.image.resize` on each keras backend against the spec's resize weights, each backend
in its own interpreter (KERAS_BACKEND is read once, when keras is imported).

The probe resizes identity images: row j of `eye(L)` laid out `[1, L, L, 1]` and resized along the height to
N gives the `[N, L]` weight matrix keras applies, compared with the spec's `resize_weights` made dense.
What each backend computes (the kernel `posenc.impl.builtin.keras_resize` maps the cases onto):
  - torch: bicubic a = -0.75, clamped borders (PyTorch's `bicubic`);
  - numpy, jax, tensorflow: a = -0.5, border="renormalize" (taps outside dropped, no widening);
  - every backend with antialias=True: PyTorch's antialiased kernel with a = -0.5; bilinear and nearest: the
    spec's defaults.
Tolerance: the weights are float32 functions of a float32 source coordinate s <= L, whose rounding (ulp(L) <=
L * 2^-23) moves a weight by at most max|W'| = 1.5 times that (Keys' slope for a in [-0.75, -0.5]):
1e-6 + 1.5 * L * 2^-23 (1.2e-5 at L = 64; measured 2.9e-6 there, 1e-6 below L = 16). TensorFlow's bicubic without
antialias reads Keys' kernel from a 1024-entry table at `lrintf(frac * 1024)` (resize_bicubic_op.cc, TF 2.21),
so its weights are off by up to max|W'| / 2048 = 1.25 / 2048 = 6.1e-4 (the kernel's slope for a = -0.5 is at
most 1.25): 7e-4 there, still 20x below the 1.3e-2..6e-2 that separate it from the other kernels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from posenc_np.learned import resize_weights

pytest.importorskip("keras")

SHAPES = ((7, 16), (16, 7), (12, 9), (4, 13), (24, 64), (64, 24))
_PROBE = """
import json, sys
import numpy as np
import keras
out = {"backend": keras.backend.backend()}
for L, N in json.loads(sys.argv[1]):
    for interp in ("bicubic", "bilinear", "nearest"):
        for aa in ((False, True) if interp != "nearest" else (False,)):
            image = np.eye(L, dtype="float32")[None, :, :, None]
            y = keras.ops.image.resize(image, (N, L), interpolation=interp, antialias=aa, data_format="channels_last")
            out[f"{L} {N} {interp} {aa}"] = np.asarray(keras.ops.convert_to_numpy(y))[0, :, :, 0].tolist()
print("KERAS-PROBE " + json.dumps(out))
"""


def _dense(index, weight, old_len):
    out = np.zeros((index.shape[0], old_len))
    np.add.at(out, (np.repeat(np.arange(index.shape[0]), index.shape[1]), index.ravel()), weight.ravel())
    return out


@pytest.fixture(scope="module", params=("numpy", "jax", "tensorflow", "torch"))
def probed(request):
    backend = request.param
    pytest.importorskip({"numpy": "numpy", "jax": "jax", "tensorflow": "tensorflow", "torch": "torch"}[backend])
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(SHAPES)], env=env, capture_output=True,
                          text=True, timeout=300)
    line = [x for x in done.stdout.splitlines() if x.startswith("KERAS-PROBE ")]
    assert line, done.stderr[-2000:]
    out = json.loads(line[0][len("KERAS-PROBE "):])
    assert out.pop("backend") == backend
    return backend, {k: np.asarray(v) for k, v in out.items()}


def _spec(backend, method, antialias, old_len, new_len):
    if method == "nearest":
        options = {}
    elif antialias:
        options = {"cubic_a": -0.5, "antialias": True}
    elif method == "cubic" and backend == "torch":
        options = {"cubic_a": -0.75, "border": "clamp"}
    else:
        options = {"cubic_a": -0.5, "border": "renormalize"}
    return _dense(*resize_weights(old_len, new_len, method=method, **options), old_len)


@pytest.mark.parametrize("old_len, new_len", SHAPES)
def test_keras_resize_is_the_backends_spec_kernel(probed, old_len, new_len):
    backend, got = probed
    for interp, method in (("bicubic", "cubic"), ("bilinear", "linear"), ("nearest", "nearest")):
        for aa in ((False, True) if method != "nearest" else (False,)):
            weights = got[f"{old_len} {new_len} {interp} {aa}"]
            tol = 7e-4 if (backend, method, aa) == ("tensorflow", "cubic", False) else 1e-6 + 1.5 * old_len * 2**-23
            err = np.abs(weights - _spec(backend, method, aa, old_len, new_len)).max()
            assert err <= tol, f"keras {backend} {interp} antialias={aa} {old_len}->{new_len}: {err:.2e} > {tol}"


@pytest.mark.parametrize("old_len, new_len", [(7, 16), (16, 7), (4, 13)])
def test_keras_backends_bicubic_differ_by_the_border_and_a(probed, old_len, new_len):
    """The kernel the other backends use is not this backend's: the check above can fail."""
    backend, got = probed
    weights = got[f"{old_len} {new_len} bicubic False"]
    other = "numpy" if backend == "torch" else "torch"
    assert np.abs(weights - _spec(other, "cubic", False, old_len, new_len)).max() > 1e-2
