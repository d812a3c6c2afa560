"""Every built-in's findings (`FINDINGS` in posenc/impl/builtin/NAME.py, rendered into docs/ecosystem.md) still
reproduce: each `reproduction` runs as a standalone script in a fresh interpreter, without posenc, and its
`still` expression, evaluated in the namespace the script leaves, must be True. When upstream fixes the
behaviour `still` turns False (or the script raises) and the test fails, so the ecosystem page cannot go stale
silently (issue 32)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys

import pytest

from posenc.impl.builtin import BUILTINS, builtin_module, builtin_status

KEYS = {"implementation", "title", "text", "reproduction", "still"}
MARKER = "POSENC-FINDING-RESULT "
#: a reproduction runs Triton kernels in the interpreter on a CPU; the slowest here (unsloth) takes ~12 s
TIMEOUT_S = 300

# Runs in the child: the reproduction as __main__, then `still` in its namespace, then which posenc
# packages ended up imported (a reproduction must not need posenc, directly or through a helper).
_RUNNER = """
import json, sys
source, still = json.loads(sys.argv[1])
namespace = {"__name__": "__main__"}
exec(compile(source, "<reproduction>", "exec"), namespace)
value = eval(compile(still, "<still>", "eval"), namespace)
posenc = sorted(m for m in sys.modules if m.split(".")[0] == "posenc" or m.startswith("posenc_"))
print(%r + json.dumps({"still": bool(value), "posenc": posenc}))
""" % MARKER


def slug(text: str, words: int = 6) -> str:
    """A short id part: the first `words` words of `text`, lower case, joined by '-'."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower())[:words])


def all_findings() -> list[tuple[str, dict]]:
    """`(built-in name, finding)` for every finding of every built-in, in `BUILTINS` order."""
    return [(name, finding) for name in BUILTINS for finding in builtin_module(name).FINDINGS]


FINDINGS = all_findings()
IDS = [f"{f['implementation']}-{slug(f['title'])}" for _, f in FINDINGS]


def test_finding_ids_are_unique():
    assert len(set(IDS)) == len(IDS), sorted(i for i in IDS if IDS.count(i) > 1)


@pytest.mark.parametrize(("name", "finding"), FINDINGS, ids=IDS)
def test_finding_is_complete_and_needs_no_posenc(name, finding):
    """The keys of the protocol (posenc/impl/builtin/__init__.py), a script that parses and names no posenc
    module, and a `still` that is one expression."""
    assert set(finding) == KEYS, f"{name}: finding keys {sorted(finding)}, expected {sorted(KEYS)}"
    assert all(isinstance(finding[k], str) and finding[k].strip() for k in KEYS), f"{name}: empty or non-str key"
    assert "posenc" not in finding["reproduction"], (
        f"{name}: the reproduction of {finding['title']!r} mentions posenc; it must run without it")
    ast.parse(finding["reproduction"])
    compile(finding["still"], "<still>", "eval")
    names = builtin_module(name).NAMES
    assert finding["implementation"] in (names() if callable(names) else names)


def run_reproduction(finding: dict, cwd) -> dict:
    """Run `finding`'s reproduction and `still` in a fresh interpreter (in `cwd`, so neither the repository's
    posenc nor a library's cache files in the caller's cwd are involved); the child's verdict dict."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    argv = [sys.executable, "-c", _RUNNER, json.dumps([finding["reproduction"], finding["still"]])]
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{finding['implementation']}: the reproduction ran past {TIMEOUT_S} s")
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    if done.returncode != 0 or not lines:
        pytest.fail(f"{finding['implementation']}: the reproduction of {finding['title']!r} failed "
                    f"(exit {done.returncode}): upstream changed or fixed it? re-run posenc check --impl "
                    f"{finding['implementation']}, update FINDINGS/EXPECTED\n{done.stdout[-2000:]}\n"
                    f"{done.stderr[-4000:]}")
    return json.loads(lines[-1][len(MARKER):])


@pytest.mark.parametrize(("name", "finding"), FINDINGS, ids=IDS)
def test_finding_still_reproduces(name, finding, tmp_path):
    module = builtin_module(name)
    if module.EXPECTED is None:
        pytest.skip(f"{name} lives in an environment of its own ({module.INSTALL[:60]}...)")
    if not builtin_status(name)[0]:
        pytest.skip(f"{name} ({module.DISTRIBUTION}) is not installed")
    result = run_reproduction(finding, tmp_path)
    assert not result["posenc"], f"{name}: the reproduction imported {result['posenc']}; it must not need posenc"
    assert result["still"], (f"{name}: {finding['title']!r} no longer reproduces (`{finding['still']}` is False): "
                             f"upstream fixed it? re-run posenc check --impl {name}, update FINDINGS/EXPECTED")
