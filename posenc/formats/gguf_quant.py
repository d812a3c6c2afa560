"""GGUF tensor types for `posenc port ... --outtype TYPE`: which tensors are quantized, how, and how much
each one moves.

The rule is llama.cpp's converter's (`conversion/base.py`, `ModelBase.prepare_tensors`, in the llama.cpp
that llama-cpp-python 0.3.36 vendors): a tensor with at most one dimension, or whose GGUF name ends in
`_norm.weight`, or whose name does not end in `.weight`, is F32 ("Most of the codebase that takes in 1D
tensors or norms only handles F32 tensors"); every other tensor takes the requested type; a tensor the
quantizer refuses (its rows are not a whole number of blocks: `gguf.QuantError`) falls back to F16, as the
converter does. The quantizers are the `gguf` package's own (`gguf.quants.quantize`, gguf-py 0.19), which
implement ggml's reference `quantize_row_*_ref`; the file type is `general.file_type`
(`gguf.LlamaFileType`). Of the converter's own `--outtype` choices (f32, f16, bf16, q8_0, tq1_0, tq2_0,
auto) posenc takes the first four (the ternary types are for ternary-trained models) and also writes q4_0,
q4_1, q5_0 and q5_1, which `gguf.quants` implements; it writes every 2-D weight in that type (as
`llama-quantize --pure`), since the K-quants `llama-quantize` mixes in (Q6_K for `output.weight`...) have no
quantizer in gguf-py 0.19 (`quantize` raises NotImplementedError for them).

Quantization step per block of 32 values `x` (ggml-quants.c, `quantize_row_*_ref`): Q8_0 `d = max|x| / 127`,
Q4_0 `d = |m| / 8`, Q5_0 `d = |m| / 16` (m the value of largest magnitude), Q4_1 `d = (max x - min x) / 15`,
Q5_1 `d = (max x - min x) / 31`; each value is rounded to a multiple of d, so its error is at most d / 2 (up
to d for Q4_0/Q5_0 on the side opposite to m) and, for values spread across the block, about uniform on
`[-d/2, d/2]`: RMS `d / sqrt(12)`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from posenc_np.backend import numpy_dtype

__all__ = ["OUTTYPES", "QUANTIZED", "FILE_TYPE", "ACTIVATION_TYPE", "TensorError", "tensor_type", "quantize",
           "dequantize", "rounded", "error_bound", "quantization_error", "expected_logit_error", "outtype_of"]

#: `--outtype` -> the GGML type of 2-D weights
OUTTYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0", "q4_0": "Q4_0", "q4_1": "Q4_1",
            "q5_0": "Q5_0", "q5_1": "Q5_1"}
#: the block-quantized types among them
QUANTIZED = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
#: `--outtype` -> `general.file_type` (gguf.LlamaFileType: ALL_F32, MOSTLY_F16, ...)
FILE_TYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "bf16": 32}
#: the type ggml's CPU backend rounds activations to before a dot product with weights of each type
#: (`type_traits_cpu[...].vec_dot_type`, ggml/src/ggml-cpu/ggml-cpu.c): Q8_0 for Q8_0/Q4_0/Q5_0, Q8_1 for
#: Q4_1/Q5_1; F16 and BF16 weights meet activations rounded to F16 / BF16
ACTIVATION_TYPE = {"Q8_0": "Q8_0", "Q4_0": "Q8_0", "Q5_0": "Q8_0", "Q4_1": "Q8_1", "Q5_1": "Q8_1", "F16": "F16",
                   "BF16": "BF16", "F32": "F32"}
# relative RMS error of rounding activations to each type: 8-bit blocks, step max|x| / 127 with max|x| at most
# 3 RMS of the block (a bound for Gaussian-like rows of 32: E max|z| over 32 normals is 2.07), RMS step / sqrt(12);
# F16/BF16 rounding: half an ulp, 2^-11 and 2^-8 relative, RMS of a uniform error 1 / sqrt(3) of that
_ACTIVATION_REL_RMS = {"Q8_0": 3 / (127 * math.sqrt(12)), "Q8_1": 3 / (127 * math.sqrt(12)),
                       "F16": 2.0 ** -11 / math.sqrt(3), "BF16": 2.0 ** -8 / math.sqrt(3), "F32": 0.0}


def outtype_of(value):
    """`--outtype` checked: the GGML type name of 2-D weights; ValueError naming the value."""
    if value not in OUTTYPES:
        raise ValueError(f"--outtype {value!r} is not a GGUF type posenc writes; choose from {', '.join(OUTTYPES)}")
    return OUTTYPES[value]


def _type(name):
    import gguf

    return getattr(gguf.GGMLQuantizationType, name)


def tensor_type(name, shape, outtype):
    """The GGML type llama.cpp's converter gives tensor `name` (GGUF name) of `shape` under `outtype`:
    F32 for norms, 1-D tensors and non-`.weight` tensors; F16 when the rows are not whole blocks."""
    import gguf

    wanted = outtype_of(outtype)
    if len(shape) <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight"):
        return "F32"
    if wanted in QUANTIZED and shape[-1] % gguf.GGML_QUANT_SIZES[_type(wanted)][0]:
        return "F16"  # the converter's QuantError fallback
    return wanted


def quantize(array, kind):
    """`array` (float) in GGML type `kind`: the bytes `gguf.quants.quantize` writes for a block type
    (uint8, rows of blocks), else the array cast to float32/float16/bfloat16."""
    import gguf

    values = np.asarray(array, dtype=np.float32)
    if kind in QUANTIZED:
        return gguf.quants.quantize(values, _type(kind))
    if kind == "BF16":
        return values.astype(numpy_dtype("bfloat16"))
    return values.astype({"F32": np.float32, "F16": np.float16}[kind])


def dequantize(data, kind, shape):
    """The float32 values a GGML block type's bytes `data` stand for, in `shape`."""
    import gguf

    return gguf.quants.dequantize(np.asarray(data), _type(kind)).reshape(shape).astype(np.float32)


