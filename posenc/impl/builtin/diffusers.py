"""diffusers' timestep embedding `get_timestep_embedding(timesteps, embedding_dim, flip_sin_to_cos,
downscale_freq_shift, scale, max_period)` (diffusers/models/embeddings.py; checked on diffusers 0.42.1), the
sinusoid every diffusion model embeds its timestep with.

Mapping of the contract's `sinusoidal(positions, dim, *, base, layout, denominator)`:
* `layout="concat"` -> `flip_sin_to_cos=False` (`[sin | cos]`), `"concat-cos"` -> `True` (`[cos | sin]`);
  interleaved pairs are not expressible (a skip);
* `denominator="dim"` -> `downscale_freq_shift=0` (`exp(-ln(max_period) i / half)`), `"half-1"` -> `1`;
* `base` -> `max_period` (an int in diffusers' signature: a fractional base is a skip);
* positions: a 1-D tensor of float timesteps (the function's input); other shapes are flattened and put back.
It computes in float32 (precision class "float32").
"""

from __future__ import annotations

from ...adapters import NotSupported, adapter
from ..implementation import Implementation, ImplementationUnavailable

DISTRIBUTION = "diffusers"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ("diffusers",)

_FLIP = {"concat": False, "concat-cos": True}
_SHIFT = {"dim": 0, "half-1": 1}


def sinusoidal(positions, dim, *, base=10000.0, layout="interleaved", denominator="dim", dtype=None):
    """The contract's `sinusoidal` through `get_timestep_embedding` (torch in, torch out)."""
    from diffusers.models.embeddings import get_timestep_embedding

    if layout not in _FLIP:
        raise NotSupported(f"get_timestep_embedding writes [sin | cos] or [cos | sin] halves, not layout={layout!r}")
    if float(base) != int(base):
        raise NotSupported(f"get_timestep_embedding's max_period is an int, not base={base!r}")
    out = get_timestep_embedding(positions.reshape(-1), int(dim), flip_sin_to_cos=_FLIP[layout],
                                 downscale_freq_shift=_SHIFT[denominator], max_period=int(base))
    out = out.reshape(*positions.shape, int(dim))
    return out if dtype is None else out.to(adapter("torch").dtype(dtype))  # the model casts to its dtype


def sinusoidal_2d(positions, dim, *, base=10000.0, axis_order="xy", blocks="per-axis", layout="concat",
                  denominator="dim", dtype=None):
    """The contract's `sinusoidal_2d` through `get_2d_sincos_pos_embed_from_grid(dim, grid)` (PixArt, SD3, DiT's
    patch embeddings): `grid[0]` (encoded first, as diffusers' `meshgrid(grid_w, grid_h)` puts the column
    coordinate there) and `grid[1]` any float positions; `[sin | cos]` halves, Vaswani's denominator, base 10000."""
    import torch
    from diffusers.models.embeddings import get_2d_sincos_pos_embed_from_grid

    settings = dict(blocks=blocks, layout=layout, denominator=denominator)
    if settings != dict(blocks="per-axis", layout="concat", denominator="dim") or float(base) != 10000.0:
        raise NotSupported(f"get_2d_sincos_pos_embed_from_grid encodes [enc(grid[0]) | enc(grid[1])], each "
                           f"[sin | cos] with base 10000 and Vaswani's denominator; not {settings}, base={base}")
    flat = positions.reshape(-1, 2).to(torch.float64)
    first, second = (flat[:, 1], flat[:, 0]) if axis_order == "xy" else (flat[:, 0], flat[:, 1])
    out = get_2d_sincos_pos_embed_from_grid(int(dim), torch.stack([first, second]))
    out = out.reshape(*positions.shape[:-1], int(dim))
    return out if dtype is None else out.to(adapter("torch").dtype(dtype))


def load() -> Implementation:
    import importlib.metadata

    try:
        import diffusers.models.embeddings  # noqa: F401
    except ImportError as error:
        raise ImplementationUnavailable(f"--impl diffusers: diffusers does not import ({error})") from error
    return Implementation("diffusers", "torch", {"sinusoidal": sinusoidal, "sinusoidal_2d": sinusoidal_2d},
                          angles="float32",
                          version=importlib.metadata.version(DISTRIBUTION), differentiable=False,
                          description="get_timestep_embedding (the timestep sinusoid of diffusion models), "
                                      "get_2d_sincos_pos_embed_from_grid (2-D patch tables)")


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = "`pip install diffusers` (posenc's dev extra)"
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = (
    {
        "implementation": "diffusers",
        "title": "the DiT timestep path shifts the frequency denominator that facebookresearch/DiT does not",
        "text": ("diffusers' DiT / PixArt timestep embedding calls get_timestep_embedding with "
                 "downscale_freq_shift=1 (frequencies 10000**(-i/(half-1))), where facebookresearch/DiT's "
                 "TimestepEmbedder divides by half: the same checkpoint's timestep embedding differs "
                 "(11.4 apart in norm at t=999, hidden size 256, each of norm 11.3)."),
        "reproduction": ("import torch\n"
                         "from diffusers.models.embeddings import get_timestep_embedding\n"
                         "t = torch.tensor([999.0])\n"
                         "dit = get_timestep_embedding(t, 256, flip_sin_to_cos=True, downscale_freq_shift=1)\n"
                         "paper = get_timestep_embedding(t, 256, flip_sin_to_cos=True, downscale_freq_shift=0)\n"
                         "print((dit - paper).norm())  # 11.4 (each has norm 11.3): the DiT paper's formula is shift 0"),
        "still": "float((dit - paper).norm()) > 1.0",
    },
)

#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
EXPECTED = {}
