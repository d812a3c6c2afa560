"""RoPE spec vs Hugging Face transformers' own RoPE code: frequencies, attention scale, rotated q/k,
the Llama weight-conversion permutation, and whole published config.json files.

The reference is transformers (installed 5.x): `ROPE_INIT_FUNCTIONS` with a `LlamaConfig`,
`LlamaRotaryEmbedding` (including its dynamic-NTK / LongRoPE update on a long input),
`apply_rotary_pos_emb` and `convert_llama_weights_to_hf.permute`. transformers computes in float32, so it
is held to the float32 tolerance. The spec's own properties are tests/spec/test_rope_scaling.py.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import posenc_np as pn
from posenc_np.rope import rope_plan
from posenc_np.scaling import SCALING_TYPES
from posenc_np.testing import compare, tolerance

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb  # noqa: E402

HEAD_DIM = 32
ORIGINAL = 64


def _longrope(n):
    rng = np.random.default_rng(0)
    return {"rope_type": "longrope", "short_factor": (1 + rng.random(n)).tolist(),
            "long_factor": (2 + 6 * rng.random(n)).tolist()}


# (id, HF rope_parameters without rope_theta, rope_theta, partial_rotary_factor)
HF_CASES = [
    ("default", {"rope_type": "default"}, 10000.0, None),
    ("default-partial", {"rope_type": "default"}, 10000.0, 0.5),
    ("linear", {"rope_type": "linear", "factor": 4.0}, 10000.0, None),
    ("linear-old-type-key", {"type": "linear", "factor": 2.5}, 500000.0, None),
    ("dynamic", {"rope_type": "dynamic", "factor": 3.0}, 10000.0, None),
    ("dynamic-partial", {"type": "dynamic", "factor": 2.0}, 10000.0, 0.5),
    ("yarn", {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": ORIGINAL}, 10000.0, None),
    ("yarn-no-truncate", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL,
                          "truncate": False, "beta_fast": 16, "beta_slow": 2}, 10000.0, None),
    ("yarn-mscale", {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": ORIGINAL,
                     "mscale": 0.707, "mscale_all_dim": 0.707, "beta_fast": 32, "beta_slow": 1}, 10000.0, None),
    ("yarn-mscale-only", {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": ORIGINAL,
                          "mscale": 1.0, "mscale_all_dim": 0}, 10000.0, None),
    ("yarn-attention-factor", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL,
                               "attention_factor": 1.3}, 10000.0, 0.5),
    ("llama3", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": ORIGINAL}, 500000.0, None),
    ("llama3-wide", {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 0.5, "high_freq_factor": 8.0,
                     "original_max_position_embeddings": ORIGINAL}, 10000.0, None),
    ("longrope", {**_longrope(HEAD_DIM // 2), "factor": 16.0, "original_max_position_embeddings": ORIGINAL},
     10000.0, None),
    ("longrope-attention-factor", {**_longrope(HEAD_DIM // 4), "attention_factor": 1.1,
                                   "original_max_position_embeddings": ORIGINAL}, 10000.0, 0.5),
]


def hf_config(params, theta, partial, *, max_pos=None):
    params = {**copy.deepcopy(params), "rope_theta": theta}
    kwargs = dict(hidden_size=4 * HEAD_DIM, num_attention_heads=4, num_key_value_heads=2, head_dim=HEAD_DIM,
                  max_position_embeddings=max_pos or (ORIGINAL if "dynamic" in str(params) else 4 * ORIGINAL),
                  rope_parameters=params)
    if partial is not None:
        params["partial_rotary_factor"] = partial
    return LlamaConfig(**kwargs)


def hf_frequencies(config, seq_len=None):
    kind = config.rope_parameters["rope_type"]
    if kind == "default":
        dim = int(config.head_dim * config.rope_parameters.get("partial_rotary_factor", 1.0))
        inv = 1.0 / (config.rope_parameters["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        return inv.double().numpy(), 1.0
    inv, scale = ROPE_INIT_FUNCTIONS[kind](config, None, seq_len=seq_len)
    return inv.double().numpy(), float(scale)


def as_config_dict(config):
    return {"head_dim": config.head_dim, "hidden_size": config.hidden_size,
            "num_attention_heads": config.num_attention_heads,
            "max_position_embeddings": config.max_position_embeddings,
            "rope_parameters": copy.deepcopy(config.rope_parameters)}


def assert_relative(actual, desired):
    """float32 reference: compare ratios, since inverse frequencies span several decades."""
    result = compare(np.asarray(actual) / np.asarray(desired), np.ones_like(desired), tolerance("float32"))
    assert result.passed, result


@pytest.mark.parametrize("case_id, params, theta, partial", HF_CASES, ids=[c[0] for c in HF_CASES])
@pytest.mark.parametrize("seq_len", [None, 3 * ORIGINAL], ids=["init", "long"])
def test_frequencies_match_transformers(case_id, params, theta, partial, seq_len):
    config = hf_config(params, theta, partial)
    hf_seq_len = seq_len
    if seq_len is not None and "dynamic" in case_id:
        hf_seq_len = torch.tensor(seq_len)
    desired, desired_scale = hf_frequencies(config, hf_seq_len)
    mine = pn.scaling_from_hf_config(as_config_dict(config))
    inv, scale = pn.rope_frequencies(mine["rotary_dim"], base=mine["base"], scaling=mine["scaling"], seq_len=seq_len)
    assert inv.shape == desired.shape
    assert_relative(inv, desired)
    assert compare(scale, desired_scale, tolerance("float64")).passed, (scale, desired_scale)


@pytest.mark.parametrize("case_id, params, theta, partial", HF_CASES, ids=[c[0] for c in HF_CASES])
@pytest.mark.parametrize("length", ["short", "long"])
def test_rotated_qk_match_transformers(case_id, params, theta, partial, length):
    """LlamaRotaryEmbedding (its dynamic / longrope update included) + apply_rotary_pos_emb vs apply_rope."""
    config = hf_config(params, theta, partial)
    rng = np.random.default_rng(1)
    batch, heads, seq = 2, 3, 6
    start = 0 if length == "short" else 3 * ORIGINAL  # long: beyond the original context
    positions = start + np.stack([np.arange(seq), np.arange(seq) + 5])  # per-row ids, e.g. KV-cache offsets
    q = rng.standard_normal((batch, heads, seq, HEAD_DIM)).astype(np.float32)
    k = rng.standard_normal((batch, heads, seq, HEAD_DIM)).astype(np.float32)
    # Llama's default RoPE ignores partial_rotary_factor; GPT-NeoX's (same code otherwise) honours it.
    partial_default = partial is not None and config.rope_parameters["rope_type"] == "default"
    rotary = (GPTNeoXRotaryEmbedding if partial_default else LlamaRotaryEmbedding)(config)
    cos, sin = rotary(torch.from_numpy(q), torch.from_numpy(positions))
    r = cos.shape[-1]
    q_hf, k_hf = apply_rotary_pos_emb(torch.from_numpy(q[..., :r]), torch.from_numpy(k[..., :r]), cos, sin)
    q_hf = np.concatenate([q_hf.numpy(), q[..., r:]], -1)
    k_hf = np.concatenate([k_hf.numpy(), k[..., r:]], -1)

    mine = pn.scaling_from_hf_config(as_config_dict(config))
    assert mine["rotary_dim"] == r
    kwargs = dict(base=mine["base"], rotary_dim=r, scaling=mine["scaling"], layout="half")
    q_me = pn.apply_rope(q.astype(np.float64), positions[:, None, :], **kwargs)
    k_me = pn.apply_rope(k.astype(np.float64), positions[:, None, :], **kwargs)
    plan = rope_plan(r, base=mine["base"], scaling=mine["scaling"])
    max_angle = positions.max() * plan.turns_at(positions.max() + 1).max() * 2 * math.pi
    for mine_out, hf_out in ((q_me, q_hf), (k_me, k_hf)):
        result = compare(hf_out, mine_out, tolerance("float32", max_angle=max_angle, scale=np.abs(mine_out).max()))
        assert result.passed, result


def test_ntk_is_dynamic_at_the_matching_length():
    """Static NTK with factor a equals HF dynamic NTK (factor f) at the length where f*s/L - (f-1) = a."""
    f, s = 2.0, 3 * ORIGINAL  # growth term 2 * 3 - 1 = 5
    config = hf_config({"rope_type": "dynamic", "factor": f}, 10000.0, None)
    desired, _ = hf_frequencies(config, torch.tensor(s))
    inv, scale = pn.rope_frequencies(HEAD_DIM, scaling={"rope_type": "ntk", "factor": 5.0})
    assert_relative(inv, desired)
    assert scale == 1.0


def test_keras_hub_yarn_differs_from_hf_only_where_documented():
    """With truncate=False and a ramp inside r/2 - 1, keras-hub-yarn = HF yarn except the attention scale."""
    common = {"factor": 4.0, "original_max_position_embeddings": 4096, "truncate": False}
    config = hf_config({"rope_type": "yarn", **common}, 10000.0, None)
    desired, _ = hf_frequencies(config)
    inv, scale = pn.rope_frequencies(HEAD_DIM, scaling={"rope_type": "keras-hub-yarn", **common})
    assert_relative(inv, desired)
    assert scale == pytest.approx(0.1 * math.log(4.0) + 1.0, rel=1e-15)
    # The clamp differs (high <= r/2 - 1 in keras-hub, r - 1 in HF): visible when the ramp runs past r/2.
    wide = {"factor": 4.0, "original_max_position_embeddings": 10 ** 9, "beta_fast": 32, "beta_slow": 1}
    hf_inv, _ = pn.rope_frequencies(HEAD_DIM, scaling={"rope_type": "yarn", **wide})
    kh_inv, _ = pn.rope_frequencies(HEAD_DIM, scaling={"rope_type": "keras-hub-yarn", **wide})
    assert not np.allclose(hf_inv, kh_inv)
    assert pn.rope_frequencies(HEAD_DIM, scaling={"rope_type": "yarn", **common})[1] == 1.0 + 0.1 * math.log(4.0)


def test_every_registered_type_is_exercised():
    tested = {params.get("rope_type", params.get("type")) for _, params, _, _ in HF_CASES}
    # proportional is compared with HF in tests/reference/test_schedule_reference.py (its rotary_dim is head_dim)
    # the runtime variants (vllm-*, mlx-*, llamacpp-*) are checked in tests/reference/test_spec_readers.py
    runtime_variants = {"vllm-ntk", "vllm-longrope", "mlx-longrope", "mlx-yarn", "llamacpp-freq-factors"}
    assert tested | {"ntk", "keras-hub-dynamic", "keras-hub-yarn", "proportional"} | runtime_variants == set(SCALING_TYPES)


# --- weight permutation between layouts ------------------------------------------------------------

def hf_permute(w, n_heads, dim1, dim2):
    """transformers/models/llama/convert_llama_weights_to_hf.py `permute`, re-typed."""
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def test_permutation_equals_hf_convert_script():
    heads, head_dim, hidden = 4, 16, 8
    w = torch.arange(heads * head_dim * hidden, dtype=torch.float64).reshape(heads * head_dim, hidden)
    desired = hf_permute(w, heads, heads * head_dim, hidden).numpy()
    assert np.array_equal(pn.permute_qk_rows(w.numpy(), heads, source="interleaved", target="half"), desired)
    back = pn.permute_qk_rows(desired, heads, source="half", target="interleaved")
    assert np.array_equal(back, w.numpy())
    perm = pn.rope_permutation(head_dim, source="interleaved", target="half")
    i, j = np.meshgrid(np.arange(head_dim // 2), np.arange(2), indexing="ij")
    assert np.array_equal(perm[j * head_dim // 2 + i], 2 * i + j)  # new row j*hd/2 + i <- old 2i + j



# --- whole config.json files, as published on the Hub ---------------------------------------------

RAW_CONFIGS = {
    "llama-3.1": ("LlamaConfig", {
        "hidden_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 131072,
        "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"}}),
    "phi-3-128k": ("Phi3Config", {  # original length at top level, no factor: HF derives it
        "hidden_size": 256, "num_attention_heads": 8, "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
        "rope_scaling": {"type": "longrope", "short_factor": np.linspace(1, 2, 16).tolist(),
                         "long_factor": np.linspace(1, 40, 16).tolist()}}),
    "gpt-neox": ("GPTNeoXConfig", {
        "hidden_size": 256, "num_attention_heads": 4, "rotary_pct": 0.25, "rotary_emb_base": 20000,
        "max_position_embeddings": 2048}),
    "dynamic-old-style": ("LlamaConfig", {
        "hidden_size": 128, "num_attention_heads": 4, "max_position_embeddings": 256, "rope_theta": 10000.0,
        "rope_scaling": {"type": "dynamic", "factor": 2.0}}),
}


@pytest.mark.parametrize("name", list(RAW_CONFIGS))
def test_scaling_from_hf_config_json_matches_transformers(name, tmp_path):
    import json

    class_name, raw = RAW_CONFIGS[name]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    mine = pn.scaling_from_hf_config(str(path))
    config = getattr(transformers, class_name)(**copy.deepcopy(raw))
    module_name = {"LlamaConfig": "llama", "Phi3Config": "phi3", "GPTNeoXConfig": "gpt_neox"}[class_name]
    module = __import__(f"transformers.models.{module_name}.modeling_{module_name}", fromlist=["x"])
    rotary_class = next(getattr(module, n) for n in dir(module) if n.endswith("RotaryEmbedding"))
    seq_len = 2 * raw["max_position_embeddings"]  # past every original length: the scaled regime
    rotary = rotary_class(config)
    inv_init = rotary.inv_freq.double().numpy()
    x = torch.zeros(1)
    rotary(x, torch.tensor([[seq_len - 1]]))  # HF's dynamic / longrope update
    inv_long = rotary.inv_freq.double().numpy()
    assert mine["rotary_dim"] == 2 * inv_init.shape[0]
    for seq, desired in ((None, inv_init), (seq_len, inv_long)):
        inv, scale = pn.rope_frequencies(mine["rotary_dim"], base=mine["base"], scaling=mine["scaling"], seq_len=seq)
        assert_relative(inv, desired)
        assert compare(scale, rotary.attention_scaling, tolerance("float64")).passed
