"""The training-time cases (`cases_training`) for implementations: the backward pass, aliasing, and the
gradients of the tables a kernel is fed, judged against `posenc.impl.training`'s float64 statements."""

from __future__ import annotations

import numpy as np

from posenc_np.testing import compare, tolerance

from ..adapters import adapter
from ..impl.precision import class_tolerance, spec_rotation
from ..impl.training import angle_gradients, diagnose_backward, rope_backward, rotate_table_half, table_gradients

__all__ = ["run_training", "training_refusal", "kernel_serves"]


def training_refusal(case, impl) -> str | None:
    """Why `impl` does not run the training case `case`, None when it does."""
    if not impl.differentiable:
        return f"{impl.name} declares differentiable=False (inference only)"
    if impl.framework == "numpy":
        return f"{impl.name} computes in NumPy: no gradients to check"
    if impl.kernel is None and "apply_rope" not in impl.functions:
        return f"{impl.name} provides no apply_rope"
    layout = case_layout(case)
    if impl.kernel is not None and layout != impl.kernel[1]:
        return f"{impl.name} declares layouts {impl.kernel[1]}, not {layout}"  # its kernel's one layout
    if case.training != "backward" and impl.framework != "torch":
        return "aliasing and table gradients are autograd probes of torch implementations"
    if case.training == "table-grad" and impl.kernel is None and impl.angle_kernel is None:
        return (f"{impl.name} is fed no cos/sin or angle tables (a kernel with transformers' signature, or an "
                "angle-fed `angle_kernel`, is)")
    if case.training == "table-grad" and not impl.table_grads:
        return f"{impl.name} declares table_grads=False"
    return None


def case_layout(case) -> str:
    """The RoPE layout a training case asks for (its registered keywords; half by default)."""
    from .cases_training import TRAINING_SETS

    return TRAINING_SETS.get(case.case_set, (None, {}))[1].get("layout", "half")


def kernel_serves(impl, kwargs) -> bool:
    """Whether the training probes call `impl`'s own kernel (transformers' signature) rather than differentiate
    its `apply_rope`: it has one (a kernel in another layout than the case's makes the case a skip)."""
    return impl.kernel is not None


def _probe(case, want, impl, dtype, form):
    x, positions, cotangent = want.args
    kwargs = dict(want.kwargs)
    if impl.framework == "torch":
        from ..impl.training_torch import function_probe, kernel_probe

        # aliasing: q in the memory order transformers' attention layers hand it over, where kernels that
        # rotate a contiguous copy and kernels that write back into the caller's tensor part ways
        order = "bshd" if case.training == "aliasing" else "bhsd"
        if case.training == "table-grad" and impl.kernel is None:
            from ..impl.training_torch import angle_probe

            return angle_probe(impl.angle_kernel, x, positions, kwargs, cotangent, dtype_name=dtype)
        if kernel_serves(impl, kwargs):
            return kernel_probe(impl.kernel, x, positions, kwargs, cotangent, form=form, dtype_name=dtype,
                                tables=case.training == "table-grad", order=order)
        return function_probe(impl.functions["apply_rope"], x, positions, kwargs, cotangent, form=form,
                              dtype_name=dtype, order=order)
    ad = adapter(impl.framework)
    fn, pos = impl.functions["apply_rope"], ad.from_numpy(positions)
    grad = ad.grad(lambda t: fn(t, pos, **kwargs), ad.from_numpy(x), ad.from_numpy(cotangent))
    return dict(grad_q=np.asarray(ad.to_numpy(grad), np.float64))


def _backward_fields(impl, want, dtype, result, rerun):
    """The backward's record fields: every gradient the probe returned against the spec's."""
    x, positions, cotangent = want.args
    r = result.get("rotary_dim", x.shape[-1])
    kw = {k: v for k, v in want.kwargs.items() if not (r < x.shape[-1] and k == "rotary_dim")}
    shape = x.shape[:-1] + (r,)
    rot = spec_rotation(shape, positions, kw)
    desired = rope_backward(cotangent[..., :r], shape, positions, kw, rot=rot)
    tol = class_tolerance(impl.angles, desired, dtype, cotangent[..., :r], positions, kw, rot=rot)
    grads = [g for g in (result["grad_q"], result.get("grad_k")) if g is not None]
    worst = max((compare(g, desired, tol) for g in grads), key=lambda c: (not c.passed, c.err_in_tol))
    fields = dict(status="pass" if worst.passed else "fail", max_abs_err=worst.max_abs_err,
                  err_in_tol=worst.err_in_tol, tol=worst.atol, tol_why="backward: " + worst.tol_why,
                  message=worst.message)
    if not worst.passed:
        bad = next(g for g in grads if not compare(g, desired, tol).passed)
        found = diagnose_backward(bad, desired, tol, cotangent=cotangent[..., :r], x_shape=shape,
                                  positions=positions, kwargs=kw, rot=rot)
        if found.name == "unknown" and rerun is not None and rerun():
            found = type(found)("cotangent-layout", "your gradient is right for a contiguous cotangent and wrong "
                                                    "for this memory form of the same values")
        fields.update(diagnosis=found.name, diagnosis_detail=found.sentence)
    return fields, desired, tol


def run_training(case, want, impl, dtype) -> dict:
    """The record fields of training case `case` for `impl` in `dtype` (`training_refusal` first)."""
    form = case.cotangent_form
    try:
        result = _probe(case, want, impl, dtype, form)
    except RuntimeError as error:
        if "does not require grad" not in str(error):
            raise
        return _failed("no-gradient", f"the output does not depend on x through autograd ({error}); declare "
                       "Implementation(differentiable=False) for an inference-only implementation")

    def dense_passes():
        again = _probe(case, want, impl, dtype, "dense")
        return _backward_fields(impl, want, dtype, again, None)[0]["status"] == "pass"

    fields, desired, tol = _backward_fields(impl, want, dtype, result, dense_passes if form != "dense" else None)
    if case.training == "aliasing":
        return _aliasing_fields(impl, want, result, desired, tol)
    if case.training == "table-grad":
        return _table_fields(want, result)
    return fields


