"""`resize_grid` under each resize convention against the code that ships it: torch `F.interpolate` (size and
`scale_factor` grids, antialias), transformers 5.24 `interpolate_pos_encoding` of ViT, CLIP, SigLIP, Dinov2 and
Dinov2-with-registers and Siglip2's `resize_positional_embeddings` (tiny random configs, nothing downloaded),
facebookresearch/dinov2's `interpolate_pos_encoding` (transcribed: the package is not installed), and timm 1.0.31's
`resample_abs_pos_embed` (its `layers/pos_embed.py` loaded by file path: `import timm` needs torchvision).

Tolerances: float64 references agree to rounding (1e-12, sums of at most a few dozen terms of size <= the table's
range); float32 references (Dinov2, Dinov2-reg, timm, Siglip2 compute in float32) to 1e-5 of the table's range
(float32 unit roundoff 6e-8 times the sum of |weights| <= 1.3, with margin for the float32 weights themselves).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc_np as pn
from posenc_np.conventions import conventions

torch = pytest.importorskip("torch")
F = torch.nn.functional

F32_TOL = 1e-5  # of the table's range; see the module docstring


def _table(rows, dim, seed=0):
    """A smooth table like a trained position grid (a random walk over the rows), range about 1-3."""
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.normal(size=(rows, dim)), axis=0) / math.sqrt(rows)


def _interpolate(grid, old, new=None, *, scale=None, mode="bicubic", antialias=False, align_corners=False,
                 dtype=torch.float64):
    """`F.interpolate` on a `[old_h * old_w, dim]` grid as the ViT resizers call it: `[1, dim, h, w]`."""
    x = torch.tensor(grid, dtype=dtype).reshape(1, old[0], old[1], -1).permute(0, 3, 1, 2)
    kwargs = {"size": new} if scale is None else {"scale_factor": scale}
    y = F.interpolate(x, mode=mode, antialias=antialias, align_corners=align_corners, **kwargs)
    return y.permute(0, 2, 3, 1).reshape(-1, x.shape[1]).double().numpy()


def _grid_kwargs(name, prefix_tokens):
    """The convention's `resize_grid` keywords, with the model's prefix rows."""
    return {**conventions[name].params, "prefix_tokens": prefix_tokens}


# --- torch F.interpolate: the kernel and grid definitions ----------------------------------------------------

GRIDS = [((6, 6), (9, 9)), ((9, 9), (4, 4)), ((5, 7), (8, 3)), ((2, 8), (4, 4)), ((7, 4), (7, 4))]


@pytest.mark.parametrize("old, new", GRIDS)
@pytest.mark.parametrize("method, antialias", [("cubic", False), ("cubic", True), ("linear", False),
                                               ("linear", True)])
def test_resize_grid_equals_torch_interpolate_size(old, new, method, antialias):
    """Size grid, with and without torch's antialiased kernel (its bicubic AA uses a = -0.5)."""
    table = _table(old[0] * old[1], 5)
    mode = {"cubic": "bicubic", "linear": "bilinear"}[method]
    reference = _interpolate(table, old, new, mode=mode, antialias=antialias)
    cubic_a = -0.5 if antialias else -0.75
    ours = pn.resize_grid(table, old, new, method=method, antialias=antialias, cubic_a=cubic_a)
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-12)


@pytest.mark.parametrize("old, scale", [((8, 8), (1.3, 1.3)), ((8, 6), (0.55, 1.7)), ((37 // 3, 9), (0.5, 2.0)),
                                        ((5, 5), (2.02, 2.02))])
@pytest.mark.parametrize("antialias", [False, True])
def test_resize_grid_equals_torch_interpolate_scale_factor(old, scale, antialias):
    """`scale_factor=` samples at (i + 0.5) / scale - 0.5 with the scale as given (output size floor(L * scale)),
    not at N / L: the two grids differ whenever L * scale is not an integer."""
    table = _table(old[0] * old[1], 4, seed=3)
    reference = _interpolate(table, old, scale=scale, antialias=antialias)
    new = tuple(int(math.floor(n * s)) for n, s in zip(old, scale, strict=True))
    ours = pn.resize_grid(table, old, new, scale=scale, antialias=antialias, cubic_a=-0.5 if antialias else -0.75)
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-12)
    if all(n * s != int(n * s) for n, s in zip(old, scale, strict=True)):
        size_grid = pn.resize_grid(table, old, new, antialias=antialias, cubic_a=-0.5 if antialias else -0.75)
        assert np.abs(size_grid - reference).max() > 1e-3


def test_resize_table_antialias_equals_torch_in_the_wide_orientation():
    """1-D `resize_table(antialias=True)` equals torch on a `[1, C, 1, L]` image (the orientation torch gets right)."""
    table = _table(16, 3, seed=5)
    for new_len, mode, method, cubic_a in ((24, "bilinear", "linear", -0.75), (7, "bicubic", "cubic", -0.5),
                                           (40, "bicubic", "cubic", -0.5)):
        x = torch.tensor(table.T[None, :, None, :])
        reference = F.interpolate(x, size=(1, new_len), mode=mode, antialias=True)[0, :, 0, :].T.numpy()
        ours = pn.resize_table(table, new_len, method=method, antialias=True, cubic_a=cubic_a)
        np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-12)


