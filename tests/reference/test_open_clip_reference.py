"""open_clip 3.3.0's own resizers, installed and run (`open_clip/model.py` `resize_pos_embed` and
`resize_text_pos_embed`, their source read from the installed file as `--impl open-clip` does: `import open_clip`
needs torchvision), against posenc's `resize_grid` under the `open-clip` convention and `resize_table(method=
"linear")`; and how far they sit from the timm and HF ViT conventions.

Tolerance: open_clip resizes a float32 table in float32 (no cast), posenc in float64, so they agree to 1e-6 of the
table's range: float32 unit roundoff 6e-8 times the sum of |weights| (<= 1.3 for the antialiased a = -0.5
kernel, 1 for linear) on inputs and weights each rounded once, with margin; measured 0.2e-6 at most.
"""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

import posenc_np as pn
from posenc.impl.builtin import builtin_status
from posenc_np.conventions import conventions

torch = pytest.importorskip("torch")
if not builtin_status("open-clip")[0]:
    pytest.skip("open_clip is not installed (pip install --no-deps -r requirements-nodeps.txt)",
                allow_module_level=True)

from posenc.impl.builtin.open_clip import functions, resize_grid, resize_table  # noqa: E402

F32_TOL = 1e-6  # of the table's range; see the module docstring


def _table(rows, dim, seed=0):
    """A smooth table like a trained position grid (a random walk over the rows), range about 1-3."""
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.normal(size=(rows, dim)), axis=0) / math.sqrt(rows)


def _open_clip_image(table, new_grid):
    """`resize_pos_embed(state_dict, model)` with open_clip's defaults, as `load_checkpoint` calls it."""
    state = {"visual.positional_embedding": torch.tensor(table, dtype=torch.float32)}
    model = types.SimpleNamespace(visual=types.SimpleNamespace(grid_size=tuple(new_grid)))
    functions()["resize_pos_embed"](state, model)
    return state["visual.positional_embedding"].double().numpy()


def _open_clip_text(table, new_len):
    """`resize_text_pos_embed(state_dict, model)` with open_clip's defaults (1-D linear)."""
    state = {"positional_embedding": torch.tensor(table, dtype=torch.float32)}
    functions()["resize_text_pos_embed"](state, types.SimpleNamespace(positional_embedding=torch.empty(new_len, 8)))
    return state["positional_embedding"].double().numpy()


def _grid(name, old, new, table):
    return pn.resize_grid(table, old, new, **{**conventions[name].params, "prefix_tokens": 1})


@pytest.mark.parametrize("old, new", [(14, (16, 16)), (14, (24, 24)), (16, (8, 8)), (7, (10, 12)), (2, (4, 4)),
                                      (6, (9, 3))])
def test_resize_pos_embed_equals_the_open_clip_convention(old, new):
    """The image tower: the class row kept, the square grid resized by torch's antialiased bicubic (a = -0.5)."""
    table = _table(1 + old * old, 6, seed=3)
    reference = _open_clip_image(table, new)
    assert reference.shape == (1 + new[0] * new[1], 6)
    np.testing.assert_allclose(_grid("open-clip", (old, old), new, table), reference, rtol=0,
                               atol=F32_TOL * np.ptp(table))
    # the built-in's `resize_grid` is that same call
    ours = resize_grid(torch.tensor(table, dtype=torch.float32), (old, old), new, method="cubic", cubic_a=-0.5,
                       antialias=True, prefix_tokens=1)
    np.testing.assert_array_equal(ours.double().numpy(), reference)


@pytest.mark.parametrize("old, new", [(77, 32), (77, 128), (16, 77), (77, 77)])
def test_resize_text_pos_embed_equals_resize_table_linear(old, new):
    """The text tower: a 1-D linear resize on the size grid, posenc's `resize_table` default."""
    table = _table(old, 8, seed=5)
    reference = _open_clip_text(table, new)
    np.testing.assert_allclose(pn.resize_table(table, new, method="linear"), reference, rtol=0,
                               atol=F32_TOL * np.ptp(table))
    np.testing.assert_array_equal(resize_table(torch.tensor(table, dtype=torch.float32), new).double().numpy(),
                                  reference)


