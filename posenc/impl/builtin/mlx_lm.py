"""mlx-lm's rotary modules: `mlx_lm/models/rope_utils.py` `initialize_rope(dims, base, traditional,
scaling_config, max_position_embeddings)` (checked on mlx-lm 0.32.2 with mlx[cpu] 0.32.4).

The module is loaded by its file path: `import mlx_lm` imports huggingface_hub and its model registry,
while `rope_utils.py` imports only `mlx.core` / `mlx.nn`. Mapping of the contract:

* `scaling` -> `scaling_config` with the same `rope_type` (mlx-lm reads HF's config keys): default,
  linear, dynamic, llama3, yarn, longrope; posenc's `mlx-yarn` / `mlx-longrope` (the spec's statement of
  what mlx-lm computes) are passed as mlx-lm's `yarn` / `longrope`. Any other type is a skip. An HF
  `longrope` or `yarn` case is run as mlx-lm reads the same config, so where mlx-lm means something else
  the check fails and says so.
* `max_position_embeddings`: `original_max_position_embeddings` for `dynamic` (HF's threshold), `factor x
  original` for `longrope` (mlx-lm derives the magnitude factor from their ratio), else the original.
* multi-axis RoPE -> `rope_type="mrope"` with the section, called with the first (temporal) axis as
  positions: mlx-lm's text models give no other axis.
* `x` and positions reach the module's `__call__(x, offset)` as in `--impl mlx` (offsets per row, one
  token per row otherwise); `dynamic` takes one int offset per call.

Precision class "float32" (every module calls `mx.fast.rope`).
"""

from __future__ import annotations

import numpy as np

from ...adapters import NotSupported
from ..implementation import Implementation, ImplementationUnavailable
from ._kernel_inputs import require_shared_three_axes, rotary_width, token_positions
from ._loading import module_file
from .mlx import MLX_DTYPES, call_with_offsets

DISTRIBUTION = "mlx-lm"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ('mlx-lm',)

#: posenc rope_type -> mlx-lm's name for what the spec's entry computes
_TYPES = {"default": "default", "linear": "linear", "dynamic": "dynamic", "llama3": "llama3", "yarn": "yarn",
          "longrope": "longrope", "mlx-yarn": "yarn", "mlx-longrope": "longrope"}

def rope_utils():
    """mlx-lm's `models/rope_utils.py`, loaded by path once."""
    try:
        return module_file("mlx_lm", "models", "rope_utils.py",
                           missing="--impl mlx-lm: mlx_lm is not installed (pip install mlx-lm)")
    except ImplementationUnavailable:
        raise
    except ImportError as error:
        raise ImplementationUnavailable(f"--impl mlx-lm: models/rope_utils.py does not import ({error}); on Linux "
                                        f"install mlx[cpu] beside mlx-lm") from error


def scaling_config(scaling, *, mrope_section=None):
    """`(scaling_config, max_position_embeddings)` for `initialize_rope` (see the module docstring)."""
    if mrope_section is not None:
        if scaling is not None:
            raise NotSupported("mlx-lm's mrope rope_type takes no other scaling")
        return {"rope_type": "mrope", "mrope_section": list(mrope_section)}, None
    if scaling is None:
        return None, None
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind not in _TYPES:
        raise NotSupported(f"mlx-lm's initialize_rope has no rope_type {kind!r} "
                           f"(it has {', '.join(sorted(set(_TYPES.values())))})")
    config = {k: v for k, v in scaling.items() if k not in ("type", "rope_type")}
    config["rope_type"] = _TYPES[kind]
    original = scaling.get("original_max_position_embeddings")
    if _TYPES[kind] == "longrope":
        config.setdefault("short_factor", config["long_factor"])  # initialize_rope requires it, SuScaledRoPE never reads it
    if _TYPES[kind] == "longrope" and "factor" in scaling:
        return config, int(round(float(scaling["factor"]) * original))
    return config, original


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None,
               mrope_section=None, mrope_interleaved=False, mrope_frequencies="shared"):
    """The contract's `apply_rope` through the module `initialize_rope` builds (NumPy in, NumPy out)."""
    x = np.asarray(x)
    r = rotary_width(x.shape[-1], rotary_dim, rotary_pct)
    if mrope_section is not None:
        require_shared_three_axes("mlx-lm's mrope", mrope_section, mrope_frequencies)
        positions = token_positions(x.shape, positions, axes=3)[0]
    config, max_positions = scaling_config(scaling, mrope_section=mrope_section)
    module = rope_utils().initialize_rope(r, float(base), layout == "interleaved", config, max_positions)
    dynamic = config is not None and config["rope_type"] == "dynamic"
    return call_with_offsets(x, positions, lambda a, offset: module(a, offset=offset),
                             what=f"mlx-lm {type(module).__name__}", scalar_offset_only=dynamic)


