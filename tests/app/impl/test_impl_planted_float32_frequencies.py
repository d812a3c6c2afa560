"""Planted float32 sinusoid frequencies (mlx's `nn.SinusoidalPositionalEncoding`: `exp` of a `log` in float32,
the angle a float32 product): named `angle-precision` by the variant that forms them so
(posenc/impl/angle_diagnosis.py `float32_frequency_variant`), within the record's own tolerance, where the
spec's float64 frequencies are past it at positions near 2^20."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np
from posenc.check.registry import all_cases
from posenc.check.run_impl import run_implementations
from posenc.impl import Implementation
from posenc.impl.diagnosis import diagnose
from posenc_np.testing import Tolerance


def torch_exp_log_frequencies(positions, dim, *, base=10000.0, layout="concat", denominator="half-1", dtype=None):
    """mlx's formula written in torch float32 (another library's exp and log): `sigma = exp((1 - i/(h-1))
    (ln 1 - ln(1/base)) + ln(1/base))`, `y = t * sigma`, `[sin y | cos y]` or `[cos y | sin y]`."""
    torch = pytest.importorskip("torch")
    assert denominator == "half-1" and layout in ("concat", "concat-cos")
    half = int(dim) // 2
    one_zero = 1 - torch.arange(half, dtype=torch.float32) / (half - 1)
    low = torch.log(torch.tensor(1.0 / base, dtype=torch.float32))
    sigma = torch.exp(one_zero * (0 - low) + low)
    y = torch.from_numpy(np.asarray(positions, np.float32))[..., None] * sigma
    parts = [torch.sin(y), torch.cos(y)] if layout == "concat" else [torch.cos(y), torch.sin(y)]
    return torch.cat(parts, -1).double().numpy()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("layout", ["concat", "concat-cos"])
def test_float32_frequencies_at_random_long_positions_are_named(seed, layout):
    """Random positions in [2^19, 2^20): the planted output is caught under the float32 angle bound
    2 eps32 t_max (the checker's term) and named by the variant, which reproduces it within that bound
    (torch's and NumPy's float32 exp differ by an ulp: 2^-24 x 2^20 = 0.06 rad at most)."""
    rng = np.random.default_rng(seed)
    positions = np.sort(rng.integers(2**19, 2**20, size=12)).astype(np.float64)
    kwargs = dict(layout=layout, denominator="half-1")
    desired = posenc_np.sinusoidal(positions, 32, **kwargs)
    actual = torch_exp_log_frequencies(positions, 32, **kwargs)
    tol = Tolerance(2 * 2.0**-24 * positions.max(), "float32 angles")
    assert np.abs(actual - desired).max() > tol.atol  # the planted mismatch is caught
    found = diagnose(actual, desired, tol, encoding="sinusoidal", args=(positions, 32), kwargs=kwargs,
                     dtype="float32", spec_fn=lambda *a, **k: posenc_np.sinusoidal(*a, **k))
    assert found.name == "angle-precision" and "as a float32 product" in found.sentence


def test_a_wrong_frequency_is_not_named_by_the_float32_variant():
    """Frequencies 1e-5 off (a wrong constant, not float32 rounding): 5 rad at 2^19, no variant holds it."""
    rng = np.random.default_rng(3)
    positions = np.sort(rng.integers(2**19, 2**20, size=12)).astype(np.float64)
    desired = posenc_np.sinusoidal(positions, 32)
    actual = posenc_np.sinusoidal(positions * (1 + 1e-5), 32)
    tol = Tolerance(2 * 2.0**-24 * positions.max(), "float32 angles")
    found = diagnose(actual, desired, tol, encoding="sinusoidal", args=(positions, 32), kwargs={},
                     dtype="float32", spec_fn=lambda *a, **k: posenc_np.sinusoidal(*a, **k))
    assert "as a float32 product" not in found.sentence


def test_the_long_case_through_check_names_the_variant():
    """`sinusoidal/fairseq/long` through the checker: caught and named by the variant itself, not by the looser
    2x float32 bound."""
    cases = [c for c in all_cases() if c.id == "sinusoidal/fairseq/long"]
    assert len(cases) == 1
    impl = Implementation("planted", "numpy", {"sinusoidal": torch_exp_log_frequencies})
    ((status, name, detail),) = {(r.status, r.diagnosis, r.diagnosis_detail)
                                 for r in run_implementations(cases, [impl], dtypes=["float32"])}
    assert (status, name) == ("fail", "angle-precision") and "as a float32 product" in detail
