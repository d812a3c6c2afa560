"""`posenc port --resize GLOB=HxW --resize-method CONVENTION`: a ViT position grid resized as timm, HF ViT or
DINOv2 do, the written table equal to that library's own resize (timm's `resample_abs_pos_embed`, transformers'
`ViTEmbeddings.interpolate_pos_encoding`), the report naming the convention used and what each other convention
would have written; bad requests are exit 2 naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import cli

torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors.numpy")

NAME = "vit.embeddings.position_embeddings"


@pytest.fixture
def vit(tmp_path):
    """A ViT checkpoint's position table: [1, 1 + 14 * 14, 8], a smooth grid as trained tables are, and a CLS token."""
    rng = np.random.default_rng(0)
    table = np.cumsum(rng.normal(size=(197, 8)), axis=0) / 14
    path = tmp_path / "vit.safetensors"
    safetensors.save_file({NAME: table[None].astype(np.float32),
                           "vit.embeddings.cls_token": rng.normal(size=(1, 1, 8)).astype(np.float32)}, str(path))
    return path, table


def _port(vit, tmp_path, capsys, method, grid="24x24"):
    out = tmp_path / f"{method}.safetensors"
    code = cli("port", vit[0], out, "--resize", f"{NAME}={grid}", "--resize-method", method)
    captured = capsys.readouterr()
    return code, captured.out + captured.err, (safetensors.load_file(str(out))[NAME] if code == 0 else None)


def test_timm_convention_writes_what_timm_resample_abs_pos_embed_gives(vit, tmp_path, capsys):
    from posenc.impl.builtin import builtin_status
    from posenc.impl.builtin.timm import layers_module

    if not builtin_status("timm")[0]:
        pytest.skip("timm is not installed")
    code, text, got = _port(vit, tmp_path, capsys, "timm")
    assert code == 0 and got.shape == (1, 577, 8), text
    want = layers_module("pos_embed").resample_abs_pos_embed(torch.tensor(vit[1][None], dtype=torch.float32),
                                                             [24, 24], old_size=[14, 14], num_prefix_tokens=1)
    # float32 both ways: the same kernel, summed in another order
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=2e-6 * np.ptp(vit[1]))
    assert "convention timm" in text and "hf-vit 1.1%" in text and "dinov2-reg the same" in text


def test_hf_vit_convention_writes_what_vit_interpolate_pos_encoding_gives(vit, tmp_path, capsys):
    from transformers.models.vit.modeling_vit import ViTConfig, ViTEmbeddings

    code, text, got = _port(vit, tmp_path, capsys, "hf-vit", "10x10")
    assert code == 0 and got.shape == (1, 101, 8), text
    module = ViTEmbeddings(ViTConfig(hidden_size=8, image_size=28, patch_size=2, num_attention_heads=1,
                                     num_hidden_layers=1, intermediate_size=4)).double()
    with torch.no_grad():
        module.position_embeddings.copy_(torch.tensor(vit[1][None]))
        want = module.interpolate_pos_encoding(torch.zeros(1, 101, 8, dtype=torch.float64), 20, 20)
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=2e-6 * np.ptp(vit[1]))
    assert "convention hf-vit" in text and "timm " in text and "dinov2 " in text


def test_dinov2_convention_samples_the_scale_factor_grid(vit, tmp_path, capsys):
    import posenc_np

    code, text, got = _port(vit, tmp_path, capsys, "dinov2", "10x10")
    assert code == 0, text
    want = posenc_np.resize_grid(vit[1].astype(np.float32).astype(np.float64), (14, 14), (10, 10), method="cubic",
                                 scale=(10.1 / 14, 10.1 / 14), prefix_tokens=1)
    np.testing.assert_allclose(got[0], want, rtol=0, atol=2e-6 * np.ptp(vit[1]))
    assert "convention dinov2" in text


@pytest.mark.parametrize("args, words", [
    (("--resize", f"{NAME}=24x24", "--resize-method", "linear"), "is a grid: --resize-method is one of timm"),
    (("--resize", f"{NAME}=24x24", "--prefix-tokens", "2"), "is not a square grid (give --prefix-tokens)"),
    (("--resize", f"{NAME}=24x0"), "is not a valid value"),
])
def test_a_grid_resize_that_cannot_be_done_is_exit_2_naming_it(vit, tmp_path, capsys, args, words):
    out = tmp_path / "out.safetensors"
    code = cli("port", vit[0], out, *args)
    text = capsys.readouterr().err
    assert code == 2 and words in text, text
    assert not out.exists()
