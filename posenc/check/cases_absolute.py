"""Suite cases for the absolute encodings: sinusoidal (per convention), learned tables, resizing."""

from __future__ import annotations

import numpy as np

from posenc_np.backend import numpy_dtype
from posenc_np.conventions import conventions
from posenc_np.learned import resize_grid_weights, resize_weights
from posenc_np.sinusoidal import sinusoid_inv_freq
from posenc_np.testing import tolerance

from .registry import MODES, Case, register

DIM = 32
LONG = 2**20


def _sinusoid_tol(positions, params):
    inv_freq = sinusoid_inv_freq(DIM, base=params["base"], denominator=params["denominator"])
    max_angle = float(np.abs(np.asarray(positions, np.float64)).max() * inv_freq.max())
    return lambda desired, dtype, args: tolerance(dtype, max_angle=max_angle)


def _sinusoid_case(convention, case, positions, description, modes=MODES):
    params = dict(conventions[convention].params)
    positions = np.asarray(positions)

    def make(rng, dtype):
        return (positions, DIM), {**params, "dtype": dtype}

    register(Case("sinusoidal", convention, case, make, _sinusoid_tol(positions, params), modes=modes,
                  description=description))


for _name in ("vaswani", "tensor2tensor", "fairseq"):
    _offset = conventions[_name].position_offset
    _sinusoid_case(_name, "short", np.arange(24) + _offset, "positions offset .. offset+23")
    _sinusoid_case(_name, "long", np.array([0, 1, 255, 257, 4097, 65537, LONG - 3, LONG - 1]) + _offset,
                   "positions up to 2^20 (bf16 would round 257 to 256)")
    _sinusoid_case(_name, "per-row", np.array([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12], [500, 501, 502, 503, 504, 505]])
                   + _offset, "[batch, seq] positions: KV-cache offsets per row")
_sinusoid_case("vaswani", "float-positions", np.arange(12) * 0.37,
               "interpolated (non-integer) positions")
# consecutive positions past 2048: float16 keeps only even integers there and bfloat16 (past 256) only every 8th
# or 16th, so an implementation that rounds its positions to the compute dtype fails at short distances
_sinusoid_case("vaswani", "past-2048", np.arange(2049, 2061), "positions 2049..2060 (float16 and bfloat16 round them)")
for _name in ("diffusers-sd", "ddpm", "diffusers-dit"):
    _sinusoid_case(_name, "timesteps", np.array([0.0, 1.0, 17.5, 250.0, 999.0]),
                   "diffusion timesteps (float positions 0..999)")

# the transformers sinusoid builders' position rules (eager only: their parameters are fairseq's, tensor2tensor's
# or (concat, dim), whose backend code the cases above already trace)
EAGER = ("eager",)
_sinusoid_case("marian", "kv-offset", np.arange(500, 512)[None, :] + np.array([[0], [37]]),
               "[batch, seq] positions arange(past, past + 12), past 500 and 537", modes=EAGER)
_sinusoid_case("whisper-encoder", "encoder", np.arange(1500), "encoder positions 0..1499 (the stored table)",
               modes=EAGER)
_sinusoid_case("m2m100", "left-pad", np.array([[1, 1, 1, 2, 3, 4], [2, 3, 4, 5, 6, 7]]),
               "fairseq make_positions of a left-padded batch: pads at padding_idx 1, tokens from 2", modes=EAGER)
_sinusoid_case("xglm", "left-pad", np.arange(6)[None, :].repeat(2, 0) + 2,
               "position_ids + 2 for a left-padded batch (not padding-aware: pads take positions too)", modes=EAGER)


