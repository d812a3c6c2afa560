"""Named conventions: how each published codebase parametrises a contract function.

`conventions["tensor2tensor"].params` are the keyword arguments that make `sinusoidal` compute what
tensor2tensor's `get_timing_signal_1d` computes; `position_offset` is the first position a codebase
uses (fairseq and RoBERTa start at padding_idx + 1 = 2). The formulas and the evidence for each entry
are in docs/conventions.md (subsection numbers in `source`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["Convention", "conventions", "families", "FAMILY_OF_ENCODING"]

#: The `posenc check --encoding` family name of each contract function.
FAMILY_OF_ENCODING = {
    "sinusoidal": "sinusoidal",
    "sinusoidal_2d": "sinusoidal",
    "learned": "learned",
    "resize_table": "resize",
    "resize_grid": "resize",
    "apply_rope": "rope",
    "alibi_bias": "alibi",
    "t5_bias": "t5",
    "t5_bucket": "t5",
    "relative_embeddings": "relative",
    # packed sequences and context parallelism (posenc_np.packing)
    "positions_from_cu_seqlens": "packing",
    "document_mask": "packing",
    "document_bias": "packing",
    "cp_positions": "packing",
    "cp_indices": "packing",
    "cp_shard": "packing",
    "cp_unshard": "packing",
    "rerotate": "packing",
    # research encodings
    "dynamic_position_encoding": "dynamic",
    "nope": "nope",
    "apply_xpos": "xpos",
    "kerple_bias": "kerple",
    "sandwich_bias": "sandwich",
    "fire_bias": "fire",
    "cope": "cope",
    "randomized_positions": "randomized",
    "make_log_bucket_position": "deberta",
    "build_relative_position": "deberta",
    # per-layer schedules, MLA, attention temperature
    "rope_schedule_from_hf_config": "schedule",
    "apply_mla_rope": "mla",
    "llama4_attn_scale": "temperature",
    "llama_4_scaling": "temperature",
}


@dataclass(frozen=True)
class Convention:
    """One codebase's way of using a contract function.

    Attributes:
        name: registry key.
        encoding: the contract function it parametrises ("sinusoidal", "apply_rope", ...).
        params: keyword arguments for that function.
        position_offset: first position index the codebase feeds (0 unless it starts later).
        source: paper and codebase file.
        notes: what a port has to know that `params` cannot say.
        extra: facts that are not function arguments (row counts, padding rows, head-dim fractions).
    """

    name: str
    encoding: str
    params: dict
    position_offset: int = 0
    source: str = ""
    notes: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def family(self) -> str:
        return FAMILY_OF_ENCODING[self.encoding]

    def __post_init__(self):
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))


_ALL = [
    # --- sinusoidal (docs/conventions.md §1) ---
    Convention(
        "vaswani", "sinusoidal", {"layout": "interleaved", "denominator": "dim", "base": 10000.0},
        source="Vaswani et al. 2017 (arXiv:1706.03762) section 3.5; keras-hub sine_position_encoding.py",
        notes="Paper frequencies base**(-2i/dim), sin on even and cos on odd channels; tokens scaled by sqrt(d).",
    ),
    Convention(
        "tensor2tensor", "sinusoidal", {"layout": "concat", "denominator": "half-1", "base": 10000.0},
        source="tensor2tensor/layers/common_attention.py get_timing_signal_1d (1.2)",
        notes="Frequencies base**(-i/(dim/2-1)) and [sin | cos] halves; also TF Model Garden's "
              "'RelativePositionEmbedding' and Flax's WMT sinusoidal_init.",
    ),
    Convention(
        "diffusers-sd", "sinusoidal", {"layout": "concat-cos", "denominator": "dim", "base": 10000.0},
        source="diffusers/models/embeddings.py get_timestep_embedding(flip_sin_to_cos=True, downscale_freq_shift=0) "
               "(Timesteps of the SD 1.x-XL UNets, SD3, Flux; glide's timestep_embedding)",
        notes="Diffusion timesteps (float positions 0..999) embedded as [cos | sin] with frequencies "
              "max_period**(-i/half) = base**(-2i/dim).",
    ),
    Convention(
        "ddpm", "sinusoidal", {"layout": "concat", "denominator": "half-1", "base": 10000.0},
        source="diffusers/models/embeddings.py get_timestep_embedding(flip_sin_to_cos=False, downscale_freq_shift=1) "
               "(the DDPM UNet's timestep embedding)",
        notes="[sin | cos] with frequencies max_period**(-i/(half-1)): tensor2tensor's table at timestep positions.",
    ),
    Convention(
        "diffusers-dit", "sinusoidal", {"layout": "concat-cos", "denominator": "half-1", "base": 10000.0},
        source="diffusers/models/embeddings.py get_timestep_embedding(flip_sin_to_cos=True, downscale_freq_shift=1) "
               "(diffusers' DiT / PixArt timestep path)",
        notes="facebookresearch/DiT's TimestepEmbedder divides by half (denominator 'dim'): diffusers' DiT path "
              "shifts the denominator, so their embeddings differ (research: 1.94 apart at t=999).",
    ),
    Convention(
        "fairseq", "sinusoidal", {"layout": "concat", "denominator": "half-1", "base": 10000.0},
        position_offset=2,
        source="fairseq/modules/sinusoidal_positional_embedding.py, fairseq/utils.py make_positions (1.3)",
        notes="Positions start at padding_idx + 1 = 2 (cumsum of non-pad tokens + padding_idx); the "
              "table row padding_idx = 1 is zeroed and is what pad tokens get.",
        extra={"padding_idx": 1, "zero_rows": (1,)},
    ),
    Convention(
        "whisper-encoder", "sinusoidal", {"layout": "concat", "denominator": "half-1", "base": 10000.0},
        source="openai/whisper whisper/model.py sinusoids(length, channels, max_timescale=10000); HF "
               "models/whisper/modeling_whisper.py sinusoids (transformers 5.24)",
        notes="Encoder positions 0..1499 (max_source_positions): exp(-ln(10000)/(C/2-1) i), [sin | cos]: "
              "tensor2tensor's table. HF stores it as an nn.Embedding the checkpoint fills; the decoder's "
              "positions are learned.",
        extra={"num_rows": 1500},
    ),
    Convention(
        "marian", "sinusoidal", {"layout": "concat", "denominator": "dim", "base": 10000.0},
        source="HF models/marian/modeling_marian.py MarianSinusoidalPositionalEmbedding.create_weight "
               "(also Pegasus, RoFormer; transformers 5.24)",
        notes="pos / 10000**(2(j//2)/D) with sin on the first half and cos on the second: [sin | cos] at the paper's "
              "frequencies; positions arange(past, past + L) (no padding offset). Built in float64 NumPy, stored "
              "float32. Odd D gives sin ceil(D/2) columns (posenc refuses odd dim).",
    ),
    Convention(
        "m2m100", "sinusoidal", {"layout": "concat", "denominator": "half-1", "base": 10000.0},
        position_offset=2,
        source="HF models/m2m_100/modeling_m2m_100.py M2M100SinusoidalPositionalEmbedding (also NLLB, NLLB-MoE, "
               "Speech2Text; transformers 5.24); fairseq sinusoidal_positional_embedding.py",
        notes="fairseq's table: positions cumsum(ids != pad) * mask + padding_idx, so real tokens start at 2 and "
              "pads read row padding_idx = 1, which is zeroed; the table has num_positions + 2 rows and grows.",
        extra={"padding_idx": 1, "zero_rows": (1,)},
    ),
    Convention(
        "xglm", "sinusoidal", {"layout": "concat", "denominator": "half-1", "base": 10000.0},
        position_offset=2,
        source="HF models/xglm/modeling_xglm.py XGLMSinusoidalPositionalEmbedding (transformers 5.24)",
        notes="The fairseq table, but positions are position_ids + 2 (arange + past, not padding-aware): left "
              "padding shifts real tokens, unlike M2M100. Row padding_idx = 1 is zeroed.",
        extra={"padding_idx": 1, "zero_rows": (1,)},
    ),
    # --- 2-D sin-cos tables (sinusoidal_2d; positions [..., 2] = (row, column)) ---
    Convention(
        "mae-2d", "sinusoidal_2d", {"axis_order": "xy", "blocks": "per-axis", "layout": "concat",
                                    "denominator": "dim", "base": 10000.0},
        source="facebookresearch/mae util/pos_embed.py get_2d_sincos_pos_embed; facebookresearch/DiT models.py; "
               "SD3 reference mmditx.py",
        notes="[sin x | cos x | sin y | cos y], each dim/4 wide (meshgrid(grid_w, grid_h): MAE's emb_h is the "
              "column); integer grid, tokens row-major; MAE prepends a zero CLS row.",
    ),
    Convention(
        "diffusers-2d", "sinusoidal_2d", {"axis_order": "xy", "blocks": "per-axis", "layout": "concat",
                                          "denominator": "dim", "base": 10000.0},
        source="diffusers models/embeddings.py get_2d_sincos_pos_embed, get_2d_sincos_pos_embed_from_grid, "
               "PatchEmbed (diffusers 0.42)",
        notes="MAE's table at float positions: row i at i / (grid_h / base_size) / interpolation_scale, column j "
              "likewise (float32 grid, float64 frequencies). PixArt: base_size = sample_size / patch, "
              "interpolation_scale = max(sample_size // 64, 1); SD3 stores a pos_embed_max_size table (the "
              "checkpoint's values win) and centre-crops it.",
        extra={"positions": "index * base_size / grid / interpolation_scale"},
    ),
    Convention(
        "timm-sincos2d", "sinusoidal_2d", {"axis_order": "yx", "blocks": "sin-cos", "layout": "concat",
                                           "denominator": "dim", "base": 10000.0},
        source="timm layers/pos_embed_sincos.py build_sincos2d_pos_embed (timm 1.0)",
        notes="[sin h | sin w | cos h | cos w] with bands temperature**(-k/(dim/4)); interleave_sin_cos=True gives "
              "blocks='per-axis' ([sin h | cos h | sin w | cos w]); reverse_coord swaps the axes.",
    ),
    Convention(
        "big-vision-2d", "sinusoidal_2d", {"axis_order": "xy", "blocks": "per-axis", "layout": "concat",
                                           "denominator": "half-1", "base": 10000.0},
        source="google-research/big_vision big_vision/models/vit.py posemb_sincos_2d",
        notes="omega = 1 / temperature**linspace(0, 1, dim/4): the last band reaches 1/temperature "
              "(denominator dim/4 - 1), [sin x | cos x | sin y | cos y]; no CLS position embedding.",
    ),
    # --- learned (section 2) ---
    Convention(
        "bert", "learned", {}, source="google-research/bert modeling.py; HF models/bert/modeling_bert.py (2.1)",
        notes="Rows 0..511 for 512 tokens, positions arange(seq) (+ past length), not padding-aware.",
        extra={"num_rows": 512},
    ),
    Convention(
        "roberta", "learned", {}, position_offset=2,
        source="HF models/roberta/modeling_roberta.py create_position_ids_from_input_ids; fairseq (2.3)",
        notes="514 rows = 512 + padding_idx + 1; real tokens use rows 2..513, pads row 1. Porting to a "
              "0-based table drops rows [:2].",
        extra={"num_rows": 514, "padding_idx": 1},
    ),
    # --- ViT position-grid resizes (resize_grid; docs/conventions.md, research families-2026-12.md 2.1-2.2) ---
    Convention(
        "hf-vit", "resize_grid", {"method": "cubic", "align_corners": False, "cubic_a": -0.75, "antialias": False},
        source="transformers 5.24 models/vit/modeling_vit.py, models/clip/modeling_clip.py, models/siglip/"
               "modeling_siglip.py, models/dinov2/modeling_dinov2.py ViTEmbeddings.interpolate_pos_encoding etc.: "
               "F.interpolate(size=(h // patch, w // patch), mode='bicubic', align_corners=False)",
        notes="PyTorch bicubic (a = -0.75, replicated borders), size grid, no antialias. One prefix row (CLS) for "
              "ViT, CLIP and Dinov2, none for SigLIP; Dinov2 resamples in float32 and casts back. HF Dinov2 "
              "passes size, not the original's scale_factor (transformers PR #35411 context): see 'dinov2'.",
        extra={"prefix_tokens": 1},
    ),
    Convention(
        "timm", "resize_grid", {"method": "cubic", "align_corners": False, "cubic_a": -0.5, "antialias": True},
        source="timm 1.0.31 layers/pos_embed.py resample_abs_pos_embed(num_prefix_tokens=1, interpolation='bicubic', "
               "antialias=True, align_corners=None); models/vision_transformer.py dynamic-size path",
        notes="torch's antialiased bicubic (aten _upsample_bicubic2d_aa: a = -0.5, the support widened by 1/scale "
              "when downsampling, taps outside the grid dropped and weights renormalised), used for upsampling "
              "too; float32, cast back. num_prefix_tokens rows (CLS, registers) kept; rectangular old_size "
              "(timm PR #2737). NaFlexVit SigLIP2 configs use bilinear (see 'siglip2').",
        extra={"prefix_tokens": 1},
    ),
    Convention(
        "open-clip", "resize_grid", {"method": "cubic", "align_corners": False, "cubic_a": -0.5, "antialias": True},
        source="open_clip 3.3.0 open_clip/model.py resize_pos_embed(interpolation='bicubic', antialias=True)",
        notes="The image tower's table at load time: timm's kernel, one prefix row, square old grid. The text "
              "tower's resize_text_pos_embed is a 1-D resize_table(method='linear') (no antialias).",
        extra={"prefix_tokens": 1},
    ),
    Convention(
        "dinov2", "resize_grid", {"method": "cubic", "align_corners": False, "cubic_a": -0.75, "antialias": False},
        source="facebookresearch/dinov2 dinov2/models/vision_transformer.py interpolate_pos_encoding "
               "(interpolate_offset=0.1, interpolate_antialias=False): F.interpolate(scale_factor=((h0 + 0.1) / M, "
               "(w0 + 0.1) / M), mode='bicubic'); dino issue #8",
        notes="The scale_factor grid: pass scale=((new_h + 0.1) / old_h, (new_w + 0.1) / old_w), which samples at "
              "(i + 0.5) / scale - 0.5, not at the size grid's old/new (0.13 apart from HF Dinov2 on a range-2.7 "
              "table at 37 -> 16). One CLS row; float32.",
        extra={"prefix_tokens": 1, "interpolate_offset": 0.1},
    ),
    Convention(
        "dinov2-reg", "resize_grid", {"method": "cubic", "align_corners": False, "cubic_a": -0.5, "antialias": True},
        source="facebookresearch/dinov2 dinov2/hub/backbones.py *_reg models (interpolate_antialias=True, "
               "interpolate_offset=0.0); transformers 5.24 models/dinov2_with_registers/"
               "modeling_dinov2_with_registers.py interpolate_pos_encoding (size, antialias=True)",
        notes="Size grid with torch's antialiased bicubic (a = -0.5). The table holds the CLS row only: register "
              "tokens are inserted after the position embedding is added. float32.",
        extra={"prefix_tokens": 1},
    ),
    Convention(
        "siglip2", "resize_grid", {"method": "linear", "align_corners": False, "antialias": True},
        source="transformers 5.24 models/siglip2/modeling_siglip2.py Siglip2VisionEmbeddings."
               "resize_positional_embeddings: F.interpolate(size=spatial_shape, mode='bilinear', align_corners=False, "
               "antialias=True); timm naflexvit SigLIP2 configs (pos_embed_interp_mode='bilinear')",
        notes="Bilinear with antialias (matters when an axis shrinks), no prefix row, per image spatial_shapes; "
              "rows past h * w up to max_length are filled with the first resized row. float32.",
        extra={"prefix_tokens": 0, "padding": "rows past new_h * new_w repeat row 0"},
    ),
    Convention(
        "keras-jax", "resize_grid",
        {"method": "cubic", "align_corners": False, "cubic_a": -0.5, "antialias": False, "border": "renormalize"},
        source="keras 3.15.1 keras/src/ops/image.py resize(interpolation='bicubic', antialias=False) on the jax "
               "backend (keras/src/backend/jax/image.py -> jax.image.resize -> scale_and_translate); the same "
               "numbers on the numpy backend (keras/src/backend/numpy/image.py) and TF 2.21 ResizeBicubic",
        notes="Keys a = -0.5, taps outside the grid dropped and the rest renormalised, no widening when "
              "downsampling (antialias=True is torch's AA kernel with a = -0.5, as 'timm'). keras-hub DINOV2 "
              "resizes its position grid through this op, so its table depends on KERAS_BACKEND: the torch "
              "backend is 'hf-vit' (a = -0.75, clamped borders); TF quantises the kernel to 1/1024 (~5e-4).",
        extra={"prefix_tokens": 1},
    ),
    # --- rotary (section 3) ---
    Convention(
        "meta-llama", "apply_rope", {"layout": "interleaved"},
        source="meta-llama/llama llama/model.py precompute_freqs_cis / apply_rotary_emb (3.2)",
        notes="Complex-number form on pairs (2j, 2j+1); float32 math; positions are cache offsets start_pos + t.",
    ),
    Convention(
        "hf-llama", "apply_rope", {"layout": "half"},
        source="HF models/llama/modeling_llama.py rotate_half; convert_llama_weights_to_hf.py permute (3.3)",
        notes="Pairs (j, j + r/2); checkpoints converted from Meta have q/k rows permuted per head.",
    ),
    Convention(
        "gptj", "apply_rope", {"layout": "interleaved", "rotary_dim": 64},
        source="HF models/gptj/modeling_gptj.py rotate_every_two (3.4)",
        notes="Only the first 64 channels of each 256-wide head rotate; frequencies use rotary_dim.",
    ),
    Convention(
        "gpt-neox", "apply_rope", {"layout": "half", "rotary_pct": 0.25},
        source="HF models/gpt_neox/modeling_gpt_neox.py (3.5)",
        notes="rotary_ndims = int(head_size * rotary_pct); fused query_key_value is laid out per head.",
    ),
    # --- rotary over several axes (docs/conventions.md "Multi-axis RoPE"); positions [A, ..., seq] ---
    Convention(
        "qwen2-vl", "apply_rope", {"layout": "half", "base": 1000000.0, "mrope_section": (16, 24, 24)},
        source="HF models/qwen2_vl/modeling_qwen2_vl.py Qwen2VLRotaryEmbedding.recomposition_frequencies; "
               "models/qwen2_5_vl/modeling_qwen2_5_vl.py (transformers 5.24); Wang et al. 2024 arXiv:2409.12191",
        notes="M-RoPE, head_dim 128: positions [3, batch, seq] (temporal, height, width); pairs 0-15 take time, "
              "16-39 height, 40-63 width, in both halves (HF's old code repeats the list: mrope_section * 2). "
              "Qwen2.5-VL uses the same rotation; its position ids (mrope_position_ids) space video frames by "
              "tokens_per_second * second_per_grid_ts. Text tokens carry the same id on all three axes.",
        extra={"head_dim": 128, "axes": ("temporal", "height", "width")},
    ),
    Convention(
        "qwen3-vl", "apply_rope", {"layout": "half", "base": 500000.0, "mrope_section": (24, 20, 20),
                                   "mrope_interleaved": True},
        source="HF models/qwen3_vl/modeling_qwen3_vl.py Qwen3VLTextRotaryEmbedding.recomposition_frequencies "
               "(transformers 5.24)",
        notes="Interleaved M-RoPE, head_dim 128: pair j takes height when j % 3 == 1 and j < 60, width when "
              "j % 3 == 2 and j < 60, time otherwise (pairs 0, 3, ..., 57 and 60-63). HF always interleaves, "
              "whatever mrope_interleaved says; llama.cpp calls it IMROPE.",
        extra={"head_dim": 128, "axes": ("temporal", "height", "width")},
    ),
    Convention(
        "qwen2-vl-vision", "apply_rope", {"layout": "half", "base": 10000.0, "mrope_section": 2,
                                          "mrope_frequencies": "per-axis"},
        source="HF models/qwen2_vl/modeling_qwen2_vl.py Qwen2VLVisionRotaryEmbedding (compute_axial_rope_parameters "
               "with dim = head_dim // 2), vision_utils.get_vision_position_ids (transformers 5.24)",
        notes="Vision tower 2-D RoPE, positions [2, ..., seq] = (row, column) of each patch: pairs 0..d/4-1 take "
              "the row, d/4..d/2-1 the column, each axis turning with base**(-2k/(d/2)) (its own 1-D set of width "
              "d/2). HF orders the patches in spatial_merge_size x spatial_merge_size windows first: the ids "
              "are permuted, the rotation is not. Qwen2.5-VL and Qwen3-VL vision towers use the same. Needs "
              "head_dim % 4 == 0 (as HF).",
        extra={"axes": ("height", "width")},
    ),
    Convention(
        "pixtral", "apply_rope", {"layout": "half", "base": 10000.0, "mrope_section": 2,
                                  "mrope_frequencies": "strided"},
        source="HF models/pixtral/modeling_pixtral.py PixtralVisionRotaryEmbedding (transformers 5.24); "
               "mistral-inference rope.py precompute_freqs_cis_2d",
        notes="Vision encoder 2-D RoPE, positions [2, ..., seq] = (row, column): the 1-D frequencies of the whole "
              "head, the even ones (0, 2, 4, ...) for the row on pairs 0..d/4-1 and the odd ones for the column on "
              "the rest (HF: cat(inv_freq[0::2], inv_freq[1::2])).",
        extra={"axes": ("height", "width")},
    ),
    Convention(
        "flux", "apply_rope", {"layout": "interleaved", "base": 10000.0, "mrope_section": (8, 28, 28),
                               "mrope_frequencies": "per-axis"},
        source="diffusers models/transformers/transformer_flux.py FluxPosEmbed(theta=10000, axes_dim=(16, 56, 56)), "
               "models/embeddings.py get_1d_rotary_pos_embed(repeat_interleave_real=True) (diffusers 0.42)",
        notes="3-axis image RoPE of FLUX.1, head_dim 128, positions [3, ..., seq] = the ids' columns (0 for "
              "image tokens / text index, row, column): channels 0-15 are a 1-D RoPE of width 16 over axis 0, "
              "16-71 width 56 over the row, 72-127 width 56 over the column; pairs (2j, 2j+1). diffusers forms the "
              "frequencies in float64 except on MPS/NPU (float32).",
        extra={"head_dim": 128, "axes": ("index", "height", "width"), "axes_dim": (16, 56, 56)},
    ),
    # --- ALiBi (section 4) ---
    Convention(
        "press-alibi", "alibi_bias", {"form": "causal"},
        source="Press et al. 2021 (arXiv:2108.12409); ofirpress/attention_with_linear_biases (4.1)",
        notes="-m (i - j) for keys j <= i; use with a causal mask.",
    ),
    Convention(
        "bloom-alibi", "alibi_bias", {"form": "bloom"},
        source="HF models/bloom/modeling_bloom.py build_alibi_tensor (4.2)",
        notes="+m * j on key positions only (cumsum of the attention mask); equals the paper's softmax "
              "only under a causal mask; added after the 1/sqrt(d) scale.",
    ),
    Convention(
        "mpt-alibi", "alibi_bias", {"form": "causal", "max_bias": 8.0},
        source="HF models/mpt/modeling_mpt.py build_mpt_alibi_tensor(num_heads, sequence_length, alibi_bias_max=8); "
               "mosaicml/llm-foundry gen_slopes",
        notes="m (j - (L-1)): the paper's causal form with every query at the last position, a row constant "
              "under the causal mask; slopes 2**(-alibi_bias_max k / N), N = 2**ceil(log2 H), reordered "
              "(= Press's rule with max_bias). alibi_bias_max is a config field (8 in released MPTs).",
    ),
    Convention(
        "ggml-alibi", "alibi_bias", {"form": "symmetric", "max_bias": 8.0},
        source="ggml src/ggml-cpu/ops.cpp ggml_compute_forward_soft_max_f32 (m0 = 2**(-max_bias/n_floor), "
               "m1 = 2**(-(max_bias/2)/n_floor)); llama.cpp llama-kv-cache.cpp mask -|p0 - p1|",
        notes="softmax(scale * logits + slope * mask) with mask = -|i - j| on real KV-cache positions and -inf "
              "above the diagonal; max_bias from GGUF max_alibi_bias (8 for bloom/mpt). With flash attention "
              "the mask is F16: distances past 2048 round.",
    ),
    # --- T5 (section 5) ---
    Convention(
        "t5", "t5_bias", {"bidirectional": True, "num_buckets": 32, "max_distance": 128},
        source="HF models/t5/modeling_t5.py T5Attention._relative_position_bucket; Raffel et al. 2019 (5.1)",
        notes="Encoder; relative_position = key - query; logits are not scaled by 1/sqrt(d_kv). HF table "
              "[num_buckets, heads]; t5x/Mesh TF store [heads, num_buckets].",
    ),
    Convention(
        "t5-decoder", "t5_bias", {"bidirectional": False, "num_buckets": 32, "max_distance": 128},
        source="HF models/t5/modeling_t5.py (decoder self-attention) (5.1)",
        notes="Unidirectional: future keys all fall in bucket 0.",
    ),
    # --- relative (section 6) ---
    Convention(
        "shaw", "relative_embeddings", {},
        source="Shaw et al. 2018 (arXiv:1803.02155); tensor2tensor dot_product_attention_relative (6)",
        notes="Row clip(j - i, -k, k) + k of a [2k+1, depth] table (key - query).",
    ),
    Convention(
        "hf-bert-relative-key", "relative_embeddings", {"sign": "query-key"},
        source="HF models/bert/modeling_bert.py position_embedding_type='relative_key' (6)",
        notes="distance = query - key, index distance + max_pos - 1 of a [2*max_pos - 1, head_dim] table, no "
              "clipping. Reversing the rows (table[::-1]) gives the Shaw table with k = max_pos - 1.",
    ),
]

_ALL += [
    # --- research encodings (pe-conventions.md section 7, landscape 1.5) ---
    Convention("nope", "nope", {}, source="Kazemnejad et al. 2023 (arXiv:2305.19466); HF Llama4 no_rope_layers",
               notes="No positional encoding; the causal mask is the only positional signal."),
    Convention("dynamic-linear", "dynamic_position_encoding", {"layout": "interleaved", "denominator": "dim"},
               source="the project documents' dynamic position-aware encoding: nn.Linear(d, d) over the sinusoid",
               notes="weight is [out, in] (torch); Keras Dense / Flax nnx.Linear kernel = weight.T."),
    Convention("xpos-x-transformers", "apply_xpos", {"layout": "interleaved", "scale_base": 512.0, "gamma": 0.4},
               source="Sun et al. 2022 (arXiv:2212.10554); lucidrains/x-transformers RotaryEmbedding(use_xpos=True)",
               notes="x-transformers centres the exponent at max_pos // 2 (center=); q scaled, k inverse-scaled."),
    Convention("kerple-log", "kerple_bias", {"kernel": "log"},
               source="Chi et al. 2022 (arXiv:2205.09921); chijames/KERPLE", notes="-r1 ln(1 + r2 |i - j|)."),
    Convention("kerple-power", "kerple_bias", {"kernel": "power"},
               source="Chi et al. 2022 (arXiv:2205.09921); chijames/KERPLE", notes="-r1 |i - j|**r2, 0 < r2 <= 2."),
    Convention("sandwich", "sandwich_bias", {"base": 10000.0},
               source="Chi et al. 2023 (arXiv:2212.10356); NeMo sandwich_relative_position_embedding.py",
               notes="frequencies from t = 1; head scale H / (8 h)."),
    Convention("fire", "fire_bias", {"eps": 1e-6},
               source="Li et al. 2023 (arXiv:2310.04418); mcleish7/arithmetic cramming/architectures/embeddings.py",
               notes="MLP 1 -> 32 -> H, c init 0.1, L = L_multiplier * 512."),
    Convention("cope", "cope", {}, source="Golovneva et al. 2024 (arXiv:2405.18719); x-transformers CoPE",
               notes="gates sigmoid(q.k), reverse cumsum over keys clipped at max_pos - 1, interpolated."),
    Convention("ruoss-randomized", "randomized_positions", {},
               source="Ruoss et al. 2023 (arXiv:2305.16843); google-deepmind/randomized_positional_encodings",
               notes="train on a sorted random subset of 0 .. max_len - 1; test on arange."),
    Convention("deberta-v3", "build_relative_position", {"bucket_size": 256, "max_position": 512},
               source="HF models/deberta_v2/modeling_deberta_v2.py build_relative_position / make_log_bucket_position",
               notes="relative = query - key (opposite of T5/Shaw); log buckets beyond bucket_size // 2."),
]

conventions = MappingProxyType({c.name: c for c in _ALL})


def families() -> list[str]:
    """Family names `posenc check --encoding` accepts, in contract order."""
    return list(dict.fromkeys(FAMILY_OF_ENCODING.values()))
