"""`posenc.impl.Implementation`, SPEC resolution and the `--impl` options of `posenc check`: declared
capabilities become skips with their reason (never passes), bad SPECs exit 2 naming them, `--impl list`
shows the built-ins, `POSENC_IMPL` names implementations, `--backend` runs posenc's own alongside."""

from __future__ import annotations

import json
import textwrap

import pytest

import posenc_np
from helpers import FAST
from posenc.check.registry import all_cases
from posenc.check.run_impl import run_implementations
from posenc.cli import main
from posenc.impl import Implementation
from posenc.impl.builtin import BUILTINS, builtin_status
from posenc.impl.resolve import ImplementationSpecError, resolve, split_env

CASES = {c.id: c for c in all_cases()}


def _spec_rope(x, positions, **kw):
    return posenc_np.apply_rope(x, positions, **kw)


def test_implementation_records_its_declaration():
    impl = Implementation("mine", "numpy", {"apply_rope": _spec_rope}, version="1.2", layouts="half",
                          dtypes=["float32"], angles="float32", max_positions=4096)
    assert (impl.name, impl.framework, impl.version, impl.layouts, impl.dtypes, impl.angles, impl.max_positions) == (
        "mine", "numpy", "1.2", ("half",), ("float32",), "float32", 4096)
    with pytest.raises(TypeError):
        impl.functions["alibi_bias"] = _spec_rope  # read-only mapping


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(name="", framework="numpy", functions={"apply_rope": _spec_rope}), ValueError, "name=''"),
    (dict(name="x", framework="cupy", functions={"apply_rope": _spec_rope}), ValueError, "framework='cupy'"),
    (dict(name="x", framework="numpy", functions={}), ValueError, "functions="),
    (dict(name="x", framework="numpy", functions={"apply_rotary": _spec_rope}), ValueError, "'apply_rotary'"),
    (dict(name="x", framework="numpy", functions={"apply_rope": 3}), TypeError, "functions['apply_rope']"),
    (dict(name="x", framework="numpy", functions={"apply_rope": _spec_rope}, angles="bf16"), ValueError, "angles='bf16'"),
    (dict(name="x", framework="numpy", functions={"apply_rope": _spec_rope}, layouts=["diagonal"]), ValueError,
     "'diagonal'"),
    (dict(name="x", framework="numpy", functions={"apply_rope": _spec_rope}, dtypes=["int8"]), ValueError, "'int8'"),
    (dict(name="x", framework="numpy", functions={"apply_rope": _spec_rope}, max_positions=0), ValueError,
     "max_positions=0"),
    (dict(name="x", framework="numpy", functions={"apply_rope": _spec_rope}, version=1), TypeError, "version=1"),
])
def test_bad_declarations_name_the_argument(kwargs, error, words):
    with pytest.raises(error, match=words.replace("[", r"\[").replace("(", r"\(")):
        Implementation(**kwargs)


def test_undeclared_capabilities_are_skips_with_the_reason():
    def half_only(x, positions, *, base=10000.0, layout="half"):  # no scaling, no rotary_dim keywords
        return posenc_np.apply_rope(x, positions, base=base, layout=layout)

    impl = Implementation("narrow", "numpy", {"apply_rope": half_only}, layouts=["half"], dtypes=["float32"])
    records = {(r.convention, r.case, r.dtype): r for r in run_implementations(
        [CASES[i] for i in ("rope/hf-llama/short", "rope/gptj/short", "rope/half-yarn/long", "rope/gpt-neox/short",
                            "alibi/press-alibi/short")], [impl], dtypes=["float32", "bfloat16"])}
    assert records["hf-llama", "short", "float32"].status == "pass"
    assert records["hf-llama", "short", "bfloat16"].message == "narrow declares dtypes float32, not bfloat16"
    assert records["gptj", "short", "float32"].message == "narrow declares layouts half, not interleaved"
    assert records["half-yarn", "long", "float32"].message == "apply_rope of narrow does not accept keyword 'scaling'"
    assert records["gpt-neox", "short", "float32"].message == ("apply_rope of narrow does not accept keyword "
                                                              "'rotary_pct'")
    assert records["press-alibi", "short", "float32"].message == "narrow provides no alibi_bias"
    assert all(r.status == "skip" for k, r in records.items() if k != ("hf-llama", "short", "float32"))


def test_keywords_equal_to_the_contract_default_are_not_passed():
    seen = []

    def rope(x, positions, *, layout="half"):
        seen.append(layout)
        return posenc_np.apply_rope(x, positions, layout=layout)

    impl = Implementation("defaults", "numpy", {"apply_rope": rope})
    [record] = run_implementations([CASES["rope/half-default/long"]], [impl], dtypes=["float32"])
    assert record.status == "pass" and seen == ["half"]  # the case's scaling=None was not passed


