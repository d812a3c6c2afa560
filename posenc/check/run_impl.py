"""Run the registered cases through other implementations (`posenc check --impl`): one record per comparison,
judged by `posenc.impl.judge`."""

from __future__ import annotations

import time

import numpy as np

from ..adapters import NotSupported, adapter, current_device, trailing_view_base
from ..impl.implementation import passed_keywords
from ..impl.judge import judge, outputs_for
from .inputs import expected_for
from .profile import error_by_position
from .record import UNVERSIONED, Record, impl_plan, one_line
from .run_training import kernel_serves, run_training, training_refusal

__all__ = ["run_implementations", "REFERENCE_HELPERS"]

#: Contract functions a case may use around the one it checks (an attention over a bias); an implementation
#: that lacks them gets posenc's own backend of its framework.
REFERENCE_HELPERS = frozenset({"attention"})


def run_implementations(cases, impls, *, dtypes, seed=0, progress=None):
    """Compare every case x implementation x dtype (eagerly) with the spec; returns a list of `Record`s.

    Each record's tolerance is the case's, with RoPE's angle term replaced by the implementation's
    precision class (`posenc.impl.precision.class_tolerance`); RoPE records carry the worst angle error
    and failing ones a diagnosis. A case the implementation cannot express (`Implementation.refusal`: a
    function it lacks, a keyword its callable does not take, a layout or dtype it does not declare,
    positions past its declared table; or its own `NotSupported`) is a skip with the reason. An exception
    is an error, except one the case declares a correct refusal from an implementation with a table
    (`Case.refusals`, `Implementation.may_refuse`).
    """
    by_name = {impl.name: impl for impl in impls}
    plan = impl_plan(cases, dtypes=dtypes, names=list(by_name))
    expected: dict = {}
    records: list[Record] = []
    for n, (case, dtype, name) in enumerate(plan, 1):
        impl = by_name[name]
        if progress:
            progress(n, len(plan), f"{case.id} {name} {dtype}")
        if (case.id, dtype) not in expected:
            expected[(case.id, dtype)] = expected_for(case, seed, dtype)
        records.append(_compare(case, expected[(case.id, dtype)], impl, dtype))
    return records


def _compare(case, want, impl, dtype) -> Record:
    def record(**fields):
        return Record.for_case(case, impl.name, dtype, "eager", impl=impl.version or UNVERSIONED, **fields)

    if case.case_set == "grad":
        return record(status="skip", message="table gradients of posenc's trainable encodings run on posenc's "
                                             "backends; implementations run the training cases (cases_training)")
    if case.training:
        return _training(case, want, impl, dtype, record)
    positions = () if case.refusals else want.args  # the declared refusals are what those cases check
    reason = (impl.refusal(None if case.fn else case.encoding, want.kwargs, dtype, positions)
              or adapter(impl.framework).device_refusal(current_device()))
    if reason:
        return record(status="skip", message=reason)
    started = time.perf_counter()
    try:
        out = _call(impl, case, want.args, want.kwargs)
    except NotSupported as error:  # the implementation's own declaration: a case it cannot express
        return record(status="skip", message=f"not supported: {error}")
    except Exception as error:  # noqa: BLE001 - one failing implementation must not hide the matrix
        seconds = time.perf_counter() - started
        if impl.refused(error, case.refusals):
            return record(status="pass", seconds=seconds, message=f"refused (a declared refusal): {one_line(error)}")
        return record(status="error", seconds=seconds, message=one_line(error))
    seconds = time.perf_counter() - started
    try:
        outputs = outputs_for(out, want.desired)
        fields = judge(impl, want, out, dtype=dtype)
    except (TypeError, ValueError) as error:  # an output that is not an array of numbers shaped like the spec's
        return record(status="error", seconds=seconds,
                      message=f"the output cannot be compared with the spec's {np.shape(want.desired)} array: "
                              f"{one_line(error)}"[:400])
    if fields["status"] == "fail" and getattr(case.fn, "without_context", None) is not None:
        fields.update(_context_diagnosis(case, want, impl, dtype))
    return record(seconds=seconds, error_by_position=error_by_position(case, want.args, outputs, want.desired64),
                  **fields)


