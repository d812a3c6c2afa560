"""Training-time semantics for implementations (cases_training, run_training): planted kernels whose
backward ignores offsets, writes constants into the pass-through channels or mis-reads a zero-stride
cotangent, kernels that write into their input unseen or into the incoming gradient, and a kernel that
returns no gradient for its tables: each caught and named. An honest autograd.Function kernel and
transformers' apply_rotary_pos_emb pass everything (differentiated with torch.autograd.grad, which
autograd.Function kernels need); every cotangent is random, drawn from the case seed."""

from __future__ import annotations

import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import posenc_np  # noqa: E402
from posenc.check.registry import all_cases  # noqa: E402
from posenc.check.run_impl import run_implementations  # noqa: E402
from posenc.impl import Implementation  # noqa: E402
from posenc.impl.builtin import builtin_status, load_builtin  # noqa: E402

TRAINING = [c for c in all_cases() if c.convention == "training"]


def verdicts(impl, *sets):
    cases = [c for c in TRAINING if not sets or c.case_set in sets]
    return {r.case: (r.status, r.diagnosis) for r in run_implementations(cases, [impl], dtypes=["float32"])}


def _spec_rope(x, positions, kwargs, sign=1.0):
    """The spec's rotation of a torch tensor by sign * theta (float64 NumPy inside)."""
    p = positions.numpy() if hasattr(positions, "numpy") else np.asarray(positions)
    if sign > 0:
        out = posenc_np.apply_rope(x.detach().double().numpy(), p, **kwargs)
    else:
        from posenc.impl.training import rope_backward

        out = rope_backward(x.detach().double().numpy(), tuple(x.shape), p, kwargs)
    return torch.from_numpy(np.ascontiguousarray(out)).to(x.dtype)


def rope_function(backward_positions=None, passthrough=None, read_cotangent=None):
    """An `apply_rope` autograd.Function: the spec's forward; its backward the spec's transposed rotation,
    at `backward_positions(positions)` if given, with the pass-through channels set by `passthrough`, and the
    cotangent read by `read_cotangent`."""
    class Rope(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, positions, kwargs):
            ctx.positions, ctx.kwargs = positions, kwargs
            return _spec_rope(x, positions, kwargs)

        @staticmethod
        def backward(ctx, grad):
            grad = read_cotangent(grad) if read_cotangent else grad
            positions = backward_positions(ctx.positions) if backward_positions else ctx.positions
            out = _spec_rope(grad, positions, ctx.kwargs, sign=-1.0)
            r = ctx.kwargs.get("rotary_dim") or grad.shape[-1]
            if passthrough is not None and r < grad.shape[-1]:
                out[..., r:] = passthrough
            return out, None, None

    def apply_rope(x, positions, **kwargs):
        return Rope.apply(x, positions, kwargs)

    return apply_rope


def impl_of(fn, **declarations):
    return Implementation("planted", "torch", {"apply_rope": fn}, **declarations)


def test_an_honest_autograd_function_passes_every_backward_case():
    got = verdicts(impl_of(rope_function()), "backward", "backward-offset", "backward-partial",
                   "backward-zero-stride", "backward-bshd", "backward-non-contiguous", "aliasing")
    assert set(got.values()) == {("pass", None)}, got


def test_a_backward_that_ignores_offsets_is_named_offset():
    """TE #2188: the forward at the offsets, the backward from position 0 on every row."""
    got = verdicts(impl_of(rope_function(backward_positions=lambda p: p - p.min(dim=-1, keepdim=True).values)),
                   "backward", "backward-offset")
    assert got["backward-offset"] == ("fail", "offset"), got


def test_a_backward_that_writes_constants_into_pass_through_channels_is_named():
    """apex #1750: the pass-through channels' gradient overwritten with a constant."""
    got = verdicts(impl_of(rope_function(passthrough=0.0)), "backward", "backward-partial")
    assert got == {"backward": ("pass", None), "backward-partial": ("fail", "pass-through")}, got


def test_a_rotation_autograd_never_sees_is_named_unrotated():
    """vLLM's CPU rotary_embedding op: q rotated in place by an op with no autograd formula, so the gradient
    of the copy it rotated is the cotangent itself."""
    def in_place_unseen(x, positions, **kwargs):
        q = x.clone()
        q.data.copy_(_spec_rope(x, positions, kwargs))
        return q

    got = verdicts(impl_of(in_place_unseen), "backward", "backward-offset")
    assert got == {"backward": ("fail", "unrotated"), "backward-offset": ("fail", "unrotated")}, got


def test_a_backward_that_mis_reads_a_zero_stride_cotangent_is_named():
    """unsloth #3781: a cotangent expanded over the heads (stride 0) read as if each head had its own rows."""
    def first_head_only(grad):
        if grad.stride(1) == 0:  # the bug: only the rows the stride-0 axis really stores are read
            kept = torch.zeros(grad.shape, dtype=grad.dtype)
            kept[:, :1] = grad[:, :1]
            return kept
        return grad

    got = verdicts(impl_of(rope_function(read_cotangent=first_head_only)), "backward", "backward-zero-stride")
    assert got == {"backward": ("pass", None), "backward-zero-stride": ("fail", "cotangent-layout")}, got


