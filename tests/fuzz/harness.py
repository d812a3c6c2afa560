"""Run one fuzz draw on the spec and on a backend and judge the pair of outcomes.

The rule (docs/api.md §1, "Bad input"): for the same arguments the backend either returns what the spec
returns within the tolerance policy (`posenc_np.testing.compare`), or raises the same error class
(ValueError or TypeError) as the spec, with a message that names one of the function's arguments. Any
other exception (IndexError, RuntimeError, a framework's own error class) is a failure, in the spec too,
and so is an input array modified in place.
"""

from __future__ import annotations

import copy
import inspect
import re

import numpy as np

import posenc_np as pn
from fuzz_table import BF16, ENTRIES, NonContiguous, known_bug, spec_array, tol_for
from posenc_np.testing import compare

ALLOWED = (ValueError, TypeError)


class Mismatch(AssertionError):
    pass


def outcome(fn):
    try:
        return "ok", fn()
    except Exception as error:  # judged below: only ValueError/TypeError naming an argument pass
        return "error", error


def argument_names(name, backend=None) -> set:
    """The argument names a message may name: the function's parameters, or a module's constructor and
    call parameters."""
    names = set()
    spec_fn = getattr(pn, name, None)
    targets = [spec_fn] if spec_fn is not None else []
    if backend is not None and hasattr(backend.module, name):
        obj = getattr(backend.module, name)
        targets.append(obj.__init__ if inspect.isclass(obj) else obj)
        if inspect.isclass(obj):
            for method in ("forward", "call", "__call__"):
                if method in vars(obj):
                    targets.append(getattr(obj, method))
                    break
    names |= set(ENTRIES[name].also_names) if name in ENTRIES else set()
    if name == "rope_modules_from_schedule":
        targets.append(pn.apply_rope)
    if name == "RotaryEmbedding":
        targets.append(pn.apply_rope)
    for target in targets:
        try:
            names |= {p for p in inspect.signature(target).parameters if p not in ("self", "args", "kwargs")}
        except (TypeError, ValueError):
            pass
    return names


def names_an_argument(message: str, names) -> bool:
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", message) for n in names)


def check_error(error, names, who):
    if not isinstance(error, ALLOWED):
        raise Mismatch(f"{who} raised {type(error).__name__}: {error} (a bad input must raise ValueError or "
                       f"TypeError naming the argument)")
    if not names_an_argument(str(error), names):
        raise Mismatch(f"{who} raised {type(error).__name__} whose message names no argument of {sorted(names)}: "
                       f"{error}")


def _arrays(values):
    for v in values:
        if isinstance(v, NonContiguous):
            yield v.array
        elif isinstance(v, np.ndarray):
            yield v
        elif isinstance(v, list):
            yield from _arrays(v)


def integer_dtype_rule(call, error, names) -> bool:
    """A backend's error for a float array where an integer array is required (see `judge`)."""
    floats = any(a.dtype.kind == "f" or a.dtype == BF16 for a in _arrays([*call.args, *call.kwargs.values()]))
    return (floats and isinstance(error, ALLOWED) and "integer" in str(error)
            and names_an_argument(str(error), names))


def error_class(error):
    return ValueError if isinstance(error, ValueError) else TypeError


# --- conversions ---------------------------------------------------------------------------------------

def to_backend(backend, value):
    if isinstance(value, NonContiguous):
        a, b = value.axes
        return backend.swapaxes(backend.from_numpy(np.ascontiguousarray(np.swapaxes(value.array, a, b))), a, b)
    if isinstance(value, np.ndarray):
        return backend.from_numpy(value)
    if isinstance(value, list) and any(isinstance(v, (np.ndarray, NonContiguous)) for v in value):
        return [to_backend(backend, v) for v in value]
    return value


def to_numpy(backend, out):
    if out is None or isinstance(out, (str, bool, int, float, dict, np.ndarray, np.generic)):
        return out
    if isinstance(out, (tuple, list)):
        return type(out)(to_numpy(backend, o) for o in out)
    return backend.to_numpy(out)


def snapshot(args):
    return copy.deepcopy([spec_array(a) for a in args])