def test_torch_antialias_on_a_width_one_image_repeats_one_value():
    """torch 2.13 `F.interpolate(antialias=True)` on `[N, C, L, 1]` returns its first output value along L (the
    research's finding, families-2026-12.md section 2.3): backends compute the kernel themselves, never through this
    call. This test fails when torch fixes it; then the note in the backends' `resize_table` can go."""
    x = torch.arange(16, dtype=torch.float64)[None, None, :, None]
    wrong = F.interpolate(x, size=(24, 1), mode="bilinear", antialias=True)[0, 0, :, 0].numpy()
    right = pn.resize_table(np.arange(16.0)[:, None], 24, antialias=True)[:, 0]
    assert np.ptp(wrong) == 0 and np.ptp(right) > 10


# --- transformers 5.24 interpolate_pos_encoding --------------------------------------------------------------

transformers = pytest.importorskip("transformers")

PATCH = 4
IMAGE = 32  # an 8 x 8 grid of 4-pixel patches
SIZES = [(48, 48), (20, 20), (36, 24), (24, 44), (32, 20)]  # (height, width) in pixels: up, down, non-square


def _hf_embeddings(kind):
    """Tiny random embeddings modules of transformers 5.24 and their position table `[1, rows, dim]` attribute."""
    common = dict(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
                  image_size=IMAGE, patch_size=PATCH, num_channels=3)
    torch.manual_seed(0)
    if kind == "vit":
        from transformers.models.vit.modeling_vit import ViTConfig, ViTEmbeddings
        module = ViTEmbeddings(ViTConfig(**common))
    elif kind == "dinov2":
        from transformers.models.dinov2.modeling_dinov2 import Dinov2Config, Dinov2Embeddings
        module = Dinov2Embeddings(Dinov2Config(**common))
    elif kind == "dinov2-reg":
        from transformers.models.dinov2_with_registers.modeling_dinov2_with_registers import (
            Dinov2WithRegistersConfig,
            Dinov2WithRegistersEmbeddings,
        )
        module = Dinov2WithRegistersEmbeddings(Dinov2WithRegistersConfig(**common, num_register_tokens=4))
    elif kind == "clip":
        from transformers.models.clip.modeling_clip import CLIPVisionConfig, CLIPVisionEmbeddings
        module = CLIPVisionEmbeddings(CLIPVisionConfig(**common))
    else:
        from transformers.models.siglip.modeling_siglip import SiglipVisionConfig, SiglipVisionEmbeddings
        module = SiglipVisionEmbeddings(SiglipVisionConfig(**common))
    with torch.no_grad():  # a smooth table (random init is i.i.d.), as trained tables are
        if kind in ("clip", "siglip"):
            weight = module.position_embedding.weight
            weight.copy_(torch.tensor(_table(*weight.shape, seed=7)))
        else:
            table = module.position_embeddings
            table.copy_(torch.tensor(_table(*table.shape[1:], seed=7))[None])
    return module


def _hf_table(module):
    if hasattr(module, "position_embedding"):
        return module.position_embedding.weight.detach().double().numpy()
    return module.position_embeddings.detach()[0].double().numpy()


# (model, convention, prefix rows of its position table, float64-capable: Dinov2 and Dinov2-reg cast to float32)
HF_MODELS = [("vit", "hf-vit", 1, True), ("clip", "hf-vit", 1, True), ("siglip", "hf-vit", 0, True),
             ("dinov2", "hf-vit", 1, False), ("dinov2-reg", "dinov2-reg", 1, False)]


