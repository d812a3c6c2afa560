"""Properties of the spec's `resize_grid` and of `resize_table`'s `antialias` / `scale` keywords (float64 NumPy).

The comparisons with the code that ships each kernel are in tests/reference/test_resize_grid_reference.py; here:
identities, separability, the weights' invariants and the argument checks (each error names its argument).
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn


def _table(rows, dim=3, seed=0):
    return np.random.default_rng(seed).normal(size=(rows, dim))


@pytest.mark.parametrize("method, antialias", [("cubic", False), ("cubic", True), ("linear", False),
                                               ("linear", True), ("nearest", False)])
def test_the_same_grid_is_the_identity(method, antialias):
    """At equal sizes every kernel puts weight 1 on its own row (Keys: W(0) = 1, W(1) = W(2) = 0), so nothing moves."""
    table = _table(1 + 5 * 4)
    out = pn.resize_grid(table, (5, 4), (5, 4), method=method, antialias=antialias, prefix_tokens=1)
    np.testing.assert_array_equal(out, table)


@pytest.mark.parametrize("prefix", [0, 1, 5])
def test_prefix_rows_pass_through_and_the_grid_is_separable(prefix):
    """The prefix rows are copied bit for bit; the grid equals resize_table along the rows, then the columns."""
    old, new = (6, 4), (3, 7)
    table = _table(prefix + old[0] * old[1], seed=prefix)
    keywords = dict(method="cubic", cubic_a=-0.5, antialias=True)
    out = pn.resize_grid(table, old, new, prefix_tokens=prefix, **keywords)
    np.testing.assert_array_equal(out[:prefix], table[:prefix])
    grid = table[prefix:].reshape(old[0], old[1], -1)
    rows = np.stack([pn.resize_table(grid[:, x], new[0], **keywords) for x in range(old[1])], axis=1)
    both = np.stack([pn.resize_table(rows[y], new[1], **keywords) for y in range(new[0])], axis=0)
    np.testing.assert_allclose(out[prefix:], both.reshape(new[0] * new[1], -1), rtol=0, atol=1e-14)


def test_a_square_grid_may_be_one_int_and_a_scale_one_number():
    table = _table(1 + 36)
    np.testing.assert_array_equal(pn.resize_grid(table, 6, 9, prefix_tokens=1),
                                  pn.resize_grid(table, (6, 6), (9, 9), prefix_tokens=1))
    np.testing.assert_array_equal(pn.resize_grid(table, 6, 9, scale=1.6, prefix_tokens=1),
                                  pn.resize_grid(table, 6, 9, scale=(1.6, 1.6), prefix_tokens=1))


@pytest.mark.parametrize("old_len, new_len", [(16, 24), (16, 7), (37, 16), (5, 1), (1, 4)])
@pytest.mark.parametrize("method", ["linear", "cubic"])
def test_antialias_weights_sum_to_one_inside_the_widened_support(old_len, new_len, method):
    """PyTorch's AA kernel: renormalised, and no tap farther than (taps / 2) * max(L / N, 1) + 1 from its centre."""
    index, weight = pn.resize_weights(old_len, new_len, method=method, antialias=True, cubic_a=-0.5)
    np.testing.assert_allclose(weight.sum(axis=1), 1.0, rtol=0, atol=1e-14)
    assert index.min() >= 0 and index.max() < old_len
    ratio = old_len / new_len
    centre = ratio * (np.arange(new_len) + 0.5)
    used = weight != 0
    reach = (2 if method == "linear" else 4) / 2 * max(ratio, 1.0) + 1
    assert np.all(np.abs(index + 0.5 - centre[:, None])[used] <= reach)


def test_antialias_only_widens_when_downsampling():
    """Upsampling with AA keeps the kernel's width: linear AA equals linear away from the borders (where AA drops
    taps instead of clamping them); downsampling averages, which plain linear sampling does not."""
    table = _table(12, seed=4)
    up_plain, up_aa = pn.resize_table(table, 30), pn.resize_table(table, 30, antialias=True)
    np.testing.assert_allclose(up_aa[2:-2], up_plain[2:-2], rtol=0, atol=1e-14)
    # 8 -> 2 of a ramp: the triangle widened to support 4 around centres 2 and 6, weights 1 - |j + 0.5 - c| / 4
    # over rows 0..5 (resp. 2..7), cut at the border and renormalised; plain linear samples rows 1.5 and 5.5
    down = pn.resize_table(np.arange(8.0)[:, None], 2, antialias=True)[:, 0]
    w = np.array([0.625, 0.875, 0.875, 0.625, 0.375, 0.125])
    np.testing.assert_allclose(down, [w @ np.arange(6) / w.sum(), 7 - w @ np.arange(6) / w.sum()], atol=1e-14)
    assert not np.allclose(pn.resize_table(_table(8, seed=5), 2, antialias=True), pn.resize_table(_table(8, seed=5), 2))


