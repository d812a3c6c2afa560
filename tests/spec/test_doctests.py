"""The docstring examples of the spec run as doctests: every `>>>` line in every posenc_np module
(`Examples:` blocks of the public functions, module docstrings) must reproduce its printed output.

One test per module, so a failure names the module and the example. Option flags: ELLIPSIS and
NORMALIZE_WHITESPACE (what a reader of the docstring relies on). The same could be had from pytest's own
collector (`--doctest-modules posenc_np` in pyproject's `addopts`); this test keeps it in the default test
command without that option, and also requires every public function to carry an example.

NumPy and ml_dtypes only, like the spec.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil

import numpy as np
import pytest

import posenc_np

MODULES = sorted(info.name for info in pkgutil.walk_packages(posenc_np.__path__, prefix="posenc_np."))
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.mark.parametrize("name", ["posenc_np", *MODULES])
def test_module_doctests(name):
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    # the examples print arrays: one print style for all, whatever a previous test set
    with np.printoptions(precision=8, suppress=False, threshold=1000, linewidth=75, legacy=False):
        for test in doctest.DocTestFinder(exclude_empty=True).find(module, name, module=module):
            runner.run(test, out=report.append)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, (f"{results.failed} of {results.attempted} examples failed in {name}:\n"
                                 + "".join(report))


#: Public functions still without an example: strict xfails, so the test fails once the example
#: lands, until the name is dropped here. A new public function without an example fails.
MISSING_EXAMPLES = {"attention", "permute_qk_rows", "resize_weights", "scaling_from_hf_config", "tolerance",
                    "xpos_scale"}


def _public_functions():
    for name in posenc_np.__all__:
        obj = getattr(posenc_np, name)
        if inspect.isfunction(obj):
            missing = name in MISSING_EXAMPLES
            marks = [pytest.mark.xfail(reason="no docstring example yet", strict=True)] if missing else []
            yield pytest.param(name, obj, id=name, marks=marks)


@pytest.mark.parametrize("name, fn", list(_public_functions()))
def test_public_function_has_an_example(name, fn):
    """The quality bar: every public spec function shows one call and its output in its docstring."""
    examples = doctest.DocTestParser().get_examples(inspect.getdoc(fn) or "")
    assert examples, f"posenc_np.{name} has no `>>>` example in its docstring"
    assert any(e.want for e in examples), f"posenc_np.{name}'s example shows no output to check"


def test_missing_examples_are_public_functions():
    """A name left in MISSING_EXAMPLES after its function was renamed or removed would excuse nothing."""
    public = {name for name in posenc_np.__all__ if inspect.isfunction(getattr(posenc_np, name))}
    assert MISSING_EXAMPLES <= public, f"not public functions of posenc_np: {sorted(MISSING_EXAMPLES - public)}"