def test_implementation_not_supported_is_a_skip():
    from posenc.impl import NotSupported

    def rope(x, positions, **kw):
        raise NotSupported("my kernel has no per-row positions")

    [record] = run_implementations([CASES["rope/hf-llama/per-row"]], [Implementation("ns", "numpy", {"apply_rope": rope})],
                                   dtypes=["float32"])
    assert record.status == "skip" and record.message == "not supported: my kernel has no per-row positions"


USER_MODULE = """
    import posenc_np
    from posenc.impl import Implementation

    IMPL = Implementation("user-spec", "numpy", {"apply_rope": posenc_np.apply_rope}, version="9")
    BOTH = [IMPL, Implementation("user-two", "numpy", {"apply_rope": posenc_np.apply_rope})]
    NOT_ONE = 42
"""


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "my_rope.py"
    path.write_text(textwrap.dedent(USER_MODULE))
    return path


def test_resolve_file_module_and_attributes(user_file, monkeypatch):
    assert [i.name for i in resolve(str(user_file))] == ["user-spec"]
    assert [i.name for i in resolve(f"{user_file}:BOTH")] == ["user-spec", "user-two"]
    monkeypatch.syspath_prepend(str(user_file.parent))
    assert [i.name for i in resolve("my_rope:IMPL")] == ["user-spec"]
    assert [i.name for i in resolve("my_rope")] == ["user-spec"]


@pytest.mark.parametrize("spec, words", [
    ("{dir}/missing.py:IMPL", "does not exist"),
    ("{file}:NOPE", "has no attribute 'NOPE'"),
    ("{file}:NOT_ONE", "is int, not a posenc.impl.Implementation"),
    ("no_such_module_posenc:IMPL", "cannot import module 'no_such_module_posenc'"),
])
def test_resolve_errors_name_the_spec(user_file, spec, words):
    spec = spec.format(dir=user_file.parent, file=user_file)
    with pytest.raises(ImplementationSpecError, match=words) as info:
        resolve(spec)
    assert spec in str(info.value)


def test_a_file_that_fails_to_import_is_named(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ImplementationSpecError, match="importing .*broken.py.* failed: RuntimeError: boom"):
        resolve(str(path))


def test_split_env_keeps_colons_in_specs():
    assert split_env(" transformers, path/to/k.py:IMPL ,,mod:ATTR") == ["transformers", "path/to/k.py:IMPL", "mod:ATTR"]