def rounded(array, kind):
    """The float32 (F16: float16, BF16: bfloat16) values a tensor written as `kind` holds: for a block type,
    `dequantize(quantize(array))`, which is also what `quantize` of these values stores again (gguf-py's
    quantizers give back the same values for values already on a block's grid)."""
    if kind in QUANTIZED:
        return dequantize(quantize(array, kind), kind, np.shape(array))
    return quantize(array, kind)


# |error| <= c d per block: half a step, or a whole one for the Q4_0/Q5_0 values on the side opposite to the
# largest magnitude (levels -8..7 / -16..15 times d, d = m / -8 or -16); plus the f16 rounding of the stored
# scale (relative 2^-11) times the largest level, and for Q4_1/Q5_1 the f16 rounding of the stored minimum
_STEP_BOUND = {"Q8_0": 0.5 + 127 * 2.0 ** -11, "Q4_0": 1 + 8 * 2.0 ** -11, "Q5_0": 1 + 16 * 2.0 ** -11,
               "Q4_1": 0.5 + 15 * 2.0 ** -11, "Q5_1": 0.5 + 31 * 2.0 ** -11}
_ULP_BOUND = {"F16": (2.0 ** -11, 2.0 ** -25), "BF16": (2.0 ** -8, 2.0 ** -134), "F32": (0.0, 0.0)}


def error_bound(array, kind):
    """Per-element bound on |rounded(array, kind) - array| (float64, the shape of `array`): `_STEP_BOUND[kind]`
    times the block's step (plus the minimum's f16 rounding for Q4_1/Q5_1), or half an ulp for F16/BF16
    (relative 2^-11 / 2^-8, half the smallest subnormal near 0), a float32 ulp of slack for the arithmetic."""
    values = np.asarray(array, dtype=np.float64)
    if kind in _ULP_BOUND:
        rel, floor = _ULP_BOUND[kind]
        return np.abs(values) * rel + floor
    blocks = values.reshape(-1, 32)
    bound = _STEP_BOUND[kind] * _steps(values, kind)
    if kind in ("Q4_1", "Q5_1"):
        bound = bound + np.abs(blocks.min(axis=1)) * 2.0 ** -11
    slack = np.abs(blocks).max(axis=1) * 2.0 ** -22
    return np.broadcast_to((bound + slack)[:, None], blocks.shape).reshape(values.shape)


