"""Regenerate tests/spec/golden/golden.npz: small reference arrays taken from code outside posenc.

Each array is computed by an external reference (the published formula restated in float64 NumPy,
PyTorch's F.interpolate, Hugging Face transformers' RoPE and T5 code), never by posenc itself, so a
change to the spec that moves a number is caught by tests/spec/test_golden.py. PROVENANCE below is
written into the file beside each array.

Run from the project root:  python tests/spec/golden/make_golden.py
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import torch
import transformers
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
from transformers.models.t5.modeling_t5 import T5Attention

OUT = pathlib.Path(__file__).with_name("golden.npz")
POSITIONS = np.array([0, 1, 2, 255, 257, 4097, 65537], dtype=np.float64)


def paper_sinusoid(p, d):  # Vaswani et al. 2017, section 3.5: PE(p, 2i) = sin(p / 10000^(2i/d)), cos on odd
    i = np.arange(d // 2)
    angle = p[:, None] / 10000.0 ** (2 * i / d)
    out = np.empty((len(p), d))
    out[:, 0::2], out[:, 1::2] = np.sin(angle), np.cos(angle)
    return out


def t2t_sinusoid(p, d):  # tensor2tensor get_timing_signal_1d: log increment over num_timescales - 1
    n = d // 2
    inv = np.exp(np.arange(n) * -(math.log(1.0e4) / max(n - 1, 1)))
    angle = p[:, None] * inv[None, :]
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1)


def main():
    arrays, provenance = {}, {}
    arrays["sinusoid_positions"] = POSITIONS
    arrays["sinusoid_vaswani_d8"] = paper_sinusoid(POSITIONS, 8)
    provenance["sinusoid_vaswani_d8"] = "Vaswani et al. 2017 section 3.5 formula, float64 NumPy"
    arrays["sinusoid_t2t_d8"] = t2t_sinusoid(POSITIONS, 8)
    provenance["sinusoid_t2t_d8"] = "tensor2tensor common_attention.get_timing_signal_1d formula, float64 NumPy"

    table = np.sin(np.arange(12 * 3, dtype=np.float64).reshape(12, 3) * 0.7)
    arrays["resize_source"] = table
    x = torch.tensor(table.T[None, :, :, None])
    for name, mode, align in [("linear", "bilinear", False), ("linear_corners", "bilinear", True),
                              ("cubic", "bicubic", False)]:
        out = torch.nn.functional.interpolate(x, size=(20, 1), mode=mode, align_corners=align)
        arrays[f"resize_{name}_20"] = out[0, :, :, 0].T.numpy()
        provenance[f"resize_{name}_20"] = f"torch {torch.__version__} F.interpolate mode={mode} align_corners={align}"

    rng = np.random.default_rng(0)
    q = rng.normal(size=(1, 2, 5, 8))
    pos = np.array([0, 1, 7, 300, 4096])
    inv_freq = 1.0 / 10000.0 ** (np.arange(0, 8, 2) / 8)
    freqs = pos[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = torch.tensor(np.cos(emb))[None], torch.tensor(np.sin(emb))[None]
    rotated, _ = apply_rotary_pos_emb(torch.tensor(q), torch.tensor(q), cos, sin)
    arrays["rope_x"], arrays["rope_positions"] = q, pos
    arrays["rope_half"] = rotated.numpy()
    provenance["rope_half"] = (f"transformers {transformers.__version__} llama apply_rotary_pos_emb (rotate_half), "
                               "float64 cos/sin of p * 10000^(-2i/8)")

    rel = np.arange(-4 * 128, 4 * 128 + 1)
    for bidirectional in (True, False):
        buckets = T5Attention._relative_position_bucket(torch.tensor(rel), bidirectional=bidirectional,
                                                        num_buckets=32, max_distance=128)
        key = f"t5_bucket_{'bi' if bidirectional else 'uni'}"
        arrays[key] = buckets.numpy()
        provenance[key] = (f"transformers {transformers.__version__} T5Attention._relative_position_bucket, "
                           f"bidirectional={bidirectional}, 32 buckets, max_distance 128, relative = key - query")
    arrays["t5_relative"] = rel

    slopes = {}
    for n in (8, 12):  # Press et al.: 2^(-8k/n) for powers of two; 12 = 8 of n=8 then odd ones of n=16
        p8 = [2 ** (-8 * k / 8) for k in range(1, 9)]
        slopes[n] = p8 if n == 8 else p8 + [2 ** (-8 * k / 16) for k in range(1, 17, 2)][:4]
        arrays[f"alibi_slopes_{n}"] = np.array(slopes[n])
        provenance[f"alibi_slopes_{n}"] = "Press et al. 2021 slope rule (ofirpress reference get_slopes)"

    arrays["provenance"] = np.array(json.dumps(provenance))
    np.savez(OUT, **arrays)
    print(f"wrote {OUT} with {len(arrays) - 1} arrays")


if __name__ == "__main__":
    main()
