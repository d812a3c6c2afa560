"""The q/k row permutation carries the per-channel q/k norms with it (Gemma 3, Qwen3: `[head_dim]` per head;
OLMo 2: `[heads * head_dim]` over the whole projection).

Reference: transformers' own models (tiny random configs, nothing downloaded). The half-layout checkpoint is
ported to the interleaved layout with `posenc port --rope-q/--rope-k`; the ported weights are loaded into the
same transformers model whose `apply_rotary_pos_emb` is replaced by the interleaved rotation (pairs
`(2j, 2j+1)` at the frequencies transformers computed), and its logits must equal the original model's.
Without the norm permutation they do not.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from posenc import cli  # noqa: E402
from posenc.port import mapping  # noqa: E402
from posenc_np.testing import compare, tolerance  # noqa: E402

COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128)
MODELS = {
    "qwen3": (lambda: transformers.Qwen3Config(**COMMON, head_dim=16), "Qwen3ForCausalLM", "qwen3"),
    "gemma3": (lambda: transformers.Gemma3TextConfig(**COMMON, head_dim=16, query_pre_attn_scalar=16,
                                                     sliding_window=8), "Gemma3ForCausalLM", "gemma3"),
    "olmo2": (lambda: transformers.Olmo2Config(**COMMON), "Olmo2ForCausalLM", "olmo2"),
}


def _interleaved_rotary(q, k, cos, sin, unsqueeze_dim=1, **_):
    """transformers' apply_rotary_pos_emb with consecutive pairs: cos/sin `[..., head_dim]` hold each
    frequency twice (`cat(freqs, freqs)`); pair j = channels (2j, 2j+1) rotates at frequency j."""
    half = cos.shape[-1] // 2
    cos, sin = cos[..., :half].unsqueeze(unsqueeze_dim), sin[..., :half].unsqueeze(unsqueeze_dim)

    def rotate(x):
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)

    return rotate(q), rotate(k)


def _logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].double().numpy()


@pytest.mark.parametrize("family", list(MODELS))
def test_qk_norms_follow_the_row_permutation(tmp_path, family, monkeypatch):
    make, cls_name, module_name = MODELS[family]
    config = make()
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(config).eval()
    with torch.no_grad():  # norms away from their init, so that a norm left unpermuted shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.5 * torch.randn_like(p))
    src = tmp_path / "hf"
    model.save_pretrained(src)
    tokens = np.random.default_rng(0).integers(0, COMMON["vocab_size"], 40).tolist()
    desired = _logits(model, tokens)
    hd = config.head_dim if getattr(config, "head_dim", None) else config.hidden_size // config.num_attention_heads
    argv = ["port", src / "model.safetensors", tmp_path / "out.safetensors", "--rope-q", "*q_proj.weight",
            "--rope-k", "*k_proj.weight", "--rope-from", "half", "--rope-to", "interleaved", "--heads", "4",
            "--kv-heads", "2", "--rope-theta", "10000"]
    assert cli.main([str(a) for a in argv]) == 0
    from safetensors.torch import load_file

    ported = load_file(str(tmp_path / "out.safetensors"))
    norm = ported["model.layers.0.self_attn.q_norm.weight"]
    assert norm.shape[0] in (hd, 4 * hd)
    module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    monkeypatch.setattr(module, "apply_rotary_pos_emb", _interleaved_rotary)
    interleaved = getattr(transformers, cls_name)(config).eval()
    interleaved.load_state_dict(ported, strict=False)
    actual = _logits(interleaved, tokens)
    tol = tolerance("float32", scale=np.abs(desired).max(), slack_ulps=64)
    assert compare(actual, desired, tol).passed
    # the same port without the norms' permutation gives other logits
    monkeypatch.setattr(mapping, "_permute_qk_norms", lambda entries, rules: None)
    assert cli.main([str(a) for a in argv[:2]] + [str(tmp_path / "bare.safetensors")] + [str(a) for a in argv[3:]]) == 0
    interleaved.load_state_dict(load_file(str(tmp_path / "bare.safetensors")), strict=False)
    assert not compare(_logits(interleaved, tokens), desired, tol).passed
