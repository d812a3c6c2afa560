"""open_clip's position-table resizers (checked on open-clip-torch 3.3.0, `open_clip/model.py`), what
`load_checkpoint` runs when a checkpoint's tables do not match the model:

* `resize_pos_embed(state_dict, model, interpolation='bicubic', antialias=True)` (L792-823): the image tower's
  `state_dict['visual.positional_embedding']` `[1 + old_n, width]`, the first row (the class token) kept and
  the rest taken as a square grid `int(sqrt(old_n))` on a side, resized with `F.interpolate(size=
  model.visual.grid_size, mode=interpolation, antialias=antialias, align_corners=False)`;
* `resize_text_pos_embed(state_dict, model, interpolation='linear', antialias=False)` (L826-855): the text
  tower's `[L, width]` resized along the positions to `model.positional_embedding.shape[0]` with a 1-D
  `F.interpolate(mode=interpolation, antialias=antialias, align_corners=False)`.

`open_clip/model.py` imports `open_clip/utils.py`, which imports torchvision (whose PyPI wheel does not load
beside this CPU torch), and transformers and timm through `hf_model.py` / `timm_model.py`; so the two
functions' source, and `to_2tuple` from `utils.py`, are read from the installed files and executed alone
(their bodies use only `math`, `logging`, `torch`, `F` and `to_2tuple`). They are called with a state-dict
stub `{key: table}` and a stand-in model carrying only what they read (`visual.grid_size`;
`positional_embedding`, whose shape alone is read), and the resized table is read back from the dict.

Mapping of the contract (the loaders call the defaults: posenc's `open-clip` convention, `resize_grid(
method="cubic", cubic_a=-0.5, antialias=True, prefix_tokens=1)`, and `resize_table(method="linear")`):

* `resize_grid` -> `resize_pos_embed`: `method` "cubic" / "linear" -> `interpolation` 'bicubic' /
  'bilinear', `antialias` passed. Skips: `prefix_tokens` other than 1 (`extra_tokens = 1` is fixed, its
  FIXME), a non-square old grid (the side is `int(sqrt(n))`), `align_corners=True` and `scale` (it passes
  `align_corners=False` and `size`), "nearest" (F.interpolate refuses `align_corners` for it), a cubic `a`
  other than PyTorch's (-0.75, or -0.5 when antialiased), `border="renormalize"` with a plain bicubic
  (PyTorch's clamps; "linear", and any antialiased kernel, are the same under either border, so those run),
  and half precision with antialias (torch has no such CPU kernel). A new grid with the old one's token count
  is returned unchanged (`new_seq_len == old_pos_embed.shape[0]`: a 6x6 table asked for 4x9 stays 6x6;
  FINDINGS), which no check case reaches, as it needs one prefix row and a square old grid;
* `resize_table` -> `resize_text_pos_embed`: `method="linear"` only (a 1-D `F.interpolate` has no bicubic,
  and "nearest" refuses `align_corners`), without `align_corners`, `scale` or `antialias` (antialias needs a
  4-D input); `border` is accepted either way ("linear" gives the same numbers under both).

Precision: the functions resize in the table's dtype (no float32 cast, unlike timm), so float32 tables are
computed in float32; the precision class is float32.
"""

from __future__ import annotations

import ast
import collections.abc
import functools
import itertools
import logging
import math
import types

from posenc_np.backend import check_choice
from posenc_np.learned import RESIZE_BORDERS

from ...adapters import NotSupported
from ..implementation import Implementation
from ._loading import package_dir

DISTRIBUTION = "open_clip_torch"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ("open-clip",)

_MISSING = "--impl open-clip: open_clip is not installed (pip install --no-deps open_clip_torch)"
_MODES = {"cubic": "bicubic", "linear": "bilinear"}


