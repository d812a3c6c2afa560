"""What `posenc check` compares: a registry of cases, one per (encoding, convention, case set).

A case builds NumPy inputs for one dtype; the suite feeds the same inputs to the float64 spec and to
each backend (eager and jit) and compares with the tolerance the case derives from the spec result.
Encodings register their cases in their own module (`cases_absolute.py`, `cases_rope.py`, ...);
`all_cases()` imports them.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from posenc_np.backend import BACKEND_DTYPES
from posenc_np.conventions import FAMILY_OF_ENCODING
from posenc_np.testing import Tolerance

__all__ = ["Case", "register", "all_cases", "CASE_MODULES", "DTYPES", "MODES", "JIT_DTYPES"]

#: The dtypes and modes a case runs in unless it lists fewer (the one list of modes; dtypes are the spec's).
DTYPES = BACKEND_DTYPES
MODES = ("eager", "jit")
#: The jit budget (docs/performance.md, "posenc check"): a compile costs 0.3-5 s per case, dtype and backend
#: on 2 cores, most of a run. Every case runs eager in all its dtypes. Jit runs once per traced path, the
#: first case registered with an encoding, convention and case function (`Case.traced_path`): the path is
#: fixed by them, and another case set of the same path only changes the shapes and values the compiled
#: program is given, which eager mode checks. It runs in these dtypes (or the case's first dtype when it
#: lists none of them), except the first jit case registered in each family, its representative, which runs
#: jit in all its dtypes: the half-precision rule under a compiler (upcast to float32, round once) is the same
#: code for every case of a family. `Case.jit_dtypes` overrides all three.
JIT_DTYPES = ("float32",)

#: Modules that register cases, in report order.
CASE_MODULES = ("cases_absolute", "cases_rope", "cases_mrope", "cases_bias", "cases_alibi_max_bias", "cases_grad",
                "cases_packing", "cases_research", "cases_schedule", "cases_edge", "cases_training")


@dataclass(frozen=True)
class Case:
    """One comparison, run for every backend x dtype x mode it lists.

    Attributes:
        encoding: the contract function called on every package ("sinusoidal", "apply_rope", ...), or
            a function of the case's own when `fn` is given.
        convention: a `posenc_np.conventions` name, or a variant tag ("yarn", "linear-cubic") when no
            named convention applies.
        case_set: the inputs' set ("short", "long", "kv-offset", "per-row", "left-pad", "broadcast", "grad").
        make: `(rng, dtype) -> (args, kwargs)`: NumPy inputs; float inputs already in `dtype`
            (`ml_dtypes.bfloat16` for bfloat16); a `dtype=` keyword, if any, as the dtype name string.
        tol: `(desired_float64, dtype, args) -> Tolerance`: `args` are the inputs `make` built, for bounds
            that depend on them (attention logits, a gradient's cotangent); most cases ignore them.
        fn: `(package_module, *args, **kwargs) -> array` when the comparison is not a single contract
            call (a module, a gradient, an attention path); it is run on the spec with `posenc_np`.
        dtypes: the dtypes this case applies to (default: all of the suite's).
        description: one line for the report.
        modes: the modes this case runs in (jit costs a compile per case, dtype and backend).
        out_dtype: `(dtype) -> dtype name` every output array of a backend must have (eager), or None
            when the case does not pin it; tests/backends/test_conformance.py checks it.
        training: the training-time probe an implementation runs for this case (`"backward"`, `"aliasing"`,
            `"table-grad"`; posenc.check.run_training), None for a forward comparison; `cotangent_form` the
            memory form its cotangent is given in (`cases_training.COTANGENT_FORMS`).
        refusals: the exception types that are a correct refusal of these inputs (as PyTorch OpInfo's
            `ErrorInput` pins an error type), for a backend or implementation that declares a table
            (`Adapter.may_refuse`, `Implementation.may_refuse`): positions past it. Any other exception,
            and any exception from a table-free backend, is an error.
    """

    encoding: str
    convention: str
    case_set: str
    make: Callable
    tol: Callable[[np.ndarray, str, tuple], Tolerance]
    fn: Callable | None = None
    dtypes: tuple = DTYPES
    description: str = ""
    modes: tuple = MODES
    out_dtype: Callable[[str], str] | None = None
    jit_dtypes: tuple | None = None
    refusals: tuple = ()
    training: str | None = None
    cotangent_form: str = "dense"

    def refused(self, error: BaseException, *, may_refuse: bool) -> bool:
        """Whether raising `error` is a correct refusal of this case by a runner that `may_refuse`."""
        return may_refuse and bool(self.refusals) and isinstance(error, self.refusals)

    def runs(self, dtype: str, mode: str) -> bool:
        """Whether this case runs in `dtype` and `mode` (its dtypes and modes, and the jit budget)."""
        if dtype not in self.dtypes or mode not in self.modes:
            return False
        if mode != "jit":
            return True
        if self.jit_dtypes is not None:
            return dtype in self.jit_dtypes
        budget = [d for d in self.dtypes if d in JIT_DTYPES]
        return dtype in budget if budget else dtype == self.dtypes[0]

    @property
    def family(self) -> str:
        return FAMILY_OF_ENCODING.get(self.encoding, self.encoding)

    @property
    def id(self) -> str:
        return f"{self.family}/{self.convention}/{self.case_set}"

    @property
    def traced_path(self) -> tuple:
        """What fixes the program a compiler traces: the encoding and convention of a single contract call; the
        encoding and the case's function for a case built of several calls (by qualified name: a factory's
        closures share one, their captured values being static options), the convention's own call being
        the path of that convention's single-call case."""
        if self.fn is None:
            return self.encoding, "convention", self.convention
        return self.encoding, "function", self.fn.__qualname__


_CASES: list[Case] = []


def register(case: Case) -> Case:
    if any(c.id == case.id for c in _CASES):
        raise ValueError(f"case {case.id!r} is registered twice")
    if "jit" in case.modes and case.jit_dtypes is None:
        compiled = [c for c in _CASES if "jit" in c.modes]
        if any(c.traced_path == case.traced_path for c in compiled):
            case = dataclasses.replace(case, modes=tuple(m for m in case.modes if m != "jit"))
        elif not any(c.family == case.family for c in compiled):
            case = dataclasses.replace(case, jit_dtypes=case.dtypes)  # the family's representative: every dtype
    _CASES.append(case)
    return case


def all_cases() -> list[Case]:
    for name in CASE_MODULES:
        importlib.import_module(f"{__package__}.{name}")
    return list(_CASES)
