"""PyTorch's `torch.nn.functional.interpolate` as the learned-table and ViT-grid resizer most ports call
(torch 2.13): `resize_table` on the table seen as an image `[1, dim, 1, L]` (bicubic, and bilinear with
antialiasing, are 2-D modes; the tall `[1, dim, L, 1]` form hits the antialiasing bug below), and `resize_grid` on the grid rows
seen as `[1, dim, old_h, old_w]` (prefix rows passed through, as timm and HF do).

Mapping of the contract: `method` "linear" / "cubic" / "nearest" -> "linear" or "bilinear" / "bicubic" /
"nearest-exact"; `align_corners`; `antialias`; `scale` -> `scale_factor` (the output length must be the
case's, else a skip); `cubic_a` is PyTorch's fixed -0.75 (-0.5 with `antialias=True`, its antialiasing
kernel's): any other is a skip.
"""

from __future__ import annotations

from ...adapters import NotSupported
from ..implementation import Implementation

DISTRIBUTION = "torch"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ("torch-interpolate",)

_MODES = {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest-exact"}


def _kernel_a(antialias: bool) -> float:
    return -0.5 if antialias else -0.75


def _interpolate(image, size, *, method, align_corners, cubic_a, antialias, scale):
    """`F.interpolate` of `image [1, C, H, W]` to `size` (or by `scale`) with the contract's settings."""
    import torch.nn.functional as F

    if method not in _MODES:
        raise NotSupported(f"F.interpolate has no method={method!r}")
    if method == "cubic" and cubic_a != _kernel_a(antialias):
        raise NotSupported(f"F.interpolate's bicubic kernel has a={_kernel_a(antialias)} "
                           f"(antialias={antialias}), not cubic_a={cubic_a}")
    if method == "nearest" and (align_corners or antialias):
        raise NotSupported("nearest-exact takes neither align_corners nor antialias")
    options = {} if method == "nearest" else {"align_corners": align_corners}
    if antialias:
        options["antialias"] = True
    try:
        if scale is None:
            return F.interpolate(image, size=tuple(size), mode=_MODES[method], **options)
        out = F.interpolate(image, scale_factor=tuple(float(s) for s in scale), mode=_MODES[method], **options)
    except NotImplementedError as error:  # torch's own refusal (no antialiased half-precision CPU kernel)
        raise NotSupported(f"F.interpolate refuses it: {str(error).splitlines()[0]}") from error
    if tuple(out.shape[-2:]) != tuple(size):
        raise NotSupported(f"scale_factor={scale} gives {tuple(out.shape[-2:])} rows, not the case's {tuple(size)}")
    return out


def resize_table(table, new_len, *, method="linear", align_corners=False, cubic_a=-0.75, antialias=False,
                 scale=None):
    """The contract's `resize_table` through F.interpolate on `[1, dim, 1, L]` (torch in, torch out): the wide
    orientation, as torch 2.13's antialiased kernels get a `[.., L, 1]` image wrong (FINDINGS)."""
    image = table.T[None, :, None, :]
    out = _interpolate(image, (1, int(new_len)), method=method, align_corners=align_corners, cubic_a=cubic_a,
                       antialias=antialias, scale=None if scale is None else (1.0, scale))
    return out[0, :, 0, :].T


def resize_grid(table, old_grid, new_grid, *, method="cubic", align_corners=False, cubic_a=-0.75, antialias=False,
                scale=None, prefix_tokens=0):
    """The contract's `resize_grid` through F.interpolate on the grid rows `[1, dim, old_h, old_w]`."""
    import torch

    (old_h, old_w), (new_h, new_w) = old_grid, new_grid
    prefix, grid = table[:prefix_tokens], table[prefix_tokens:]
    image = grid.reshape(int(old_h), int(old_w), -1).permute(2, 0, 1)[None]
    scales = None if scale is None else (tuple(scale) if isinstance(scale, (tuple, list)) else (scale, scale))
    out = _interpolate(image, (int(new_h), int(new_w)), method=method, align_corners=align_corners, cubic_a=cubic_a,
                       antialias=antialias, scale=scales)
    return torch.cat([prefix, out[0].permute(1, 2, 0).reshape(int(new_h) * int(new_w), -1)])


def load() -> Implementation:
    import torch

    return Implementation("torch-interpolate", "torch", {"resize_table": resize_table, "resize_grid": resize_grid},
                          version=torch.__version__.split("+")[0], angles="float32", differentiable=False,
                          description="torch.nn.functional.interpolate (linear, bicubic, nearest-exact, antialias, "
                                      "scale_factor)")


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = "`pip install torch==2.13.0` (posenc's pin)"
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = (
    {
        "implementation": "torch-interpolate",
        "title": "antialiased interpolation of a width-1 image returns one value repeated",
        "text": ("`F.interpolate(x, size=(n, 1), mode='bicubic' or 'bilinear', antialias=True)` on `x [N, C, L, "
                 "1]`, the shape a 1-D position table takes to reach the 2-D modes, returns the same value at "
                 "every output row (torch 2.13 CPU). The same table laid out wide, `[N, C, 1, L]`, is resized "
                 "correctly, so the bug is in the antialiasing path's handling of a size-1 axis."),
        "reproduction": ("import torch\n"
                         "import torch.nn.functional as F\n"
                         "x = torch.linspace(0, 1, 16).reshape(1, 1, 16, 1)\n"
                         "tall = F.interpolate(x, size=(8, 1), mode='bilinear', antialias=True)[0, 0, :, 0]\n"
                         "wide = F.interpolate(x.transpose(2, 3), size=(1, 8), mode='bilinear', "
                         "antialias=True)[0, 0, 0]\n"
                         "print(tall, wide)  # tall: one value repeated; wide: increasing"),
        "still": "float((tall - wide).abs().max()) > 0.1",
    },
)
#: the verdicts at the pinned version, as data: every float32 comparison that fails or errors
#: ("implementation convention/case" -> diagnosis; tests/app/impl/test_builtin_verdicts.py)
EXPECTED = {}
