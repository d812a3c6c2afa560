"""`posenc port` of a multi-axis RoPE model (Qwen2-VL / Qwen3-VL text attention): the section and its
interleaving are read from the HF config, carried in the sidecar, and the attention logits are verified on
text, image and video positions (posenc/port/checks.py `mrope_probes`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import cli
from posenc.port import mapping
from posenc.port.checks import mrope_probes

PROBES = mrope_probes(np.arange(10))

pytest.importorskip("safetensors")



def _source(tmp_path, model_type, section, interleaved=None):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(12)
    save_file({"attn.q.weight": rng.standard_normal((64, 32)).astype(np.float32),
               "attn.k.weight": rng.standard_normal((32, 32)).astype(np.float32)}, str(tmp_path / "src.safetensors"))
    params = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": section}
    if interleaved is not None:
        params["mrope_interleaved"] = interleaved
    config = {"model_type": model_type, "text_config": {
        "model_type": f"{model_type}_text", "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "max_position_embeddings": 4096, "rope_parameters": params}}
    (tmp_path / "config.json").write_text(json.dumps(config))


def _port(tmp_path, *extra):
    return cli("port", tmp_path / "src.safetensors", tmp_path / "dst.safetensors", "--rope-q", "attn.q.weight",
               "--rope-k", "attn.k.weight", "--heads", 4, "--kv-heads", 2, "--rope-from", "half", "--rope-to",
               "interleaved", "--hf-config", tmp_path / "config.json", "--json", tmp_path / "r.json", *extra)


@pytest.mark.parametrize("model_type, interleaved", [("qwen2_vl", False), ("qwen3_vl", True)])
def test_section_reaches_verification_and_sidecar(tmp_path, model_type, interleaved):
    _source(tmp_path, model_type, [2, 3, 3] if not interleaved else [4, 2, 2])
    assert _port(tmp_path) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    logits = [c for c in report["checks"] if c["kind"] == "rope-logits"]
    assert [c["name"].split("(")[-1] for c in logits] == [f"{p} positions)" for p in PROBES]
    assert all(c["passed"] for c in logits)
    rope = json.loads((tmp_path / "dst.safetensors.rope.json").read_text())["rope"]
    assert rope["mrope_section"] == ([2, 3, 3] if not interleaved else [4, 2, 2])
    assert rope["mrope_interleaved"] is interleaved  # qwen3_vl interleaves whatever its config says
    assert rope["layout"] == "interleaved" and rope["base"] == 1000000.0


def test_probes_differ_per_axis_where_they_should():
    assert np.array_equal(PROBES["text"][0], PROBES["text"][2])
    for probe in ("image", "video"):
        assert not np.array_equal(PROBES[probe][1], PROBES[probe][2])
    assert len(set(PROBES["video"][0].tolist())) > len(set(PROBES["image"][0].tolist()))


def test_broken_permutation_fails_on_every_probe(tmp_path, monkeypatch, capsys):
    _source(tmp_path, "qwen2_vl", [2, 3, 3])
    monkeypatch.setattr(mapping, "permute_qk_rows", lambda w, *a, **k: w)
    assert _port(tmp_path) == 1
    report = json.loads((tmp_path / "r.json").read_text())
    assert [c["passed"] for c in report["checks"] if c["kind"] == "rope-logits"] == [False] * 3
    assert "NOT verified" in capsys.readouterr().out


def test_bad_section_is_bad_usage(tmp_path, capsys):
    _source(tmp_path, "qwen2_vl", [2, 3, 3])
    assert _port(tmp_path, "--mrope-section", "16,24,24") == 2
    assert "sums to 64 pairs" in capsys.readouterr().err
    assert cli("port", tmp_path / "src.safetensors", tmp_path / "x.safetensors", "--mrope-interleaved") == 2
