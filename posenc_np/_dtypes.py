"""Dtype names shared by the spec, the backends and the equivalence suite.

`dtype=None` means float64 in the spec and float32 in a backend (docs/api.md, common rules). Backends map the
names below onto their own dtype objects; the spec uses NumPy's and `ml_dtypes.bfloat16`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

FLOAT_DTYPES = ("float64", "float32", "bfloat16", "float16")
#: dtypes every backend supports for outputs; the suite's matrix axis.
BACKEND_DTYPES = ("float32", "bfloat16", "float16")

#: Unit roundoff (half an ulp at 1, relative) of round-to-nearest in each dtype: the one table the
#: tolerances, the precision classes and the diagnoses use.
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}

_NUMPY = {
    "float64": np.dtype(np.float64),
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}


def dtype_name(dtype) -> str:
    """Canonical name for a NumPy dtype, a name string, or any framework dtype with a `name`."""
    if isinstance(dtype, str):
        name = dtype
    else:
        name = getattr(dtype, "name", None) or str(dtype)
        name = name.replace("torch.", "")
    name = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "half": "float16",
            "float": "float32", "double": "float64"}.get(name, name)
    if name not in _NUMPY:
        raise ValueError(f"dtype={dtype!r} is not one of {list(FLOAT_DTYPES)}")
    return name


def numpy_dtype(dtype) -> np.dtype:
    return _NUMPY[dtype_name(dtype)]


def spec_output_dtype(dtype) -> np.dtype:
    """The spec computes in float64 and returns `dtype` (float64 when None)."""
    return np.dtype(np.float64) if dtype is None else numpy_dtype(dtype)


def is_float(array) -> bool:
    return np.asarray(array).dtype in (_NUMPY["float64"], _NUMPY["float32"], _NUMPY["float16"], _NUMPY["bfloat16"])
