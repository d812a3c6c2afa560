"""ALiBi spec against HF BLOOM's own `build_alibi_tensor` (transformers 5.x, models/bloom/modeling_bloom.py):
the "bloom" form with padding-aware key positions (cumsum of the attention mask), float32 tolerance."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np as pn
from helpers import assert_close
from posenc_np.testing import tolerance


@pytest.mark.parametrize("num_heads", [4, 6, 16])
def test_bloom_form_matches_hf_build_alibi_tensor(num_heads):
    torch = pytest.importorskip("torch")
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    mask = np.array([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1]])
    hf = bloom.build_alibi_tensor(torch.from_numpy(mask), num_heads, torch.float32).numpy()
    hf = hf.reshape(mask.shape[0], num_heads, 1, mask.shape[1])
    positions = (np.cumsum(mask, axis=-1) - 1) * mask  # BLOOM's padding-aware key positions
    ours = pn.alibi_bias(num_heads, positions[:, -1:], positions, form="bloom")  # [batch, heads, 1, k]
    assert_close(hf, ours, tolerance("float32", scale=np.abs(ours).max()))