def test_scale_is_the_size_grid_when_it_is_new_over_old_and_differs_otherwise():
    """source = (i + 0.5) / scale - 0.5: with scale = N / L that is the size grid; DINOv2's (N + 0.1) / L is not."""
    table = _table(37, seed=6)
    np.testing.assert_allclose(pn.resize_table(table, 16, method="cubic", scale=16 / 37),
                               pn.resize_table(table, 16, method="cubic"), rtol=0, atol=1e-13)
    offset = pn.resize_table(table, 16, method="cubic", scale=16.1 / 37)
    assert np.abs(offset - pn.resize_table(table, 16, method="cubic")).max() > 1e-3
    index, _ = pn.resize_weights(10, 4, method="nearest", scale=0.45)
    np.testing.assert_array_equal(index[:, 0], np.minimum(np.floor((np.arange(4) + 0.5) / 0.45), 9))


@pytest.mark.parametrize("call, error, name", [
    (lambda t: pn.resize_grid(t, (4, 4), (2, 2)), ValueError, "prefix_tokens"),  # 17 rows, no prefix given
    (lambda t: pn.resize_grid(t, (4, 0), (2, 2), prefix_tokens=1), ValueError, "old_grid"),
    (lambda t: pn.resize_grid(t, (4, 4), (2, 2, 2), prefix_tokens=1), ValueError, "new_grid"),
    (lambda t: pn.resize_grid(t, (4, 4), (2, 2), prefix_tokens=-1), ValueError, "prefix_tokens"),
    (lambda t: pn.resize_grid(t, (4, 4), (2, 2), prefix_tokens=1, scale=(0.5,)), ValueError, "scale"),
    (lambda t: pn.resize_grid(t, (4, 4), (2, 2), prefix_tokens=1, scale=-1.0), ValueError, "scale"),
    (lambda t: pn.resize_grid(t, (4, 4), (2, 2), prefix_tokens=1, method="nearest", antialias=True), ValueError,
     "antialias"),
    (lambda t: pn.resize_grid(t, (4, 4), (2, 2), prefix_tokens=1, antialias="yes"), TypeError, "antialias"),
    (lambda t: pn.resize_grid(t, (4, 4), (2, 2), prefix_tokens=1, align_corners=True, scale=0.5), ValueError,
     "scale"),
    (lambda t: pn.resize_grid(t.astype(np.int32), (4, 4), (2, 2), prefix_tokens=1), TypeError, "table"),
    (lambda t: pn.resize_table(t, 3, scale=float("nan")), ValueError, "scale"),
    (lambda t: pn.resize_table(t.astype(np.int64), 3), TypeError, "table"),
])
def test_bad_arguments_raise_naming_the_argument(call, error, name):
    with pytest.raises(error, match=name):
        call(_table(17))


def test_resize_grid_weights_is_the_plan_resize_grid_gathers_with():
    table = _table(2 + 3 * 5, seed=8)
    prefix, old, new, (ih, wh), (iw, ww) = pn.resize_grid_weights(table.shape, (3, 5), (4, 2), prefix_tokens=2,
                                                                  antialias=True, cubic_a=-0.5)
    assert (prefix, old, new) == (2, (3, 5), (4, 2))
    grid = table[2:].reshape(3, 5, -1)
    gathered = grid[ih[:, :, None, None], iw[None, None, :, :]]  # [new_h, taps_h, new_w, taps_w, dim]
    out = np.einsum("ya,xb,yaxbd->yxd", wh, ww, gathered)
    np.testing.assert_allclose(out.reshape(8, -1), pn.resize_grid(table, (3, 5), (4, 2), prefix_tokens=2,
                                                                  antialias=True, cubic_a=-0.5)[2:], atol=1e-14)