@dataclass(frozen=True)
class TensorError:
    """How far one written tensor is from its float values."""

    name: str
    type: str
    max_abs_err: float
    rms_err: float
    rel_rms_err: float      # rms_err / RMS of the tensor
    mean_step: float        # mean quantization step d of its blocks (0 for float types)

    def as_dict(self):
        return asdict(self)


def _steps(values, kind):
    blocks = values.reshape(-1, 32).astype(np.float64)
    if kind == "Q8_0":
        return np.abs(blocks).max(axis=1) / 127
    if kind in ("Q4_0", "Q5_0"):
        return np.abs(blocks).max(axis=1) / (8 if kind == "Q4_0" else 16)
    return (blocks.max(axis=1) - blocks.min(axis=1)) / (15 if kind == "Q4_1" else 31)


def quantization_error(name, array, kind, written=None):
    """`TensorError` of `array` written as `kind`; `written`: the values the file holds (else `rounded`)."""
    values = np.asarray(array, dtype=np.float64)
    back = rounded(array, kind) if written is None else written
    error = np.asarray(back, dtype=np.float64) - values
    rms = float(np.sqrt(np.mean(values * values))) if values.size else 0.0
    rms_err = float(np.sqrt(np.mean(error * error))) if values.size else 0.0
    step = float(_steps(values, kind).mean()) if kind in QUANTIZED and values.size else 0.0
    return TensorError(name, kind, float(np.abs(error).max()) if values.size else 0.0, rms_err,
                       rms_err / rms if rms else 0.0, step)


def expected_logit_error(errors, *, logits_rms, samples, matmul_names=None, extra=None):
    """The tolerance for llama.cpp's logits on a quantized file against its float port, and each tensor's share.

    First-order propagation of independent rounding errors: a matmul whose weight has relative RMS error
    rho_w and whose input is rounded with relative RMS error rho_a (`ACTIVATION_TYPE`) perturbs its output by a
    relative RMS of about sqrt(rho_w^2 + rho_a^2) in a random direction; through the residual stream and the
    final RMSNorm these add in quadrature, and the output projection carries a relative perturbation of the
    normalised state to the logits (RMS `logits_rms`). The largest of `samples` (positions x vocabulary)
    Gaussian errors stays below `sqrt(2 ln(2 samples))` sigma with probability 1/2 ... 1 - 1/(2 samples); one
    more sigma is the margin: `tol = (sqrt(2 ln(2 samples)) + 1) * logits_rms * sqrt(sum rho^2)`.

    `errors`: TensorError per written tensor; `matmul_names`: the ones used as matmul weights (default:
    every 2-D one but `token_embd.weight`, which llama.cpp reads by rows without rounding activations);
    `extra`: other named relative RMS perturbations of the same kind (a runtime's own roundings).
    Returns `(tol, shares)`: shares maps tensor name -> its fraction of sum rho^2, largest first.
    """
    contributions = {}
    for e in errors:
        if e.type == "F32" and e.rel_rms_err == 0:
            continue
        is_matmul = e.name != "token_embd.weight" if matmul_names is None else e.name in matmul_names
        rho_a = _ACTIVATION_REL_RMS[ACTIVATION_TYPE[e.type]] if is_matmul else 0.0
        contributions[e.name] = e.rel_rms_err ** 2 + rho_a ** 2
    for name, rho in (extra or {}).items():
        contributions[name] = contributions.get(name, 0.0) + float(rho) ** 2
    total = sum(contributions.values())
    k = math.sqrt(2 * math.log(2 * max(int(samples), 1))) + 1
    tol = k * float(logits_rms) * math.sqrt(total)
    shares = {n: c / total for n, c in sorted(contributions.items(), key=lambda kv: -kv[1])} if total else {}
    return tol, shares
