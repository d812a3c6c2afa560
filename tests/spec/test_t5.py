"""T5 buckets and bias, spec: golden buckets and their semantics, the integer thresholds the backends use
reproduce the buckets, shapes, validation.

NumPy and ml_dtypes only. HF transformers' `T5Attention` (bucketing at every distance in +-4 max_distance,
`compute_bias`): tests/reference/test_t5_reference.py; backends against the spec: the registry's t5 cases
(tests/backends/test_conformance.py); modules: tests/backends/test_bias_modules.py."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from posenc_np.t5 import t5_bucket_thresholds

# (num_buckets, max_distance): the T5 default, other published sizes, and (18, 128), where a float64
# log would put distances 8, 16 and 64 into different buckets than HF's float32 arithmetic.
CONFIGS = [(32, 128), (32, 256), (64, 256), (128, 128), (16, 64), (8, 16), (18, 128), (4, 3)]


# --- spec -------------------------------------------------------------------------------------------

def test_bucket_golden_and_semantics():
    relative = np.array([-200, -128, -127, -16, -8, -7, -1, 0, 1, 7, 8, 16, 127, 128, 200])
    np.testing.assert_array_equal(pn.t5_bucket(relative), [15, 15, 15, 10, 8, 7, 1, 0, 17, 23, 24, 26, 31, 31, 31])
    # decoder: every future key (relative > 0) shares bucket 0 with the current position
    assert set(pn.t5_bucket(np.arange(0, 300), bidirectional=False).tolist()) == {0}


@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
@pytest.mark.parametrize("num_buckets, max_distance", CONFIGS)
def test_thresholds_reproduce_buckets(num_buckets, max_distance, bidirectional):
    """What the backends compute: min(n, max_exact) + count(thresholds <= n), integers only."""
    thresholds = t5_bucket_thresholds(bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert np.all(np.diff(thresholds) >= 0)  # equal thresholds: one distance step that skips a bucket
    distance = np.arange(0, 5 * max_distance)
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    counted = np.minimum(distance, per_direction // 2) + np.searchsorted(thresholds, distance, side="right")
    np.testing.assert_array_equal(counted, pn.t5_bucket(-distance, bidirectional=bidirectional,
                                                         num_buckets=num_buckets, max_distance=max_distance))


def test_bias_shapes():
    table = np.arange(64.0).reshape(32, 2)
    assert pn.t5_bias(table, np.arange(3), np.arange(5)).shape == (2, 3, 5)
    batched = pn.t5_bias(table, np.array([[0, 1, 2], [4, 5, 6]]), np.arange(7))
    assert batched.shape == (2, 2, 3, 7)
    np.testing.assert_array_equal(batched[1], pn.t5_bias(table, np.arange(4, 7), np.arange(7)))


@pytest.mark.parametrize("call, match", [
    (lambda: pn.t5_bucket(np.arange(3), num_buckets=31), "num_buckets=31 must be even"),
    (lambda: pn.t5_bucket(np.arange(3), max_distance=8), "max_distance=8 must be larger"),
    (lambda: pn.t5_bucket(np.arange(3), num_buckets=16, max_distance=4), "max_distance=4"),
    (lambda: pn.t5_bucket(np.arange(3), num_buckets=2), "num_buckets=2"),
    (lambda: pn.t5_bucket(np.array([0.5, 1.0])), "relative_position"),
    (lambda: pn.t5_bias(np.zeros((16, 4)), np.arange(3), np.arange(3)), "table must have 32 rows"),
    (lambda: pn.t5_bias(np.zeros(32), np.arange(3), np.arange(3)), "table must be 2-D"),
    (lambda: pn.t5_bias(np.zeros((32, 4)), np.array([0.0, 1.5]), np.arange(3)), "q_positions"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
