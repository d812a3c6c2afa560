"""timm's position-table code (checked on timm 1.0.31): `layers/pos_embed.py` `resample_abs_pos_embed(posemb,
new_size, old_size=None, num_prefix_tokens=1, interpolation='bicubic', antialias=True)` (what every timm ViT
calls when the image size changes, and open_clip's `resize_pos_embed` repeats) and `layers/pos_embed_sincos.py`
`build_sincos2d_pos_embed(feat_shape, dim, temperature, reverse_coord, interleave_sin_cos)`.

`import timm` imports torchvision, whose PyPI wheel does not load beside this torch, so the two files are
loaded by path as modules of a stand-in package over timm's `layers/` directory (their relative imports,
`_fx`, `helpers`, `grid`, `trace_utils`, are plain torch). Mapping of the contract:

* `resize_grid` -> `resample_abs_pos_embed(table[None], new_grid, old_grid, num_prefix_tokens=prefix_tokens,
  interpolation='bicubic' | 'bilinear' | 'nearest', antialias)`: `F.interpolate` with `align_corners=False`
  and the size grid, so `align_corners`, `scale` and a cubic `a` other than PyTorch's (-0.75, or -0.5 when
  antialiased) are skips;
* `sinusoidal_2d` -> `build_sincos2d_pos_embed([h, w], dim, temperature=base)` for positions that are the
  full grid `(y, x)` of `h x w` (its only input): `blocks="sin-cos"`, `axis_order="yx"` (`reverse_coord`
  gives "xy", and builds the grid over `(w, h)`: its rows run x-major and are put back y-major), and `interleave_sin_cos=True` gives `blocks="per-axis"`; the layout is `[sin | cos]` within a
  block and the denominator Vaswani's over each `dim / 2` half.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import types

import numpy as np

from ...adapters import NotSupported
from ..implementation import Implementation
from ._loading import package_dir

DISTRIBUTION = "timm"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ("timm",)

_MISSING = "--impl timm: timm is not installed (pip install --no-deps timm)"
_STAND_IN = "_posenc_timm_layers"
_MODES = {"cubic": "bicubic", "linear": "bilinear", "nearest": "nearest"}


@functools.cache
def layers_module(name: str):
    """timm's `layers/<name>.py`, executed once as a module of a stand-in package over timm's `layers/`."""
    layers = package_dir("timm", missing=_MISSING) / "layers"
    if _STAND_IN not in sys.modules:
        stand_in = types.ModuleType(_STAND_IN)
        stand_in.__path__ = [str(layers)]
        sys.modules[_STAND_IN] = stand_in
    full = f"{_STAND_IN}.{name}"
    if full not in sys.modules:
        spec = importlib.util.spec_from_file_location(full, layers / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
    return sys.modules[full]


def resize_grid(table, old_grid, new_grid, *, method="cubic", align_corners=False, cubic_a=-0.75, antialias=False,
                scale=None, prefix_tokens=0):
    """The contract's `resize_grid` through `resample_abs_pos_embed` (torch in, torch out)."""
    if method not in _MODES:
        raise NotSupported(f"resample_abs_pos_embed has no interpolation for method={method!r}")
    if align_corners or scale is not None:
        raise NotSupported("resample_abs_pos_embed samples on the size grid with align_corners=False")
    if method == "cubic" and cubic_a != (-0.5 if antialias else -0.75):
        raise NotSupported(f"timm's bicubic is PyTorch's (a={-0.5 if antialias else -0.75} with "
                           f"antialias={antialias}), not cubic_a={cubic_a}")
    if method == "nearest" and antialias:
        raise NotSupported("nearest takes no antialias")
    out = layers_module("pos_embed").resample_abs_pos_embed(
        table[None], [int(n) for n in new_grid], old_size=[int(n) for n in old_grid], num_prefix_tokens=int(prefix_tokens),
        interpolation=_MODES[method], antialias=bool(antialias))
    return out[0]


def _full_grid(positions) -> tuple[int, int]:
    """`(h, w)` when `positions [..., 2]` is the grid `(y, x)`, y in 0..h-1, x in 0..w-1, in row-major order."""
    p = np.asarray(positions)
    flat = p.reshape(-1, 2)
    if p.dtype.kind not in "iu" or not flat.size:
        raise NotSupported("build_sincos2d_pos_embed builds the integer grid 0..h-1 x 0..w-1 only")
    h, w = int(flat[:, 0].max()) + 1, int(flat[:, 1].max()) + 1
    if flat.shape[0] != h * w:
        raise NotSupported("build_sincos2d_pos_embed builds the full grid 0..h-1 x 0..w-1; these positions are not "
                           "one")
    y, x = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    if not np.array_equal(flat, np.stack([y.ravel(), x.ravel()], -1)):
        raise NotSupported("build_sincos2d_pos_embed builds the full grid 0..h-1 x 0..w-1 in row-major order; "
                           "these positions are not one")
    return h, w


def sinusoidal_2d(positions, dim, *, base=10000.0, axis_order="xy", blocks="per-axis", layout="concat",
                  denominator="dim", dtype=None):
    """The contract's `sinusoidal_2d` through `build_sincos2d_pos_embed` (torch in, torch out)."""
    if layout != "concat" or denominator != "dim":
        raise NotSupported(f"build_sincos2d_pos_embed writes [sin | cos] with Vaswani's denominator, not "
                           f"layout={layout!r}, denominator={denominator!r}")
    h, w = _full_grid(positions.numpy())
    reverse = axis_order == "xy"
    out = layers_module("pos_embed_sincos").build_sincos2d_pos_embed(
        [h, w], int(dim), temperature=float(base), reverse_coord=reverse, interleave_sin_cos=blocks == "per-axis")
    if reverse:  # the grid is then built over (w, h): its rows run x-major; put them back y-major
        out = out.reshape(w, h, int(dim)).transpose(0, 1)
    return out.reshape(*positions.shape[:-1], int(dim))


def load() -> Implementation:
    import importlib.metadata

    layers_module("pos_embed")
    layers_module("pos_embed_sincos")
    return Implementation("timm", "torch", {"resize_grid": resize_grid, "sinusoidal_2d": sinusoidal_2d},
                          version=importlib.metadata.version(DISTRIBUTION), angles="float32", differentiable=False,
                          description="resample_abs_pos_embed, build_sincos2d_pos_embed (module files by path)")


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = "`pip install --no-deps timm` (its layers' module files are loaded by path; torchvision is not needed)"
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = ()
#: the verdicts at the pinned version, as data: every float32 comparison that fails or errors
#: ("implementation convention/case" -> diagnosis; tests/app/impl/test_builtin_verdicts.py)
EXPECTED = {}
