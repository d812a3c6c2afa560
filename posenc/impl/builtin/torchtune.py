"""torchtune's `RotaryPositionalEmbeddings(dim, max_seq_len, base)` (torchtune/modules/position_embeddings.py)
and `Llama3ScaledRoPE` (torchtune/models/llama3_1/_position_embeddings.py), checked on torchtune 0.6.1.

`import torchtune` needs torchao; both module files import only torch, so they are loaded by path.
Mapping of the contract:

* `forward(x [b, s, n_h, h_d], *, input_pos [b, s])`: every token of `x` becomes one row of `s` carrying
  its own position (`[1, tokens, 1, dim]`), so any positions run.
* layout "interleaved" only (the Meta Llama complex form); partial rotary: the module is built with
  `dim = rotary_dim` and given the first `rotary_dim` channels, the rest concatenated back.
* scalings: unscaled, and llama3 through `Llama3ScaledRoPE(scale_factor, low_freq_factor,
  high_freq_factor, old_context_len)`; the others are skips.
* the cache holds `MAX_SEQ_LEN` rows (`max_positions`): `cache[input_pos]` indexes it, so positions at or
  past it are the edge cases' business (an IndexError is the correct refusal).

Precision class "float32": `theta` and the `einsum` of the cache are float32; `x` is upcast to float32
for the products and the output cast back to its dtype.
"""

from __future__ import annotations

import functools

import numpy as np

from ...adapters import NotSupported
from ..implementation import Implementation
from ._kernel_inputs import rotary_width, rotate_partial, scaling_type, token_positions
from ._loading import module_file

DISTRIBUTION = "torchtune"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ('torchtune',)
#: rows of the rope cache the modules are built with: covers the suite's longest positions (2**20 - 1)
MAX_SEQ_LEN = 2**20

_FILES = {"RotaryPositionalEmbeddings": ("modules", "position_embeddings.py"),
          "Llama3ScaledRoPE": ("models", "llama3_1", "_position_embeddings.py")}


def module_class(name: str):
    """torchtune's rotary class `name`, from its module file loaded by path once."""
    module = module_file("torchtune", *_FILES[name],
                         missing="--impl torchtune: torchtune is not installed (pip install --no-deps torchtune)")
    return getattr(module, name)


def rope_module(rotary_dim: int, base, scaling):
    """The torchtune module for the contract's frequencies (the last one is reused: its cache costs ~0.1 s per
    2**20 rows)."""
    kind, params = scaling_type(scaling, rotary_dim=rotary_dim, base=base)
    if kind == "default":
        return _built(("RotaryPositionalEmbeddings", rotary_dim, float(base)))
    if kind == "llama3":
        options = dict(scale_factor=params["factor"], low_freq_factor=params["low_freq_factor"],
                       high_freq_factor=params["high_freq_factor"],
                       old_context_len=params["original_max_position_embeddings"])
        return _built(("Llama3ScaledRoPE", rotary_dim, float(base), tuple(sorted(options.items()))))
    raise NotSupported(f"torchtune has RotaryPositionalEmbeddings and Llama3ScaledRoPE, no {kind!r} scaling")


@functools.lru_cache(maxsize=1)
def _built(key):
    name, rotary_dim, base, *options = key
    return module_class(name)(rotary_dim, max_seq_len=MAX_SEQ_LEN, base=base, **dict(options[0] if options else ()))


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None,
               rotary_pct=None):
    """The contract's `apply_rope` through torchtune's rotary module (torch in, torch out)."""
    import torch

    if layout != "interleaved":
        raise NotSupported("torchtune's RotaryPositionalEmbeddings rotates interleaved pairs only")
    r = rotary_width(x.shape[-1], rotary_dim, rotary_pct)
    module = rope_module(r, base, scaling)
    tokens = torch.from_numpy(np.ascontiguousarray(token_positions(tuple(x.shape), positions.numpy()).reshape(1, -1)))

    def rotate(part):
        return module(part.reshape(1, -1, 1, r), input_pos=tokens).reshape(*x.shape[:-1], r)

    return rotate_partial(rotate, x, r, lambda parts: torch.cat(parts, dim=-1))


def load() -> Implementation:
    import importlib.metadata

    module_class("RotaryPositionalEmbeddings")
    return Implementation("torchtune", "torch", {"apply_rope": apply_rope},
                          version=importlib.metadata.version("torchtune"), layouts=("interleaved",),
                          dtypes=("float32", "bfloat16", "float16"), angles="float32", max_positions=MAX_SEQ_LEN,
                          description="RotaryPositionalEmbeddings / Llama3ScaledRoPE (input_pos [b, s], "
                                      f"cache of {MAX_SEQ_LEN} rows)")


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ('`pip install --no-deps torchtune` (the adapter loads the module files, which need only '
           'torch; `import torchtune` needs torchao)')
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = (
    {
        'implementation': ('torchtune'),
        'title': ('negative positions read the rope cache from its end'),
        'text': ('`RotaryPositionalEmbeddings.forward(x, input_pos=...)` gathers `self.cache[input_pos]`: '
            'a negative id is a Python index from the end, so position -1 is rotated as position '
            '`max_seq_len - 1`, with no error (positions at or past `max_seq_len` raise IndexError).'),
        'reproduction': ('import importlib.util, os, torch\n'
                         '# the module file by path: `import torchtune` needs torchao\n'
                         'spec = importlib.util.find_spec("torchtune")\n'
                         'path = os.path.join(spec.submodule_search_locations[0], "modules", '
                         '"position_embeddings.py")\n'
                         'loader = importlib.util.spec_from_file_location("position_embeddings", path)\n'
                         'module = importlib.util.module_from_spec(loader); loader.loader.exec_module(module)\n'
                         'rope = module.RotaryPositionalEmbeddings(16, max_seq_len=64)\n'
                         'x = torch.randn(1, 1, 1, 16)\n'
                         'same = torch.equal(rope(x, input_pos=torch.tensor([[-1]])), rope(x, '
                         'input_pos=torch.tensor([[63]])))\n'
                         'print(same)  # True: position -1 is rotated as position 63, no error'),
        'still': 'same',
    },
)

#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
EXPECTED = {
    'torchtune edge/negative-positions-interleaved': 'wrapped',
}
