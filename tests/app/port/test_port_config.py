"""posenc.port.hf_config: the one reading of an HF config's head counts and RoPE schedule that every preset,
check and `posenc doctor` uses."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from posenc.errors import UsageError
from posenc.port import hf_config
from posenc.port.presets import keras_llama

ROOT = Path(__file__).resolve().parents[3]


def test_heads_honours_head_dim():
    """Gemma, Qwen3 and Mistral NeMo set a head_dim that is not hidden_size // heads: the head dim is the
    config's (here 32, where 64 // 4 = 16 would shape every q/k row block wrong)."""
    config = {"num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64, "head_dim": 32}
    assert hf_config.heads(config) == (4, 2, 32)
    assert hf_config.heads({**config, "head_dim": None}) == (4, 2, 16)
    assert hf_config.heads({"num_attention_heads": 4, "hidden_size": 64}) == (4, 4, 16)


def test_keras_preset_refuses_the_head_dim_a_llama_backbone_derives_otherwise():
    """keras-hub's LlamaAttention derives head_dim = hidden_dim // num_query_heads: a config with its own
    head_dim cannot be expressed, and the message names both values."""
    config = {"model_type": "llama", "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64,
              "head_dim": 32, "num_hidden_layers": 1, "vocab_size": 8, "intermediate_size": 16,
              "max_position_embeddings": 64, "rope_theta": 10000.0}
    with pytest.raises(UsageError, match=r"head_dim 32 != hidden_size // num_attention_heads = 16"):
        keras_llama.keras_hub_llama_config(config)


def test_no_module_of_the_port_reads_head_counts_itself():
    """One copy of the rule: outside hf_config.py no function of posenc/port indexes a config by
    "num_attention_heads" (the key every head-count reader needs); they call hf_config.heads."""
    found = []
    for path in sorted((ROOT / "posenc" / "port").rglob("*.py")):
        if path.name == "hf_config.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            key = node.slice if isinstance(node, ast.Subscript) else (
                node.args[0] if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get"
                and node.args else None)
            if isinstance(key, ast.Constant) and key.value == "num_attention_heads":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, "head counts read outside posenc/port/hf_config.py:\n" + "\n".join(found)


def test_schedule_names_the_caller_when_the_config_is_refused():
    with pytest.raises(UsageError, match=r"^hf-llama-to-flax: "):
        hf_config.schedule({"model_type": "llama", "rope_scaling": {"rope_type": "no-such-type"}},
                           "hf-llama-to-flax")