def load() -> Implementation:
    import importlib.metadata

    rope_utils()
    return Implementation("mlx-lm", "numpy", {"apply_rope": apply_rope},
                          version=importlib.metadata.version("mlx-lm"), dtypes=MLX_DTYPES, angles="float32",
                          description="rope_utils.initialize_rope modules (linear, dynamic, llama3, yarn, "
                                      "longrope, mrope) on mx.fast.rope")


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ('`pip install --no-deps mlx-lm` beside `mlx[cpu]` (on Linux mlx-lm does not depend on mlx)')
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = (
    {
        'implementation': ('mlx-lm'),
        'title': ('longrope (SuScaledRoPE) ignores `traditional` and the short factors'),
        'text': ("`initialize_rope(..., traditional=True, scaling_config={'rope_type': 'longrope', ...})` "
            'builds `SuScaledRoPE`, which calls `mx.fast.rope(..., traditional=False)`: an '
            'interleaved model gets the half layout. It also uses the long factors at every length '
            "(HF: short factors up to `original_max_position_embeddings`; posenc names mlx-lm's rule "
            '`mlx-longrope`).'),
        'reproduction': ('import mlx.core as mx\n'
                         'from mlx_lm.models.rope_utils import initialize_rope\n'
                         "config = {'rope_type': 'longrope', 'short_factor': [1.0] * 8, 'long_factor': [1.0] * 8,\n"
                         "          'original_max_position_embeddings': 64}\n"
                         'rope = initialize_rope(16, 10000.0, True, config, 1024)  # traditional=True: interleaved '
                         'pairs\n'
                         'x = mx.random.normal((1, 1, 4, 16))\n'
                         'half = mx.fast.rope(x, 16, traditional=False, base=10000.0, scale=1.0, offset=0) * '
                         'rope._scale\n'
                         'err = mx.abs(rope(x) - half).max().item()\n'
                         'print(err)  # 2e-7: the half layout, not the interleaved one asked for'),
        'still': 'err < 1e-5',
    },
    {
        'implementation': ('mlx-lm'),
        'title': ('`mrope` is plain 1-D RoPE'),
        'text': ("`rope_type='mrope'` returns `nn.RoPE` and ignores `mrope_section`: right for text "
            'tokens (all axes equal), wrong for image or video ids (mlx-vlm has the multi-axis code).'),
        'reproduction': ('from mlx_lm.models.rope_utils import initialize_rope\n'
                         "rope = initialize_rope(128, 1e6, False, {'rope_type': 'mrope', 'mrope_section': [16, 24, "
                         '24]}, 4096)\n'
                         'print(type(rope).__name__)  # RoPE: plain 1-D, mrope_section ignored'),
        'still': "type(rope).__name__ == 'RoPE'",
    },
)

#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
EXPECTED = {
    'mlx-lm half-longrope/short': 'longrope-factors',
    'mlx-lm half-longrope/per-row': 'longrope-factors',
    'mlx-lm interleaved-longrope/short': 'longrope-factors',
    'mlx-lm interleaved-longrope/long': 'layout',
    'mlx-lm interleaved-longrope/per-row': 'longrope-factors',
    'mlx-lm interleaved-mlx-longrope/long': 'layout',
    'mlx-lm qwen2-vl/short': 'mrope-axes',
    'mlx-lm qwen2-vl/long': 'unrotated',
    'mlx-lm qwen2-vl/per-row': 'mrope-axes',
    'mlx-lm qwen2-vl/text-image-video': 'mrope-axes',
    'mlx-lm qwen3-vl/short': 'mrope-axes',
    'mlx-lm qwen3-vl/long': 'unrotated',
    'mlx-lm qwen3-vl/per-row': 'mrope-axes',
    'mlx-lm qwen3-vl/text-image-video': 'mrope-axes',
}
