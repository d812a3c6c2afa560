"""Suite cases for the absolute encodings: sinusoidal (per convention), learned tables, resizing."""

from __future__ import annotations

import numpy as np

from posenc_np.backend import numpy_dtype
from posenc_np.conventions import conventions
from posenc_np.learned import resize_weights
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


def _resize_case(name, old_len, new_len, method, align_corners=False, cubic_a=-0.75):
    index, weight = resize_weights(old_len, new_len, method=method, align_corners=align_corners, cubic_a=cubic_a)
    gain = float(np.abs(weight).sum(axis=1).max())  # a weighted sum's float32 error scales with sum |w|

    def make(rng, dtype):
        # smooth rows (a random walk) like a trained position table, plus noise
        table = (np.cumsum(rng.normal(size=(old_len, 8)), axis=0) / np.sqrt(old_len)).astype(numpy_dtype(dtype))
        return (table, new_len), {"method": method, "align_corners": align_corners, "cubic_a": cubic_a}

    def tol(desired, dtype, args):
        return tolerance(dtype, scale=gain * max(float(np.abs(desired).max()), 1e-30))

    register(Case("resize_table", name, f"{old_len}->{new_len}", make, tol,
                  description=f"{method}, align_corners={align_corners}"))


_resize_case("linear", 24, 64, "linear")
_resize_case("linear", 64, 24, "linear")
_resize_case("linear-corners", 24, 64, "linear", align_corners=True)
_resize_case("nearest", 24, 40, "nearest")
_resize_case("cubic", 24, 64, "cubic")
_resize_case("cubic", 64, 24, "cubic")
_resize_case("cubic-corners", 24, 37, "cubic", align_corners=True)
_resize_case("cubic-a0.5", 24, 64, "cubic", cubic_a=-0.5)
