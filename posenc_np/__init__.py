"""posenc_np: the specification. Float64 NumPy, every encoding with its formula and source.

Backends (posenc_torch, posenc_tf, posenc_jax) export the same names and are checked against these
functions by `posenc check`. The public reference is docs/api.md.
"""

from .alibi import alibi_bias, alibi_slopes
from .attention import attention
from .conventions import Convention, conventions

# research encodings
from .cope import cope
from .deberta import build_relative_position, make_log_bucket_position
from .dynamic import dynamic_position_encoding, nope
from .fire import fire_bias
from .kerple import kerple_bias, sandwich_bias
from .learned import learned, resize_grid, resize_grid_weights, resize_table, resize_weights
from .mla import apply_mla_rope, mla_rope_permutation, mla_softmax_scale
from .mrope import mrope_position_ids, tmrope_position_ids
from .packing import (
                      cp_indices,
                      cp_positions,
                      cp_shard,
                      cp_unshard,
                      document_bias,
                      document_ids,
                      document_mask,
                      positions_from_cu_seqlens,
                      rerotate,
)
from .randomized import randomized_positions, sample_randomized_positions
from .relative import relative_embeddings
from .rope import (
                      apply_rope,
                      load_hf_config,
                      permute_qk_rows,
                      rope_cos_sin,
                      rope_frequencies,
                      rope_permutation,
                      scaling_from_hf_config,
)
from .schedule import indexer_rope_schedule_from_hf_config, rope_schedule_from_hf_config
from .sinusoidal import sinusoid_inv_freq, sinusoidal, sinusoidal_2d
from .t5 import t5_bias, t5_bucket
from .temperature import llama4_attn_scale, llama_4_scaling
from .testing import tolerance
from .xpos import apply_xpos, xpos_scale

__version__ = "0.1.0"

__all__ = [
    "cp_indices",
    "cp_positions",
    "cp_shard",
    "cp_unshard",
    "document_bias",
    "document_ids",
    "document_mask",
    "positions_from_cu_seqlens",
    "rerotate",
    "apply_rope",
    "permute_qk_rows",
    "rope_cos_sin",
    "rope_frequencies",
    "rope_permutation",
    "scaling_from_hf_config",
    "load_hf_config",
    "mrope_position_ids",
    "tmrope_position_ids",
    "rope_schedule_from_hf_config",
    "indexer_rope_schedule_from_hf_config",
    "apply_mla_rope",
    "mla_rope_permutation",
    "mla_softmax_scale",
    "llama4_attn_scale",
    "llama_4_scaling",
    "alibi_bias",
    "alibi_slopes",
    "attention",
    "relative_embeddings",
    "t5_bias",
    "t5_bucket",
    "Convention",
    "conventions",
    "learned",
    "resize_grid",
    "resize_grid_weights",
    "resize_table",
    "resize_weights",
    "sinusoidal",
    "sinusoidal_2d",
    "sinusoid_inv_freq",
    "tolerance",
    "apply_xpos",
    "build_relative_position",
    "cope",
    "dynamic_position_encoding",
    "fire_bias",
    "kerple_bias",
    "make_log_bucket_position",
    "nope",
    "randomized_positions",
    "sample_randomized_positions",
    "sandwich_bias",
    "xpos_scale",
]
