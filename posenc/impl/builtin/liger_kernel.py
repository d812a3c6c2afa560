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
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ('liger-kernel',)


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


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ("`pip install --no-deps liger-kernel triton` (Triton's interpreter runs it without a GPU, "
           'float32 and float16)')
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = (
    {
        'implementation': ('liger-kernel'),
        'title': ('a contiguous [batch, heads, 1, dim] q is read with the wrong row stride'),
        'text': ('`rope_forward` transposes q to `[batch, seq, heads, dim]` and passes `q.stride(1)` as '
            'the row stride. For one decode token (seq = 1) of a contiguous `[batch, heads, 1, dim]` '
            "q, the transposed view is contiguous for torch (size-1 dims' strides are free) and "
            '`stride(1)` is `dim`, not `heads * dim`, so rows of different batch entries overlap: '
            "batch > 1 and heads > 1 give wrong values (q in transformers' memory order, a "
            'transposed `[batch, seq, heads, dim]` view, is fine).'),
        'reproduction': ("import os  # no GPU needed: Triton's interpreter (set before triton is imported) runs the "
                         'kernel on CPU tensors\n'
                         'os.environ["TRITON_INTERPRET"] = "1"\n'
                         'import torch\n'
                         'from liger_kernel.transformers.rope import liger_rotary_pos_emb\n'
                         'd = 16\n'
                         'ang = torch.tensor([[7.0]], dtype=torch.float64) * 10000.0 ** (-torch.arange(0, d, '
                         '2).double() / d)  # position 7\n'
                         'cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)  # [seq = 1, '
                         'dim]\n'
                         'q = torch.randn(2, 2, 1, 16)  # contiguous [batch, heads, seq, dim], one decode token\n'
                         'want = q.double() * cos + torch.cat([-q[..., d // 2:], q[..., :d // 2]], -1).double() * '
                         'sin  # rotate_half form\n'
                         'qo, _ = liger_rotary_pos_emb(q.clone(), q.clone(), cos.float().expand(2, 1, d), '
                         'sin.float().expand(2, 1, d))\n'
                         'err = float((qo - want).abs().max())\n'
                         'print(err)  # ~3 (depends on q), not 1e-7'),
        'still': 'err > 0.1',
    },
    {
        'implementation': ('liger-kernel'),
        'title': ('`unsqueeze_dim=2` is accepted and ignored'),
        'text': ('`liger_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)` on `[batch, seq, heads, dim]` q '
            "(transformers' `unsqueeze_dim=2` form) rotates as if q were `[batch, heads, seq, dim]`: "
            'the kernel always transposes axes 1 and 2.'),
        'reproduction': ("import os  # no GPU needed: Triton's interpreter (set before triton is imported) runs the "
                         'kernel on CPU tensors\n'
                         'os.environ["TRITON_INTERPRET"] = "1"\n'
                         'import torch\n'
                         'from liger_kernel.transformers.rope import liger_rotary_pos_emb\n'
                         'd = 16\n'
                         'ang = torch.arange(8).double()[:, None] * 10000.0 ** (-torch.arange(0, d, 2).double() / d)\n'
                         'cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)  # [seq, dim]\n'
                         'q = torch.randn(2, 8, 2, 16)  # [batch, seq, heads, dim]\n'
                         "c, s = cos[:, None], sin[:, None]  # transformers' unsqueeze_dim=2\n"
                         'want = q.double() * c + torch.cat([-q[..., d // 2:], q[..., :d // 2]], -1).double() * s\n'
                         'qo, _ = liger_rotary_pos_emb(q.clone(), q.clone(), cos.float()[None], sin.float()[None], '
                         'unsqueeze_dim=2)\n'
                         'err = float((qo - want).abs().max())\n'
                         'print(err)  # ~5 (depends on q), not 1e-7'),
        'still': 'err > 0.1',
    },
)

#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
EXPECTED = {
    'liger-kernel hf-llama/broadcast': 'unrotated',
    'liger-kernel gpt-neox/broadcast': 'unrotated',
    'liger-kernel edge/decode-past-table': 'unrotated',
    'liger-kernel training/aliasing': 'upstream-gradient-corrupted',
    'liger-kernel training/table-grad': 'no-gradient',
}