def hf_kernel(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)

    def rotate_half(x):
        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)

    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def test_an_in_place_kernel_that_hides_its_write_corrupts_the_upstream_gradient():
    """Liger / unsloth / flash-attn inplace=True: the result written into q through `.data` (no version bump)."""
    def in_place(q, k, cos, sin, unsqueeze_dim=1):
        q_out, k_out = hf_kernel(q, k, cos, sin, unsqueeze_dim)
        q.data.copy_(q_out.detach())
        return q_out, k_out

    (status, diagnosis) = verdicts(Implementation.from_rotary_kernel(in_place, "planted"), "aliasing")["aliasing"]
    assert (status, diagnosis) == ("fail", "upstream-gradient-corrupted")
    declared = Implementation.from_rotary_kernel(in_place, "planted", inplace=True)
    assert verdicts(declared, "aliasing")["aliasing"] == ("fail", "upstream-gradient-corrupted")


def test_a_kernel_that_writes_its_input_unversioned_but_harmlessly_is_named():
    """The write is invisible to the gradient here (nothing saved the input), but not to the caller."""
    def scribble(q, k, cos, sin, unsqueeze_dim=1):
        out = hf_kernel(q, k, cos, sin, unsqueeze_dim)
        k.data.mul_(1.5)
        return out

    got = verdicts(Implementation.from_rotary_kernel(scribble, "planted"), "aliasing")
    assert got["aliasing"] == ("fail", "in-place-unversioned"), got


def kernel_without_table_gradients(*, zero_cotangent=False):
    """An HF-signature autograd.Function kernel whose backward returns no gradient for cos/sin (and, with
    `zero_cotangent`, zeroes the incoming gradient's memory after using it)."""
    class Rope(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, cos, sin):
            ctx.save_for_backward(cos, sin)
            return hf_kernel(q, k, cos, sin)

        @staticmethod
        def backward(ctx, gq, gk):
            cos, sin = ctx.saved_tensors
            out = hf_kernel(gq, gk, cos, -sin)
            if zero_cotangent:
                gq.data.zero_()  # the kernel reuses the incoming gradient's memory
            return out[0], out[1], None, None

    def kernel(q, k, cos, sin, unsqueeze_dim=1):
        return Rope.apply(q, k, cos, sin) if unsqueeze_dim == 1 else hf_kernel(q, k, cos, sin, unsqueeze_dim)

    return kernel


def test_a_backward_that_overwrites_the_incoming_gradient_is_named():
    kernel = kernel_without_table_gradients(zero_cotangent=True)
    impl = Implementation.from_rotary_kernel(kernel, "planted", table_grads=False)
    (record,) = run_implementations([c for c in TRAINING if c.case_set == "aliasing"], [impl], dtypes=["float32"])
    # the zeroed gradient buffer is also what autograd sums the upstream gradient in: both are named
    named = record.diagnosis == "cotangent-mutated" or "cotangent-mutated" in record.diagnosis_detail
    assert record.status == "fail" and named, (record.diagnosis, record.diagnosis_detail)
    assert verdicts(impl, "table-grad")["table-grad"][0] == "skip"  # table_grads=False declared


def test_a_kernel_without_table_gradients_is_named_no_gradient_and_an_honest_one_is_exact():
    kernel = kernel_without_table_gradients()

    assert verdicts(Implementation.from_rotary_kernel(kernel, "planted"), "table-grad")["table-grad"] == \
        ("fail", "no-gradient")
    assert verdicts(Implementation.from_rotary_kernel(hf_kernel, "honest"), "table-grad")["table-grad"] == \
        ("pass", None)


def angle_kernel(t, freqs, *, keep_graph=True):
    """Transformer Engine's unfused form `t cos F + rotate_half(t) sin F` (t [s, b, h, r], freqs [s, 1, 1, r]); with
    `keep_graph=False` the angles are detached first (a kernel that returns no gradient for them)."""
    freqs = freqs if keep_graph else freqs.detach()
    half = t.shape[-1] // 2
    return t * freqs.cos() + torch.cat((-t[..., half:], t[..., :half]), -1) * freqs.sin()


def angle_fed(keep_graph=True, **declarations):
    def apply_rope(x, positions, **kwargs):
        inv = torch.from_numpy(posenc_np.rope_frequencies(x.shape[-1])[0])
        freqs = (positions.double()[:, None] * inv).repeat(1, 2)[:, None, None, :]
        return angle_kernel(x.movedim(-2, 0), freqs, keep_graph=keep_graph).movedim(0, -2)

    impl = Implementation("planted", "torch", {"apply_rope": apply_rope}, layouts=("half",), **declarations)
    impl.angle_kernel = (functools.partial(angle_kernel, keep_graph=keep_graph), "half")
    return impl