@pytest.mark.parametrize("argv, words", [
    (["--impl", "{dir}/missing.py"], "does not exist"),
    (["--impl", "{file}:NOT_ONE"], "not a posenc.impl.Implementation"),
    (["--impl", ","], "names nothing"),
    (["--impl", "list,transformers"], "--impl list stands alone"),
    (["--impl", "{file}", "--impl", "{file}:IMPL"], "two implementations called 'user-spec'"),
    (["--impl", "{file}", "--mode", "jit"], "runs implementations eagerly"),
])
def test_bad_impl_usage_exits_2_naming_it(user_file, capsys, argv, words):
    argv = [a.format(dir=user_file.parent, file=user_file) for a in argv]
    assert main(["check", *argv, "--encoding", "rope", "--quiet"]) == 2  # bad usage: nothing runs
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_impl_list_shows_every_builtin(capsys):
    assert main(["check", "--impl", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == list(BUILTINS)
    assert len(out) >= 8
    for line, name in zip(out, BUILTINS, strict=True):
        installed, version = builtin_status(name)
        assert (line.split()[1] == "installed") == installed and (version or "-") in line


def test_impl_runs_only_the_named_implementation_and_writes_its_records(user_file, tmp_path, capsys):
    report = tmp_path / "r.json"
    assert main(["check", "--impl", str(user_file), "--encoding", "hf-llama", "--dtype", "float32",
                 "--json", str(report), *FAST]) == 0
    data = json.loads(report.read_text())
    assert {r["backend"] for r in data["records"]} == {"user-spec"}
    assert {r["impl"] for r in data["records"]} == {"9"}
    assert all(r["worst_angle_err"] is not None and r["worst_angle_position"] is not None for r in data["records"])
    assert data["versions"]["impl:user-spec"] == "9"
    out = capsys.readouterr().out
    assert "user-spec 9: 8 passed, 0 failed, 0 skipped" in out and "worst angle error" in out


def test_backend_runs_posenc_alongside(user_file, tmp_path):
    report = tmp_path / "r.json"
    assert main(["check", "--impl", str(user_file), "--backend", "torch", "--encoding", "hf-llama", "--dtype",
                 "float32", "--mode", "eager", "--json", str(report), *FAST]) == 0
    assert {r["backend"] for r in json.loads(report.read_text())["records"]} == {"user-spec", "torch"}


def test_posenc_impl_environment_variable(user_file, tmp_path, monkeypatch):
    monkeypatch.setenv("POSENC_IMPL", f"{user_file}:BOTH")
    report = tmp_path / "r.json"
    assert main(["check", "--encoding", "hf-llama", "--dtype", "float32", "--json", str(report), *FAST]) == 0
    assert {r["backend"] for r in json.loads(report.read_text())["records"]} == {"user-spec", "user-two"}


def test_a_failing_implementation_exits_1_with_its_diagnosis(tmp_path, capsys):
    path = tmp_path / "interleaved.py"
    path.write_text(textwrap.dedent("""
        import posenc_np
        from posenc.impl import Implementation

        def rope(x, positions, *, layout="half", **kw):  # always interleaved: the mlx-lm #1431 bug
            return posenc_np.apply_rope(x, positions, layout="interleaved", **kw)

        IMPL = Implementation("always-interleaved", "numpy", {"apply_rope": rope})
    """))
    report = tmp_path / "r.json"
    assert main(["check", "--impl", str(path), "--encoding", "hf-llama", "--dtype", "float32",
                 "--json", str(report), *FAST]) == 1
    out = capsys.readouterr().out
    assert "diagnosis: layout: your outputs equal the spec with layout='interleaved'" in out
    records = json.loads(report.read_text())["records"]
    failed = [r for r in records if r["status"] == "fail"]
    assert failed and all(r["diagnosis"] == "layout" for r in failed)
    assert all(r["worst_angle_err"] > 0.1 for r in failed)  # a wrong layout is a wrong angle, stated


CRASHING = """
    import os
    import signal
    import time

    import posenc_np
    from posenc.impl import Implementation

    def crash(x, positions, **kw):  # a native kernel's segfault
        os.kill(os.getpid(), signal.SIGSEGV)

    def hang(x, positions, **kw):
        time.sleep(3600)

    CRASH = Implementation("crashes", "numpy", {"apply_rope": crash})
    HANG = Implementation("hangs", "numpy", {"apply_rope": hang})
"""


def test_a_crashing_or_hanging_implementation_is_reported_and_the_others_kept(tmp_path, capsys):
    path = tmp_path / "bad_kernels.py"
    path.write_text(textwrap.dedent(CRASHING))
    good = tmp_path / "good.py"
    good.write_text(textwrap.dedent(USER_MODULE))
    report = tmp_path / "r.json"
    assert main(["check", "--impl", f"{path}:CRASH", "--impl", f"{path}:HANG", "--impl", str(good), "--encoding",
                 "hf-llama", "--dtype", "float32", "--timeout", "60", "--json", str(report), "--quiet"]) == 1
    records = json.loads(report.read_text())["records"]
    by = {name: [r for r in records if r["backend"] == name] for name in ("crashes", "hangs", "user-spec")}
    hf_llama = len([c for c in all_cases() if c.convention == "hf-llama"])  # one record per case, float32 only
    assert len(by["crashes"]) == len(by["hangs"]) == len(by["user-spec"]) == hf_llama
    assert all(r["status"] == "error" and "was killed by SIGSEGV before reporting" in r["message"]
               for r in by["crashes"])
    assert all(r["status"] == "error" and "timed out after 60 s" in r["message"] for r in by["hangs"])
    assert all(r["status"] == "pass" for r in by["user-spec"])


@pytest.mark.parametrize("returned", [None, "text", [[1, 2], [3]]])
def test_an_output_that_is_not_an_array_is_an_error_not_a_crash(returned):
    impl = Implementation("odd", "numpy", {"apply_rope": lambda x, positions, **kw: returned})
    [record] = run_implementations([CASES["rope/hf-llama/short"]], [impl], dtypes=["float32"])
    assert record.status in ("error", "fail"), record
    assert record.status != "pass"


def test_a_wrongly_shaped_output_fails_naming_the_shapes():
    impl = Implementation("shape", "numpy", {"apply_rope": lambda x, positions, **kw: x[..., :8]})
    [record] = run_implementations([CASES["rope/hf-llama/short"]], [impl], dtypes=["float32"])
    assert record.status == "fail" and "shape (2, 2, 8, 8) != spec shape (2, 2, 8, 16)" in record.message
    assert record.diagnosis == "unknown"
