"""Layers between the subpackages of the application: `posenc.check`, `posenc.impl`, `posenc.port`, ...
(a top-level module such as `posenc.cli` counts as its own). An import between two modules is an arrow
between their subpackages; the arrows must never run both ways, lazily or not, so the subpackages stack in
floors (docs/architecture.md). A cycle of modules (tests/test_layering.py) is stricter per module but does
not see two packages that import each other through different modules."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from test_layering import import_cycles, import_graph

ROOT = Path(__file__).resolve().parents[1]
#: Subpackages whose modules stay readable in one sitting (about 300 lines each).
SIZED = {"check": 320, "impl": 320}


def subpackage(module: str) -> str:
    """`posenc.check.run` -> `check`; `posenc.cli` -> `cli`; `posenc` -> `posenc`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def subpackage_graph(package: str = "posenc") -> dict[str, dict[str, str]]:
    """subpackage -> {subpackage it imports: one `module -> module (line)` that does}."""
    graph: dict[str, dict[str, str]] = {}
    for module, targets in import_graph(package).items():
        mine = subpackage(module)
        graph.setdefault(mine, {})
        for target, line in targets.items():
            other = subpackage(target)
            if other not in (mine, package):
                graph[mine].setdefault(other, f"{module} -> {target} (line {line})")
    for targets in list(graph.values()):
        for other in targets:
            graph.setdefault(other, {})
    return graph


def _why(graph, cycle) -> str:
    return "\n".join(f"  {a} -> {b}: {graph[a][b]}" for a in cycle for b in sorted(graph[a]) if b in cycle)


def test_no_two_subpackages_of_the_application_import_each_other():
    graph = subpackage_graph()
    cycles = import_cycles(graph)
    assert not cycles, "subpackages of posenc in a cycle:\n" + "\n\n".join(_why(graph, c) for c in cycles)


def test_impl_imports_nothing_of_check():
    """`posenc.impl` (implementations, their judge and built-ins) is a floor below `posenc.check`."""
    assert "check" not in subpackage_graph()["impl"], subpackage_graph()["impl"]["check"]


def test_the_subpackage_check_catches_a_planted_cycle(tmp_path, monkeypatch):
    """Two subpackages that import each other through different modules, one of them lazily: no module
    cycle, but a cycle of subpackages."""
    package = tmp_path / "posenc"
    for sub in ("check", "impl"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "check" / "run.py").write_text("from ..impl import judge\n")
    (package / "impl" / "judge.py").write_text("def judge():\n    from ..check.html import colour\n")
    (package / "check" / "html.py").write_text("colour = 1\n")
    (package / "cli.py").write_text("from .check import run\n")
    monkeypatch.setattr(sys.modules["test_layering"], "ROOT", tmp_path)
    graph = subpackage_graph()
    assert not import_cycles(import_graph("posenc"))
    assert import_cycles(graph) == [["check", "impl"]]
    assert graph["cli"] == {"check": "posenc.cli -> posenc.check.run (line 1)"}


@pytest.mark.parametrize("sub", sorted(SIZED))
def test_modules_of_the_suite_stay_short(sub):
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "posenc" / sub).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > SIZED[sub]}
    assert not long, f"modules of posenc/{sub} over {SIZED[sub]} lines (split them by job): {long}"
