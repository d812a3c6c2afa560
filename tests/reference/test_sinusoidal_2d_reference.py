"""`sinusoidal_2d` against the builders that ship it: diffusers' `get_2d_sincos_pos_embed` and
`get_2d_sincos_pos_embed_from_grid` (diffusers/models/embeddings.py, the installed diffusers: MAE's formula at
`base_size` / `interpolation_scale` float positions) and timm 1.0.31's `build_sincos2d_pos_embed`
(`layers/pos_embed_sincos.py`, loaded by file path: `import timm` needs torchvision).

Tolerances: diffusers forms its frequencies and angles in float64, so with its own grid the difference is float64
rounding; its grid is float32 (`arange / (grid / base_size) / interpolation_scale`, three roundings of at most
2**-24 relative each), so against positions computed in float64 the angle differs by up to 4 * 2**-24 * max|position|.
timm computes in float32: `posenc_np.testing.tolerance("float32", max_angle=...)`."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from helpers import assert_close
from posenc_np.conventions import conventions
from posenc_np.testing import Tolerance, tolerance

torch = pytest.importorskip("torch")
embeddings = pytest.importorskip("diffusers.models.embeddings")

F64 = Tolerance(1e-12, "float64 on both sides")


def _positions(grid_h, grid_w, base_size, interpolation_scale):
    """diffusers' position rule, in float64: (row, column) = (i, j) / (grid / base_size) / interpolation_scale."""
    rows = np.arange(grid_h) / (grid_h / base_size) / interpolation_scale
    cols = np.arange(grid_w) / (grid_w / base_size) / interpolation_scale
    return np.stack(np.meshgrid(rows, cols, indexing="ij"), axis=-1)  # [grid_h, grid_w, 2], tokens row-major


def _diffusers(dim, grid, base_size, interpolation_scale):
    out = embeddings.get_2d_sincos_pos_embed(dim, grid, base_size=base_size, interpolation_scale=interpolation_scale,
                                             output_type="pt")
    return out.double().numpy()


# (dim, grid, base_size, interpolation_scale): MAE/DiT (base = grid, integer positions), PixArt-alpha 1024
# (grid 64, base 64, scale 2), a non-square grid, an SD3-like grid with base 64 at grid 96
SETTINGS = [(64, 16, 16, 1.0), (64, 64, 64, 2.0), (32, (6, 10), 8, 1.0), (96, 24, 16, 1.0), (64, 96, 64, 1.0)]


@pytest.mark.parametrize("dim, grid, base_size, interpolation_scale", SETTINGS)
def test_diffusers_get_2d_sincos_pos_embed_is_the_convention(dim, grid, base_size, interpolation_scale):
    grid_h, grid_w = (grid, grid) if isinstance(grid, int) else grid
    positions = _positions(grid_h, grid_w, base_size, interpolation_scale)
    ours = pn.sinusoidal_2d(positions, dim, **conventions["diffusers-2d"].params).reshape(-1, dim)
    bound = 4 * 2.0**-24 * float(np.abs(positions).max()) + 1e-12
    assert_close(_diffusers(dim, grid, base_size, interpolation_scale), ours,
                 Tolerance(bound, "float32 grid: 4 * 2**-24 * max |position| on the angle"))


def test_diffusers_integer_grid_is_mae():
    ours = pn.sinusoidal_2d(_positions(14, 14, 14, 1.0).round().astype(np.int64), 64, **conventions["mae-2d"].params)
    assert_close(_diffusers(64, 14, 14, 1.0), ours.reshape(-1, 64), F64)  # integer positions: exact in float32


def test_pixart_positions_matter():
    """PixArt-alpha 1024 (grid 64, base 64, interpolation_scale 2): positions i/2, not i (research §1.3: 2.0 off)."""
    hf = _diffusers(64, 64, 64, 2.0)
    integer = pn.sinusoidal_2d(_positions(64, 64, 64, 1.0), 64).reshape(-1, 64)
    assert np.abs(hf - integer).max() > 1.5


@pytest.mark.parametrize("dim", [16, 64])
def test_diffusers_from_grid_float64(dim):
    """get_2d_sincos_pos_embed_from_grid on an arbitrary float64 grid: grid[0] is encoded first (x, the column)."""
    positions = np.random.default_rng(3).uniform(-20.0, 200.0, size=(5, 7, 2))
    grid = torch.from_numpy(np.stack([positions[..., 1], positions[..., 0]])[:, None])  # [2, 1, H, W]: (x, y)
    hf = embeddings.get_2d_sincos_pos_embed_from_grid(dim, grid, output_type="pt").numpy()
    assert_close(hf, pn.sinusoidal_2d(positions, dim).reshape(-1, dim), F64)


# --- timm 1.0.31 build_sincos2d_pos_embed -------------------------------------------------------------------


def _timm_sincos():
    """timm's `layers/pos_embed_sincos.py`, loaded by path as `--impl timm` loads it (`import timm` needs torchvision)."""
    from posenc.impl.builtin import builtin_status
    from posenc.impl.builtin.timm import layers_module

    if not builtin_status("timm")[0]:
        pytest.skip("timm is not installed (pip install --no-deps -r requirements-nodeps.txt)")
    return layers_module("pos_embed_sincos")


@pytest.mark.parametrize("reverse_coord, interleave, params", [
    (False, False, dict(conventions["timm-sincos2d"].params)),
    (False, True, dict(conventions["timm-sincos2d"].params, blocks="per-axis")),
    (True, False, dict(conventions["timm-sincos2d"].params, axis_order="xy")),
])
@pytest.mark.parametrize("shape", [(6, 10), (14, 14)])
def test_timm_build_sincos2d_pos_embed_is_the_convention(reverse_coord, interleave, params, shape):
    dim = 64
    timm = _timm_sincos().build_sincos2d_pos_embed(list(shape), dim=dim, reverse_coord=reverse_coord,
                                                   interleave_sin_cos=interleave).double().numpy()
    positions = np.stack(np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing="ij"), axis=-1)
    if reverse_coord:  # timm then walks the grid (w, h): tokens column-major
        positions = positions.transpose(1, 0, 2)
    ours = pn.sinusoidal_2d(positions, dim, **params).reshape(-1, dim)
    assert_close(timm, ours, tolerance("float32", max_angle=float(max(shape))))
