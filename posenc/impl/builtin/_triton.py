"""Running a library's Triton kernels on a machine without a GPU: Triton's interpreter.

`TRITON_INTERPRET=1` must be set before the kernel's module is imported (`triton.jit` reads it when it
decorates). The interpreter runs float32 and float16 but not bfloat16 (triton-lang/triton #4972,
#11584: bf16 values are computed on their bit patterns), so on a CPU the adapters declare those two.
"""

from __future__ import annotations

import os

__all__ = ["triton_mode", "INTERPRETER_DTYPES"]

INTERPRETER_DTYPES = ("float32", "float16")


def triton_mode() -> str:
    """"native" when torch sees a CUDA device, else "interpreter" (setting `TRITON_INTERPRET=1`)."""
    import torch

    if torch.cuda.is_available():
        return "native"
    os.environ["TRITON_INTERPRET"] = "1"
    return "interpreter"
