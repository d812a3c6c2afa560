"""Liger's rotary kernel `liger_kernel.transformers.rope.liger_rotary_pos_emb(q, k, cos, sin, position_ids=None,
unsqueeze_dim=1, rotary_dim=None)` (liger_kernel/ops/rope.py, a Triton kernel; checked on liger-kernel 0.8.5
with triton 3.9.0 under `TRITON_INTERPRET=1`).

It has transformers' `apply_rotary_pos_emb` signature, so the adapter is
`Implementation.from_rotary_kernel`: posenc builds the cos/sin tables in float64 (class "table"), casts
them to the inputs' dtype, and judges the kernel's application (half layout only). Without a GPU the
kernel runs in Triton's interpreter, float32 and float16 only (posenc.impl.builtin._triton).
"""

from __future__ import annotations

from ..implementation import Implementation, ImplementationUnavailable
from ._triton import INTERPRETER_DTYPES, triton_mode

DISTRIBUTION = "liger-kernel"


def load() -> Implementation:
    import importlib.metadata

    mode = triton_mode()
    try:
        from liger_kernel.transformers.rope import liger_rotary_pos_emb
    except ImportError as error:
        raise ImplementationUnavailable(f"--impl liger-kernel: liger_kernel.transformers.rope does not import "
                                        f"({error}); it needs triton (pip install triton)") from error
    impl = Implementation.from_rotary_kernel(
        liger_rotary_pos_emb, "liger-kernel", layout="half", version=importlib.metadata.version(DISTRIBUTION),
        dtypes=INTERPRETER_DTYPES if mode == "interpreter" else None)
    impl.description = f"liger_rotary_pos_emb (Triton, {mode}), tables from the float64 spec"
    return impl
