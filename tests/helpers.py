"""Helpers shared by the tests (one copy each). tests/conftest.py puts this directory on sys.path, so a
test module writes `from helpers import assert_close`; conftest itself holds only fixtures and hooks.

Framework imports happen inside the helpers that need them, so spec tests can import this module in an
environment with only NumPy and ml_dtypes.
"""

from __future__ import annotations

import numpy as np

from posenc_np.testing import Tolerance, compare, tolerance

__all__ = ["EXACT", "FAST", "assert_close", "cli", "run_builtin", "keras_round_trip", "keras_bias_round_trip",
           "fire_layers"]

#: Bit-exact comparison (gathers, integer buckets).
EXACT = tolerance("float32", exact=True)

#: Quick in-process `posenc check` options: eager mode only, no progress output, and `--jobs 1`, so the run
#: stays in the test's process instead of spawning worker interpreters.
FAST = ["--mode", "eager", "--quiet", "--jobs", "1"]


def cli(*argv):
    """Run the `posenc` command line in-process on `argv` (paths and numbers are str()-ed); returns the exit
    code. Tests read what it printed with pytest's `capsys`."""
    from posenc.cli import main

    return main([str(a) for a in argv])


def run_builtin(name, *, select=None, dtypes=("float32",)):
    """Records of `--impl` built-in `name` over the registry's RoPE cases (`select(case)` narrows them), at
    `dtypes`; skips the test when the built-in's library is not installed."""
    import pytest

    from posenc.check.registry import all_cases
    from posenc.check.run_impl import run_implementations
    from posenc.impl.builtin import builtin_status, load_builtin

    if not builtin_status(name)[0]:
        pytest.skip(f"{name} is not installed")
    cases = [c for c in all_cases() if c.family == "rope" and (select is None or select(c))]
    return run_implementations(cases, load_builtin(name), dtypes=list(dtypes))


def assert_close(actual, desired, tol: Tolerance):
    """Assert `actual` is within `tol` of `desired`, naming the worst element and the bound."""
    result = compare(actual, desired, tol)
    assert result.passed, (f"max abs err {result.max_abs_err:.3g} at {result.worst_index} > {tol}: "
                           f"{result.message}")


def keras_round_trip(model, path):
    """Save a Keras model as .keras and load it back without `custom_objects` (the layers must be
    registered serializable); returns the loaded model."""
    import keras

    model.save(path)
    return keras.saving.load_model(path)


def keras_bias_round_trip(layer, seq_len, path):
    """Save a model around a `(q_positions, k_positions)` Keras layer as .keras, load it, and return
    (model output, loaded output, loaded layer) for positions 0..seq_len-1."""
    import keras

    positions = keras.Input(shape=(seq_len,), dtype="int32", batch_size=1)
    model = keras.Model(positions, layer(positions, positions))
    loaded = keras_round_trip(model, path)
    x = np.arange(seq_len)[None].astype(np.int32)
    return np.asarray(model(x)), np.asarray(loaded(x)), loaded.layers[-1]


def fire_layers(module):
    """FIREBias's two dense layers: torch's is an `nn.Sequential` `mlp` (Linear, ReLU, Linear) like the
    paper's code, the other frameworks name them `mlp_in` and `mlp_out`."""
    return (module.mlp[0], module.mlp[2]) if hasattr(module, "mlp") else (module.mlp_in, module.mlp_out)
