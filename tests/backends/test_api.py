"""The four packages export the same names, and every contract name of ../shared/API.md."""

from __future__ import annotations

import importlib
import pathlib
import re

import pytest

from posenc.adapters import adapter

API = pathlib.Path(__file__).resolve().parents[2] / "shared" / "API.md"
BACKEND_ONLY = {"SinusoidalEncoding", "LearnedEncoding", "RotaryEmbedding", "ALiBi", "T5RelativeBias",
                "RelativePositionEmbedding"}


def _functions_in_contract():
    if not API.exists():
        pytest.skip("../shared/API.md is not beside this checkout")
    return set(re.findall(r"^- `([a-z_0-9]+)\(", API.read_text(), flags=re.M))


def test_backends_export_the_spec_functions_and_the_modules(backend):
    spec = importlib.import_module("posenc_np")
    module = backend.module
    spec_functions = {n for n in spec.__all__ if callable(getattr(spec, n)) and n[0].islower()}
    contract = _functions_in_contract()
    backend_names = set(module.__all__)
    missing = sorted((contract & spec_functions) - backend_names)
    assert not missing, f"{backend.name} lacks {missing}"
    present_modules = backend_names & BACKEND_ONLY
    for name in backend_names:
        assert hasattr(module, name), name
    assert {"SinusoidalEncoding", "LearnedEncoding"} <= present_modules


def test_spec_exports_every_contract_function_it_implements():
    spec = importlib.import_module("posenc_np")
    assert hasattr(spec, "conventions")
    names = set(spec.__all__)
    for name in ("sinusoidal", "learned", "resize_table"):
        assert name in names


def test_backend_all_lists_are_equal_across_frameworks():
    names = {}
    for b in ("torch", "tf", "jax"):
        if adapter(b).available():
            names[b] = sorted(adapter(b).module.__all__)
    assert len({tuple(v) for v in names.values()}) <= 1, names
