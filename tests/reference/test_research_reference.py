"""The research encodings' spec against installed reference code: transformers' own DeBERTa-v2 functions
(`make_log_bucket_position`, `build_relative_position`) and PyTorch's `nn.Linear` for the dynamic encoding."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pe
from posenc_np.testing import tolerance

# --- DeBERTa: transformers' own functions ---------------------------------------------------------------

@pytest.mark.parametrize("bucket_size, max_position", [(256, 512), (8, 64), (4, 16), (32, 128), (256, 1024)])
def test_deberta_log_buckets_equal_transformers(bucket_size, max_position):
    torch = pytest.importorskip("torch")
    hf = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")
    relative = np.arange(-6 * max_position, 6 * max_position + 1)
    expected = hf.make_log_bucket_position(torch.tensor(relative), bucket_size, max_position).long().numpy()
    np.testing.assert_array_equal(pe.make_log_bucket_position(relative, bucket_size, max_position), expected)


@pytest.mark.parametrize("q_len, k_len, bucket_size, max_position", [(7, 7, -1, -1), (5, 300, 256, 512), (40, 9, 8, 64)])
def test_deberta_build_relative_position_equals_transformers(q_len, k_len, bucket_size, max_position):
    torch = pytest.importorskip("torch")
    hf = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")
    expected = hf.build_relative_position(torch.zeros(1, q_len, 4), torch.zeros(1, k_len, 4), bucket_size=bucket_size,
                                          max_position=max_position).numpy()
    ours = pe.build_relative_position(np.arange(q_len), np.arange(k_len), bucket_size=bucket_size,
                                      max_position=max_position)
    np.testing.assert_array_equal(ours[None], expected)


# --- the dynamic encoding: PyTorch's nn.Linear ------------------------------------------------------------

def test_dynamic_encoding_equals_nn_linear_over_the_sinusoid():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 8).double()
    x = np.random.default_rng(0).normal(size=(2, 5, 8))
    table = torch.tensor(pe.sinusoidal(np.arange(5), 8))
    expected = (torch.tensor(x) + linear(table)).detach().numpy()
    ours = pe.dynamic_position_encoding(x, linear.weight.detach().numpy(), linear.bias.detach().numpy())
    np.testing.assert_allclose(ours, expected, rtol=0, atol=tolerance("float64", scale=4.0).atol)
