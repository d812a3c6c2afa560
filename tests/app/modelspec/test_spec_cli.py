"""`posenc spec` on the command line: exit 0 same encoding, 1 different (named, with the horizon), 2 bad input;
--json, --runtime, --lint.

The horizon is checked against a brute-force property: at the reported position the RMS logit difference
of the two settings, computed from explicit rotation matrices and averaged over random unit-norm q, k,
exceeds the bfloat16 tolerance, and one position earlier it does not.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from posenc.cli import main
from posenc.modelspec.compare import BF16_LOGIT_TOL
from posenc_np.rope import apply_rope

LLAMA31 = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
           "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 131072,
           "vocab_size": 128, "rope_theta": 500000.0,
           "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192, "rope_type": "llama3"}}


def _write(path, data):
    path.write_text(json.dumps(data))
    return str(path)


@pytest.fixture
def configs(tmp_path):
    transformers = pytest.importorskip("transformers")
    v4 = _write(tmp_path / "v4.json", LLAMA31)
    transformers.LlamaConfig(**{k: v for k, v in LLAMA31.items() if k != "model_type"}).save_pretrained(tmp_path / "v5")
    plain = _write(tmp_path / "plain.json", {**LLAMA31, "rope_scaling": None})
    return {"v4": v4, "v5": str(tmp_path / "v5" / "config.json"), "plain": plain}


def test_v4_config_and_its_transformers5_save_are_the_same_spec(configs, capsys):
    assert main(["spec", configs["v4"], configs["v5"]]) == 0
    assert "SAME encoding" in capsys.readouterr().out


def _brute_rms(scaling_a, scaling_b, position, samples=4000, d=16, base=500000.0):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((samples, d))
    k = rng.standard_normal((samples, d))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    k /= np.linalg.norm(k, axis=1, keepdims=True)

    def logits(scaling):
        qr = apply_rope(q, np.full(samples, position), base=base, scaling=scaling)
        kr = apply_rope(k, np.zeros(samples, int), base=base, scaling=scaling)
        return np.sum(qr * kr, axis=1)

    return float(np.sqrt(np.mean((logits(scaling_a) - logits(scaling_b)) ** 2)))


def test_llama3_scaled_vs_unscaled_names_the_scaling_and_the_horizon(configs, capsys, tmp_path):
    out_json = tmp_path / "cmp.json"
    assert main(["spec", configs["v4"], configs["plain"], "--json", str(out_json)]) == 1
    out = capsys.readouterr().out
    assert "scaling: 'llama3' vs 'default'" in out and "detection horizon: position" in out
    report = json.loads(out_json.read_text())["comparison"]
    horizon = report["horizon"]
    assert report["prompt_length"] == horizon + 1 and 0 < horizon < 8192
    scaling = dict(LLAMA31["rope_scaling"])
    # Monte-Carlo estimate (4000 pairs: ~2 % relative error) brackets the closed form's crossing
    assert _brute_rms(scaling, None, horizon) > 0.9 * BF16_LOGIT_TOL
    assert _brute_rms(scaling, None, horizon - 1) < 1.1 * BF16_LOGIT_TOL
    assert _brute_rms(scaling, None, max(horizon // 2, 1)) < BF16_LOGIT_TOL


def test_one_source_prints_the_table_and_json(configs, capsys, tmp_path):
    assert main(["spec", configs["v5"], "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dialect"] == "hf" and data["num_layers"] == 2
    assert data["layers"][0]["scaling"]["rope_type"] == "llama3" and len(data["layers"][0]["inv_freq"]) == 8
    assert main(["spec", configs["v5"]]) == 0
    assert "llama3(factor=8.0" in capsys.readouterr().out


def test_runtime_says_what_mlx_computes_for_a_v5_config(configs, capsys):
    assert main(["spec", configs["v5"], "--runtime", "mlx", "--lint"]) == 1
    captured = capsys.readouterr()
    assert "never reads rope_parameters" in captured.out + captured.err
    assert main(["spec", configs["v5"], configs["v5"], "--runtime2", "mlx"]) == 1
    assert "base: 500000.0 vs 10000.0" in capsys.readouterr().out


def test_lint_flags_a_missing_base(tmp_path, capsys):
    path = _write(tmp_path / "c.json", {k: v for k, v in LLAMA31.items() if k not in ("rope_theta", "rope_scaling")})
    assert main(["spec", path]) == 0
    assert main(["spec", path, "--lint"]) == 1
    assert "rope_theta" in capsys.readouterr().err


def test_gguf_and_hf_source_compare_equal(tmp_path, capsys):
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "qwen2")
    for key, value in (("block_count", 2), ("context_length", 32768), ("embedding_length", 64),
                       ("attention.head_count", 4)):
        writer.add_uint32(f"qwen2.{key}", value)
    writer.add_float32("qwen2.rope.freq_base", 1000000.0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    hf = _write(tmp_path / "q.json", {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64,
                                     "num_attention_heads": 4, "max_position_embeddings": 32768,
                                     "rope_theta": 1000000.0})
    assert main(["spec", hf, str(tmp_path / "m.gguf")]) == 0
    assert main(["spec", _write(tmp_path / "q2.json", {**json.loads(open(hf).read()), "rope_theta": 10000.0}),
                 str(tmp_path / "m.gguf")]) == 1
    assert "base: 10000.0 vs 1000000.0" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["spec", "/nonexistent/config.json"], "cannot read"),
    (["spec", "{bad}"], "cannot read"),
    (["spec", "CONFIG", "--json", "/nonexistent-dir/x.json"], "does not exist"),
    (["spec", "CONFIG", "--json", "out.txt"], "suffix"),
    (["spec", "CONFIG", "--runtime", "transformer-engine"], "Transformer Engine"),
    (["spec", "BAD", ], "rope_type"),
])
def test_bad_input_is_exit_2_with_one_message(tmp_path, capsys, argv, message):
    config = _write(tmp_path / "c.json", LLAMA31)
    bad = _write(tmp_path / "bad.json", {**LLAMA31, "rope_scaling": {"rope_type": "warp", "factor": 2.0}})
    argv = [{"CONFIG": config, "BAD": bad}.get(a, a) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