def _grid(rows, cols):
    """`[rows, cols, 2]` (row, column) positions of a ViT patch grid."""
    return np.stack(np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij"), axis=-1)


def _diffusers_grid(grid_h, grid_w, base_size, interpolation_scale):
    """diffusers' float grid: index / (grid / base_size) / interpolation_scale per axis (in float64 here)."""
    rows = np.arange(grid_h) / (grid_h / base_size) / interpolation_scale
    cols = np.arange(grid_w) / (grid_w / base_size) / interpolation_scale
    return np.stack(np.meshgrid(rows, cols, indexing="ij"), axis=-1)


def _sinusoid_2d_case(convention, case, positions, description, modes=MODES):
    params = dict(conventions[convention].params)
    positions = np.asarray(positions)
    # each axis is a sinusoid of width DIM / 2: the largest angle is the largest coordinate times w_0 = 1
    inv_freq = sinusoid_inv_freq(DIM // 2, base=params["base"], denominator=params["denominator"])
    max_angle = float(np.abs(positions.astype(np.float64)).max() * inv_freq.max())

    def make(rng, dtype):
        return (positions, DIM), {**params, "dtype": dtype}

    register(Case("sinusoidal_2d", convention, case, make,
                  lambda desired, dtype, args: tolerance(dtype, max_angle=max_angle), modes=modes,
                  description=description))


# a non-square grid, so that swapping rows and columns (axis_order) changes the table; jit for one case only
_sinusoid_2d_case("mae-2d", "grid-6x8", _grid(6, 8), "[6, 8, 2] integer grid: [sin x | cos x | sin y | cos y]")
_sinusoid_2d_case("mae-2d", "long", np.array([[0, 0], [1, 257], [4097, 2049], [65537, 65535], [LONG - 1, 3]]),
                  "(row, column) up to 2^20 (bf16 would round 257 to 256)", modes=EAGER)
_sinusoid_2d_case("diffusers-2d", "pixart-16-base8-interp2", _diffusers_grid(16, 16, 8, 2),
                  "float grid i / (16 / 8) / 2 (PixArt's base_size and interpolation_scale)", modes=EAGER)
_sinusoid_2d_case("diffusers-2d", "non-square-6x10", _diffusers_grid(6, 10, 8, 1),
                  "float grid rows i * 8 / 6, columns j * 8 / 10", modes=EAGER)
_sinusoid_2d_case("timm-sincos2d", "grid-6x8", _grid(6, 8), "[6, 8, 2] integer grid: [sin h | sin w | cos h | cos w]",
                  modes=EAGER)
_sinusoid_2d_case("big-vision-2d", "grid-6x8", _grid(6, 8), "[6, 8, 2] integer grid, denominator dim/4 - 1",
                  modes=EAGER)


def _left_padded_positions(tokens, padding_idx):
    """fairseq `make_positions`: real tokens count from padding_idx + 1, pads get padding_idx."""
    mask = tokens != padding_idx
    return np.cumsum(mask, axis=1) * mask + padding_idx


def _learned_case(convention, case, rows, positions, description):
    positions = np.asarray(positions)

    def make(rng, dtype):
        table = rng.normal(size=(rows, DIM)).astype(numpy_dtype(dtype))
        return (table, positions), {}

    register(Case("learned", convention, case, make, lambda desired, dtype, args: tolerance(dtype, exact=True),
                  description=description))


_learned_case("bert", "short", 512, np.arange(16), "rows 0..15")
_learned_case("bert", "kv-offset", 512, np.arange(500, 512)[None, :].repeat(2, 0), "rows 500..511, batch of 2")
_learned_case("roberta", "left-pad", 514,
              _left_padded_positions(np.array([[1, 1, 1, 5, 6, 7], [5, 6, 7, 8, 9, 10]]), padding_idx=1),
              "make_positions on a left-padded batch: pads row 1, tokens from row 2")
# rows float16 cannot index (only even integers from 2048): a lookup that casts its positions to the model's dtype
# reads the row beside (500..511 above does the same for bfloat16)
_learned_case("bert", "past-2048", 4096, np.arange(2049, 2061), "rows 2049..2060 of a 4096-row table")


def _resize_case(name, old_len, new_len, method, align_corners=False, cubic_a=-0.75, antialias=False, scale=None,
                 border="clamp", modes=MODES):
    options = {"method": method, "align_corners": align_corners, "cubic_a": cubic_a, "antialias": antialias,
               "scale": scale, **({} if border == "clamp" else {"border": border})}
    index, weight = resize_weights(old_len, new_len, **options)
    gain = float(np.abs(weight).sum(axis=1).max())  # a weighted sum's float32 error scales with sum |w|

    def make(rng, dtype):
        # smooth rows (a random walk) like a trained position table, plus noise
        table = (np.cumsum(rng.normal(size=(old_len, 8)), axis=0) / np.sqrt(old_len)).astype(numpy_dtype(dtype))
        return (table, new_len), options

    def tol(desired, dtype, args):
        return tolerance(dtype, scale=gain * max(float(np.abs(desired).max()), 1e-30))

    register(Case("resize_table", name, f"{old_len}->{new_len}", make, tol, modes=modes,
                  description=f"{method}, align_corners={align_corners}, antialias={antialias}, scale={scale}, "
                              f"border={border}"))


_resize_case("linear", 24, 64, "linear")
_resize_case("linear", 64, 24, "linear")
_resize_case("linear-corners", 24, 64, "linear", align_corners=True)
_resize_case("nearest", 24, 40, "nearest")
_resize_case("cubic", 24, 64, "cubic")
_resize_case("cubic", 64, 24, "cubic")
_resize_case("cubic-corners", 24, 37, "cubic", align_corners=True)
_resize_case("cubic-a0.5", 24, 64, "cubic", cubic_a=-0.5)
_resize_case("cubic-antialias", 64, 24, "cubic", cubic_a=-0.5, antialias=True)  # torch's AA bicubic, widened
_resize_case("linear-scale", 24, 37, "linear", scale=1.55)  # torch scale_factor grid: 37 = floor(24 * 1.55)
# border="renormalize": JAX / TF / keras (numpy, jax, tensorflow backends) bicubic without antialias; up (jit: the
# new option's one traced case) and down (no widening), eager only
_resize_case("cubic-renormalize", 24, 64, "cubic", cubic_a=-0.5, border="renormalize")
_resize_case("cubic-renormalize", 64, 24, "cubic", cubic_a=-0.5, border="renormalize", modes=EAGER)


def _resize_grid_case(convention, case, old_grid, new_grid, prefix_tokens, description, scale=None,
                      modes=("eager", "jit")):
    """`resize_grid` under a named convention on a smooth `[prefix + h * w, 8]` table."""
    params = dict(conventions[convention].params)
    keywords = {**params, "scale": scale, "prefix_tokens": prefix_tokens}
    _, _, _, (_, weight_h), (_, weight_w) = resize_grid_weights(
        (prefix_tokens + old_grid[0] * old_grid[1], 8), old_grid, new_grid, **keywords)
    # the two axes' weighted sums nest: the float32 error scales with the product of their sums of |w|
    gain = float(np.abs(weight_h).sum(axis=1).max() * np.abs(weight_w).sum(axis=1).max())

    def make(rng, dtype):
        rows = np.cumsum(rng.normal(size=(old_grid[0] * old_grid[1], 8)), axis=0) / np.sqrt(old_grid[0] * old_grid[1])
        table = np.concatenate([rng.normal(size=(prefix_tokens, 8)), rows]).astype(numpy_dtype(dtype))
        return (table, old_grid, new_grid), keywords

    def tol(desired, dtype, args):
        return tolerance(dtype, scale=gain * max(float(np.abs(desired).max()), 1e-30))

    register(Case("resize_grid", convention, case, make, tol, description=description, modes=modes))


# few cases (each runs on every backend, dtype and mode): up and down, prefix rows 0 / 1 / 5, a non-square grid,
# torch's antialiased kernel and the scale_factor grid
_resize_grid_case("hf-vit", "7x7->10x10", (7, 7), (10, 10), 1, "HF ViT bicubic upsampling, CLS row")
# jit: the hf-vit case traces the grid path; the others differ in constants (weights, scale), eager only
_resize_grid_case("timm", "9x9->5x5-prefix5", (9, 9), (5, 5), 5, "timm antialiased bicubic downsampling, 5 prefix rows",
                  modes=("eager",))
_resize_grid_case("siglip2", "6x6->4x9", (6, 6), (4, 9), 0, "antialiased bilinear to a non-square grid, no prefix",
                  modes=("eager",))
_resize_grid_case("keras-jax", "7x7->10x10", (7, 7), (10, 10), 1, "keras bicubic (jax/numpy/tf backends): "
                  "a = -0.5, renormalised borders", modes=("eager",))
_resize_grid_case("dinov2", "8x8->6x10", (8, 8), (6, 10), 1, "scale_factor grid (interpolate_offset 0.1)",
                  scale=(6.1 / 8, 10.1 / 8), modes=("eager",))
# the models' own shapes (transformers' SigLIP: no prefix row; Dinov2-with-registers: antialiased), eager only
_resize_grid_case("hf-vit", "6x6->4x4-no-prefix", (6, 6), (4, 4), 0, "HF SigLIP bicubic downsampling, no prefix row",
                  modes=("eager",))
_resize_grid_case("dinov2-reg", "6x6->9x9", (6, 6), (9, 9), 1, "Dinov2-with-registers antialiased bicubic, CLS row",
                  modes=("eager",))

