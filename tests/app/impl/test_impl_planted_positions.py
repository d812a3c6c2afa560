"""`positions-rounded`: an implementation that casts its positions (or timesteps) to the compute dtype before
forming angles is named so, in every family: RoPE whose positions pass through bfloat16 (257 -> 256) and a
sinusoid whose timesteps pass through float16, planted in mocks built on the spec."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import posenc_np
from posenc.check.registry import all_cases
from posenc.check.run_impl import run_implementations
from posenc.impl import Implementation


def _rounded(p, dtype):
    return np.asarray(p).astype(np.float64).astype(dtype).astype(np.asarray(p).dtype)


def test_rope_with_positions_in_bfloat16_is_named_positions_rounded():
    def apply_rope(x, positions, **kwargs):
        out = posenc_np.apply_rope(x.astype(np.float64), _rounded(positions, ml_dtypes.bfloat16), **kwargs)
        return out.astype(x.dtype)

    cases = [c for c in all_cases() if c.id == "rope/hf-llama/long"]
    (record,) = run_implementations(cases, [Implementation("bf16-positions", "numpy", {"apply_rope": apply_rope})],
                                    dtypes=["bfloat16"])
    assert (record.status, record.diagnosis) == ("fail", "positions-rounded"), (record.status, record.message)
    assert "bfloat16" in record.diagnosis_detail


def test_a_sinusoid_with_timesteps_in_float16_is_named_positions_rounded():
    def sinusoidal(positions, dim, **kwargs):
        kwargs.pop("dtype", None)
        return posenc_np.sinusoidal(np.asarray(positions).astype(np.float16).astype(np.float64), dim, **kwargs)

    cases = [c for c in all_cases() if c.id == "sinusoidal/vaswani/past-2048"]
    (record,) = run_implementations(cases, [Implementation("fp16-timesteps", "numpy", {"sinusoidal": sinusoidal})],
                                    dtypes=["float16"])
    assert (record.status, record.diagnosis) == ("fail", "positions-rounded"), (record.status, record.message)
