"""`sinusoidal_2d` and ALiBi `max_bias` in every backend beyond the numbers: validation (written once in posenc_np,
raised by every backend, naming the argument), the ALiBi module's `max_bias` and its Keras config.

The values on every backend x dtype x mode are the registry's sinusoidal_2d (mae-2d, diffusers-2d, timm-sincos2d,
big-vision-2d) and mpt-alibi / ggml-alibi cases (tests/backends/test_conformance.py)."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from helpers import assert_close
from posenc_np.testing import tolerance

GRID = np.stack(np.meshgrid(np.arange(3), np.arange(4), indexing="ij"), axis=-1)


@pytest.mark.parametrize("kwargs, match", [
    (dict(positions=np.zeros((4, 3), np.int64)), "positions must have a last axis of size 2"),
    (dict(dim=6), "dim=6 must be divisible by 4"),
    (dict(axis_order="hw"), "axis_order"),
    (dict(blocks="sin-cos", layout="interleaved"), "layout"),
])
def test_sinusoidal_2d_bad_input(backend, kwargs, match):
    args = dict(positions=GRID, dim=16)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        backend.module.sinusoidal_2d(backend.from_numpy(args.pop("positions")), args.pop("dim"), **args)


@pytest.mark.parametrize("max_bias", [0.0, -1.0, float("nan"), float("inf")])
def test_alibi_max_bias_bad_input(backend, max_bias):
    module = backend.module
    with pytest.raises(ValueError, match="max_bias"):
        module.alibi_slopes(4, max_bias=max_bias)
    with pytest.raises(ValueError, match="max_bias"):
        module.alibi_bias(4, np.arange(3), np.arange(3), max_bias=max_bias)
    with pytest.raises(ValueError, match="max_bias"):
        module.ALiBi(4, max_bias=max_bias)


def test_alibi_module_max_bias(backend):
    q, k = np.arange(3, 8), np.arange(8)
    layer = backend.module.ALiBi(12, form="causal", max_bias=4.0)
    actual = backend.to_numpy(layer(backend.from_numpy(q), backend.from_numpy(k)))
    desired = pn.alibi_bias(12, q, k, form="causal", max_bias=4.0)
    assert_close(actual, desired, tolerance("float32", scale=np.abs(desired).max()))
    assert np.abs(desired - pn.alibi_bias(12, q, k, form="causal")).max() > 0.5  # the default would not pass


def test_keras_alibi_config_keeps_max_bias(require_backend):
    posenc_tf = require_backend("tf")
    layer = posenc_tf.ALiBi(12, form="symmetric", max_bias=16.0)
    assert layer.get_config()["max_bias"] == 16.0
    again = posenc_tf.ALiBi.from_config(layer.get_config())
    q = np.arange(6)
    assert_close(again(q, q).numpy(), pn.alibi_bias(12, q, q, max_bias=16.0), tolerance("float32", scale=6.0))
