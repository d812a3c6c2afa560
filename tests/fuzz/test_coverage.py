"""Coverage of the fuzz table: every name in every package's `__all__` has an entry in
`fuzz_table.ENTRIES` (so `test_properties.py` draws it on the spec and on every backend) or an explicit,
reasoned exclusion in `fuzz_table.EXCLUDED`. A new public name fails this test until it has one."""

from __future__ import annotations

import importlib

import pytest

from fuzz_table import ENTRIES, EXCLUDED

PACKAGES = ("posenc_np", "posenc_torch", "posenc_tf", "posenc_jax")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_has_a_fuzz_entry(package):
    try:
        module = importlib.import_module(package)
    except ImportError as error:  # a framework that is not installed: its names are covered where it is
        pytest.skip(f"{package} does not import here: {error}")
    missing = sorted(set(module.__all__) - set(ENTRIES) - set(EXCLUDED))
    assert not missing, f"{package}: no fuzz entry (tests/fuzz/fuzz_table.py ENTRIES) or exclusion for {missing}"


def test_exclusions_are_reasoned_and_not_also_entries():
    assert not set(EXCLUDED) & set(ENTRIES)
    assert all(len(reason) > 40 for reason in EXCLUDED.values())
    names = set().union(*(importlib.import_module(p).__all__ for p in ("posenc_np",)))
    stale = sorted(set(ENTRIES) | set(EXCLUDED)) and sorted(n for n in set(ENTRIES) | set(EXCLUDED)
                                                           if n not in names and not n[0].isupper()
                                                           and n != "rope_modules_from_schedule")
    assert not stale, f"entries for names no package exports: {stale}"
