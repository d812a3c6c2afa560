"""Suite cases for RoPE: every layout x scaling type, and the four named conventions.

Signatures (shapes + keyword arguments, one torch compile each per dtype) are kept few: the case sets
"short", "long" and "kv-offset" share `x [2, 2, 8, 16]` with `positions [8]`; "per-row" and "left-pad"
share `positions [2, 1, 8]`; "broadcast" feeds `[batch, seq, heads, dim]` with `positions [2, 8, 1]`.
Under jit (one compile per signature and dtype) run: the sequence-length dependent types (`dynamic`,
`longrope`, half layout: traced seq_len), and "kv-offset" of hf-llama, meta-llama and gpt-neox plus
hf-llama's "broadcast"; the rest run eagerly: under jit the position-dependent code is the same, and
static scalings are constants.
"""

from __future__ import annotations

import numpy as np

from posenc_np.backend import numpy_dtype
from posenc_np.conventions import conventions
from posenc_np.rope import resolve_rotary_dim, rope_plan
from posenc_np.testing import ROPE_ANGLE_GOAL, tolerance

from .registry import Case, register

HEAD_DIM = 16
ORIGINAL = 64  # original_max_position_embeddings of the scaled cases: "long" positions exceed it
LONG = 2**20

SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "ntk": {"rope_type": "ntk", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": ORIGINAL},
    "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": ORIGINAL, "beta_fast": 32,
             "beta_slow": 1},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": ORIGINAL},
    "longrope": {"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.8],
                 "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 13.0, 18.0], "factor": 16.0,
                 "original_max_position_embeddings": ORIGINAL},
    "keras-hub-dynamic": {"rope_type": "keras-hub-dynamic", "factor": 4.0},
    "keras-hub-yarn": {"rope_type": "keras-hub-yarn", "factor": 8.0, "original_max_position_embeddings": ORIGINAL},
    # runtime variants (posenc spec --runtime): static frequencies that the backends take from the spec plan
    "vllm-ntk": {"rope_type": "vllm-ntk", "factor": 4.0},
    "vllm-longrope": {"rope_type": "vllm-longrope", "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.8],
                      "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 13.0, 18.0], "factor": 16.0,
                      "original_max_position_embeddings": ORIGINAL, "max_model_len": 16 * ORIGINAL},
    "mlx-longrope": {"rope_type": "mlx-longrope", "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 13.0, 18.0],
                     "factor": 16.0, "original_max_position_embeddings": ORIGINAL},
    "mlx-yarn": {"rope_type": "mlx-yarn", "factor": 8.0, "original_max_position_embeddings": ORIGINAL,
                 "mscale": 0.707, "mscale_all_dim": 0.0},
    "llamacpp-freq-factors": {"rope_type": "llamacpp-freq-factors",
                              "freq_factors": [1.0, 1.0, 1.0, 1.5, 3.0, 8.0, 8.0, 8.0]},
}
JIT_SCALINGS = ("dynamic", "longrope")  # traced seq_len: the in-graph frequency path

POSITIONS = {
    "short": np.arange(8),
    "long": np.array([0, 255, 257, 4097, 65537, 300001, LONG - 3, LONG - 1]),
    "kv-offset": np.arange(8) + 1000,  # decoding after a 1000-token cache
    "per-row": np.array([[0, 1, 2, 3, 4, 5, 6, 7], [40, 41, 42, 43, 44, 45, 46, 47]])[:, None, :],
    # HF: position_ids = cumsum(mask) - 1, pads filled with 1; the second row has no padding
    "left-pad": np.array([[1, 1, 1, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5, 6, 7]])[:, None, :],
    "broadcast": np.array([[0, 1, 2, 3, 4, 5, 6, 7], [90, 91, 92, 93, 94, 95, 96, 97]])[:, :, None],
    # a context-parallel rank's tokens of a 16-token sequence split zigzag over 2 ranks (Megatron, TE thd)
    "cp-zigzag-rank0": np.array([0, 1, 2, 3, 12, 13, 14, 15]),
    "cp-zigzag-rank1": np.array([4, 5, 6, 7, 8, 9, 10, 11]),
}
DESCRIPTIONS = {
    "short": "x [2,2,8,16], positions 0..7 (below every original length)",
    "long": "positions up to 2^20 (past original_max_position_embeddings=64)",
    "kv-offset": "positions 1000..1007: decoding with a KV cache",
    "per-row": "positions [2,1,8]: different ids per batch row, broadcast over heads",
    "left-pad": "left-padded batch, HF position_ids (pads at 1)",
    "broadcast": "x [batch, seq, heads, dim] with positions [2, 8, 1]",
    "cp-zigzag-rank0": "rank 0's tokens of 16 split zigzag over 2 context-parallel ranks: positions 0-3, 12-15",
    "cp-zigzag-rank1": "rank 1's tokens of 16 split zigzag over 2 context-parallel ranks: positions 4-11",
}
CP_SETS = ("cp-zigzag-rank0", "cp-zigzag-rank1")


def _x_shape(case, head_dim):
    return (2, 8, 2, head_dim) if case == "broadcast" else (2, 2, 8, head_dim)


def _rope_case(tag, case, params, *, head_dim=HEAD_DIM, modes=("eager", "jit")):
    positions = POSITIONS[case]
    shape = _x_shape(case, head_dim)
    rotary_dim = resolve_rotary_dim(head_dim, params.get("rotary_dim"), params.get("rotary_pct"))
    plan = rope_plan(rotary_dim, base=params.get("base", 10000.0), scaling=params.get("scaling"),
                     layout=params.get("layout", "half"))

    def make(rng, dtype):
        x = rng.standard_normal(shape).astype(numpy_dtype(dtype))
        return (x, positions.astype(np.int64)), dict(params)

    def tol(desired, dtype, args):
        return tolerance(dtype, angle_error=ROPE_ANGLE_GOAL, scale=float(np.abs(desired.astype(np.float64)).max()))

    register(Case("apply_rope", tag, case, make, tol, modes=modes,
                  description=f"{params.get('layout', 'half')}, {plan.kind} scaling: {DESCRIPTIONS[case]}"))


for _layout in ("half", "interleaved"):
    for _name, _scaling in SCALINGS.items():
        # "long" includes position 0 and crosses the original length; "short" and "per-row" matter only
        # where the frequencies depend on the sequence length (below / above it, per batch).
        _sets = ("short", "long", "per-row") if _name in JIT_SCALINGS else ("long",)
        for _case in _sets:
            _jit = _name in JIT_SCALINGS and _case != "per-row" and _layout == "half"
            _rope_case(f"{_layout}-{_name}", _case, {"layout": _layout, "scaling": _scaling},
                       modes=("eager", "jit") if _jit else ("eager",))

for _name, _head_dim in (("hf-llama", HEAD_DIM), ("meta-llama", HEAD_DIM), ("gptj", 72), ("gpt-neox", HEAD_DIM)):
    for _case in (c for c in POSITIONS if c not in CP_SETS or _name == "hf-llama"):
        _jit = (_name == "hf-llama" and _case in ("kv-offset", "broadcast")) or (
            _name in ("meta-llama", "gpt-neox") and _case == "kv-offset")
        _modes = ("eager", "jit") if _jit else ("eager",)
        _rope_case(_name, _case, dict(conventions[_name].params), head_dim=_head_dim, modes=_modes)
