"""The pytest plugin, as a kernel library uses it: `pytest --posenc-impl my_kernel.py` in the library's own
test run (pytest's `pytester`). The README's example kernel collects one item per comparison and passes; its
sign-flipped twin fails with `direction` in the message; a bad SPEC is a usage error; without the option
the plugin adds nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

from posenc.check.registry import all_cases  # noqa: E402

pytest_plugins = ["pytester"]
#: Imported here, so pytester's in-process runs (which drop the modules they import) share one registry.
CASES = all_cases()

ROOT = Path(__file__).resolve().parents[3]
FLIP = ("torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2])",
        "torch.cat((x[..., x.shape[-1] // 2:], -x[..., : x.shape[-1] // 2])")


def _example() -> str:
    text = (ROOT / "docs" / "impl.md").read_text()
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def test_the_documented_kernel_collects_and_passes(pytester):
    pytester.makepyfile(my_kernel=_example())
    result = pytester.runpytest("--posenc-impl", "my_kernel.py", "--posenc-encoding", "hf-llama",
                                "--posenc-dtype", "float32", "-v", "-p", "no:cacheprovider")
    expected = [c for c in CASES if c.convention == "hf-llama" and "float32" in c.dtypes and "eager" in c.modes]
    result.assert_outcomes(passed=len(expected))
    result.stdout.fnmatch_lines(["*rope/hf-llama/short/float32/eager PASSED*", "*rope/hf-llama/kv-offset/float32/eager PASSED*"])


def test_a_sign_flipped_kernel_fails_naming_direction(pytester):
    source = _example()
    assert FLIP[0] in source
    pytester.makepyfile(my_kernel=source.replace(*FLIP))
    result = pytester.runpytest("--posenc-impl", "my_kernel.py", "--posenc-encoding", "hf-llama",
                                "--posenc-dtype", "float32", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 1 and not outcomes.get("passed"), outcomes
    result.stdout.fnmatch_lines(["*diagnosis: direction: your outputs equal the spec rotated by -theta*",
                                 "*worst angle error * rad at position *"])


def test_skips_carry_their_reasons(pytester):
    pytester.makepyfile(my_kernel=_example())
    result = pytester.runpytest("--posenc-impl", "my_kernel.py", "--posenc-encoding", "gptj",
                                "--posenc-dtype", "float32", "-rs", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*SKIPPED*my-kernel declares layouts half, not interleaved*"])


@pytest.mark.parametrize("argv, words", [
    (["--posenc-impl", "no_such_module:IMPL"], "cannot import module 'no_such_module'"),
    (["--posenc-impl", "my_kernel.py", "--posenc-encoding", "ropee"], "--posenc-encoding"),
])
def test_a_bad_option_is_a_usage_error(pytester, argv, words):
    pytester.makepyfile(my_kernel=_example())
    result = pytester.runpytest(*argv, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert words in result.stderr.str()


def test_without_the_option_the_plugin_adds_nothing(pytester):
    pytester.makepyfile(test_x="def test_one():\n    assert True\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
