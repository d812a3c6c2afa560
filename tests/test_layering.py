"""The three layers and the direction of their imports, enforced.

    posenc_np (the spec)  <-  posenc_torch | posenc_tf | posenc_jax | posenc_mlx (backends)  <-  posenc (the application)

* posenc_np imports NumPy, ml_dtypes, the standard library and itself, nothing else;
* a backend imports its own framework(s), NumPy, ml_dtypes, the standard library, posenc_np and itself:
  never another backend, never posenc;
* posenc imports the spec, the backends and the standard library; a framework (torch, tensorflow, jax, mlx,
  onnx, ...) only in `posenc/adapters.py` and the paths `posenc.adapters.FRAMEWORK_CODE` lists with their
  reasons (`test_only_the_adapters_and_the_listed_framework_code_import_a_framework`);
* inside each package, imports point one way too: no import cycle (`test_no_import_cycle_inside_a_package`),
  and inside posenc no module imports another module's private (`_name`) name
  (`test_no_private_name_is_imported_across_modules_of_the_application`).

Every `import` statement counts, at module level or inside a function (a lazy import is still a
dependency), and so do string imports (`importlib.import_module("x")`, `__import__("x")`,
`pytest.importorskip("x")`). A violation fails naming file:line.

The spec's tests follow the spec's rule: tests/spec/ runs in an environment with only NumPy and
ml_dtypes (plus pytest). Tests that compare the spec with another system's real code (transformers,
torch's functional ops, TF/JAX resizers) live in tests/reference/; the backends' tests in tests/backends/;
the application's in tests/app/. `test_spec_tests_pass_with_only_numpy_and_ml_dtypes` runs tests/spec in a
child interpreter that can see nothing but the standard library, NumPy, ml_dtypes, pytest and this
repository, and `test_spec_imports_without_frameworks` imports every posenc_np module with the
frameworks blocked.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
SPEC_DEPS = {"numpy", "ml_dtypes"}
FRAMEWORKS = {"posenc_torch": {"torch"}, "posenc_tf": {"tensorflow", "keras"}, "posenc_jax": {"jax", "jaxlib", "flax"},
              "posenc_mlx": {"mlx"}}
#: What each layer may import besides the standard library and itself.
ALLOWED = {"posenc_np": SPEC_DEPS, **{pkg: SPEC_DEPS | {"posenc_np"} | fw for pkg, fw in FRAMEWORKS.items()}}
#: Imported by nothing in the spec's environment: every framework, backend, the application, and the
#: heavy references the tests compare with.
BLOCKED = sorted({"torch", "tensorflow", "keras", "jax", "jaxlib", "flax", "mlx", "transformers", "safetensors", "onnx",
                  "onnxruntime", "gguf", "diffusers", "hypothesis", "posenc", *FRAMEWORKS})
STRING_IMPORTERS = {"import_module", "__import__", "importorskip"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_statements(path: Path):
    """`(line, absolute module name, imported names or None)` for every import in `path`, relative ones
    resolved; the names are those of a `from MODULE import a, b` (None for `import MODULE` and string imports)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            if node.level:
                base = package[:len(package) - node.level + 1] if node.level <= len(package) else None
                if base is None:  # climbs above the top package
                    for name in ([node.module] if node.module else names):
                        yield node.lineno, "." * node.level + name, None
                    continue
                if node.module:
                    yield node.lineno, ".".join(base + [node.module]), names
                else:  # `from . import a, b`: each name is a module of the package (or a name of its __init__)
                    for name in names:
                        yield node.lineno, ".".join(base + [name]), None
            else:
                yield node.lineno, node.module, names
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in STRING_IMPORTERS):
            yield node.lineno, node.args[0].value, None


def imports(path: Path):
    """`(line, absolute module name)` for every import in `path`, relative ones resolved."""
    for line, name, _ in import_statements(path):
        yield line, name


def violations(package: str, allowed: set[str]) -> list[str]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, name in imports(path):
            root = name.split(".")[0]
            if root not in STDLIB and root != package and root not in allowed:
                found.append(f"{path.relative_to(ROOT)}:{line}: imports {name}")
    return found