def test_an_angle_fed_kernel_gets_d_dfreqs_against_the_analytic_gradient():
    """d<t cos F + rot(t) sin F, w>/dF = sum over batch and heads of w (rot(t) cos F - t sin F)."""
    assert verdicts(angle_fed(), "table-grad")["table-grad"] == ("pass", None)
    assert verdicts(angle_fed(keep_graph=False), "table-grad")["table-grad"] == ("fail", "no-gradient")
    assert verdicts(angle_fed(keep_graph=False, table_grads=False), "table-grad")["table-grad"][0] == "skip"


def test_angle_gradients_equal_finite_differences():
    from posenc.impl.training import angle_gradients

    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 5, 3, 8)), rng.standard_normal((2, 5, 3, 8))
    freqs = rng.uniform(-3, 3, (2, 1, 1, 8))

    def loss(f):
        half = x[..., 4:], x[..., :4]
        return float((w * (x * np.cos(f) + np.concatenate([-half[0], half[1]], -1) * np.sin(f))).sum())

    numeric = np.zeros_like(freqs)
    for index in np.ndindex(freqs.shape):
        step = np.zeros_like(freqs)
        step[index] = 1e-6
        numeric[index] = (loss(freqs + step) - loss(freqs - step)) / 2e-6
    np.testing.assert_allclose(angle_gradients(x, w, freqs, "half"), numeric, atol=1e-6)


def matmul_angles_rope(x, positions, *, base=10000.0, layout="half"):
    """RoPE whose angles are a float32 matmul `positions @ inv_freq`: bfloat16 under torch.autocast (TE #2240)."""
    d = x.shape[-1]
    inv = (1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)).float()
    angles = (positions.float().reshape(-1, 1) @ inv[None]).reshape(*positions.shape, d // 2).double()
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    out = x.double() * cos + torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1).double() * sin
    return out.to(x.dtype)


def test_an_angle_table_built_under_autocast_is_named_autocast():
    """Transformer Engine PR #2240: outside autocast the matmul is float32 and passes (positions 32760-32767 in
    float32 have angle error ~2e-3 rad, inside the float32 class); inside, bfloat16 keeps 8 bits: 8 rad off."""
    cases = [c for c in TRAINING if c.case_set == "autocast"]
    (record,) = run_implementations(cases, [impl_of(matmul_angles_rope, angles="float32", layouts=("half",))],
                                    dtypes=["float32"])
    assert (record.status, record.diagnosis) == ("fail", "autocast"), record.message
    honest = impl_of(lambda x, positions, **kw: torch.from_numpy(posenc_np.apply_rope(
        x.double().numpy(), positions.numpy(), **kw)).to(x.dtype), angles="float32")
    (record,) = run_implementations(cases, [honest], dtypes=["float32"])
    assert record.status == "pass", record.message


def test_autocast_is_a_skip_outside_torch():
    cases = [c for c in TRAINING if c.case_set == "autocast"]
    (record,) = run_implementations(cases, [Implementation("numpy", "numpy", {"apply_rope": posenc_np.apply_rope})],
                                    dtypes=["float32"])
    assert record.status == "skip" and "autocast" in record.message


def test_the_zigzag_shard_of_a_rank_is_recognised():
    from posenc.adapters import NotSupported
    from posenc.impl.builtin._kernel_inputs import zigzag_shard

    for world in (2, 4):
        for rank in range(world):
            rows = np.stack([posenc_np.cp_positions(8 * world, world_size=world, rank=rank, strategy="zigzag")] * 3)
            assert zigzag_shard(rows, what="k") == (world, rank)
    assert zigzag_shard(np.stack([np.arange(8)] * 2), what="k") == (1, 0)
    with pytest.raises(NotSupported, match="k restarts every sequence"):
        zigzag_shard(np.stack([np.arange(8) + 3]), what="k")


@pytest.mark.parametrize("name, expected", [
    ("transformers", {"aliasing": ("pass", None), "table-grad": ("pass", None), "autocast": ("pass", None)}),
    # research: unsloth rotates q in place where q.transpose(1, 2) is contiguous (transformers' memory order),
    # unversioned, and its tables get no gradient
    ("unsloth", {"aliasing": ("fail", "upstream-gradient-corrupted"), "table-grad": ("fail", "no-gradient")}),
    # TE's unfused path is plain torch: its angle table is differentiated exactly
    ("transformer-engine", {"aliasing": ("pass", None), "table-grad": ("pass", None)}),
    ("megatron-core", {"aliasing": ("pass", None), "table-grad": ("pass", None), "autocast": ("pass", None)}),
    # research: Liger rotates q in place when it is in transformers' memory order, unversioned, and returns no
    # gradient for cos/sin
    ("liger-kernel", {"aliasing": ("fail", "upstream-gradient-corrupted"), "table-grad": ("fail", "no-gradient")}),
])
def test_libraries_training_verdicts(name, expected):
    if not builtin_status(name)[0]:
        pytest.skip(f"{name} is not installed")
    got = {}
    for impl in load_builtin(name)[:1]:
        got = verdicts(impl)
    assert {k: got[k] for k in expected} == expected, got
    backward = [v for k, v in got.items() if k.startswith("backward")]
    # a kernel in one layout skips the other layout's backward case
    assert all(v in (("pass", None), ("skip", None)) for v in backward) and backward.count(("pass", None)) >= 5, got
