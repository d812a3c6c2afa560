"""Coverage of the fuzz table: every name in every package's `__all__` has an entry in
`fuzz_table.ENTRIES` (so `test_properties.py` draws it on the spec and on every backend) or an explicit,
reasoned exclusion in `fuzz_table.EXCLUDED`. A new public name fails this test until it has one; an entry
or exclusion for a name that no package exports (a function or a module class renamed or removed) fails
too."""

from __future__ import annotations

import importlib
import inspect

import pytest

from fuzz_table import ENTRIES, EXCLUDED
from posenc.adapters import BACKENDS, adapter

PACKAGES = ("posenc_np", *(adapter(name).package for name in BACKENDS))


def _exports(package) -> dict:
    """`{name: object}` of the package's `__all__`; skips the test when the package does not import here."""
    try:
        module = importlib.import_module(package)
    except ImportError as error:  # a framework that is not installed: its names are covered where it is
        pytest.skip(f"{package} does not import here: {error}")
    return {name: getattr(module, name) for name in module.__all__}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_has_a_fuzz_entry(package):
    missing = sorted(set(_exports(package)) - set(ENTRIES) - set(EXCLUDED))
    assert not missing, f"{package}: no fuzz entry (tests/fuzz/fuzz_table.py ENTRIES) or exclusion for {missing}"


def test_every_entry_and_exclusion_names_an_exported_name():
    """Functions and module classes alike: a backend-only name (`rope_modules_from_schedule`, the module
    classes) counts as exported by the backend that exports it."""
    exported = set().union(*(_exports(package) for package in PACKAGES))
    stale = sorted((set(ENTRIES) | set(EXCLUDED)) - exported)
    assert not stale, f"fuzz_table.py has entries or exclusions for names no package exports: {stale}"


def test_exclusions_are_what_no_draw_can_call():
    """An exclusion is reasoned when the name is not something a fuzz draw could call: no function (every
    public function takes arguments a draw can make) and no backend class (the module classes have
    entries); what is left is spec-only data and record types. The reason is prose for the reader, not
    checked: what is checked is that the name is not something a draw could call."""
    assert not set(EXCLUDED) & set(ENTRIES), f"both drawn and excluded: {sorted(set(EXCLUDED) & set(ENTRIES))}"
    spec = _exports("posenc_np")
    backend_names = set().union(*(_exports(package) for package in PACKAGES[1:]))
    for name in EXCLUDED:
        assert name in spec, f"{name}: an exclusion must be a spec name (backend names are drawn)"
        assert not inspect.isfunction(spec[name]), f"{name} is a function: give it a fuzz entry"
        assert name not in backend_names, f"{name} is exported by a backend: give it a fuzz entry"