def _run_source(path, names: tuple[str, ...], namespace: dict) -> dict:
    """Execute only the top-level definitions `names` (functions, or assignments to them) of the Python file
    `path` in `namespace`, keeping the file's name and line numbers; NotSupported if one is missing."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found, wanted = [], set(names)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in wanted:
            found.append(node)
        elif isinstance(node, ast.Assign) and {getattr(t, "id", None) for t in node.targets} & wanted:
            found.append(node)
    defined = {getattr(n, "name", None) for n in found} | {t.id for n in found if isinstance(n, ast.Assign)
                                                            for t in n.targets}
    if wanted - defined:
        raise NotSupported(f"{path} defines no {', '.join(sorted(wanted - defined))}")
    exec(compile(ast.Module(body=found, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace


@functools.cache
def functions() -> dict:
    """`{"resize_pos_embed": ..., "resize_text_pos_embed": ...}`: open_clip's own functions, executed from
    the installed `open_clip/model.py` with `to_2tuple` from `open_clip/utils.py` (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    root = package_dir("open_clip", missing=_MISSING)
    utils = _run_source(root / "utils.py", ("_ntuple", "to_2tuple"),
                        {"collections": collections, "repeat": itertools.repeat})
    namespace = {"math": math, "logging": logging, "torch": torch, "F": F, "to_2tuple": utils["to_2tuple"]}
    model = _run_source(root / "model.py", ("resize_pos_embed", "resize_text_pos_embed"), namespace)
    return {name: model[name] for name in ("resize_pos_embed", "resize_text_pos_embed")}


def _refused(error: Exception) -> NotSupported:
    return NotSupported(f"F.interpolate refuses it: {str(error).splitlines()[0]}")


def _check_border(border, method, antialias, who):
    """PyTorch's plain bicubic clamps the taps outside the table; "linear" and the antialiased kernels give the
    same numbers under either border (docs/api.md, `resize_table`), so only a plain cubic needs "clamp"."""
    check_choice("border", border, RESIZE_BORDERS)
    if border != "clamp" and method == "cubic" and not antialias:
        raise NotSupported(f"{who}'s bicubic is PyTorch's, with clamped borders, not border={border!r}")


def resize_grid(table, old_grid, new_grid, *, method="cubic", align_corners=False, cubic_a=-0.75, antialias=False,
                scale=None, prefix_tokens=0, border="clamp"):
    """The contract's `resize_grid` through `resize_pos_embed` on a state-dict stub (torch in, torch out)."""
    (old_h, old_w), (new_h, new_w) = (int(n) for n in old_grid), (int(n) for n in new_grid)
    if int(prefix_tokens) != 1:
        raise NotSupported(f"resize_pos_embed keeps exactly one prefix row (extra_tokens = 1), not "
                           f"prefix_tokens={prefix_tokens}")
    if old_h != old_w:
        raise NotSupported(f"resize_pos_embed takes the old grid as square (int(sqrt(n)) a side), not "
                           f"{old_h}x{old_w}")
    if method not in _MODES:
        raise NotSupported(f"resize_pos_embed passes align_corners=False, which F.interpolate refuses for "
                           f"method={method!r}")
    if align_corners or scale is not None:
        raise NotSupported("resize_pos_embed samples on the size grid with align_corners=False")
    if method == "cubic" and cubic_a != (-0.5 if antialias else -0.75):
        raise NotSupported(f"open_clip's bicubic is PyTorch's (a={-0.5 if antialias else -0.75} with "
                           f"antialias={antialias}), not cubic_a={cubic_a}")
    _check_border(border, method, antialias, "resize_pos_embed")
    state = {"visual.positional_embedding": table}
    model = types.SimpleNamespace(visual=types.SimpleNamespace(grid_size=(new_h, new_w)))
    try:
        functions()["resize_pos_embed"](state, model, interpolation=_MODES[method], antialias=bool(antialias))
    except NotImplementedError as error:  # no antialiased half-precision CPU kernel
        raise _refused(error) from error
    return state["visual.positional_embedding"]


def resize_table(table, new_len, *, method="linear", align_corners=False, cubic_a=-0.75, antialias=False,
                 scale=None, border="clamp"):
    """The contract's `resize_table` through `resize_text_pos_embed` on a state-dict stub (torch in, out)."""
    import torch

    if method != "linear":
        raise NotSupported(f"resize_text_pos_embed is a 1-D F.interpolate: 'linear' only, not method={method!r}")
    if align_corners or scale is not None:
        raise NotSupported("resize_text_pos_embed samples on the size grid with align_corners=False")
    if antialias:
        raise NotSupported("F.interpolate antialiases only 4-D inputs; resize_text_pos_embed's is 3-D")
    _check_border(border, method, antialias, "resize_text_pos_embed")
    state = {"positional_embedding": table}
    model = types.SimpleNamespace(positional_embedding=torch.empty(int(new_len), table.shape[-1], device="meta"))
    functions()["resize_text_pos_embed"](state, model)
    return state["positional_embedding"]


def load() -> Implementation:
    import importlib.metadata

    functions()
    return Implementation("open-clip", "torch", {"resize_grid": resize_grid, "resize_table": resize_table},
                          version=importlib.metadata.version(DISTRIBUTION), angles="float32", differentiable=False,
                          description="resize_pos_embed, resize_text_pos_embed (their source from open_clip/model.py)")


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ("`pip install --no-deps open_clip_torch` (the two functions' source is read from open_clip/model.py; "
           "torchvision is not needed)")
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = (
    {
        "implementation": "open-clip",
        "title": "resize_pos_embed keeps the old layout when the new grid has as many tokens",
        "text": ("`resize_pos_embed` returns early when `grid_h * grid_w + 1` equals the checkpoint table's rows, "
                 "so a 6x6 image table loaded into a model whose `visual.grid_size` is (4, 9) (the same 36 "
                 "tokens, a non-square `image_size`) is kept as it is and read in 4x9 order: the second row of "
                 "the new grid starts at the old grid's (1, 3). On a smooth table that is 11.4 % of its range "
                 "from the resize timm's `resample_abs_pos_embed` (the same call otherwise) computes. The early "
                 "return compares token counts, not grids (open_clip 3.3.0 `open_clip/model.py` L797-801)."),
        "reproduction": ("import ast, importlib.util, logging, math, pathlib, types\n"
                         "import torch\n"
                         "import torch.nn.functional as F\n"
                         "# open_clip/model.py imports torchvision (utils.py): run resize_pos_embed's source alone\n"
                         "path = pathlib.Path(importlib.util.find_spec('open_clip').submodule_search_locations[0]) "
                         "/ 'model.py'\n"
                         "found = [n for n in ast.parse(path.read_text()).body\n"
                         "         if isinstance(n, ast.FunctionDef) and n.name == 'resize_pos_embed']\n"
                         "ns = {'math': math, 'logging': logging, 'torch': torch, 'F': F,\n"
                         "      'to_2tuple': lambda x: tuple(x) if isinstance(x, (tuple, list)) else (x, x)}\n"
                         "exec(compile(ast.Module(body=found, type_ignores=[]), str(path), 'exec'), ns)\n"
                         "table = torch.cat([torch.zeros(1, 1), torch.arange(36.0).reshape(36, 1)])  # 6 * row + "
                         "col\n"
                         "state = {'visual.positional_embedding': table}\n"
                         "model = types.SimpleNamespace(visual=types.SimpleNamespace(grid_size=(4, 9)))\n"
                         "ns['resize_pos_embed'](state, model)\n"
                         "out = state['visual.positional_embedding']\n"
                         "print(out[1:, 0].reshape(4, 9))  # the 6x6 values in 4x9 order, not resized"),
        "still": "torch.equal(out, table)",
    },
)
#: the verdicts at the pinned version, as data: every float32 comparison that fails or errors
#: ("implementation convention/case" -> diagnosis; tests/app/impl/test_builtin_verdicts.py)
EXPECTED = {}
