"""The keras-numpy / -jax / -tensorflow / -torch built-ins (keras.ops.image.resize per keras backend) through
`posenc check --impl`, the `border` diagnosis on planted kernels (a keras kernel judged against the other
border is named, not `unknown`), and `border`'s validation in the spec and a backend."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import posenc_np
from posenc.check.registry import all_cases
from posenc.check.run_impl import run_implementations
from posenc.impl import Implementation


def _check(spec):
    done = subprocess.run([sys.executable, "-m", "posenc", "check", "--impl", spec, "--encoding", "resize"],
                          capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("backend, passed", [("jax", 10), ("torch", 11), ("numpy", 10)])
def test_posenc_check_runs_keras_on_its_backend_and_passes(backend, passed):
    pytest.importorskip("keras")
    pytest.importorskip(backend)
    rc, out = _check(f"keras-{backend}")
    assert rc == 0, out[-3000:]
    assert f"keras-{backend} 3." in out and f"{passed} passed, 0 failed" in out, out[-3000:]
    # the skips carry their reason: the other backends' bicubic, align_corners and scale
    assert "not supported: keras' bicubic on the" in out and "has no align_corners" in out


def test_posenc_check_keras_tensorflow_fails_where_its_kernel_table_is_coarse():
    """TF's bicubic reads Keys' kernel from a 1024-entry table: 64 -> 24 and 7x7 -> 10x10 fail (24 -> 64, whose
    fractions are multiples of 1/8, passes); the verdicts are keras_tensorflow.EXPECTED's."""
    pytest.importorskip("keras")
    pytest.importorskip("tensorflow")
    rc, out = _check("keras-tensorflow")
    assert rc != 0, out[-3000:]
    assert "8 passed, 2 failed" in out and "diagnoses kernel-table x2" in out, out[-3000:]


def _diagnoses(fn, case_ids):
    cases = [c for c in all_cases() if c.id in case_ids]
    assert len(cases) == len(case_ids)
    impl = Implementation("planted", "numpy", {"resize_table": fn, "resize_grid": fn})
    return {r.case: (r.status, r.diagnosis) for r in run_implementations(cases, [impl], dtypes=["float32"])}


def test_keras_numpy_kernel_judged_against_torchs_bicubic_is_named_border():
    """keras' numpy / jax bicubic (a = -0.5, renormalised) where the case asks PyTorch's (a = -0.75, clamped)."""
    def keras_numpy(table, *args, **kw):
        resize = posenc_np.resize_table if len(args) == 1 else posenc_np.resize_grid
        return resize(table, *args, **{**kw, "cubic_a": -0.5, "border": "renormalize"})

    got = _diagnoses(keras_numpy, ["resize/cubic/24->64", "resize/cubic/64->24", "resize/hf-vit/7x7->10x10"])
    assert set(got.values()) == {("fail", "border")}, got


@pytest.mark.parametrize("case", ["resize/cubic-renormalize/24->64", "resize/cubic-a0.5/24->64",
                                  "resize/keras-jax/7x7->10x10"])
def test_the_other_border_alone_is_named_border(case):
    def flipped(table, *args, border="clamp", **kw):
        resize = posenc_np.resize_table if len(args) == 1 else posenc_np.resize_grid
        return resize(table, *args, **kw, border="clamp" if border == "renormalize" else "renormalize")

    assert set(_diagnoses(flipped, [case]).values()) == {("fail", "border")}


def test_a_kernel_read_from_tfs_1024_entry_table_is_named_kernel_table():
    """TF's ResizeBicubic rounds the fraction to 1/1024 before reading Keys' kernel; 7 -> 10 (0.7 steps)."""
    from posenc.impl.family_diagnosis import _kernel_table_resize

    def quantised(table, *args, **kw):
        encoding = "resize_table" if len(args) == 1 else "resize_grid"
        return _kernel_table_resize(encoding, (table, *args), kw).astype(np.asarray(table).dtype)

    got = _diagnoses(quantised, ["resize/cubic-renormalize/64->24", "resize/keras-jax/7x7->10x10"])
    assert set(got.values()) == {("fail", "kernel-table")}, got


def test_renormalize_upsampling_is_torchs_antialiased_kernel_and_downsampling_is_not_widened():
    """Upsampling, the antialiased kernel is not widened either, so the two agree; downsampling, renormalize
    keeps 4 taps (no widening) where antialias spreads over 4 * L / N rows."""
    up = posenc_np.resize_weights(7, 16, method="cubic", cubic_a=-0.5, border="renormalize")
    aa = posenc_np.resize_weights(7, 16, method="cubic", cubic_a=-0.5, antialias=True)
    dense = [np.zeros((16, 7)), np.zeros((16, 7))]
    for out, (index, weight) in zip(dense, (up, aa), strict=True):
        np.add.at(out, (np.repeat(np.arange(16), index.shape[1]), index.ravel()), weight.ravel())
    np.testing.assert_allclose(dense[0], dense[1], atol=1e-15)
    index, weight = posenc_np.resize_weights(16, 7, method="cubic", cubic_a=-0.5, border="renormalize")
    assert index.shape == (7, 4)
    np.testing.assert_allclose(weight.sum(axis=1), 1.0, rtol=1e-15)