def unchanged(before, after) -> bool:
    for b, a in zip(before, after, strict=True):
        if isinstance(b, np.ndarray):
            if not np.array_equal(np.asarray(b, np.float64) if b.dtype == BF16 else b,
                                  np.asarray(a, np.float64) if a.dtype == BF16 else a,
                                  equal_nan=b.dtype.kind in "fc" or b.dtype == BF16):
                return False
        elif isinstance(b, list):
            if not unchanged(b, a):
                return False
    return True


# --- comparison ------------------------------------------------------------------------------------------

def assert_same_value(call, actual, desired, where="result"):
    if desired is None or isinstance(desired, (str, dict)):
        if actual != desired:
            raise Mismatch(f"{where}: {actual!r} != spec {desired!r}")
        return
    if isinstance(desired, (tuple, list)):
        if not isinstance(actual, (tuple, list)) or len(actual) != len(desired):
            raise Mismatch(f"{where}: {type(actual).__name__} of {len(actual) if hasattr(actual, '__len__') else '?'}"
                           f" != spec {type(desired).__name__} of {len(desired)}")
        for i, (a, d) in enumerate(zip(actual, desired, strict=True)):
            assert_same_value(call, a, d, f"{where}[{i}]")
        return
    desired_arr, actual_arr = np.asarray(desired), np.asarray(actual)
    if desired_arr.dtype == object or actual_arr.dtype == object:
        raise Mismatch(f"{where}: cannot compare {type(actual).__name__} with spec {type(desired).__name__}")
    tol = tol_for(call, desired_arr, actual_arr.dtype)
    if desired_arr.dtype.kind in "fV" and actual_arr.dtype.kind in "fV" and actual_arr.shape == desired_arr.shape:
        same_inf = np.isinf(desired_arr.astype(np.float64)) & (actual_arr.astype(np.float64)
                                                              == desired_arr.astype(np.float64))
        if same_inf.any():  # equal infinities are equal (|inf - inf| is NaN to compare())
            actual_arr, desired_arr = (np.where(same_inf, 0, a.astype(np.float64)) for a in (actual_arr, desired_arr))
    result = compare(actual_arr, desired_arr, tol)
    if not result.passed:
        raise Mismatch(f"{where}: max abs err {result.max_abs_err:.3g} at {result.worst_index} > {tol} "
                       f"{result.message}")


def assert_random_positions(actual, desired):
    """sample_randomized_positions draws from each framework's own generator: same shape, integer, strictly
    increasing along the last axis and inside [0, max_len) like the spec's."""
    actual = np.asarray(actual)
    if actual.shape != np.shape(desired) or actual.dtype.kind not in "iu":
        raise Mismatch(f"shape/dtype {actual.shape} {actual.dtype} != spec {np.shape(desired)} (integer)")
    if actual.size and (np.any(np.diff(actual, axis=-1) <= 0) or actual.min() < 0):
        raise Mismatch(f"positions not strictly increasing and non-negative: {actual}")


# --- one draw -----------------------------------------------------------------------------------------------

def spec_outcome(entry, call, backend=None, module=None):
    if entry.spec is not None:
        return outcome(lambda: entry.spec(backend, module, call))
    fn = getattr(pn, entry.name)
    return outcome(lambda: fn(*(spec_array(a) for a in call.args), **call.kwargs))


def run_backend(backend, entry, call):
    """(outcome, module-or-None) of the backend on `call`; a module entry constructs then calls."""
    obj = getattr(backend.module, entry.name)
    module = None
    try:
        [to_backend(backend, a) for a in call.args]
    except ValueError as error:
        if "does not fit int32" in str(error):  # JAX without x64 has no int64 (posenc.adapters refuses to wrap)
            return ("unrepresentable", error), None
        raise
    if call.ctor is None:
        args = [to_backend(backend, a) for a in call.args]
        kwargs = {k: to_backend(backend, v) for k, v in {**call.kwargs, **call.backend_kwargs}.items()}
        result = outcome(lambda: obj(*args, **kwargs))
    else:
        built = outcome(lambda: backend.make_module(obj, *call.ctor[0], **call.ctor[1]))
        if built[0] == "error":
            return built, None
        module = built[1]
        args = [to_backend(backend, a) for a in call.args]
        if isinstance(module, list):
            result = outcome(lambda: [None if m is None else m(*args) for m in module])
        else:
            result = outcome(lambda: module(*args))
    if result[0] == "ok":
        result = ("ok", to_numpy(backend, result[1]))
    return result, module