@pytest.mark.parametrize("height, width", SIZES)
@pytest.mark.parametrize("kind, convention, prefix, exact", HF_MODELS)
def test_hf_interpolate_pos_encoding_equals_the_convention(kind, convention, prefix, exact, height, width):
    module = _hf_embeddings(kind).double() if exact else _hf_embeddings(kind)
    table = _hf_table(module)
    grid = IMAGE // PATCH
    new = (height // PATCH, width // PATCH)
    # the embeddings argument is read for its token count and width only
    tokens = torch.zeros(1, prefix + new[0] * new[1], table.shape[1], dtype=module.patch_embeddings.projection
                         .weight.dtype if hasattr(module, "patch_embeddings") else torch.float64)
    with torch.no_grad():
        reference = module.interpolate_pos_encoding(tokens, height, width)[0].double().numpy()
    ours = pn.resize_grid(table, (grid, grid), new, **_grid_kwargs(convention, prefix))
    atol = 1e-12 if exact else F32_TOL * np.ptp(table)
    np.testing.assert_allclose(ours, reference, rtol=0, atol=atol)


@pytest.mark.parametrize("new", [(4, 16), (10, 6), (16, 16), (5, 5)])
def test_siglip2_resize_positional_embeddings_equals_the_convention(new):
    from transformers.models.siglip2.modeling_siglip2 import Siglip2VisionEmbeddings
    table = _table(64, 6, seed=11)  # Siglip2 keeps an 8 x 8 grid, no prefix row
    positional = torch.tensor(table, dtype=torch.float32).reshape(8, 8, 6)
    spatial = torch.tensor([new])
    length = new[0] * new[1] + 3  # padded past the grid with the first resized row
    with torch.no_grad():
        reference = Siglip2VisionEmbeddings.resize_positional_embeddings(positional, spatial, length)[0].double()
    ours = pn.resize_grid(table, (8, 8), new, **_grid_kwargs("siglip2", 0))
    np.testing.assert_allclose(ours, reference[: new[0] * new[1]].numpy(), rtol=0, atol=F32_TOL * np.ptp(table))
    np.testing.assert_allclose(reference[new[0] * new[1]:].numpy(), np.repeat(reference[:1].numpy(), 3, axis=0))


# --- facebookresearch/dinov2 -------------------------------------------------------------------------------


def _dinov2_interpolate_pos_encoding(pos_embed, w, h, patch_size, interpolate_offset, interpolate_antialias):
    """facebookresearch/dinov2 dinov2/models/vision_transformer.py `DinoVisionTransformer.interpolate_pos_encoding`
    (b8931f7), transcribed: the package is not on PyPI. `w, h = x.shape[-2:]` there, so `w` is the image height."""
    pos_embed = pos_embed.float()
    class_pos_embed, patch_pos_embed = pos_embed[:, 0], pos_embed[:, 1:]
    n = patch_pos_embed.shape[1]
    dim = pos_embed.shape[-1]
    w0, h0 = w // patch_size, h // patch_size
    m = int(math.sqrt(n))
    assert n == m * m
    kwargs = {}
    if interpolate_offset:
        kwargs["scale_factor"] = (float(w0 + interpolate_offset) / m, float(h0 + interpolate_offset) / m)
    else:
        kwargs["size"] = (w0, h0)
    patch_pos_embed = F.interpolate(patch_pos_embed.reshape(1, m, m, dim).permute(0, 3, 1, 2), mode="bicubic",
                                    antialias=interpolate_antialias, **kwargs)
    assert (w0, h0) == patch_pos_embed.shape[-2:]
    patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).view(1, -1, dim)
    return torch.cat((class_pos_embed.unsqueeze(0), patch_pos_embed), dim=1)


def _dinov2_scale(old, new):
    """The `dinov2` convention's scale: `(new + interpolate_offset) / old` per axis."""
    offset = conventions["dinov2"].extra["interpolate_offset"]
    return tuple((n + offset) / o for n, o in zip(new, old, strict=True))


@pytest.mark.parametrize("new", [(16, 16), (24, 32), (46, 46), (64, 48), (37, 37)])
def test_dinov2_original_equals_the_convention(new):
    """DINOv2 (`interpolate_offset=0.1`: the scale_factor grid), and its `_reg` hub models (offset 0, antialias)."""
    table = _table(1 + 37 * 37, 4, seed=13)
    pos_embed = torch.tensor(table[None])
    patch = 14
    reference = _dinov2_interpolate_pos_encoding(pos_embed, new[0] * patch, new[1] * patch, patch, 0.1, False)
    ours = pn.resize_grid(table, 37, new, scale=_dinov2_scale((37, 37), new), **_grid_kwargs("dinov2", 1))
    np.testing.assert_allclose(ours, reference[0].double().numpy(), rtol=0, atol=F32_TOL * np.ptp(table))
    reference_reg = _dinov2_interpolate_pos_encoding(pos_embed, new[0] * patch, new[1] * patch, patch, 0.0, True)
    ours_reg = pn.resize_grid(table, 37, new, **_grid_kwargs("dinov2-reg", 1))
    np.testing.assert_allclose(ours_reg, reference_reg[0].double().numpy(), rtol=0, atol=F32_TOL * np.ptp(table))


