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


_DINOV2 = """
import json, sys
import numpy as np
import keras
from keras_hub.src.models.dinov2.dinov2_layers import DINOV2Embedding
out = {}
for side, new_side in json.loads(sys.argv[1]):
    table = np.random.default_rng(side).normal(size=(1, 1 + side * side, 8)).astype("float32")
    got = DINOV2Embedding._interpolate_position_embeddings(table, 14, (14 * side, 14 * side),
                                                             (14 * new_side, 14 * new_side))
    out[f"{side} {new_side}"] = [table[0].tolist(), np.asarray(keras.ops.convert_to_numpy(got))[0].tolist()]
print("KERAS-PROBE " + json.dumps(out))
"""


@pytest.mark.parametrize("backend", ("numpy", "jax", "tensorflow", "torch"))
def test_keras_hub_dinov2_position_grid_is_the_backends_convention(backend):
    """keras-hub 0.32.0 `DINOV2Embedding._interpolate_position_embeddings` (models/dinov2/dinov2_layers.py:
    `ops.image.resize(..., interpolation='bicubic', antialias=False)` on the grid, the CLS row kept): the
    `keras-jax` convention on numpy / jax / tensorflow, `hf-vit` on the torch backend, on standard-normal tables
    (|entries| <= 4.2; a rough table, the kernels' worst case) at 7 -> 10, 16 -> 12, 37 -> 16.
    Tolerance 1e-5: float32 sums over 4 x 4 taps of entries <= 4.2 (measured <= 3.2e-6). TensorFlow 5e-3: its
    kernel table moves each weight by up to 6.1e-4 (measured 2.1e-3 on these tables, 2.4x below); the
    kernels are 0.25..0.30 apart here, 50x above either."""
    pytest.importorskip("keras_hub")
    pytest.importorskip({"numpy": "numpy", "jax": "jax", "tensorflow": "tensorflow", "torch": "torch"}[backend])
    from posenc_np import resize_grid
    from posenc_np.conventions import conventions

    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", _DINOV2, json.dumps([[7, 10], [16, 12], [37, 16]])], env=env,
                          capture_output=True, text=True, timeout=300)
    line = [x for x in done.stdout.splitlines() if x.startswith("KERAS-PROBE ")]
    assert line, done.stderr[-2000:]
    gaps = []
    for key, (table, got) in json.loads(line[0][len("KERAS-PROBE "):]).items():
        side, new_side = map(int, key.split())
        table, got = np.asarray(table), np.asarray(got)
        mine = "hf-vit" if backend == "torch" else "keras-jax"
        other = "keras-jax" if backend == "torch" else "hf-vit"
        want = resize_grid(table, side, new_side, prefix_tokens=1, **conventions[mine].params)
        tol = 5e-3 if backend == "tensorflow" else 1e-5
        assert np.abs(got - want).max() <= tol, (key, np.abs(got - want).max())
        gaps.append(np.abs(got - resize_grid(table, side, new_side, prefix_tokens=1,
                                             **conventions[other].params)).max())
    assert min(gaps) > 1e-2, gaps  # the other backend's kernel is measurably not this one