@pytest.mark.parametrize("package", list(ALLOWED))
def test_import_direction(package):
    assert (ROOT / package).is_dir(), f"{package} is missing"
    found = violations(package, ALLOWED[package])
    assert not found, (f"{package} may import only the standard library, itself and "
                       f"{sorted(ALLOWED[package])}:\n" + "\n".join(found))


def test_the_checker_catches_each_kind_of_import(tmp_path, monkeypatch):
    """A backend importing another backend (plain, lazily, relative past its root, by string) is caught."""
    package = tmp_path / "posenc_torch"
    package.mkdir()
    (package / "__init__.py").write_text("from . import rope\nfrom .rope import x\n")
    (package / "rope.py").write_text(textwrap.dedent("""\
        import numpy as np
        import torch.nn
        from posenc_np import _validate

        def f():
            import posenc_jax
            from posenc.adapters import adapter
            from .. import elsewhere
            return __import__("tensorflow")
        """))
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = violations("posenc_torch", ALLOWED["posenc_torch"])
    assert found == ["posenc_torch/rope.py:6: imports posenc_jax", "posenc_torch/rope.py:7: imports posenc.adapters",
                     "posenc_torch/rope.py:8: imports ..elsewhere", "posenc_torch/rope.py:9: imports tensorflow"]


SPEC_TEST_ALLOWED = SPEC_DEPS | {"pytest", "posenc_np", "helpers"}


def test_spec_tests_import_no_framework():
    """tests/spec and what it loads (tests/helpers.py at module level) import only the spec's dependencies."""
    found = []
    # what pytest imports: test modules and conftest files (tests/spec/golden/make_golden.py is a script that
    # regenerates the golden arrays from transformers, run by hand, never imported by a test)
    paths = [p for p in (ROOT / "tests" / "spec").rglob("*.py") if p.name.startswith("test_") or p.name == "conftest.py"]
    for path in sorted(paths):
        for line, name in imports(path):
            root = name.split(".")[0]
            if root not in STDLIB and root not in SPEC_TEST_ALLOWED:
                found.append(f"{path.relative_to(ROOT)}:{line}: imports {name}")
    helpers = ROOT / "tests" / "helpers.py"
    for node in ast.parse(helpers.read_text()).body:  # module level: helpers import frameworks lazily
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]):
                if name.split(".")[0] not in STDLIB | SPEC_TEST_ALLOWED:
                    found.append(f"tests/helpers.py:{node.lineno}: imports {name} at module level")
    assert not found, "tests/spec runs with only NumPy and ml_dtypes; move these to tests/reference or " \
                      "tests/backends:\n" + "\n".join(found)


_BLOCKER = textwrap.dedent("""\
    import sys

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"{name} is blocked: the spec must not import it", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    """)


def test_spec_imports_without_frameworks():
    """`import posenc_np` and every one of its modules, with every framework and the app blocked."""
    code = _BLOCKER + textwrap.dedent("""\
        import importlib, pkgutil
        import posenc_np
        names = [m.name for m in pkgutil.walk_packages(posenc_np.__path__, prefix="posenc_np.")]
        for name in names:
            importlib.import_module(name)
        leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        assert not leaked, leaked
        print(len(names))
        """)
    result = subprocess.run([sys.executable, "-c", f"BLOCKED = {BLOCKED!r}\n" + code], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[-1]) > 5  # the modules were really walked