# open_clip vs posenc's hf-vit convention, measured here on these tables (seed 0, dim 16), in % of the range
OPEN_CLIP_VS_HF = {(14, 16): 1.29, (14, 24): 1.26, (24, 32): 0.91, (37, 16): 4.74, (16, 8): 4.73, (27, 64): 0.85}


@pytest.mark.parametrize("old, new", list(OPEN_CLIP_VS_HF))
def test_open_clip_is_timm_and_differs_from_hf_vit_as_measured(old, new):
    """open_clip's call is timm's `resample_abs_pos_embed` defaults: bit-equal to it on float32 tables (0 apart;
    posenc's `timm` and `open-clip` conventions have the same settings), and 0.85-4.7 % of the table's range
    from HF ViT's plain bicubic (a = -0.75, no antialias), most when downsampling, where only the antialiased
    kernel widens. The spec explains the whole gap to HF."""
    table = _table(1 + old * old, 16, seed=0)
    got = _open_clip_image(table, (new, new))
    assert conventions["open-clip"].params == conventions["timm"].params
    if builtin_status("timm")[0]:
        from posenc.impl.builtin.timm import layers_module

        timm_out = layers_module("pos_embed").resample_abs_pos_embed(
            torch.tensor(table[None], dtype=torch.float32), [new, new], num_prefix_tokens=1)[0]
        np.testing.assert_array_equal(got, timm_out.double().numpy())
    hf = _grid("hf-vit", old, new, table)
    gap = 100 * np.abs(got - hf).max() / np.ptp(table)
    assert gap == pytest.approx(OPEN_CLIP_VS_HF[old, new], abs=0.01)
    spec_gap = 100 * np.abs(_grid("open-clip", old, new, table) - hf).max() / np.ptp(table)
    assert abs(spec_gap - gap) < 100 * F32_TOL


def test_a_new_grid_of_the_old_token_count_is_left_unchanged():
    """`resize_pos_embed` returns early when `grid_h * grid_w + 1` equals the table's rows, so a 6x6 table for a
    4x9 grid keeps its 6x6 layout, 11.4 % of the range from the resize the convention (and timm) computes."""
    table = _table(1 + 36, 16, seed=0)
    got = _open_clip_image(table, (4, 9))
    np.testing.assert_array_equal(got, table.astype(np.float32))
    gap = 100 * np.abs(got - _grid("open-clip", (6, 6), (4, 9), table)).max() / np.ptp(table)
    assert gap == pytest.approx(11.43, abs=0.01)


def test_border_runs_where_it_changes_nothing_and_is_a_skip_where_it_would():
    """`border="renormalize"` (added to the contract after open_clip's built-in): PyTorch's bilinear and its
    antialiased bicubic give the same numbers under either border, so open_clip runs them and matches posenc's
    renormalized spec to the float32 tolerance; its plain bicubic clamps, so a renormalized one is a skip; a
    border that is neither is a ValueError naming it."""
    from posenc.adapters import NotSupported

    table = _table(1 + 7 * 7, 6, seed=4)
    ours = torch.tensor(table, dtype=torch.float32)
    for kw in ({"method": "linear"}, {"method": "cubic", "cubic_a": -0.5, "antialias": True}):
        got = resize_grid(ours, (7, 7), (10, 5), prefix_tokens=1, border="renormalize", **kw)
        spec = pn.resize_grid(table, (7, 7), (10, 5), prefix_tokens=1, border="renormalize", **kw)
        np.testing.assert_allclose(got.double().numpy(), spec, rtol=0, atol=F32_TOL * np.ptp(table))
    text = _table(20, 8, seed=6)
    np.testing.assert_allclose(resize_table(torch.tensor(text, dtype=torch.float32), 33, border="renormalize")
                               .double().numpy(), pn.resize_table(text, 33, border="renormalize"), rtol=0,
                               atol=F32_TOL * np.ptp(text))
    with pytest.raises(NotSupported, match="clamped borders"):
        resize_grid(ours, (7, 7), (10, 5), prefix_tokens=1, border="renormalize")
    with pytest.raises(ValueError, match="border"):
        resize_grid(ours, (7, 7), (10, 5), method="linear", prefix_tokens=1, border="reflect")
