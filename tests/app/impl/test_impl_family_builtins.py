"""The built-ins of the non-RoPE families run to verdicts on the registry (float32): transformers' sinusoid
builders (Whisper, Marian, M2M100, XGLM) and ViT-family grid resizes (ViT, CLIP, SigLIP, Dinov2, Dinov2 with
registers, Siglip2), timm's `resample_abs_pos_embed` / `build_sincos2d_pos_embed`, torch's `F.interpolate`,
diffusers' timestep and 2-D sin-cos tables and MLX's `nn` encodings: each passes every case it can express and
expresses at least one (skips carry their reasons)."""

from __future__ import annotations

import pytest

from posenc.check.registry import all_cases
from posenc.check.run_impl import run_implementations
from posenc.impl.builtin import builtin_status, load_builtin

FAMILIES = ("sinusoidal", "resize", "alibi")


@pytest.mark.parametrize("builtin, names", [
    ("transformers", ("transformers-whisper", "transformers-marian", "transformers-m2m100", "transformers-xglm",
                      "transformers-vit", "transformers-clip", "transformers-siglip", "transformers-dinov2",
                      "transformers-dinov2-reg", "transformers-siglip2")),
    ("timm", ("timm",)),
    ("torch", ("torch-interpolate",)),
    ("diffusers", ("diffusers",)),
])
def test_family_builtins_pass_what_they_express(builtin, names):
    if not builtin_status(builtin)[0]:
        pytest.skip(f"{builtin} is not installed")
    impls = [i for i in load_builtin(builtin) if i.name in names]
    assert [i.name for i in impls] == list(names)
    cases = [c for c in all_cases() if c.family in FAMILIES and c.fn is None]
    records = run_implementations(cases, impls, dtypes=["float32"])
    for name in names:
        mine = [r for r in records if r.backend == name]
        bad = [(r.convention, r.case, r.status, r.diagnosis, r.message[:120]) for r in mine
               if r.status in ("fail", "error")]
        assert not bad, (name, bad)
        assert any(r.status == "pass" for r in mine), f"{name} expressed no case"
        assert all(r.message for r in mine if r.status == "skip")


def test_diffusers_sd_timesteps_are_the_concat_cos_sinusoid():
    """diffusers' get_timestep_embedding(flip_sin_to_cos=True, downscale_freq_shift=0), SD/Flux's timestep path,
    equals sinusoidal(layout="concat-cos") at float timesteps (float32 class)."""
    if not builtin_status("diffusers")[0]:
        pytest.skip("diffusers is not installed")
    (impl,) = load_builtin("diffusers")
    cases = [c for c in all_cases() if c.convention == "diffusers-sd"]
    records = run_implementations(cases, [impl], dtypes=["float32"])
    assert records and all(r.status == "pass" for r in records), [(r.case, r.status) for r in records]
