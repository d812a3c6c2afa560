"""posenc_torch: the posenc contract in PyTorch (functions and `torch.nn.Module`s).

Every function agrees with `posenc_np` within `posenc_np.testing.tolerance`; `posenc check` proves it.
"""

from .alibi import ALiBi, alibi_bias, alibi_slopes
from .attention import attention
from .cope import CoPE, cope
from .deberta import build_relative_position, make_log_bucket_position
from .dynamic import DynamicPositionEncoding, dynamic_position_encoding, nope
from .fire import FIREBias, fire_bias
from .kerple import KERPLEBias, kerple_bias, sandwich_bias
from .learned import LearnedEncoding, learned, resize_grid, resize_table
from .mla import apply_mla_rope, mla_rope_permutation, mla_softmax_scale
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
from .relative import RelativePositionEmbedding, relative_embeddings
from .rope import (
                      RotaryEmbedding,
                      apply_rope,
                      permute_qk_rows,
                      rope_cos_sin,
                      rope_frequencies,
                      rope_permutation,
                      scaling_from_hf_config,
)
from .schedule import rope_modules_from_schedule, rope_schedule_from_hf_config
from .sinusoidal import SinusoidalEncoding, sinusoidal, sinusoidal_2d
from .t5 import T5RelativeBias, t5_bias, t5_bucket
from .temperature import llama4_attn_scale, llama_4_scaling
from .xpos import apply_xpos, xpos_scale

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
    "RotaryEmbedding",
    "apply_rope",
    "permute_qk_rows",
    "rope_cos_sin",
    "rope_frequencies",
    "rope_permutation",
    "scaling_from_hf_config",
    "rope_schedule_from_hf_config",
    "rope_modules_from_schedule",
    "apply_mla_rope",
    "mla_rope_permutation",
    "mla_softmax_scale",
    "llama4_attn_scale",
    "llama_4_scaling",
    "ALiBi",
    "RelativePositionEmbedding",
    "T5RelativeBias",
    "alibi_bias",
    "alibi_slopes",
    "attention",
    "relative_embeddings",
    "t5_bias",
    "t5_bucket",
    "LearnedEncoding",
    "SinusoidalEncoding",
    "learned",
    "resize_grid",
    "resize_table",
    "sinusoidal",
    "sinusoidal_2d",
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
    "CoPE",
    "DynamicPositionEncoding",
    "FIREBias",
    "KERPLEBias",
]
