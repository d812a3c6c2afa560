"""The registry's jit budget (posenc/check/registry.py): jit once per traced path, its float32 comparison,
and every dtype for one representative case per family; every case eager in all its dtypes."""

from collections import Counter

from posenc.check.registry import DTYPES, all_cases


def test_each_traced_path_compiles_once():
    compiled = Counter(c.traced_path for c in all_cases() if "jit" in c.modes and c.jit_dtypes is None)
    assert compiled and max(compiled.values()) == 1, [p for p, n in compiled.items() if n > 1]


def test_every_case_runs_eager_in_all_its_dtypes():
    for case in all_cases():
        if "eager" in case.modes:
            assert all(case.runs(d, "eager") for d in case.dtypes), case.id


def test_each_familys_first_compiled_case_is_compiled_in_every_dtype():
    first = {}
    for case in all_cases():
        if "jit" in case.modes:
            first.setdefault(case.family, case)
    for family, case in first.items():
        assert all(case.runs(d, "jit") for d in case.dtypes), (family, case.id)
    assert any(len(c.dtypes) == 3 for c in first.values())


def test_another_case_set_of_a_compiled_path_runs_eager_only():
    """kv-offset after short, long after short: the same program with other shapes and values."""
    cases = {c.id: c for c in all_cases()}
    assert cases["sinusoidal/vaswani/short"].runs("float32", "jit")
    assert not cases["sinusoidal/vaswani/long"].runs("float32", "jit")
    assert cases["sinusoidal/vaswani/long"].runs("float32", "eager")
    assert set(DTYPES) >= set(cases["sinusoidal/vaswani/short"].dtypes)