def _failed(name, sentence, **fields):
    return dict(status="fail", diagnosis=name, diagnosis_detail=sentence, message=sentence, **fields)


def _aliasing_fields(impl, want, result, desired, tol):
    x = want.args[0][..., : desired.shape[-1]]
    upstream = result["upstream"]
    also = [f"in-place-unversioned ({name})" for name, versioned in result["written"] if not versioned]
    also += ["cotangent-mutated"] if result["cotangent_mutated"] else []
    if not isinstance(upstream, str):
        # judged against the implementation's own backward (RoPE's does not depend on x), so a wrong backward
        # is the backward cases' failure and only a corrupted upstream gradient fails here
        expected = (1 - np.tanh(x.astype(np.float64)) ** 2) * result["grad_q"]
        checked = compare(upstream, expected, tol)
        if not checked.passed:
            return _failed("upstream-gradient-corrupted", "the gradient through tanh -> kernel -> loss is wrong: the "
                           "kernel overwrote its input, which tanh saved for its backward, without autograd seeing "
                           "it" + (f" (also: {', '.join(also)})" if also else ""),
                           max_abs_err=checked.max_abs_err, err_in_tol=checked.err_in_tol, tol=checked.atol)
    unversioned = [name for name, versioned in result["written"] if not versioned]
    if unversioned:
        return _failed("in-place-unversioned", f"the forward wrote into {', '.join(unversioned)} without bumping "
                       "autograd's version counter" + (" (in-place declared)" if impl.inplace else ""))
    if result["written"] and not impl.inplace:
        return _failed("in-place-undeclared", "the forward wrote into "
                       f"{', '.join(n for n, _ in result['written'])}; declare Implementation(inplace=True)")
    if result["cotangent_mutated"]:
        return _failed("cotangent-mutated", "the backward wrote into the incoming gradient (the cotangent)")
    note = f"autograd refused the in-place write: {upstream}" if isinstance(upstream, str) else ""
    return dict(status="pass", message=note or "inputs and cotangent unchanged; upstream gradient equal")


def _angle_table_fields(want, result):
    x, _, cotangent = want.args
    r = result["rotary_dim"]
    move = (2, 0, 1, 3)  # [b, h, s, r] -> the kernel's [s, b, h, r]
    xs, ws = (np.ascontiguousarray(a[..., :r].transpose(move)) for a in (x, cotangent))
    dfreqs = angle_gradients(xs, ws, result["freqs"], result["layout"])
    # each term w (rot(t) cos F - t sin F) is at most |w| (|rot(t)| + |t|): the sum's float32 scale
    rotated = np.abs(rotate_table_half(xs, result["layout"]))
    scale = float(max((np.abs(ws) * (np.abs(xs) + rotated)).sum(axis=(1, 2)).max(), 1e-30))
    tol = tolerance("float32", max_angle=float(np.abs(result["freqs"]).max()), scale=scale)
    checked = compare(result["dfreqs"], dfreqs, tol)
    fields = dict(status="pass" if checked.passed else "fail", max_abs_err=checked.max_abs_err,
                  err_in_tol=checked.err_in_tol, tol=checked.atol, tol_why="angle-table gradient: " + checked.tol_why,
                  message=checked.message)
    if not checked.passed and compare(result["dfreqs"], -dfreqs, tol).passed:
        fields.update(diagnosis="direction", diagnosis_detail="your angle table's gradient is the spec's negated: "
                                                              "the kernel rotates by -theta")
    return fields


def _table_fields(want, result):
    if "freqs" in result:
        if result.get("dfreqs") is None:
            return _failed("no-gradient", "no gradient for the angle table (freqs) that requires grad (declare "
                           "Implementation(table_grads=False) if that is by design)")
        return _angle_table_fields(want, result)
    if result.get("dcos") is None or result.get("dsin") is None:
        missing = [n for n in ("cos", "sin") if result.get(f"d{n}") is None]
        return _failed("no-gradient", f"no gradient for the {' and '.join(missing)} table that requires grad "
                       "(declare Implementation(table_grads=False) if that is by design)")
    x, _, cotangent = want.args
    r, heads = result["rotary_dim"], result["heads_axis"]
    layout = want.kwargs.get("layout", "half")
    xq, wq = x[..., :r], cotangent[..., :r]
    pairs = [(xq, wq), (np.flip(xq, heads), np.flip(wq, heads))]
    dcos, dsin = table_gradients(pairs, layout, heads)
    scale = float(max(np.abs(table_gradients([(np.abs(a), np.abs(b)) for a, b in pairs], "half", heads)[0]).max(),
                      1e-30))
    tol = tolerance("float32", scale=scale)
    checks = [compare(result["dcos"], dcos, tol), compare(result["dsin"], dsin, tol)]
    worst = max(checks, key=lambda c: (not c.passed, c.err_in_tol))
    fields = dict(status="pass" if worst.passed else "fail", max_abs_err=worst.max_abs_err,
                  err_in_tol=worst.err_in_tol, tol=worst.atol, tol_why="table gradients: " + tol.why,
                  message=worst.message)
    if not worst.passed and checks[0].passed and compare(result["dsin"], -dsin, tol).passed:
        fields.update(diagnosis="direction", diagnosis_detail="your sin table's gradient is the spec's negated: the "
                                                              "kernel rotates by -theta")
    return fields