def test_dinov2_original_and_hf_dinov2_differ_as_measured():
    """The research (families-2026-12.md section 2.1) measured, on a table of range 2.73, 0.130 (37 -> 16), 0.080
    (-> 24 x 32), 0.055 (-> 46), 0.044 (-> 64 x 48) between the scale_factor grid and HF's size grid. On this
    table (range of the same order) each difference is within a factor 2.5 of the measurement scaled to its range,
    and, as there, they shrink as the grid grows (the 0.1 offset matters less)."""
    table = _table(1 + 37 * 37, 8, seed=17)
    measured = {(16, 16): 0.130 / 2.73, (24, 32): 0.080 / 2.73, (46, 46): 0.055 / 2.73, (64, 48): 0.044 / 2.73}
    ours = {}
    for new in measured:
        original = pn.resize_grid(table, 37, new, scale=_dinov2_scale((37, 37), new), **_grid_kwargs("dinov2", 1))
        hf = pn.resize_grid(table, 37, new, **_grid_kwargs("hf-vit", 1))
        ours[new] = np.abs(original - hf).max() / np.ptp(table)
        assert measured[new] / 2.5 < ours[new] < measured[new] * 2.5, (new, ours[new], measured[new])
    assert ours[(16, 16)] > ours[(46, 46)] > ours[(64, 48)]


# --- timm 1.0.31 resample_abs_pos_embed -----------------------------------------------------------------------


def _timm_pos_embed():
    """timm's `layers/pos_embed.py`, loaded by path as `--impl timm` loads it (`import timm` needs torchvision)."""
    from posenc.impl.builtin import builtin_status
    from posenc.impl.builtin.timm import layers_module

    if not builtin_status("timm")[0]:
        pytest.skip("timm is not installed (pip install --no-deps -r requirements-nodeps.txt)")
    return layers_module("pos_embed")


@pytest.mark.parametrize("prefix", [0, 1, 5])
@pytest.mark.parametrize("old, new", [((14, 14), (16, 16)), ((14, 14), (24, 24)), ((16, 16), (8, 8)),
                                      ((6, 10), (9, 4)), ((2, 8), (4, 4))])
def test_timm_resample_abs_pos_embed_equals_the_convention(prefix, old, new):
    """timm's defaults (bicubic, antialias=True) and open_clip's `resize_pos_embed` (the same call)."""
    resample = _timm_pos_embed().resample_abs_pos_embed
    table = _table(prefix + old[0] * old[1], 6, seed=19)
    reference = resample(torch.tensor(table[None], dtype=torch.float32), list(new), old_size=list(old),
                         num_prefix_tokens=prefix)[0].double().numpy()
    ours = pn.resize_grid(table, old, new, **_grid_kwargs("timm", prefix))
    np.testing.assert_allclose(ours, reference, rtol=0, atol=F32_TOL * np.ptp(table))
    np.testing.assert_allclose(ours, pn.resize_grid(table, old, new, **_grid_kwargs("open-clip", prefix)))


# timm vs HF ViT as the research measured them (families-2026-12.md section 2.1), in % of the table's range
TIMM_VS_HF = {(14, 16): 1.1, (14, 24): 2.2, (24, 32): 1.0, (37, 16): 7.3, (16, 8): 4.9, (27, 64): 1.4}


def test_timm_and_hf_differ_as_measured():
    """timm's antialiased bicubic (a = -0.5, renormalised borders) and HF's plain bicubic (a = -0.75, replicated
    borders) differ by 1-7 % of the table's range. The research did not record its table, and the difference
    depends on the table's smoothness; on these random-walk tables every grid change is within a factor 2 of the
    measurement, and downsampling (where only the antialiased kernel widens) differs most, as measured."""
    resample = _timm_pos_embed().resample_abs_pos_embed
    ours = {}
    for (old, new), measured in TIMM_VS_HF.items():
        table = _table(1 + old * old, 16, seed=0)
        timm_out = resample(torch.tensor(table[None], dtype=torch.float32), [new, new], num_prefix_tokens=1)[0]
        hf = pn.resize_grid(table, old, new, **_grid_kwargs("hf-vit", 1))
        ours[old, new] = 100 * np.abs(timm_out.double().numpy() - hf).max() / np.ptp(table)
        assert measured / 2 < ours[old, new] < measured * 2, ((old, new), ours[old, new], measured)
        spec_gap = np.abs(pn.resize_grid(table, old, new, **_grid_kwargs("timm", 1)) - hf).max() / np.ptp(table)
        assert abs(100 * spec_gap - ours[old, new]) < 100 * F32_TOL  # the spec explains the whole gap
    assert min(ours[37, 16], ours[16, 8]) > max(ours[k] for k in ours if k[1] > k[0])
