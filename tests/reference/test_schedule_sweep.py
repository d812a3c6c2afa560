"""The sweep: `rope_schedule_from_hf_config` over the default config of every model type in the installed
transformers (tests/reference/schedule_sweep.py does the work, once per session).

Each model type with rotary position keys is either read, and then every RoPE layer's cos/sin equal the
family's own rotary embedding class for that layer type (and its `apply_rotary_pos_emb`, where standard,
equals `apply_rope` with the schedule's layout), or refused with a ValueError naming what it cannot read.
transformers computes in float32: atol 2e-5 at positions <= 144 (float32 angle error < 1e-5 rad).
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import numpy as np
import pytest

import posenc_np as pn

pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).parent))  # the sweep module sits next to this file, under any import mode
import schedule_sweep  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs" / "schedules.md"


@pytest.fixture(scope="module")
def results():
    return schedule_sweep.sweep()


def test_every_model_type_is_read_equal_to_its_rotary_module_or_refused(results):
    counts = collections.Counter(status for status, _ in results.values())
    print("sweep:", dict(counts))
    mismatches = {mt: detail for mt, (status, detail) in results.items() if status == "mismatch"}
    assert not mismatches, mismatches
    assert counts["read"] >= 255  # transformers 5.24: 261 read; fewer means the reader regressed
    assert counts["refused"] <= 91  # 91 refused, each listed with its reason in docs/schedules.md
    for mt, (status, detail) in results.items():
        if status == "refused":
            assert detail and "model_type=" in detail, (mt, detail)


def test_the_docs_list_every_refused_model_type(results):
    text = DOCS.read_text()
    missing = [mt for mt, (status, _) in results.items() if status == "refused" and f"`{mt}`" not in text]
    assert not missing, f"docs/schedules.md does not list refused model types {missing}"


def test_named_families(results):
    for mt in ("gemma2", "gemma3_text", "gemma4_text", "llama4_text", "cohere2", "smollm3", "deepseek_v3",
               "mistral_large4_text", "gpt_oss", "modernbert", "deepseek_v32", "glm_moe_dsa", "qwen3_5_text",
               "qwen3_5_moe_text", "paddleocr_vl_text", "glm_ocr_text", "granitemoe_swa", "molmo2_text", "ministral3",
               "mistral4", "ernie4_5_vl_moe_text", "qwen4_exp_text", "hy_v4_vl_text", "cosmos3_edge_text",
               "deepseek_v4"):
        assert results[mt][0] == "read", (mt, results[mt])


def test_code_fixed_settings_of_the_default_configs():
    for mt in ("deepseek_v32", "glm_moe_dsa", "mistral_large4_text"):  # no rope_interleave: the attention's code
        assert {e["layout"] for e in _schedule(mt)[1] if e} == {"interleaved"}, mt
    for mt, section, interleaved in (("qwen3_5_text", [11, 11, 10], True), ("paddleocr_vl_text", [16, 24, 24], False),
                                     ("glm_ocr_text", [8, 12, 12], False)):
        entries = [e for e in _schedule(mt)[1] if e]
        assert all(e["mrope_section"] == section and e["mrope_interleaved"] is interleaved for e in entries), mt


def _schedule(model_type):
    config = schedule_sweep._position_config(schedule_sweep._default_config(model_type))
    return config, pn.rope_schedule_from_hf_config(config)


def test_gemma3_local_global_and_gemma4_proportional():
    config, schedule = _schedule("gemma3_text")
    for layer_type, entry in zip(config.layer_types, schedule, strict=True):
        assert entry["base"] == (1e6 if layer_type == "full_attention" else 1e4)
    config, schedule = _schedule("gemma4_text")
    full = [e for t, e in zip(config.layer_types, schedule, strict=True) if t == "full_attention"]
    assert full and all(e["rotary_dim"] == 512 and e["scaling"]["rope_type"] == "proportional" for e in full)
    inv, _ = pn.rope_frequencies(512, base=full[0]["base"], scaling=full[0]["scaling"])
    assert np.count_nonzero(inv) == 64  # 0.25 * 512 / 2 rotated pairs, the rest zero frequency


def test_llama4_nope_every_fourth_layer_interleaved():
    _, schedule = _schedule("llama4_text")
    assert [i for i, e in enumerate(schedule) if e is None] == list(range(3, 48, 4))
    assert {e["layout"] for e in schedule if e} == {"interleaved"}


def test_cohere2_rotates_only_sliding_layers():
    config, schedule = _schedule("cohere2")
    assert [e is None for e in schedule] == [t != "sliding_attention" for t in config.layer_types]


@pytest.mark.parametrize("patch, match", [
    ({"rope_parameters": {"rope_type": "default"}}, "no rope_theta"),
    ({"no_rope_layers": [1, 0]}, "no_rope_layers is read only for"),
    ({"layer_types": ["full_attention", "weird_attention"]}, "weird_attention"),
    ({"rope_frobnicate": 3}, "rope_frobnicate"),
    ({"rope_parameters": {"rope_type": "su", "rope_theta": 1e4}}, "'su'"),
    ({"rope_parameters": {"sliding_attention": {"rope_theta": 1e4}}, "layer_types": ["full_attention"] * 2},
     "no entry for layer type 'full_attention'"),
])
def test_unreadable_configs_raise_naming_the_key(patch, match):
    config = {"model_type": "llama", "num_hidden_layers": 2, "head_dim": 8,
              "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}, **patch}
    with pytest.raises(ValueError, match=match):
        pn.rope_schedule_from_hf_config(config)
