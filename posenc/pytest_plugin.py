"""posenc's pytest plugin: a kernel library's own test run judges its implementation with one flag.

    pytest --posenc-impl my_pkg.rope:IMPL [--posenc-encoding rope] [--posenc-dtype bfloat16]
           [--posenc-device cuda]

collects every comparison `posenc check --impl` would make as one test item, with the id
`encoding/convention/case/dtype/mode` (`rope/hf-llama/kv-offset/bfloat16/eager`); a failing item's message
carries `diagnosis: NAME` and its sentence and the worst angle error; skips carry their reasons. Without
`--posenc-impl` the plugin adds nothing. It is registered by the installed package (the `pytest11` entry
point), so this module imports nothing but pytest until asked: like hypothesis' plugin, it must not slow
down or break a test run that never uses it.
"""

from __future__ import annotations

import os

import pytest

OPTIONS = ("impl", "encoding", "dtype", "device")


def pytest_addoption(parser):
    group = parser.getgroup("posenc", "posenc: judge an implementation against the float64 spec")
    group.addoption("--posenc-impl", metavar="SPEC",
                    help="the implementation to judge: a built-in name, module:attr or path/to/file.py:attr "
                         "(attr defaults to IMPL), as `posenc check --impl`")
    group.addoption("--posenc-encoding", metavar="E", help="families or conventions, comma-separated (default: all)")
    group.addoption("--posenc-dtype", metavar="D", help="dtypes, comma-separated (default: all)")
    group.addoption("--posenc-device", metavar="DEV", default="cpu", help="where inputs are placed (default: cpu)")


def _selection(config):
    """`(implementations, [(case, dtype)])` of the options, or a UsageError naming the bad one."""
    from posenc.check.command import select
    from posenc.check.record import impl_plan
    from posenc.check.registry import DTYPES, all_cases
    from posenc.errors import UsageError
    from posenc.impl import ImplementationUnavailable
    from posenc.impl.resolve import ImplementationSpecError, resolve
    from posenc.io import parse_choices

    spec = config.getoption("posenc_impl")
    try:
        impls = resolve(spec)
    except (ImplementationSpecError, ImplementationUnavailable) as error:
        raise UsageError(str(error)) from None
    cases = all_cases()
    known = sorted({c.family for c in cases} | {c.convention for c in cases} | {c.encoding for c in cases})
    encodings = parse_choices([config.getoption("posenc_encoding")] if config.getoption("posenc_encoding") else None,
                              known, "--posenc-encoding")
    dtypes = parse_choices([config.getoption("posenc_dtype")] if config.getoption("posenc_dtype") else None,
                           DTYPES, "--posenc-dtype", default=list(DTYPES))
    cases = select(cases, encodings=encodings, dtypes=dtypes, modes=["eager"])
    plan = impl_plan(cases, dtypes=dtypes, names=[i.name for i in impls])
    return {i.name: i for i in impls}, plan


class PosencItem(pytest.Item):
    """One comparison of `posenc check --impl`: a case, a dtype and an implementation."""

    def __init__(self, *, case, dtype, impl, **kwargs):
        super().__init__(**kwargs)
        self.case, self.dtype, self.impl = case, dtype, impl

    def runtest(self):
        from posenc.adapters import DEVICE_ENV
        from posenc.check.run_impl import run_implementations

        device = self.config.getoption("posenc_device")
        saved = os.environ.get(DEVICE_ENV)
        os.environ[DEVICE_ENV] = device
        try:
            (record,) = run_implementations([self.case], [self.impl], dtypes=[self.dtype])
        finally:
            if saved is None:
                os.environ.pop(DEVICE_ENV, None)
            else:
                os.environ[DEVICE_ENV] = saved
        if record.status == "skip":
            pytest.skip(record.message)
        if record.status != "pass":
            raise PosencFailure(record)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, PosencFailure):
            return excinfo.value.describe()
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"posenc {self.name}"


class PosencFailure(AssertionError):
    """A comparison that failed or raised: its record, described as `posenc check` describes it."""

    def __init__(self, record):
        super().__init__(record.message)
        self.record = record

    def describe(self) -> str:
        r = self.record
        lines = [f"{r.backend} {r.status}: {r.family}/{r.convention}/{r.case} {r.dtype} ({r.description})"]
        if r.max_abs_err is not None:
            lines.append(f"max_abs_err {r.max_abs_err:.3g} > tol {r.tol:.3g} ({r.tol_why})")
        if r.diagnosis:
            lines.append(f"diagnosis: {r.diagnosis}: {r.diagnosis_detail}")
        if r.worst_angle_err is not None:
            lines.append(f"worst angle error {r.worst_angle_err:.3g} rad at position {r.worst_angle_position}")
        if r.message:
            lines.append(r.message)
        return "\n".join(lines)


def pytest_collection_modifyitems(session, config, items):
    """With `--posenc-impl`, one item per comparison, after the items of the files pytest collected."""
    if not config.getoption("posenc_impl"):
        return
    from posenc.errors import UsageError

    try:
        impls, plan = _selection(config)
    except UsageError as error:
        raise pytest.UsageError(f"posenc: {error}") from None
    several = len(impls) > 1
    for case, dtype, name in plan:
        label = f"{case.id}/{dtype}/eager"
        items.append(PosencItem.from_parent(session, name=f"{name}/{label}" if several else label, case=case,
                                            dtype=dtype, impl=impls[name]))