def judge(backend, entry, call, tally=None):
    """Run `call` on the spec and on `backend` (None: the spec alone) and raise Mismatch unless they agree
    (or the disagreement is a listed open bug, `fuzz_table.KNOWN`, tallied as "known")."""
    try:
        _judge(backend, entry, call, tally)
    except Mismatch:
        if known_bug(entry.name, call.note, backend.name if backend is not None else "numpy") is None:
            raise
        if tally is not None:
            tally["known-open-bug"] += 1


def _judge(backend, entry, call, tally=None):
    names = argument_names(entry.name, backend)
    if backend is None:
        before = snapshot(call.args)
        spec = spec_outcome(entry, call)
        if spec[0] == "error":
            check_error(spec[1], names, "spec")
        if not unchanged(before, snapshot(call.args)):
            raise Mismatch("the spec modified an input array in place")
        if tally is not None:
            tally["spec-error" if spec[0] == "error" else "spec-ok"] += 1
        return
    before = snapshot(call.args)
    got, module = run_backend(backend, entry, call)
    if got[0] == "unrepresentable":
        if tally is not None:
            tally["int64-not-representable"] += 1
        return
    if not unchanged(before, snapshot(call.args)):
        raise Mismatch(f"{backend.name} modified an input array in place")
    if entry.spec is not None and module is None and got[0] == "error":
        # construction failed: the spec function with the same parameters must fail the same way
        spec = outcome(lambda: entry.spec(backend, _Unbuilt(entry.name), call))
        if spec[0] == "error" and isinstance(spec[1], _NoWeights):
            # a trainable module: the spec has no constructor to compare with; the message rule holds
            check_error(got[1], names, backend.name)
            if tally is not None:
                tally["constructor-error"] += 1
            return
        if spec[0] == "ok":
            raise Mismatch(f"{backend.name} constructor raised {type(got[1]).__name__}: {got[1]}; the spec "
                           f"function accepts these parameters")
    else:
        spec = spec_outcome(entry, call, backend, module)
    if got[0] == "error" and integer_dtype_rule(call, got[1], names) and not (
            spec[0] == "error" and error_class(spec[1]) is TypeError and error_class(got[1]) is ValueError):
        # documented (docs/reliability.md): where integers are required the spec accepts floats holding
        # integers, a backend requires an integer dtype (it cannot read traced values; eager and jit agree).
        # Not where the spec refuses the dtype itself (TypeError: bool positions): there the classes must agree.
        if tally is not None:
            tally["integer-dtype-required"] += 1
        return
    if spec[0] == "error":
        check_error(spec[1], names, "spec")
        if got[0] == "ok":
            raise Mismatch(f"spec raised {type(spec[1]).__name__}: {spec[1]}; {backend.name} returned a result")
        check_error(got[1], names, backend.name)
        if error_class(got[1]) is not error_class(spec[1]):
            raise Mismatch(f"spec raised {type(spec[1]).__name__}: {spec[1]}; {backend.name} raised "
                           f"{type(got[1]).__name__}: {got[1]}")
        kind = "same-error"
    else:
        if got[0] == "error":
            raise Mismatch(f"spec returned a result; {backend.name} raised {type(got[1]).__name__}: {got[1]}")
        if entry.random:
            assert_random_positions(got[1], spec[1])
        else:
            assert_same_value(call, got[1], spec[1])
        kind = "equal"
    if tally is not None:
        tally[kind] += 1


class _Unbuilt:
    """Stands for a module whose constructor raised: any weight read fails, so only the spec function's own
    validation of the constructor parameters decides (read before any weight in the spec_* helpers)."""

    def __init__(self, name):
        self.name = name

    def __getattr__(self, attr):
        raise _NoWeights(attr)


class _NoWeights(Exception):
    pass
