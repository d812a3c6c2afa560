"""Suite cases for training-time semantics (`posenc check --encoding rope`, case sets `backward*`, `aliasing`,
`table-grad`, `autocast`): the backward pass of RoPE against the spec's transposed rotation, with random cotangents drawn
from the case seed and the cotangent forms that break kernels (a zero-stride expand over the heads, the
`[batch, seq, heads, dim]` memory order, a non-contiguous view), in-place aliasing of the inputs and the
cotangent, the gradients of the cos/sin tables a kernel is fed, and the forward under mixed precision
(`torch.autocast` to bfloat16 around float32 inputs: an angle table built by a matmul comes out in bfloat16,
Transformer Engine PR #2240). posenc's own backends run the backward and autocast sets (their `vjp`, their
torch module under autocast); implementations run all of them (`posenc.check.run_training`; autocast is judged
as a forward case, under the implementation's float32 precision class).
"""

from __future__ import annotations

import numpy as np

from posenc_np.testing import ROPE_ANGLE_GOAL, tolerance

from ..adapters import NotSupported, adapter, adapter_for
from ..impl.training import rope_backward
from .registry import Case, register

__all__ = ["TRAINING_SETS", "COTANGENT_FORMS"]

SHAPE = (2, 3, 8, 16)  # [batch, heads, seq, head_dim]
#: the cotangent's memory form -> what it is
COTANGENT_FORMS = {
    "dense": "a contiguous random cotangent",
    "zero-stride": "the cotangent a [batch, 1, seq, dim] tensor expanded over the heads (stride 0)",
    "bshd": "the cotangent in [batch, seq, heads, dim] memory order, seen as [batch, heads, seq, dim]",
    "non-contiguous": "the cotangent a view [..., :dim] of a 2x wider array",
}
#: case set -> (positions, rope keywords, cotangent form, training probe, description)
TRAINING_SETS = {
    "backward": (np.arange(8), {}, "dense", "backward", "d x of <apply_rope(x), w>, random w"),
    "backward-offset": (np.stack([np.arange(100, 108), np.arange(7, 15)])[:, None, :], {}, "dense", "backward",
                        "per-row offsets 100 and 7 (a backward that ignores offsets fails)"),
    "backward-partial": (np.arange(8) + 3, {"rotary_dim": 8}, "dense", "backward",
                         "rotary_dim 8 of 16: the pass-through channels get the cotangent unchanged"),
    "backward-interleaved": (np.arange(8) + 3, {"layout": "interleaved"}, "dense", "backward",
                             "interleaved pairs (GPT-J, torchtune, Meta): the transposed rotation pair by pair"),
    "backward-zero-stride": (np.arange(8) + 5, {}, "zero-stride", "backward", COTANGENT_FORMS["zero-stride"]),
    "backward-bshd": (np.arange(8) + 5, {}, "bshd", "backward", COTANGENT_FORMS["bshd"]),
    "backward-non-contiguous": (np.arange(8) + 5, {}, "non-contiguous", "backward",
                                COTANGENT_FORMS["non-contiguous"]),
    "aliasing": (np.arange(8) + 2, {}, "dense", "aliasing",
                 "inputs unchanged by the forward, the cotangent by the backward; tanh -> kernel -> loss"),
    "table-grad": (np.arange(8) + 2, {}, "dense", "table-grad", "d/dcos, d/dsin of the tables a kernel is fed"),
}


def _cotangent(rng, form, dtype_np):
    if form == "zero-stride":
        small = rng.standard_normal((SHAPE[0], 1, *SHAPE[2:]))
        return np.broadcast_to(small, SHAPE).astype(dtype_np)  # materialized here; the form is the runner's
    return rng.standard_normal(SHAPE).astype(dtype_np)


