"""`posenc check --device`: every framework's inputs placed on one device, an unavailable device refused at
once (exit 2 naming it), and the device recorded in every record and report. This machine has only a CPU:
the placement path is checked with the CPU, and the refusal with the accelerators it lacks."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import posenc_np
from posenc.adapters import DEVICE_ENV, adapter, check_device_name, current_device
from posenc.check.registry import all_cases
from posenc.check.run_impl import run_implementations
from posenc.cli import main
from posenc.impl import Implementation

QUICK = ["--encoding", "hf-llama", "--dtype", "float32", "--mode", "eager", "--jobs", "1", "--quiet",
         "--compile-cache", "none"]


@pytest.mark.parametrize("name", ["cuda", "cuda:1", "mps"])
def test_an_unavailable_device_is_bad_usage_naming_it(name, capsys):
    pytest.importorskip("torch")
    assert main(["check", "--device", name, "--backend", "torch", *QUICK]) == 2
    err = capsys.readouterr().err
    assert f"--device {name} is not available" in err and "torch" in err


@pytest.mark.parametrize("name", ["CUDA", "cuda:x", "", "cuda:0:1"])
def test_a_malformed_device_name_is_refused(name):
    with pytest.raises(ValueError, match="device="):
        check_device_name(name)


def test_the_device_is_recorded_in_the_records_and_the_report(tmp_path, capsys):
    report = tmp_path / "r.json"
    assert main(["check", "--device", "cpu", "--backend", "torch", *QUICK, "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["device"] == "cpu" and {r["device"] for r in data["records"]} == {"cpu"}
    assert "device cpu" in capsys.readouterr().out
    assert DEVICE_ENV not in os.environ  # set for the run only


def test_inputs_reach_an_implementation_on_the_current_device(monkeypatch):
    torch = pytest.importorskip("torch")
    seen = []

    def apply_rope(x, positions, **kwargs):
        seen.append((x.device.type, positions.device.type))
        out = posenc_np.apply_rope(x.double().numpy(), positions.numpy(), **kwargs)
        return torch.from_numpy(out).to(x.dtype)

    monkeypatch.setenv(DEVICE_ENV, "cpu")
    cases = [c for c in all_cases() if c.id == "rope/hf-llama/short"]
    (record,) = run_implementations(cases, [Implementation("probe", "torch", {"apply_rope": apply_rope})],
                                    dtypes=["float32"])
    assert record.status == "pass" and record.device == "cpu" and seen == [("cpu", "cpu")]


def test_a_framework_that_cannot_place_the_device_makes_its_cases_skips(monkeypatch):
    """A NumPy implementation has no accelerator: asked for one, each case says so instead of running."""
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    assert current_device() == "cuda"
    cases = [c for c in all_cases() if c.id == "rope/hf-llama/short"]
    (record,) = run_implementations(cases, [Implementation("np", "numpy", {"apply_rope": posenc_np.apply_rope})],
                                    dtypes=["float32"])
    assert record.status == "skip" and "CPU only" in record.message and record.device == "cuda"


@pytest.mark.parametrize("backend", ["torch", "tf", "jax", "mlx"])
def test_each_framework_places_on_the_cpu_and_refuses_a_missing_gpu(backend, monkeypatch):
    a = adapter(backend)
    if not a.available():
        pytest.skip(f"{backend} is not installed")
    assert a.device_refusal("cpu") is None
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(a.to_numpy(a.from_numpy(x)), x)
    reason = a.device_refusal("cuda")
    assert reason is not None and ("GPU" in reason or "cuda" in reason or "gpu" in reason), reason
