"""`resize_table` against torch.nn.functional.interpolate (linear/bicubic/nearest-exact, align_corners both
ways), and where TF's `tf.image.resize` and `jax.image.resize` differ from the spec as its docstring says
(TF/JAX bicubic a = -0.5, JAX's default antialiasing and border renormalisation)."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("new_len", [1, 5, 24, 37, 64])
@pytest.mark.parametrize("method, align_corners", [("linear", False), ("linear", True), ("cubic", False),
                                                   ("cubic", True), ("nearest", False)])
def test_resize_table_matches_torch_interpolate(method, align_corners, new_len):
    table = np.random.default_rng(1).normal(size=(24, 6))
    x = torch.tensor(table.T[None, :, :, None])  # [1, dim, L, 1]: resample the position axis only
    mode = {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest-exact"}[method]
    kwargs = {} if method == "nearest" else {"align_corners": align_corners}
    reference = torch.nn.functional.interpolate(x, size=(new_len, 1), mode=mode, **kwargs)[0, :, :, 0].T.numpy()
    ours = pn.resize_table(table, new_len, method=method, align_corners=align_corners)
    rows = np.arange(new_len)
    if method == "nearest":
        # exact ties, (2i + 1) * L / (2 * new_len) an integer: the spec floors the exact rational, PyTorch
        # multiplies by a rounded float32 scale first and can land one row lower (24 -> 37, row 18)
        tie = ((2 * rows + 1) * 24) % (2 * new_len) == 0
        rows = rows[~tie]
    np.testing.assert_allclose(ours[rows], reference[rows], rtol=0, atol=1e-12)


def test_framework_resizers_differ_from_the_spec_where_documented():
    """resize_table's docstring: TF/JAX bicubic use a = -0.5 and other borders; JAX antialiases by default."""
    tf = pytest.importorskip("tensorflow")
    jax = pytest.importorskip("jax")
    table = np.random.default_rng(2).normal(size=(24, 5))
    tf_linear = tf.image.resize(table[:, :, None], (64, 5), method="bilinear").numpy()[:, :, 0]
    np.testing.assert_allclose(tf_linear, pn.resize_table(table, 64), atol=1e-6)  # same half-pixel grid
    tf_cubic = tf.image.resize(table[:, :, None], (64, 5), method="bicubic").numpy()[:, :, 0]
    assert np.abs(tf_cubic - pn.resize_table(table, 64, method="cubic")).max() > 0.05  # a = -0.5, not -0.75
    jax_down = np.asarray(jax.image.resize(table, (10, 5), method="linear"))  # antialias=True by default
    assert np.abs(jax_down - pn.resize_table(table, 10)).max() > 0.1
    jax_down_plain = np.asarray(jax.image.resize(table, (10, 5), method="linear", antialias=False))
    np.testing.assert_allclose(jax_down_plain, pn.resize_table(table, 10), atol=1e-5)
    jax_cubic = np.asarray(jax.image.resize(table, (64, 5), method="cubic", antialias=False))
    spec_a05 = pn.resize_table(table, 64, method="cubic", cubic_a=-0.5)
    np.testing.assert_allclose(jax_cubic[4:-4], spec_a05[4:-4], atol=1e-5)  # same kernel inside,
    assert np.abs(jax_cubic - spec_a05).max() > 1e-3  # but JAX renormalises border weights instead of clamping
