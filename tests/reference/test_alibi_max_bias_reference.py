"""ALiBi `max_bias` against HF MPT's own `build_mpt_alibi_tensor(num_heads, sequence_length, alibi_bias_max)`
(transformers 5.x, models/mpt/modeling_mpt.py): the `mpt-alibi` convention (causal form, every query at the last
position L - 1) with `max_bias = alibi_bias_max`, float32 tolerance."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from helpers import assert_close
from posenc_np.conventions import conventions
from posenc_np.testing import tolerance


@pytest.mark.parametrize("num_heads", [4, 12, 40, 56])
@pytest.mark.parametrize("alibi_bias_max", [4, 8, 16])
def test_mpt_alibi_is_the_convention_with_max_bias(num_heads, alibi_bias_max):
    pytest.importorskip("torch")
    mpt = pytest.importorskip("transformers.models.mpt.modeling_mpt")
    length = 50
    hf = mpt.build_mpt_alibi_tensor(num_heads, length, alibi_bias_max=alibi_bias_max).double().numpy()  # [H, 1, L]
    params = {**conventions["mpt-alibi"].params, "max_bias": float(alibi_bias_max)}
    ours = pn.alibi_bias(num_heads, np.array([length - 1]), np.arange(length), **params)
    # HF: float32 slopes 1 / 2**(k max / N) times exact integer distances < 2**24: a float32 rounding of each value
    assert_close(hf, ours, tolerance("float32", scale=np.abs(ours).max()))
    if alibi_bias_max != 8:  # and the paper's slopes would not do
        assert np.abs(hf - pn.alibi_bias(num_heads, np.array([length - 1]), np.arange(length), form="causal")).max() > 1