def _backward(module, x, positions, cotangent, **kwargs):
    """The case's result: the backward of `apply_rope` on `module` (the spec: its transposed rotation)."""
    if getattr(module, "__name__", "") == "posenc_np":
        return rope_backward(cotangent, x.shape, positions, kwargs)
    try:
        return adapter_for(module).grad(lambda t: module.apply_rope(t, positions, **kwargs), x, cotangent)
    except ValueError:  # not a posenc package: an implementation's namespace (run_training judges those)
        raise NotSupported("training probes of an implementation run in posenc.check.run_training") from None


def _probe_only(module, x, positions, cotangent, **kwargs):
    """Aliasing and table gradients are probes of an implementation's own kernel (posenc.check.run_training);
    for the spec the result is the backward all the same (what the probes' gradients are judged against)."""
    if getattr(module, "__name__", "") == "posenc_np":
        return rope_backward(cotangent, x.shape, positions, kwargs)
    raise NotSupported("aliasing and table gradients are probes of an --impl implementation's kernel; posenc's "
                       "backends run the backward sets")


def _register(case_set, positions, kwargs, form, probe, words):
    def make(rng, dtype):
        from posenc_np.backend import numpy_dtype

        x = rng.standard_normal(SHAPE).astype(numpy_dtype(dtype))
        return (x, positions.astype(np.int64), _cotangent(rng, form, numpy_dtype(dtype))), dict(kwargs)

    def tol(desired, dtype, args):
        return tolerance(dtype, angle_error=ROPE_ANGLE_GOAL, scale=float(np.abs(desired.astype(np.float64)).max()))

    register(Case("apply_rope", "training", case_set, make, tol, fn=_backward if probe == "backward" else _probe_only, dtypes=("float32",),
                  modes=("eager",), description=words, training=probe, cotangent_form=form))


#: positions where bfloat16 keeps 8 significant bits: 32760 rounds to 32768, 8 rad at the highest frequency
AUTOCAST_POSITIONS = np.arange(32760, 32768)


def _autocast(module, x, positions, **kwargs):
    """`apply_rope` on float32 inputs inside the framework's autocast to bfloat16 (the spec: plain float64)."""
    if getattr(module, "__name__", "") == "posenc_np":
        return module.apply_rope(x, positions, **kwargs)
    try:
        ad = adapter_for(module)
    except ValueError:  # an implementation's namespace (posenc.check.run_impl) names its framework
        ad = adapter(module.framework)
    with ad.autocast("bfloat16"):
        return module.apply_rope(x, positions, **kwargs)


def _without_autocast(module, x, positions, **kwargs):
    return module.apply_rope(x, positions, **kwargs)


_autocast.plain_rope = True  # one apply_rope call: judged as one (posenc.check.inputs.is_plain_rope)
#: a failure that the same call without the context does not have is named for the context
_autocast.without_context = _without_autocast
_autocast.context_diagnosis = ("autocast", "your output is right without torch.autocast and wrong under "
                               "torch.autocast(bfloat16): a table or angle built by an autocast op (a matmul) "
                               "came out in bfloat16 (Transformer Engine PR #2240); build it with autocast disabled")


def _register_autocast():
    def make(rng, dtype):
        from posenc_np.backend import numpy_dtype

        x = rng.standard_normal(SHAPE).astype(numpy_dtype(dtype))
        return (x, AUTOCAST_POSITIONS.astype(np.int64)), {}

    def tol(desired, dtype, args):
        return tolerance(dtype, angle_error=ROPE_ANGLE_GOAL, scale=float(np.abs(desired.astype(np.float64)).max()))

    register(Case("apply_rope", "training", "autocast", make, tol, fn=_autocast, dtypes=("float32",),
                  modes=("eager",), description="float32 q inside torch.autocast(bfloat16), positions 32760-32767: "
                  "an angle table built by a matmul under autocast is bfloat16 (Transformer Engine PR #2240)"))


_register_autocast()
for _set, (_positions, _kwargs, _form, _probe, _words) in TRAINING_SETS.items():
    _register(_set, _positions, _kwargs, _form, _probe, _words)
