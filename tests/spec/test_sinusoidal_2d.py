"""`sinusoidal_2d` spec against the 2-D sin-cos formulas written out independently (MAE/diffusers per-axis "xy",
timm's sin-cos blocks "yx", big_vision's dim/4 - 1 denominator), its conventions, shapes, dtypes and validation.

NumPy and ml_dtypes only. diffusers' and timm's own builders: tests/reference/test_sinusoidal_2d_reference.py;
the backends against the spec: the registry's sinusoidal_2d cases (tests/backends/test_conformance.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import posenc_np as pn
from posenc_np.conventions import conventions

#: float64 against float64 written another way (np.outer vs broadcasting, powers vs exp/log): ulp-level
TOL = 1e-12


def _grid(rows, cols):
    return np.stack(np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij"), axis=-1)


def _omega(quarter, denominator="dim", base=10000.0):
    """The frequencies of one axis: dim/4 bands, 1 / base**(k / (dim/4)) (MAE's `omega /= embed_dim / 2.`)
    or 1 / base**(k / (dim/4 - 1)) (big_vision's linspace(0, 1))."""
    k = np.arange(quarter, dtype=np.float64)
    steps = k / quarter if denominator == "dim" else np.linspace(0.0, 1.0, quarter)
    return 1.0 / base ** steps


def _mae(positions, dim, denominator="dim"):
    """MAE get_2d_sincos_pos_embed_from_grid on (row, column) positions: emb_h is built from the column."""
    positions = np.asarray(positions, np.float64).reshape(-1, 2)
    omega = _omega(dim // 4, denominator)
    x, y = np.outer(positions[:, 1], omega), np.outer(positions[:, 0], omega)
    return np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)


def _timm(positions, dim, interleave=False):
    """timm build_sincos2d_pos_embed: grid (h, w), pos2 = grid * bands, stack (sin, cos) on axis 1 or 2."""
    positions = np.asarray(positions, np.float64).reshape(-1, 2)
    pos2 = positions[:, :, None] * _omega(dim // 4)[None, None, :]  # [N, 2 (h, w), dim/4]
    return np.stack([np.sin(pos2), np.cos(pos2)], axis=2 if interleave else 1).reshape(len(positions), dim)


@pytest.mark.parametrize("dim", [4, 16, 64])
@pytest.mark.parametrize("grid", [(6, 8), (5, 5)])
def test_per_axis_xy_is_mae(dim, grid):
    positions = _grid(*grid)
    ours = pn.sinusoidal_2d(positions, dim)
    assert ours.shape == (*grid, dim)
    np.testing.assert_allclose(ours.reshape(-1, dim), _mae(positions, dim), rtol=0, atol=TOL)


@pytest.mark.parametrize("dim", [8, 32])
def test_float_positions(dim):
    positions = np.random.default_rng(0).uniform(-40.0, 300.0, size=(3, 7, 2))
    np.testing.assert_allclose(pn.sinusoidal_2d(positions, dim).reshape(-1, dim), _mae(positions, dim), rtol=0,
                               atol=TOL)


@pytest.mark.parametrize("dim", [8, 64])
def test_sin_cos_yx_is_timm(dim):
    positions = _grid(6, 8)
    ours = pn.sinusoidal_2d(positions, dim, axis_order="yx", blocks="sin-cos")
    np.testing.assert_allclose(ours.reshape(-1, dim), _timm(positions, dim), rtol=0, atol=TOL)


def test_timm_interleaved_is_per_axis_yx():
    positions = _grid(6, 8)
    ours = pn.sinusoidal_2d(positions, 32, axis_order="yx", blocks="per-axis")
    np.testing.assert_allclose(ours.reshape(-1, 32), _timm(positions, 32, interleave=True), rtol=0, atol=TOL)


def test_half_1_is_big_vision():
    positions = _grid(6, 8)
    ours = pn.sinusoidal_2d(positions, 32, denominator="half-1")
    want = _mae(positions, 32, denominator="half-1")
    np.testing.assert_allclose(ours.reshape(-1, 32), want, rtol=0, atol=TOL)
    assert ours[..., 32 // 4 - 1].max() < 0.01  # the last x band turns at 1/base: sin(7 / 10000) is small


@pytest.mark.parametrize("layout", ["interleaved", "concat", "concat-cos"])
def test_per_axis_is_two_sinusoids(layout):
    positions = np.random.default_rng(1).uniform(0, 50, size=(9, 2))
    ours = pn.sinusoidal_2d(positions, 24, layout=layout, denominator="half-1", base=500.0)
    x = pn.sinusoidal(positions[:, 1], 12, layout=layout, denominator="half-1", base=500.0)
    y = pn.sinusoidal(positions[:, 0], 12, layout=layout, denominator="half-1", base=500.0)
    np.testing.assert_array_equal(ours, np.concatenate([x, y], axis=-1))


def test_sin_cos_blocks_with_concat_cos_put_the_cosines_first():
    positions = _grid(3, 4)
    sin_cos = pn.sinusoidal_2d(positions, 16, blocks="sin-cos")
    cos_sin = pn.sinusoidal_2d(positions, 16, blocks="sin-cos", layout="concat-cos")
    np.testing.assert_array_equal(cos_sin, np.concatenate([sin_cos[..., 8:], sin_cos[..., :8]], axis=-1))


def test_axis_order_swaps_the_coordinates():
    positions = _grid(6, 8)
    for blocks in ("per-axis", "sin-cos"):
        np.testing.assert_array_equal(pn.sinusoidal_2d(positions, 16, axis_order="yx", blocks=blocks),
                                      pn.sinusoidal_2d(positions[..., ::-1], 16, axis_order="xy", blocks=blocks))
    # and it matters: on a non-square grid the two orders give different tables
    assert np.abs(pn.sinusoidal_2d(positions, 16) - pn.sinusoidal_2d(positions, 16, axis_order="yx")).max() > 0.5


def test_conventions():
    positions = _grid(6, 8)
    for name, want in [("mae-2d", _mae(positions, 32)), ("diffusers-2d", _mae(positions, 32)),
                       ("timm-sincos2d", _timm(positions, 32)), ("big-vision-2d", _mae(positions, 32, "half-1"))]:
        assert conventions[name].encoding == "sinusoidal_2d" and conventions[name].family == "sinusoidal"
        ours = pn.sinusoidal_2d(positions, 32, **conventions[name].params)
        np.testing.assert_allclose(ours.reshape(-1, 32), want, rtol=0, atol=TOL, err_msg=name)


@pytest.mark.parametrize("shape", [(2,), (5, 2), (2, 3, 4, 2)])
def test_shapes(shape):
    positions = np.arange(np.prod(shape)).reshape(shape)
    assert pn.sinusoidal_2d(positions, 8).shape == (*shape[:-1], 8)


@pytest.mark.parametrize("dtype, numpy_dtype", [("float32", np.float32), ("float16", np.float16),
                                                ("bfloat16", ml_dtypes.bfloat16)])
def test_dtype_is_a_rounding_of_the_float64_table(dtype, numpy_dtype):
    positions = _grid(4, 5)
    want = pn.sinusoidal_2d(positions, 16)
    ours = pn.sinusoidal_2d(positions, 16, dtype=dtype)
    assert ours.dtype == np.dtype(numpy_dtype)
    np.testing.assert_array_equal(ours, want.astype(numpy_dtype))


@pytest.mark.parametrize("kwargs, match", [
    (dict(dim=6), "dim=6 must be divisible by 4"),
    (dict(dim=7), "dim=7 must be even"),
    (dict(dim=0), "dim"),
    (dict(dim=4, denominator="half-1"), "dim=4 must be >= 8"),
    (dict(positions=np.zeros((4, 3))), "positions must have a last axis of size 2"),
    (dict(positions=np.zeros(())), "positions must have a last axis of size 2"),
    (dict(axis_order="hw"), "axis_order"),
    (dict(blocks="sin-cos-blocks"), "blocks"),
    (dict(blocks="sin-cos", layout="interleaved"), "layout='interleaved'"),
    (dict(layout="cos"), "layout"),
    (dict(denominator="half"), "denominator"),
    (dict(base=0.0), "base"),
    (dict(base=float("inf")), "base"),
])
def test_bad_input(kwargs, match):
    args = dict(positions=_grid(2, 3), dim=16)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        pn.sinusoidal_2d(args.pop("positions"), args.pop("dim"), **args)