def _site_packages(module: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(module)
    origin = Path(spec.origin)
    return origin.parent.parent if origin.name == "__init__.py" else origin.parent


def test_spec_tests_pass_with_only_numpy_and_ml_dtypes(tmp_path):
    """tests/spec in a child `python -S` whose sys.path holds the standard library, this repository and
    links to NumPy, ml_dtypes and pytest (with its own dependencies) only: what `pip install numpy
    ml_dtypes pytest` gives. The spec and its tests must pass there, with nothing skipped."""
    env_dir = tmp_path / "site"
    env_dir.mkdir()
    for module in ("numpy", "ml_dtypes", "pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py"):
        try:
            source = _site_packages(module)
        except (ImportError, AttributeError, TypeError):
            continue
        for entry in source.iterdir():
            if entry.name == module or entry.name == f"{module}.py" or entry.name == f"{module}.libs":
                (env_dir / entry.name).symlink_to(entry)
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; import pytest; "
            "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-rs', 'tests/spec']))")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "POSENC_TEST_BACKENDS"))}
    result = subprocess.run([sys.executable, "-S", "-c", code, str(ROOT), str(env_dir)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
    assert result.returncode == 0, tail
    assert " passed" in tail and "skipped" not in tail, tail


# ---------------------------------------------------------------- inside each package

#: Every package of the repository: the spec, each backend, the application.
PACKAGES = ["posenc_np", *FRAMEWORKS, "posenc"]


def package_modules(package: str) -> dict[str, Path]:
    """Module name -> file of every module of `package` (a package is its `__init__.py`)."""
    return {_module_name(path): path for path in sorted((ROOT / package).rglob("*.py"))}


def import_graph(package: str) -> dict[str, dict[str, int]]:
    """module -> {module of the same package it imports: the first line that does}, lazy imports included.

    `from X import a` depends on `X.a` when that is a module (a submodule imported by name), else on `X`;
    `import X.Y` depends on `X.Y`. The package `__init__`s Python runs on the way are not counted: a module
    that imports `posenc.port.checks` depends on `checks`, not on everything `posenc/port/__init__.py` imports."""
    modules = package_modules(package)
    graph = {name: {} for name in modules}
    for name, path in modules.items():
        for line, target, names in import_statements(path):
            found = [f"{target}.{n}" for n in names or () if f"{target}.{n}" in modules] or [target]
            for module in found:
                if module in modules and module != name:
                    graph[name].setdefault(module, line)
    return graph


def import_cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted; an import cycle."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def _cycle_text(graph, cycle):
    return "  " + ", ".join(f"{a} -> {b} (line {graph[a][b]})" for a in cycle for b in sorted(graph[a]) if b in cycle)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside_a_package(package):
    """No set of modules of one package imports each other around a circle, lazily or not: each package's
    modules can be ordered so that every import points to an earlier one (docs/architecture.md)."""
    if not (ROOT / package).is_dir():
        pytest.skip(f"{package} is not in this checkout")
    graph = import_graph(package)
    cycles = import_cycles(graph)
    assert not cycles, f"import cycles in {package}:\n" + "\n".join(_cycle_text(graph, c) for c in cycles)


def private_imports(package: str = "posenc") -> list[str]:
    """`from MODULE import _name` in `package` where MODULE is any module of this repository and `_name` is
    not itself a module: a private name used as another module's API."""
    repository = {name for pkg in PACKAGES if (ROOT / pkg).is_dir() for name in package_modules(pkg)}
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, module, names in import_statements(path):
            if module is None or module not in repository:
                continue
            for name in names or ():
                if name.startswith("_") and not name.startswith("__") and f"{module}.{name}" not in repository:
                    found.append(f"{path.relative_to(ROOT)}:{line}: from {module} import {name}")
    return found


def test_no_private_name_is_imported_across_modules_of_the_application():
    """Inside `posenc/`, what another module uses is public (no underscore). The spec's private modules
    `posenc_np._dtypes`, `_validate`, `_modules` (the interface the backends and the application share,
    docs/architecture.md) are reached through `posenc_np.backend`; a private name from any module may not."""
    found = private_imports("posenc")
    assert not found, "private names imported across modules (make them public):\n" + "\n".join(found)


def test_the_cycle_and_private_name_checks_catch_a_planted_case(tmp_path, monkeypatch):
    """A cycle closed by a function-local relative import, a submodule imported by name, and a private name
    imported from a sibling are each caught; a chain that points one way is not a cycle."""
    package = tmp_path / "posenc"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from . import a\n")
    (package / "sub" / "a.py").write_text("from .b import public\n")
    (package / "sub" / "b.py").write_text("def public():\n    from ..c import _helper\n    return _helper\n")
    (package / "c.py").write_text("from .sub import a\n\ndef _helper():\n    pass\n")
    (package / "d.py").write_text("from .sub import b\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph = import_graph("posenc")
    assert import_cycles(graph) == [["posenc.c", "posenc.sub.a", "posenc.sub.b"]]
    assert graph["posenc.c"] == {"posenc.sub.a": 1} and graph["posenc.d"] == {"posenc.sub.b": 1}
    assert private_imports("posenc") == ["posenc/sub/b.py:2: from posenc.c import _helper"]


# ---------------------------------------------------------------- frameworks in the application

def framework_violations(frameworks, allowed, package="posenc") -> tuple[list[str], list[str]]:
    """`(imports, unused)`: `file:line: imports NAME` for each import of one of `frameworks` in `package`
    outside the `allowed` paths (a path ending in "/" allows everything under it), and the allowed paths
    that import no framework (a stale entry)."""
    found, used = [], set()
    for path in sorted((ROOT / package).rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        entry = next((a for a in allowed if relative == a or (a.endswith("/") and relative.startswith(a))), None)
        for line, name in imports(path):
            if name.split(".")[0] not in frameworks:
                continue
            if entry is None:
                found.append(f"{relative}:{line}: imports {name}")
            else:
                used.add(entry)
    return found, sorted(set(allowed) - used)


def test_only_the_adapters_and_the_listed_framework_code_import_a_framework():
    """The rule of posenc/adapters.py: outside `adapters.py` and its `FRAMEWORK_CODE`, no module of the
    application imports a framework (lazily or by string included); every listed path does import one."""
    from posenc.adapters import FRAMEWORK_CODE, FRAMEWORKS

    found, unused = framework_violations(set(FRAMEWORKS), ["posenc/adapters.py", *FRAMEWORK_CODE])
    assert not found, ("framework code outside posenc/adapters.py and FRAMEWORK_CODE (go through an Adapter "
                       "method, or list the module with its reason):\n" + "\n".join(found))
    assert not unused, f"FRAMEWORK_CODE entries that import no framework (remove them): {unused}"


def test_the_framework_check_catches_a_planted_import(tmp_path, monkeypatch):
    """A lazy and a string import of a framework outside the allowed paths are caught; one inside an allowed
    package is not; an allowed path without a framework import is reported stale."""
    package = tmp_path / "posenc"
    (package / "train").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "plot.py").write_text("def f():\n    import torch.nn\n    return __import__('jax')\n")
    (package / "train" / "loop.py").write_text("import torch\n")
    (package / "io.py").write_text("import numpy\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found, unused = framework_violations({"torch", "jax"}, ["posenc/train/", "posenc/io.py"])
    assert found == ["posenc/plot.py:2: imports torch.nn", "posenc/plot.py:3: imports jax"]
    assert unused == ["posenc/io.py"]


# ---------------------------------------------------------------- the spec's interface to its backends

def spec_private_imports(package: str) -> list[str]:
    """Imports of a private module of `posenc_np` (`posenc_np._validate`, ...) by a module of `package`."""
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, name in imports(path):
            parts = name.split(".")
            if parts[0] == "posenc_np" and len(parts) > 1 and parts[1].startswith("_"):
                found.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    return found


@pytest.mark.parametrize("package", [*FRAMEWORKS, "posenc"])
def test_backends_and_the_application_reach_the_spec_through_its_public_interface(package):
    """What a backend takes from the spec besides its functions is named in one module, `posenc_np.backend`
    (docs/architecture.md, "The spec's backend interface"); a private module of the spec is the spec's own."""
    if not (ROOT / package).is_dir():
        pytest.skip(f"{package} is not in this checkout")
    found = spec_private_imports(package)
    assert not found, "private modules of posenc_np imported (use posenc_np.backend):\n" + "\n".join(found)


def test_the_spec_interface_check_catches_a_planted_import(tmp_path, monkeypatch):
    package = tmp_path / "posenc_torch"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "rope.py").write_text("from posenc_np.backend import check_table\n"
                                     "def f():\n    from posenc_np._validate import check_finite\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert spec_private_imports("posenc_torch") == ["posenc_torch/rope.py:3: posenc_np._validate"]
