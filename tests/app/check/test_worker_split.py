"""How `posenc check` spreads posenc's backends over its worker processes (posenc/check/workers.py)."""

import pytest

from posenc.adapters import adapter
from posenc.check import workers

BACKENDS = ["torch", "tf", "jax", "mlx", "onnx", "numpy"]


def _shares(groups):
    shares = {}
    for group in groups:
        for backend, start, stop in group:
            shares.setdefault(backend, []).append((start, stop))
    return shares


def _loads(groups):
    return [sum(adapter(b).cost * (stop - start) for b, start, stop in group) for group in groups]


@pytest.mark.parametrize("warm", [False, True])
@pytest.mark.parametrize("jobs", [2, 3])
def test_every_backend_is_run_once_whole(tmp_path, monkeypatch, warm, jobs):
    cache = tmp_path / "jax"
    if warm:
        cache.mkdir()
        (cache / "entry").write_bytes(b"x")
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(cache))
    groups = workers._balanced_groups(BACKENDS, jobs)
    for backend, pieces in _shares(groups).items():
        pieces.sort()
        assert pieces[0][0] == 0.0 and pieces[-1][1] == 1.0, backend
        assert all(a[1] == b[0] for a, b in zip(pieces[:-1], pieces[1:], strict=True)), backend  # contiguous, no overlap
        if len(pieces) > 1:  # a share costs a second import: none is a sliver
            assert min(adapter(backend).cost * (stop - start) for start, stop in pieces) >= workers._SMALLEST_SHARE
    assert set(_shares(groups)) == set(BACKENDS)
    loads = _loads(groups)
    # balanced up to the largest backend that may not be split (torch, TF), not worse
    unsplit = max(adapter(b).cost for b in BACKENDS if not adapter(b).splittable)
    assert max(loads) - min(loads) <= unsplit


def test_jax_cost_follows_its_compilation_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "missing"))
    cold = adapter("jax").cost
    (tmp_path / "missing").mkdir()
    assert adapter("jax").cost == cold  # an empty directory is a cold cache
    (tmp_path / "missing" / "entry").write_bytes(b"x")
    assert adapter("jax").cost < cold  # a filled cache skips the compilations a cold run pays for


def test_cold_jax_is_split_between_the_workers(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "missing"))
    groups = workers._balanced_groups(BACKENDS, 2)
    assert len(_shares(groups)["jax"]) == 2
    loads = _loads(groups)
    assert max(loads) - min(loads) < 1e-9
