"""Gemma's (google-deepmind/gemma) `gemma/gm/math/_positional_embeddings.py` `apply_rope(inputs, positions, *,
base_frequency, scale_factor=1.0, rope_proportion=1.0)` (checked on gemma 3.3.0 with jax 0.10.2).

The module file imports only jax, so it is loaded by path (`import gemma` pulls the whole library).
Mapping of the contract:

* `inputs [B, L, N, H]`, `positions [B, L]`: every token of `x` becomes one row of `L`, carrying its own
  position (`[1, tokens, 1, dim]`), so any positions run.
* layout "half" only (Gemma's `split(inputs, 2)`); partial rotary: the first `rotary_dim` channels are
  passed and the rest concatenated back, as a model slices before a kernel.
* scalings: linear -> `scale_factor = factor`; proportional (Gemma 4) -> `rope_proportion =
  partial_rotary_factor` with `scale_factor = factor`; the others are skips.

Precision class "float32": `timescale = base ** (2j / H)` and `positions / timescale / scale_factor` in
float32; the products promote bfloat16 inputs to float32 and the output is cast back.
"""

from __future__ import annotations

import numpy as np

from ...adapters import NotSupported
from ..implementation import Implementation
from ._kernel_inputs import rotary_width, rotate_partial, scaling_type, token_positions
from ._loading import module_file

DISTRIBUTION = "gemma"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ('gemma',)

def positional_embeddings():
    """gemma's `gm/math/_positional_embeddings.py`, loaded by path once."""
    return module_file("gemma", "gm", "math", "_positional_embeddings.py",
                       missing="--impl gemma: gemma is not installed (pip install --no-deps gemma)")


def _gemma_scaling(scaling, *, rotary_dim, base) -> dict:
    kind, params = scaling_type(scaling, rotary_dim=rotary_dim, base=base)
    if kind == "default":
        return {}
    if kind == "linear":
        return {"scale_factor": float(params["factor"])}
    if kind == "proportional":
        return {"scale_factor": float(params.get("factor", 1.0)),
                "rope_proportion": float(params.get("partial_rotary_factor", 1.0))}
    raise NotSupported(f"gemma's apply_rope has scale_factor (linear) and rope_proportion (proportional), "
                       f"no {kind!r}")


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None):
    """The contract's `apply_rope` through gemma's `apply_rope` (JAX in, JAX out)."""
    import jax.numpy as jnp

    if layout != "half":
        raise NotSupported("gemma's apply_rope rotates halves only")
    r = rotary_width(x.shape[-1], rotary_dim, rotary_pct)
    options = _gemma_scaling(scaling, rotary_dim=r, base=base)
    tokens = jnp.asarray(token_positions(x.shape, np.asarray(positions)).reshape(1, -1))

    def rotate(part):
        out = positional_embeddings().apply_rope(part.reshape(1, -1, 1, r), tokens, base_frequency=float(base),
                                                 **options)
        return out.reshape(*x.shape[:-1], r)

    return rotate_partial(rotate, x, r, lambda parts: jnp.concatenate(parts, axis=-1))


def load() -> Implementation:
    import importlib.metadata

    positional_embeddings()
    return Implementation("gemma", "jax", {"apply_rope": apply_rope}, version=importlib.metadata.version("gemma"),
                          layouts=("half",), dtypes=("float32", "bfloat16", "float16"), angles="float32",
                          description="gm.math apply_rope (positions [B, L]; scale_factor, rope_proportion)")


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ('`pip install --no-deps gemma` (3.x for Python 3.11; the adapter loads one module file '
           'that needs only jax)')
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = ()

#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
EXPECTED = {}
