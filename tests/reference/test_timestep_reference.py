"""Diffusion timestep embeddings against diffusers' own `get_timestep_embedding` (diffusers/models/embeddings.py,
the installed diffusers): each diffusers convention of the registry (`diffusers-sd`, `ddpm`, `diffusers-dit`)
equals `sinusoidal(t, dim, **params)` for float timesteps, and the DiT mismatch the research measured is there:
diffusers' DiT path (downscale_freq_shift=1) differs from the divide-by-half DiT formula."""

from __future__ import annotations

import numpy as np
import pytest

import posenc_np
from posenc_np.conventions import conventions

torch = pytest.importorskip("torch")
embeddings = pytest.importorskip("diffusers.models.embeddings")

TIMESTEPS = np.array([0.0, 1.0, 17.5, 250.0, 999.0])
#: diffusers computes in float32: exp of float32 exponents and float32 angles t * w (t <= 999), |error| <=
#: ~1e3 * 2**-24 * 2 rad on the angle plus float32 sin/cos rounding
TOL = 2e-4


@pytest.mark.parametrize("name, flip, shift", [("diffusers-sd", True, 0), ("ddpm", False, 1),
                                               ("diffusers-dit", True, 1)])
@pytest.mark.parametrize("dim", [64, 320])
def test_diffusers_timestep_embedding_is_the_convention(name, flip, shift, dim):
    got = embeddings.get_timestep_embedding(torch.tensor(TIMESTEPS, dtype=torch.float32), dim,
                                            flip_sin_to_cos=flip, downscale_freq_shift=shift).double().numpy()
    want = posenc_np.sinusoidal(TIMESTEPS, dim, **conventions[name].params)
    assert np.abs(got - want).max() < TOL


def test_the_sd_convention_is_the_concat_cos_layout_and_dit_differs_from_its_paper():
    dim = 256
    sd = posenc_np.sinusoidal(TIMESTEPS, dim, layout="concat-cos")
    assert np.array_equal(sd[:, : dim // 2], np.cos(TIMESTEPS[:, None] * posenc_np.sinusoid_inv_freq(dim)))
    # facebookresearch/DiT's TimestepEmbedder: freqs exp(-ln(10000) i / half), [cos | sin] = diffusers-sd's formula
    paper = posenc_np.sinusoidal(TIMESTEPS, dim, **conventions["diffusers-sd"].params)
    dit = posenc_np.sinusoidal(TIMESTEPS, dim, **conventions["diffusers-dit"].params)
    gap = np.linalg.norm(paper[-1] - dit[-1])
    assert gap > 1.0, gap  # the research: 1.94 apart at t=999 (hidden size 256)
