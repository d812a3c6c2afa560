"""posenc_torch.apply_rope's eager fast path (docs/performance.md, "Decode"): a call whose parameters,
shapes, dtypes and devices were checked before skips the checks; the cos/sin of one positions tensor
serve the next call. These tests hold it to the spec and to the general path, and show that nothing it
keeps outlives what it depends on (an in-place write to the positions, another table, inference mode).
"""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from posenc_np.testing import compare, tolerance

torch = pytest.importorskip("torch")
import posenc_torch as pt  # noqa: E402
from posenc_torch import rope as rope_module  # noqa: E402

POSITIONS = [0, 7, 4095, 4096, 70_000, 2]  # inside the 4096-row table and beyond it


@pytest.fixture(autouse=True)
def _fresh():
    rope_module._EAGER.clear()
    rope_module._LAST[0] = None
    yield
    rope_module._EAGER.clear()
    rope_module._LAST[0] = None


def _want(x, positions, **kwargs):
    return pn.apply_rope(x.double().numpy(), np.asarray(positions), **kwargs)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("shape", [(2, 3, 6, 16), (4, 8, 6, 2048)], ids=["small", "large"])
def test_repeated_calls_match_spec(dtype, layout, shape):
    """The first call (checks, plan) and the repeated ones (prepared) agree with the spec and each other;
    "small" takes the one-pass rotation, "large" the chunked halves."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(getattr(torch, dtype))
    desired = _want(x, POSITIONS, layout=layout)
    results = []
    for positions in (torch.tensor(POSITIONS), torch.tensor(POSITIONS, dtype=torch.int32)):
        for _ in range(2):
            results.append(pt.apply_rope(x, positions, layout=layout))
    assert len(rope_module._EAGER) == 2  # one prepared entry per positions dtype
    for got in results:
        assert got.dtype == x.dtype
        check = compare(got.double().numpy(), desired, tolerance(dtype, max_angle=70_000, scale=np.abs(desired).max()))
        assert check.passed, check
    assert all(torch.equal(results[0], r) for r in results[1:])


def test_positions_written_in_place_are_read_again():
    """The kept cos/sin belong to the positions' version: an in-place write makes the next call recompute."""
    x = torch.randn(1, 2, 3, 8)
    positions = torch.tensor([1, 2, 3])
    first = pt.apply_rope(x, positions)
    positions.add_(5000)  # beyond the table now
    again = pt.apply_rope(x, positions)
    check = compare(again.double().numpy(), _want(x, positions), tolerance("float32", max_angle=6000))
    assert check.passed, check
    assert not torch.allclose(first, again)


def test_other_parameters_do_not_share_cos_sin():
    """The same positions tensor with another base (another table) gets its own cos/sin."""
    x = torch.randn(1, 2, 3, 8)
    positions = torch.tensor([1, 2, 3])
    pt.apply_rope(x, positions)
    got = pt.apply_rope(x, positions, base=500.0)
    check = compare(got.double().numpy(), _want(x, positions, base=500.0), tolerance("float32", max_angle=10))
    assert check.passed, check


def test_inference_mode_and_autograd():
    """Inference tensors (no version counter) take the path without keeping cos/sin; a tensor that
    requires grad gets the same gradient as through the spec's (orthogonal) rotation."""
    x = torch.randn(1, 2, 3, 8)
    with torch.inference_mode():
        positions = torch.tensor([1, 2, 4097])
        got = pt.apply_rope(x, positions)
        assert rope_module._LAST[0] is None
    check = compare(got.double().numpy(), _want(x, [1, 2, 4097]), tolerance("float32", max_angle=5000))
    assert check.passed, check
    leaf = x.clone().requires_grad_(True)
    positions = torch.tensor([1, 2, 4097])
    for _ in range(2):  # the second call is the prepared one
        leaf.grad = None
        pt.apply_rope(leaf, positions).sum().backward()
    # d(sum R x)/dx = R^T 1: the rotation by the negated angles of a ones vector
    ones = np.ones((1, 2, 3, 8))
    want = pn.apply_rope(ones, -np.array([1, 2, 4097]))
    check = compare(leaf.grad.double().numpy(), want, tolerance("float32", max_angle=5000))
    assert check.passed, check


def test_checks_still_run_for_new_keys():
    """A prepared call never hides an error: float positions, or a shape that does not broadcast, raise."""
    x = torch.randn(1, 2, 3, 8)
    pt.apply_rope(x, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="positions must be an integer"):
        pt.apply_rope(x, torch.tensor([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError):
        pt.apply_rope(x, torch.tensor([0, 1, 2, 3]))
    with pytest.raises(ValueError):
        pt.apply_rope(x, torch.tensor([0, 1, 2]), out=torch.empty(1, 2, 3, 4))
