"""`posenc port` for DynamicPositionEncoding's projection between frameworks: a torch state dict
(`proj.weight [out, in]`, `proj.bias`) becomes Keras/Flax names with the declared transpose
(`kernel = weight.T`), the tool verifies the port, and the ported modules agree with torch and the spec.
Without the transpose rule the square kernel is ported as is and the outputs disagree: nothing is
transposed silently."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import posenc_np as pn
from posenc import cli
from posenc.formats import open_reader
from posenc_np.testing import compare, tolerance

DIM, SEQ = 8, 6
X = np.random.default_rng(0).normal(size=(2, SEQ, DIM)).astype(np.float32)


@pytest.fixture(scope="module")
def torch_source(tmp_path_factory):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    import posenc_torch

    torch.manual_seed(0)
    module = posenc_torch.DynamicPositionEncoding(DIM)
    path = tmp_path_factory.mktemp("port") / "dynamic.safetensors"
    save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(path))
    return path, module(torch.from_numpy(X)).detach().numpy()


def _port(source, target, *, transpose=True):
    argv = ["port", source, target, "--rename", "proj.weight=proj.kernel", "--rename", "proj.bias=proj.bias"]
    return cli.main([str(a) for a in argv + (["--transpose", "proj.weight"] if transpose else [])])


def _tol(out):
    return tolerance("float32", scale=float(np.abs(out).max()), slack_ulps=2.0 * DIM)


def _ported_outputs(tensors):
    """Outputs of the Keras and Flax modules loaded with the ported `proj.kernel` / `proj.bias`."""
    outputs = {}
    if importlib.util.find_spec("tensorflow"):  # installed: the backend must import (no silent skip)
        import posenc_tf

        layer = posenc_tf.DynamicPositionEncoding(DIM)
        layer.proj.kernel.assign(tensors["proj.kernel"])
        layer.proj.bias.assign(tensors["proj.bias"])
        outputs["tf"] = np.asarray(layer(X))
    if importlib.util.find_spec("flax"):
        from flax import nnx

        import posenc_jax

        module = posenc_jax.DynamicPositionEncoding(DIM, rngs=nnx.Rngs(0))
        module.proj.kernel[...] = tensors["proj.kernel"]
        module.proj.bias[...] = tensors["proj.bias"]
        outputs["jax"] = np.asarray(module(X))
    return outputs


def test_port_with_the_declared_transpose_agrees_across_frameworks(torch_source, tmp_path):
    source, torch_out = torch_source
    assert _port(source, tmp_path / "dynamic.npz") == 0  # 0: verified by the tool
    reader = open_reader(str(tmp_path / "dynamic.npz"))
    tensors = {name: reader.get(name) for name in reader.names()}
    src = open_reader(str(source))
    np.testing.assert_array_equal(tensors["proj.kernel"], src.get("proj.weight").T)
    spec = pn.dynamic_position_encoding(X.astype(np.float64), src.get("proj.weight").astype(np.float64),
                                        src.get("proj.bias").astype(np.float64))
    assert compare(torch_out, spec, _tol(spec)).passed
    outputs = _ported_outputs(tensors)
    assert outputs, "neither Keras nor Flax is installed"
    for name, out in outputs.items():
        result = compare(out, spec, _tol(spec))
        assert result.passed, (name, result.max_abs_err, result.atol)


def test_port_without_the_transpose_is_caught_by_the_outputs(torch_source, tmp_path):
    source, _ = torch_source
    assert _port(source, tmp_path / "raw.npz", transpose=False) == 0  # a rename alone is a valid plan
    reader = open_reader(str(tmp_path / "raw.npz"))
    tensors = {name: reader.get(name) for name in reader.names()}
    src = open_reader(str(source))
    spec = pn.dynamic_position_encoding(X.astype(np.float64), src.get("proj.weight").astype(np.float64),
                                        src.get("proj.bias").astype(np.float64))
    for name, out in _ported_outputs(tensors).items():
        assert not compare(out, spec, _tol(spec)).passed, name
