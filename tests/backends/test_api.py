"""The public names: docs/api.md's contract table, every package's `__all__`, and what the packages export.

docs/api.md §2 lists every public name with the packages that export it (`all`, `spec` = posenc_np only,
`backends` = posenc_torch, posenc_tf, posenc_jax, posenc_mlx). The `__all__` lists are read from the source with `ast`,
so these checks need no framework and never skip; importing a backend (to check the names exist at run time)
uses the backends this run selects (tests/conftest.py).
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
API_MD = ROOT / "docs" / "api.md"
SPEC = "posenc_np"
BACKENDS = ("posenc_torch", "posenc_tf", "posenc_jax", "posenc_mlx")
PACKAGES = (SPEC, *BACKENDS)
WHERE = {"all": set(PACKAGES), "spec": {SPEC}, "backends": set(BACKENDS)}

_ROW = re.compile(r"^\| `([A-Za-z_][A-Za-z0-9_]*)` \| (all|spec|backends) \|", re.M)
_ENTRY = re.compile(r"^### `([A-Za-z_][A-Za-z0-9_]*)`", re.M)


def _api_text():
    return API_MD.read_text(encoding="utf-8")


def contract_table():
    """name -> the set of packages that must export it, from docs/api.md §2."""
    rows = _ROW.findall(_api_text())
    table = {}
    for name, where in rows:
        assert name not in table, f"docs/api.md: {name!r} has two rows in the contract table"
        table[name] = WHERE[where]
    return table


def documented_entries():
    return set(_ENTRY.findall(_api_text()))


def _list_value(node):
    """The string list of an `__all__` value: a list/tuple literal, or a sum of them."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _list_value(node.left) + _list_value(node.right)
    value = ast.literal_eval(node)
    assert isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value), ast.dump(node)
    return list(value)


def declared(package):
    """`(__all__ as a list, names bound at module level)` of `package/__init__.py`, by parsing it."""
    tree = ast.parse((ROOT / package / "__init__.py").read_text(encoding="utf-8"))
    exported, bound = None, set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom | ast.Import):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Assign):
            targets = {t.id for t in node.targets if isinstance(t, ast.Name)}
            bound |= targets
            if "__all__" in targets:
                exported = _list_value(node.value)
        elif isinstance(node, ast.AugAssign) and getattr(node.target, "id", None) == "__all__":
            exported = (exported or []) + _list_value(node.value)
    assert exported is not None, f"{package}/__init__.py defines no __all__"
    return exported, bound


def expected_names(package):
    return {name for name, packages in contract_table().items() if package in packages}


def test_contract_table_lists_the_core_contract():
    """The table is there and parses: a reformatting that loses rows must fail here, not pass everything."""
    table = contract_table()
    for name, where in {"sinusoidal": "all", "learned": "all", "resize_table": "all", "apply_rope": "all",
                        "rope_cos_sin": "all", "rope_frequencies": "all", "rope_permutation": "all",
                        "scaling_from_hf_config": "all", "alibi_slopes": "all", "alibi_bias": "all",
                        "t5_bucket": "all", "t5_bias": "all", "relative_embeddings": "all", "attention": "all",
                        "SinusoidalEncoding": "backends", "LearnedEncoding": "backends",
                        "RotaryEmbedding": "backends", "ALiBi": "backends", "T5RelativeBias": "backends",
                        "RelativePositionEmbedding": "backends", "conventions": "spec"}.items():
        assert table.get(name) == WHERE[where], f"docs/api.md §2: {name!r} should be exported by {where}"


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_exactly_the_contract_names_of_the_package(package):
    exported, bound = declared(package)
    duplicates = sorted({n for n in exported if exported.count(n) > 1})
    assert not duplicates, f"{package}.__all__ lists {duplicates} twice"
    unbound = sorted(set(exported) - bound)
    assert not unbound, f"{package}.__all__ names {unbound}, which {package}/__init__.py never binds"
    expected = expected_names(package)
    missing, extra = sorted(expected - set(exported)), sorted(set(exported) - expected)
    assert not missing, f"{package}.__all__ lacks contract names {missing} (docs/api.md §2)"
    assert not extra, (f"{package}.__all__ exports {extra}, which docs/api.md §2 does not give to {package}: "
                       f"add a row to the contract table and an entry")


def test_the_backends_export_the_same_names():
    names = {package: sorted(declared(package)[0]) for package in BACKENDS}
    assert len({tuple(v) for v in names.values()}) == 1, names


def test_spec_and_backends_differ_only_by_the_documented_names():
    """What the spec exports and the backends do not (and the reverse) is exactly the table's `spec` and
    `backends` rows: a function added to one side only fails here until it is documented as such."""
    spec = set(declared(SPEC)[0])
    backend = set(declared(BACKENDS[0])[0])
    table = contract_table()
    assert spec - backend == {n for n, where in table.items() if where == WHERE["spec"]}
    assert backend - spec == {n for n, where in table.items() if where == WHERE["backends"]}


@pytest.mark.parametrize("package", PACKAGES)
def test_docs_api_has_an_entry_for_every_exported_name(package):
    undocumented = sorted(set(declared(package)[0]) - documented_entries())
    assert not undocumented, f"docs/api.md has no `### \\`name\\`` entry for {package}'s {undocumented}"


def test_every_contract_row_has_an_entry():
    assert not sorted(set(contract_table()) - documented_entries())


def test_spec_exports_its_contract_names_at_import():
    spec = importlib.import_module(SPEC)
    missing = sorted(n for n in expected_names(SPEC) if not hasattr(spec, n))
    assert not missing, missing
    assert sorted(spec.__all__) == sorted(declared(SPEC)[0])


def test_backend_exports_its_contract_names_at_import(backend):
    module = backend.module
    missing = sorted(n for n in expected_names(module.__name__) if not hasattr(module, n))
    assert not missing, f"{module.__name__} lacks {missing} at run time"
    assert sorted(module.__all__) == sorted(declared(module.__name__)[0])


_OUTSIDE = re.compile(r"(\.\./|/work/)shared\b")
_TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".yml", ".yaml", ".json"}
_NOT_SOURCE = {".git", "build", "dist", "__pycache__", ".pytest_cache", ".hypothesis"}


def _repository_files():
    """The repository's own files, relative: what git tracks or would (ignored paths such as the environments
    scripts/ builds beside the checkout are not the repository's), else every file outside `_NOT_SOURCE`."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout.splitlines()
        return [rel for rel in listed if (ROOT / rel).is_file()]
    except (OSError, subprocess.CalledProcessError):
        found = []
        for folder, subfolders, files in os.walk(ROOT):
            subfolders[:] = [d for d in subfolders if d not in _NOT_SOURCE and not d.endswith(".egg-info")]
            found += [Path(folder, file).relative_to(ROOT).as_posix() for file in files]
        return found


def test_no_file_points_outside_the_repository():
    """The repository stands alone: docs and docstrings cite docs/api.md and docs/conventions.md, never a
    directory beside the checkout."""
    offenders = []
    for rel in _repository_files():
        path = ROOT / rel
        if path.suffix not in _TEXT_SUFFIXES and rel != ".ci/run":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if _OUTSIDE.search(line):
                offenders.append(f"{rel}:{number}")
    assert not offenders, offenders
