"""The spec against committed reference arrays from outside posenc (see tests/spec/golden/make_golden.py)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import posenc_np as pn

GOLDEN = np.load(pathlib.Path(__file__).with_name("golden") / "golden.npz")
PROVENANCE = json.loads(str(GOLDEN["provenance"]))


def test_every_golden_has_provenance():
    inputs = {"sinusoid_positions", "resize_source", "rope_x", "rope_positions", "t5_relative", "provenance"}
    assert set(GOLDEN.files) - inputs == set(PROVENANCE)


@pytest.mark.parametrize("convention, key", [("vaswani", "sinusoid_vaswani_d8"), ("tensor2tensor", "sinusoid_t2t_d8")])
def test_sinusoid(convention, key):
    positions = GOLDEN["sinusoid_positions"]
    ours = pn.sinusoidal(positions, 8, **pn.conventions[convention].params)
    # pow vs exp(log) give inv_freq within an ulp or two (2.2e-16 relative); the angle carries that times p
    atol = 4 * np.finfo(np.float64).eps * positions.max()
    np.testing.assert_allclose(ours, GOLDEN[key], rtol=0, atol=atol)


@pytest.mark.parametrize("key, kwargs", [("resize_linear_20", {}), ("resize_linear_corners_20", {"align_corners": True}),
                                         ("resize_cubic_20", {"method": "cubic"})])
def test_resize(key, kwargs):
    np.testing.assert_allclose(pn.resize_table(GOLDEN["resize_source"], 20, **kwargs), GOLDEN[key], rtol=0, atol=1e-12)


def test_rope_half():
    ours = pn.apply_rope(GOLDEN["rope_x"], GOLDEN["rope_positions"], layout="half")
    np.testing.assert_allclose(ours, GOLDEN["rope_half"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets(bidirectional):
    key = f"t5_bucket_{'bi' if bidirectional else 'uni'}"
    ours = pn.t5_bucket(GOLDEN["t5_relative"], bidirectional=bidirectional)
    np.testing.assert_array_equal(ours, GOLDEN[key])


@pytest.mark.parametrize("n", [8, 12])
def test_alibi_slopes(n):
    np.testing.assert_allclose(pn.alibi_slopes(n), GOLDEN[f"alibi_slopes_{n}"], rtol=1e-12)
