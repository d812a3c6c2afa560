"""The suite's record: one comparison's outcome, the type every runner writes and every reporter reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..adapters import current_device

__all__ = ["Record", "UNVERSIONED", "one_line", "backend_plan", "impl_plan"]

#: `Record.impl` of an implementation that declares no version.
UNVERSIONED = "unversioned"


@dataclass
class Record:
    encoding: str
    family: str
    convention: str
    case: str
    backend: str
    dtype: str
    mode: str
    status: str  # "pass", "fail", "error", "skip"
    max_abs_err: float | None = None
    err_in_tol: float | None = None
    worst_index: list = field(default_factory=list)
    tol: float | None = None
    tol_why: str = ""
    message: str = ""
    seconds: float = 0.0
    description: str = ""
    #: `--impl` records: the implementation's version, and for a failure the known mismatch it matches
    #: (`posenc.impl.diagnosis.DIAGNOSES`) with its sentence
    impl: str | None = None
    diagnosis: str | None = None
    diagnosis_detail: str = ""
    #: RoPE records of `--impl`: the worst angle error (radians) against the float64 spec, the position
    #: that pair turned by, and the element (its index, the pair's first channel last)
    worst_angle_err: float | None = None
    worst_angle_position: int | None = None
    worst_angle_index: list = field(default_factory=list)
    error_by_position: list | None = None
    #: where the inputs were placed (`posenc check --device`)
    device: str = "cpu"

    @classmethod
    def for_case(cls, case, backend: str, dtype: str, mode: str, **fields) -> Record:
        """A record of `case` run on `backend` in `dtype` and `mode`; `fields` hold the outcome."""
        fields.setdefault("device", current_device())
        return cls(encoding=case.encoding, family=case.family, convention=case.convention, case=case.case_set,
                   backend=backend, dtype=dtype, mode=mode, description=case.description, **fields)

    def as_dict(self):
        return asdict(self)


def one_line(error) -> str:
    """`Type: first line of the message` (at most 300 characters) for a record or a worker's reply."""
    text = str(error)
    return f"{type(error).__name__}: {text.splitlines()[0][:300] if text else ''}"


def backend_plan(cases, *, dtypes, backends, modes) -> list:
    """Every `(case, dtype, backend, mode)` a backend run compares, in report order."""
    return [(case, dtype, backend, mode) for case in cases for dtype in dtypes if dtype in case.dtypes
            for backend in backends for mode in modes if case.runs(dtype, mode)]


def impl_plan(cases, *, dtypes, names) -> list:
    """Every `(case, dtype, name)` an `--impl` run compares (implementations run eagerly), in report order."""
    return [(case, dtype, name) for case in cases for dtype in dtypes if dtype in case.dtypes and "eager" in case.modes
            for name in names]