def test_renormalize_drops_the_outside_taps_by_the_formula():
    """Row 0 of 4 -> 6: s = 0.5 * 4 / 6 - 0.5 = -1/6, taps -2 .. 1; only rows 0 and 1 are inside."""
    def keys(x, a=-0.5):
        x = abs(x)
        return (a + 2) * x**3 - (a + 3) * x**2 + 1 if x <= 1 else a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a

    index, weight = posenc_np.resize_weights(4, 6, method="cubic", cubic_a=-0.5, border="renormalize")
    w0, w1 = keys(1 / 6), keys(7 / 6)
    assert weight[0, 0] == weight[0, 1] == 0.0
    np.testing.assert_allclose(weight[0, 2:], [w0 / (w0 + w1), w1 / (w0 + w1)], rtol=1e-14)
    np.testing.assert_array_equal(index[0, 2:], [0, 1])


@pytest.mark.parametrize("call", [
    lambda **kw: posenc_np.resize_weights(4, 6, **kw),
    lambda **kw: posenc_np.resize_table(np.zeros((4, 2)), 6, **kw),
    lambda **kw: posenc_np.resize_grid(np.zeros((5, 2)), (2, 2), (3, 3), prefix_tokens=1, **kw),
])
def test_border_validation_names_the_argument(call):
    with pytest.raises(ValueError, match="border='wrap'"):
        call(border="wrap")
    with pytest.raises(ValueError, match="border='renormalize' is not defined for method='nearest'"):
        call(method="nearest", border="renormalize")


def test_a_backend_validates_border_through_the_spec():
    torch = pytest.importorskip("torch")
    import posenc_torch

    with pytest.raises(ValueError, match="border="):
        posenc_torch.resize_table(torch.zeros(4, 2), 6, border="reflect")


def _in_fresh_interpreter(code, **env):
    import os

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env})
    return done.returncode, done.stdout.strip().splitlines()[-1:], done.stderr[-2000:]


def test_a_backend_that_does_not_import_is_unavailable_naming_it():
    pytest.importorskip("keras")
    rc, out, err = _in_fresh_interpreter(
        "import sys; sys.modules['jax'] = None\n"
        "from posenc.impl.builtin import load_builtin\n"
        "try:\n    load_builtin('keras-jax')\nexcept ImportError as e:\n    print(type(e).__name__, e)",
        KERAS_BACKEND="jax")
    assert rc == 0 and out and out[0].startswith("ImplementationUnavailable --impl keras-jax: keras with "
                                                 "KERAS_BACKEND=jax does not import"), (out, err)


def test_loading_never_changes_the_processs_keras_backend():
    """keras reads KERAS_BACKEND once: a built-in loaded in a shared process (a pytest worker) that set it
    would move every later keras user of that process to its backend. The SPEC's own worker sets it."""
    pytest.importorskip("keras")
    pytest.importorskip("tensorflow")
    rc, out, err = _in_fresh_interpreter(
        "import os; os.environ.pop('KERAS_BACKEND', None)\n"
        "from posenc.impl.builtin import load_builtin\n"
        "from posenc.impl.resolve import process_environ\n"
        "load_builtin('keras-numpy')\n"
        "import keras\n"
        "print(keras.backend.backend(), os.environ.get('KERAS_BACKEND'), process_environ('keras-numpy'))")
    assert rc == 0 and out == ["tensorflow None {'KERAS_BACKEND': 'numpy'}"], (out, err)


def test_another_backends_resize_leaves_the_running_backends_ops_working():
    """Importing keras.src.backend.numpy rebinds `keras.src.backend.numpy`, where keras on TensorFlow keeps its
    numpy ops: a pytest worker's later keras models failed ("has no attribute 'ones'") until it was restored."""
    pytest.importorskip("keras")
    pytest.importorskip("tensorflow")
    rc, out, err = _in_fresh_interpreter(
        "import numpy as np, keras\n"
        "from posenc.impl.builtin import load_builtin\n"
        "(impl,) = load_builtin('keras-numpy')\n"
        "impl.functions['resize_table'](np.ones((7, 3), 'float32'), 16, method='linear')\n"
        "print(keras.backend.backend(), float(keras.ops.sum(keras.ops.ones((2, 3)))))",
        KERAS_BACKEND="tensorflow")
    assert rc == 0 and out == ["tensorflow 6.0"], (out, err)


def test_keras_already_on_another_backend_runs_that_backends_resize_and_says_so():
    """A test session imports keras once: keras-jax then calls keras.src.backend.jax.image.resize."""
    pytest.importorskip("keras")
    pytest.importorskip("jax")
    rc, out, err = _in_fresh_interpreter(
        "import numpy as np, keras, posenc_np\n"
        "from posenc.impl.builtin import load_builtin\n"
        "(impl,) = load_builtin('keras-jax')\n"
        "t = np.random.default_rng(0).normal(size=(7, 3)).astype('float32')\n"
        "got = impl.functions['resize_table'](t, 16, method='cubic', cubic_a=-0.5, border='renormalize')\n"
        "want = posenc_np.resize_table(t.astype('float64'), 16, method='cubic', cubic_a=-0.5, border='renormalize')\n"
        "print(keras.backend.backend(), float(np.abs(got - want).max()), '|', impl.description)",
        KERAS_BACKEND="numpy")
    assert rc == 0 and out, err
    backend, err_max, _, description = out[0].split(" ", 3)
    assert backend == "numpy" and float(err_max) < 1e-5, out
    assert "keras.src.backend.jax.image.resize (keras runs numpy here)" in description, out