def _context_diagnosis(case, want, impl, dtype) -> dict:
    """The case's context named as the cause when the same call outside it passes (a case whose `fn` runs
    `apply_rope` inside a context declares `without_context` and `context_diagnosis`)."""
    try:
        plain = judge(impl, want, _call(impl, case, want.args, want.kwargs, fn=case.fn.without_context), dtype=dtype)
    except Exception:  # noqa: BLE001 - the diagnosis is a re-run; its failure leaves the first diagnosis
        return {}
    if plain["status"] != "pass":
        return {}
    name, sentence = case.fn.context_diagnosis
    return dict(diagnosis=name, diagnosis_detail=sentence)


def _training(case, want, impl, dtype, record) -> Record:
    reason = training_refusal(case, impl) or impl.refusal(None if kernel_serves(impl, want.kwargs) else "apply_rope",
                                                          {k: v for k, v in want.kwargs.items() if k != "rotary_dim"},
                                                          dtype)
    if reason:
        return record(status="skip", message=reason)
    started = time.perf_counter()
    try:
        fields = run_training(case, want, impl, dtype)
    except NotSupported as error:
        return record(status="skip", message=f"not supported: {error}")
    except Exception as error:  # noqa: BLE001 - a kernel that raises in its backward is that record's error
        return record(status="error", seconds=time.perf_counter() - started, message=one_line(error))
    return record(seconds=time.perf_counter() - started, **fields)


class _Absent(AttributeError):
    pass


class _Namespace:
    """An implementation's functions as a package module, for cases that call several contract functions
    (`Case.fn`): a function it lacks, or a keyword one does not take, makes the case a skip."""

    def __init__(self, impl):
        self._impl = impl
        self.framework = impl.framework  # cases that run under a framework's context (autocast) read it
        self.used = False  # whether the case called any of the implementation's own functions

    def __getattr__(self, name):
        fn = self._impl.functions.get(name)
        if fn is None and name in REFERENCE_HELPERS:  # not what is checked: posenc's own, in the same framework
            return getattr(adapter(self._impl.framework).module, name)
        if fn is None:
            raise _Absent(name)
        self.used = True
        return _guarded(self._impl, name, fn)


def _guarded(impl, name, fn):
    def call(*args, **kwargs):
        reason = impl.keyword_refusal(name, fn, kwargs)
        if reason:
            raise NotSupported(reason)
        return fn(*args, **passed_keywords(name, kwargs))

    return call


def _fresh(a):
    """A copy of a case input for one call (an in-place kernel must not change the next call's inputs); a view
    `base[..., :n]` stays such a view of a copied base."""
    base = trailing_view_base(a)
    return a.copy() if base is None else base.copy()[..., : a.shape[-1]]


def _call(impl, case, args, kwargs, *, fn=None):
    ad = adapter(impl.framework)
    inputs = [ad.from_numpy_keeping_views(_fresh(a)) if isinstance(a, np.ndarray) else a for a in args]
    fn = fn or case.fn
    if fn is None:
        out = _guarded(impl, case.encoding, impl.functions[case.encoding])(*inputs, **kwargs)
    else:
        namespace = _Namespace(impl)
        try:
            out = fn(namespace, *inputs, **kwargs)
        except _Absent as missing:
            raise NotSupported(f"the case also calls {missing}, which {impl.name} does not provide") from None
        if not namespace.used:  # only posenc's own helpers ran: nothing of the implementation was checked
            raise NotSupported(f"the case calls none of {impl.name}'s functions")
    return _to_numpy(ad, out)


def _to_numpy(ad, out):
    if isinstance(out, (tuple, list)):
        return type(out)(_to_numpy(ad, o) for o in out)
    return np.asarray(ad.to_numpy(out))
