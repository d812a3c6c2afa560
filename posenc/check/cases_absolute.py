"""Suite cases for the absolute encodings: sinusoidal (per convention), learned tables, resizing."""

from __future__ import annotations

import numpy as np

from posenc_np.backend import numpy_dtype
from posenc_np.conventions import conventions
from posenc_np.learned import resize_grid_weights, resize_weights
from posenc_np.sinusoidal import sinusoid_inv_freq
from posenc_np.testing import tolerance

from .registry import Case, register

DIM = 32
LONG = 2**20


def _sinusoid_tol(positions, params):
    inv_freq = sinusoid_inv_freq(DIM, base=params["base"], denominator=params["denominator"])
    max_angle = float(np.abs(np.asarray(positions, np.float64)).max() * inv_freq.max())
    return lambda desired, dtype, args: tolerance(dtype, max_angle=max_angle)


def _sinusoid_case(convention, case, positions, description):
    params = dict(conventions[convention].params)
    positions = np.asarray(positions)

    def make(rng, dtype):
        return (positions, DIM), {**params, "dtype": dtype}

    register(Case("sinusoidal", convention, case, make, _sinusoid_tol(positions, params),
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


def _resize_case(name, old_len, new_len, method, align_corners=False, cubic_a=-0.75, antialias=False, scale=None):
    options = {"method": method, "align_corners": align_corners, "cubic_a": cubic_a, "antialias": antialias,
               "scale": scale}
    index, weight = resize_weights(old_len, new_len, **options)
    gain = float(np.abs(weight).sum(axis=1).max())  # a weighted sum's float32 error scales with sum |w|

    def make(rng, dtype):
        # smooth rows (a random walk) like a trained position table, plus noise
        table = (np.cumsum(rng.normal(size=(old_len, 8)), axis=0) / np.sqrt(old_len)).astype(numpy_dtype(dtype))
        return (table, new_len), options

    def tol(desired, dtype, args):
        return tolerance(dtype, scale=gain * max(float(np.abs(desired).max()), 1e-30))

    register(Case("resize_table", name, f"{old_len}->{new_len}", make, tol,
                  description=f"{method}, align_corners={align_corners}, antialias={antialias}, scale={scale}"))


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


def _resize_grid_case(convention, case, old_grid, new_grid, prefix_tokens, description, scale=None):
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

    register(Case("resize_grid", convention, case, make, tol, description=description))


# few cases (each runs on every backend, dtype and mode): up and down, prefix rows 0 / 1 / 5, a non-square grid,
# torch's antialiased kernel and the scale_factor grid
_resize_grid_case("hf-vit", "7x7->10x10", (7, 7), (10, 10), 1, "HF ViT bicubic upsampling, CLS row")
_resize_grid_case("timm", "9x9->5x5-prefix5", (9, 9), (5, 5), 5, "timm antialiased bicubic downsampling, 5 prefix rows")
_resize_grid_case("siglip2", "6x6->4x9", (6, 6), (4, 9), 0, "antialiased bilinear to a non-square grid, no prefix")
_resize_grid_case("dinov2", "8x8->6x10", (8, 8), (6, 10), 1, "scale_factor grid (interpolate_offset 0.1)",
                  scale=(6.1 / 8, 10.1 / 8))

