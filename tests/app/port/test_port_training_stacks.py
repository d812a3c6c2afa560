"""`posenc port` to and from the training stacks: `hf-llama-to-{torchtitan,maxtext,megatron}` and back.

A tiny random transformers 5.24 `LlamaForCausalLM` (GQA 4/2 heads, llama3 scaling with Meta's constants, built from
a config: nothing downloaded) goes to each stack's checkpoint directory and back. Judged by:

* the round trip: every tensor bit for bit, and HF's logits of the returned model equal the original's exactly;
* the stacks' own model code where it runs here, on the ported directory as the stack loads it:
  torchtitan 0.3.0 `Llama3Model` (its `FlexAttention` with `flex_attention` / `create_block_mask` run eagerly: the
  class compiles them with torch.compile, minutes of inductor on this CPU) loading the DCP with
  `dcp.load(model.state_dict())` as its `CheckpointManager` does; megatron-core 0.16.1 `GPTModel` (local layer spec,
  whose `sharded_state_dict_keys_map` names the fused TE keys) loading the torch_dist directory with
  `dist_checkpointing.load` in a one-process gloo group, its CUDA RNG tracker's `fork` a null context (dropout 0);
* MaxText's decoder cannot run here (its package needs Python >= 3.12): a float64 reference forward that reads the
  Orbax tree with MaxText's documented conventions (`layers/llama2.py`, `layers/attentions.py`: scanned axis 1,
  `[embed, heads, head_dim]` kernels, the query pre-scaled so attention applies no 1/sqrt(head_dim),
  `LLaMARotaryEmbedding` rotating interleaved pairs), independent of posenc's unpacking.

Logit tolerance (stack code vs transformers, both float32, different op orders: complex multiply vs rotate-half,
flex vs eager attention, fused vs split projections): `tolerance("float32", max_angle=SEQ - 1, slack_ulps=64)` times
max |logit| (posenc_np.testing: 64 float32 ulps of slack plus the float32 angle error at the largest angle). The
weights are scaled so a wrong q/k row order, a dropped query scale or scaling moves the logits by O(1)
(planted cases below).

Each stack model run is a subprocess: torch.distributed's process group and torchtitan's patched attention are
process-wide.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("orbax.checkpoint", reason="orbax-checkpoint 0.12.8 writes MaxText's format")

from helpers import cli  # noqa: E402
from posenc.errors import UsageError  # noqa: E402
from posenc.formats import detect_format, open_reader  # noqa: E402
from posenc.port.core import port  # noqa: E402
from posenc.port.presets import get_preset  # noqa: E402
from posenc_np.rope import apply_rope  # noqa: E402
from posenc_np.testing import tolerance  # noqa: E402

STACKS = ("torchtitan", "maxtext", "megatron")
SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=16384, rms_norm_eps=1e-5,
             tie_word_embeddings=False)
#: Meta's Llama 3.1 constants: the only llama3 scaling MaxText's LLaMARotaryEmbedding and Megatron's
#: RotaryEmbedding._apply_scaling compute; theta 5e5 puts 3 of 8 bands of head_dim 16 under the 8x scaling
LLAMA3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
SEQ = 96
TOKENS = np.random.default_rng(1).integers(0, SMALL["vocab_size"], (1, SEQ))
FILES = {"torchtitan": {".metadata", "__0_0.distcp", "job_config.json"},
         "maxtext": {"items", "maxtext.yml"},
         "megatron": {".metadata", "__0_0.distcp", "metadata.json", "common.pt", "transformer_config.json"}}


def _save_hf(path, dtype=torch.float32, **over):
    """A tiny random LlamaForCausalLM saved by save_pretrained; norms off 1 and attention scaled up so a wrong
    rotation or scale moves the logits by O(1)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{**SMALL, "rope_parameters": dict(LLAMA3), **over})
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
            elif "self_attn" in name:
                p.mul_(6.0)
    model = model.to(dtype)
    model.save_pretrained(path)
    return model


def _logits(model):
    with torch.no_grad():
        return model(torch.tensor(TOKENS)).logits.double().numpy()


def _tolerance(desired):
    return tolerance("float32", max_angle=SEQ - 1.0, scale=float(np.abs(desired).max()), slack_ulps=64)


def _tensors(directory):
    reader = open_reader(directory)
    return {n: np.asarray(reader.get(n)) for n in reader.names()}


def _digest(directory):
    """sha256 over every file under `directory` (names and bytes): SOURCE must come out untouched."""
    h = hashlib.sha256()
    for root, _, files in sorted(os.walk(directory)):
        for name in sorted(files):
            path = os.path.join(root, name)
            h.update(os.path.relpath(path, directory).encode())
            with open(path, "rb") as handle:
                h.update(handle.read())
    return h.hexdigest()


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    path = tmp_path_factory.mktemp("hf") / "llama"
    model = _save_hf(path)
    return path, model, _logits(model)


@pytest.fixture(scope="module", params=STACKS)
def round_trip(request, hf, tmp_path_factory):
    """HF -> stack -> HF through the CLI, each TARGET a plain directory path (no trailing slash)."""
    stack = request.param
    src, model, logits = hf
    work = tmp_path_factory.mktemp(stack)
    before = _digest(src)
    out, back = work / stack, work / "back"
    codes = (cli("port", src, out, "--preset", f"hf-llama-to-{stack}", "--json", work / "to.json"),
             cli("port", out, back, "--preset", f"{stack}-to-hf-llama", "--json", work / "back.json"))
    return dict(stack=stack, src=src, out=out, back=back, codes=codes, before=before, after=_digest(src),
                model=model, logits=logits, reports=[json.loads((work / n).read_text()) for n in ("to.json", "back.json")])


def test_round_trip_is_bit_for_bit_and_keeps_hf_logits(round_trip):
    r = round_trip
    assert r["codes"] == (0, 0)
    assert r["before"] == r["after"], "SOURCE changed"
    assert set(os.listdir(r["out"])) == FILES[r["stack"]]
    assert detect_format(r["out"]) == {"torchtitan": "dcp", "maxtext": "orbax", "megatron": "torch_dist"}[r["stack"]]
    a, b = _tensors(r["src"]), _tensors(r["back"])
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and np.array_equal(a[name].view(np.uint32), b[name].view(np.uint32)), name
    back = transformers.LlamaForCausalLM.from_pretrained(r["back"]).eval()
    assert np.array_equal(_logits(back), r["logits"])  # same weights, same code: identical logits


def test_reports_name_every_check(round_trip):
    to, back = round_trip["reports"]
    kinds = {c["kind"] for c in to["checks"]}
    assert {"packed", "written", "rope-logits", "unpacked", "angles"} <= kinds
    assert {"written", "rope-logits", "angles"} <= {c["kind"] for c in back["checks"]}
    assert all(c["passed"] for c in to["checks"] + back["checks"])
    assert to["verified"] and back["verified"]


def test_stack_configs_say_what_the_stack_reads(round_trip):
    stack, out = round_trip["stack"], round_trip["out"]
    if stack == "torchtitan":
        model = json.loads((out / "job_config.json").read_text())["model_spec"]["model"]
        rope = model["layers"][0]["attention"]["rope"]
        assert rope["scaling"] == "llama" and rope["theta"] == 500000 and rope["scaling_factor"] == 8.0
        assert model["layers"][0]["attention"]["n_kv_heads"] == 2 and model["norm"]["eps"] == 1e-5
    elif stack == "maxtext":
        import yaml

        cfg = yaml.safe_load((out / "maxtext.yml").read_text())
        assert cfg["rope_type"] == "llama3.1" and cfg["rope_use_scale"] is True and cfg["rope_max_timescale"] == 500000
        assert cfg["base_num_kv_heads"] == 2 and cfg["head_dim"] == 16 and cfg["scan_layers"] is True
    else:
        cfg = json.loads((out / "transformer_config.json").read_text())
        assert cfg["rope_scaling"] is True and cfg["rope_scaling_factor"] == 8.0 and cfg["rotary_base"] == 500000
        assert cfg["num_query_groups"] == 2 and cfg["kv_channels"] == 16 and cfg["rotary_interleaved"] is False


# ------------------------------------------------------------------------------------------ layouts on disk

@pytest.mark.parametrize("round_trip", ["megatron"], indirect=True)
def test_megatron_qkv_is_grouped_per_query_group(round_trip):
    """linear_qkv rows of layer i, group g: [q heads 2g, 2g+1; k_g; v_g] (HF's row order inside each head)."""
    hf, mg = _tensors(round_trip["src"]), _tensors(round_trip["out"])
    qkv = mg["decoder.layers.self_attention.linear_qkv.weight"]
    for i in range(2):
        q, k, v = (hf[f"model.layers.{i}.self_attn.{n}_proj.weight"] for n in "qkv")
        for g in range(2):
            block = qkv[i, g * 64:(g + 1) * 64]
            assert np.array_equal(block[:32], q[g * 32:(g + 1) * 32])
            assert np.array_equal(block[32:48], k[g * 16:(g + 1) * 16])
            assert np.array_equal(block[48:], v[g * 16:(g + 1) * 16])
        fc1 = mg["decoder.layers.mlp.linear_fc1.weight"][i]
        assert np.array_equal(fc1[:96], hf[f"model.layers.{i}.mlp.gate_proj.weight"])
        assert np.array_equal(fc1[96:], hf[f"model.layers.{i}.mlp.up_proj.weight"])
        assert np.array_equal(mg["decoder.layers.self_attention.linear_qkv.layer_norm_weight"][i],
                              hf[f"model.layers.{i}.input_layernorm.weight"])


@pytest.mark.parametrize("round_trip", ["torchtitan"], indirect=True)
def test_torchtitan_rows_are_metas_interleaved_order(round_trip):
    """torchtitan's wq = the inverse of HF's `_permute` (its state_dict_adapter `_reverse_permute`), k with kv heads."""
    hf, tt = _tensors(round_trip["src"]), _tensors(round_trip["out"])

    def reverse_permute(w, heads):  # torchtitan 0.3.0 models/llama3/state_dict_adapter.py
        rows, cols = w.shape
        return w.reshape(heads, 2, rows // heads // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)

    assert np.array_equal(tt["layers.1.attention.qkv_linear.wq.weight"],
                          reverse_permute(hf["model.layers.1.self_attn.q_proj.weight"], 4))
    assert np.array_equal(tt["layers.1.attention.qkv_linear.wk.weight"],
                          reverse_permute(hf["model.layers.1.self_attn.k_proj.weight"], 2))


# ------------------------------------------------------------------------------------------ the stacks' own models

TORCHTITAN_RUN = r"""
import json, sys
import numpy as np, torch
import torch.distributed.checkpoint as dcp
import torchtitan.models.common.attention as attention
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.llama3 import (Llama3Model, _build_llama3_layers, _EMBEDDING_INIT, _NORM_INIT,
                                      _output_linear_init)
attention.FlexAttention._compiled_flex_attn = staticmethod(flex_attention)  # eager: no inductor on this CPU
attention._compiled_create_block_mask = create_block_mask
directory, tokens_path, out_path = sys.argv[1:4]
model_cfg = json.load(open(directory + "/job_config.json"))["model_spec"]["model"]
att, layer = model_cfg["layers"][0]["attention"], model_cfg["layers"][0]
dim, vocab = model_cfg["dim"], model_cfg["vocab_size"]
config = Llama3Model.Config(
    dim=dim, vocab_size=vocab,
    tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim, param_init=_EMBEDDING_INIT),
    norm=RMSNorm.Config(normalized_shape=dim, eps=model_cfg["norm"]["eps"], param_init=_NORM_INIT),
    lm_head=Linear.Config(in_features=dim, out_features=vocab, param_init=_output_linear_init(dim)),
    layers=_build_llama3_layers(fuse_qkv=False, n_layers=len(model_cfg["layers"]), dim=dim, n_heads=att["n_heads"],
                                n_kv_heads=att["n_kv_heads"], hidden_dim=layer["feed_forward"]["hidden_dim"],
                                rope=ComplexRoPE.Config(**att["rope"]), attn_backend="flex"))
model = config.build().eval()
state = model.state_dict()
dcp.load(state, checkpoint_id=directory, no_dist=True)  # as torchtitan's CheckpointManager loads a model
model.load_state_dict(state)
tokens = torch.from_numpy(np.load(tokens_path))
positions = torch.arange(tokens.shape[1])[None]
with torch.no_grad():
    logits = model(tokens, positions=positions, attention_masks=model.get_attention_masks(positions))
np.save(out_path, logits.double().numpy())
"""

TORCHTITAN_ADAPTER = r"""
import json, sys
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.llama3 import Llama3Model, _build_llama3_layers
from torchtitan.models.llama3.state_dict_adapter import Llama3StateDictAdapter
directory, hf_file, out_path = sys.argv[1:4]
m = json.load(open(directory + "/job_config.json"))["model_spec"]["model"]
att = m["layers"][0]["attention"]
config = Llama3Model.Config(
    dim=m["dim"], vocab_size=m["vocab_size"],
    tok_embeddings=Embedding.Config(num_embeddings=m["vocab_size"], embedding_dim=m["dim"]),
    norm=RMSNorm.Config(normalized_shape=m["dim"]), lm_head=Linear.Config(in_features=m["dim"], out_features=m["vocab_size"]),
    layers=_build_llama3_layers(fuse_qkv=False, n_layers=len(m["layers"]), dim=m["dim"], n_heads=att["n_heads"],
                                n_kv_heads=att["n_kv_heads"], hidden_dim=m["layers"][0]["feed_forward"]["hidden_dim"],
                                rope=ComplexRoPE.Config(**att["rope"]), attn_backend="flex"))
adapter = Llama3StateDictAdapter(config, None)
hf = load_file(hf_file)
ours = {k: torch.empty(v.shape, dtype=v.dtype) for k, v in adapter.from_hf(dict(hf)).items()}
dcp.load(ours, checkpoint_id=directory, no_dist=True)
theirs = adapter.from_hf(dict(hf))
back = adapter.to_hf(ours)
json.dump({"from_hf": sorted(k for k in theirs if not torch.equal(theirs[k], ours[k])),
           "to_hf": sorted(k for k in hf if not torch.equal(hf[k], back[k])), "keys": len(theirs)}, open(out_path, "w"))
"""


MEGATRON_RUN = r"""
import contextlib, json, socket, sys
sys.modules["transformer_engine"] = None  # the Python-only TE wheel raises on import: megatron's non-TE branches
import numpy as np, torch
torch.cuda.current_device = lambda: "cpu"  # rotary tables are moved to current_device()
import torch.distributed as dist
sock = socket.socket(); sock.bind(("127.0.0.1", 0)); port = sock.getsockname()[1]; sock.close()
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
from megatron.core import dist_checkpointing, parallel_state
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.tensor_parallel import random as mc_random
from megatron.core.transformer.transformer_config import TransformerConfig
parallel_state.initialize_model_parallel(1, 1)
directory, tokens_path, out_path = sys.argv[1:4]
c = json.load(open(directory + "/transformer_config.json"))
config = TransformerConfig(
    num_layers=c["num_layers"], hidden_size=c["hidden_size"], num_attention_heads=c["num_attention_heads"],
    num_query_groups=c["num_query_groups"], kv_channels=c["kv_channels"], ffn_hidden_size=c["ffn_hidden_size"],
    normalization=c["normalization"], gated_linear_unit=c["gated_linear_unit"], add_bias_linear=c["add_bias_linear"],
    activation_func=torch.nn.functional.silu, layernorm_epsilon=c["layernorm_epsilon"],
    rotary_interleaved=c["rotary_interleaved"], use_cpu_initialization=True, hidden_dropout=0.0,
    attention_dropout=0.0, params_dtype=torch.float32)
model = GPTModel(config, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
                 vocab_size=c["vocab_size"], max_sequence_length=c["seq_length"],
                 position_embedding_type=c["position_embedding_type"], rotary_base=c["rotary_base"],
                 rotary_percent=c["rotary_percent"], rope_scaling=c.get("rope_scaling", False),
                 rope_scaling_factor=c.get("rope_scaling_factor", 8.0),
                 share_embeddings_and_output_weights=c["share_embeddings_and_output_weights"])
state = dist_checkpointing.load(model.sharded_state_dict(), directory)  # Megatron's own torch_dist loader
missing = model.load_state_dict(state)
assert not missing.missing_keys and not missing.unexpected_keys, missing
model.eval()
mc_random.get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()  # dropout is 0 and eval
tokens = torch.from_numpy(np.load(tokens_path))
positions = torch.arange(tokens.shape[1])[None]
mask = torch.triu(torch.ones(1, 1, tokens.shape[1], tokens.shape[1], dtype=torch.bool), 1)
with torch.no_grad():
    logits = model(tokens, positions, mask)
np.save(out_path, logits.double().numpy())
dist.destroy_process_group()
"""


def _need(module, why):
    """Skip unless `module` is installed; found, not imported (megatron imports a Transformer Engine that raises here
    unless hidden, which the subprocess does)."""
    import importlib.util

    if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: {why}")


def _run_stack(script, directory, tmp_path):
    np.save(tmp_path / "tokens.npy", TOKENS)
    out = tmp_path / "logits.npy"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-c", script, str(directory), str(tmp_path / "tokens.npy"), str(out)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return np.load(out)


def _assert_close(actual, desired):
    tol = _tolerance(desired)
    err = float(np.max(np.abs(actual - desired)))
    assert err <= tol.atol, f"max |err| {err:.3g} > tol {tol.atol:.3g}"
    return err, tol.atol


@pytest.mark.parametrize("round_trip", ["torchtitan"], indirect=True)
def test_torchtitan_llama3_model_gives_hf_logits(round_trip, tmp_path):
    _need("torchtitan.models", "torchtitan 0.3.0 (requirements-nodeps.txt)")
    _assert_close(_run_stack(TORCHTITAN_RUN, round_trip["out"], tmp_path), round_trip["logits"])


@pytest.mark.parametrize("round_trip", ["torchtitan"], indirect=True)
def test_torchtitan_state_dict_adapter_agrees(round_trip, tmp_path):
    """torchtitan's own HF converter (`Llama3StateDictAdapter.from_hf` / `to_hf`, the code behind its
    convert_from_hf.py / convert_to_hf.py) gives exactly the tensors posenc wrote, and takes them back to HF's."""
    _need("torchtitan.models", "torchtitan 0.3.0 (requirements-nodeps.txt)")
    out = tmp_path / "adapter.json"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-c", TORCHTITAN_ADAPTER, str(round_trip["out"]),
                           str(round_trip["src"] / "model.safetensors"), str(out)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(out.read_text()) == {"from_hf": [], "to_hf": [], "keys": 21}


@pytest.mark.parametrize("round_trip", ["torchtitan"], indirect=True)
def test_torchtitan_catches_the_missing_permute(round_trip, tmp_path):
    """torchtitan PR #1441's bug planted: HF rows stored unpermuted; torchtitan's own logits move by O(1)."""
    _need("torchtitan.models", "torchtitan 0.3.0 (requirements-nodeps.txt)")
    from posenc.formats import write_checkpoint
    from posenc.port.stacks import TorchtitanLayout, dims_of

    hf = _tensors(round_trip["src"])
    layout = TorchtitanLayout(dims_of(json.loads((round_trip["src"] / "config.json").read_text())))
    planted = tmp_path / "planted"
    write_checkpoint(planted, "dcp", layout.pack({n: (a.shape, a.dtype.name, lambda a=a: a) for n, a in hf.items()}))
    (planted / "job_config.json").write_text((round_trip["out"] / "job_config.json").read_text())
    logits = _run_stack(TORCHTITAN_RUN, planted, tmp_path)
    assert np.max(np.abs(logits - round_trip["logits"])) > 100 * _tolerance(round_trip["logits"]).atol


@pytest.mark.parametrize("round_trip", ["megatron"], indirect=True)
def test_megatron_gpt_model_gives_hf_logits(round_trip, tmp_path):
    _need("megatron.core", "megatron-core 0.16.1 (requirements-nodeps.txt)")
    _assert_close(_run_stack(MEGATRON_RUN, round_trip["out"], tmp_path), round_trip["logits"])


def _rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def maxtext_reference_logits(directory, tokens, *, query_scaled=True):
    """Float64 logits of MaxText's Llama decoder on the Orbax tree under `directory`/items, read with MaxText's
    conventions (MaxText `layers/llama2.py` LlamaDecoderLayer, `layers/attentions.py`, `layers/embeddings.py`
    LLaMARotaryEmbedding; the yml beside it): layer i is index i of axis 1; q = x . query[:, i] (already times
    1/sqrt(head_dim), so the scores are not scaled again); rope_type llama3.1 rotates interleaved pairs with the
    llama3 scaling of Meta's constants (factor rope_linear_scaling_factor... fixed 8, 1, 4, 8192) when
    rope_use_scale; `query_scaled=False` is the planted reading without the folded scale."""
    import yaml

    cfg = yaml.safe_load((directory / "maxtext.yml").read_text())
    r = open_reader(directory / "items")
    p = "params/params/"

    def get(name):
        return np.asarray(r.get(p + name), np.float64)

    eps, layers = cfg["normalization_layer_epsilon"], cfg["base_num_decoder_layers"]
    heads, kv, d = cfg["base_num_query_heads"], cfg["base_num_kv_heads"], cfg["head_dim"]
    scaling = None
    if cfg["rope_type"] == "llama3.1" and cfg.get("rope_use_scale"):
        scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192}
    layout = "interleaved" if cfg["rope_type"] == "llama3.1" else "half"
    rope = dict(base=float(cfg["rope_max_timescale"]), scaling=scaling, layout=layout)
    x = get("token_embedder/embedding")[tokens[0]]
    seq = x.shape[0]
    positions = np.arange(seq)
    mask = np.triu(np.full((seq, seq), -np.inf), 1)
    q_k, k_k, v_k, o_k = (get(f"decoder/layers/self_attention/{n}/kernel") for n in ("query", "key", "value", "out"))
    wi0, wi1, wo = (get(f"decoder/layers/mlp/{n}/kernel") for n in ("wi_0", "wi_1", "wo"))
    ln1, ln2 = (get(f"decoder/layers/{n}/scale") for n in ("pre_self_attention_layer_norm",
                                                            "post_self_attention_layer_norm"))
    for i in range(layers):
        h = _rms(x, ln1[:, i], eps)
        q = np.einsum("te,enh->nth", h, q_k[:, i])
        k = np.einsum("te,enh->nth", h, k_k[:, i])
        v = np.einsum("te,enh->nth", h, v_k[:, i])
        q, k = apply_rope(q, positions, **rope), apply_rope(k, positions, **rope)
        k, v = np.repeat(k, heads // kv, axis=0), np.repeat(v, heads // kv, axis=0)
        scores = q @ k.transpose(0, 2, 1) / (1.0 if query_scaled else np.sqrt(d)) + mask
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        x = x + np.einsum("nth,nhe->te", weights @ v, o_k[:, i])
        h = _rms(x, ln2[:, i], eps)
        gate = h @ wi0[:, i]
        x = x + (gate / (1 + np.exp(-gate)) * (h @ wi1[:, i])) @ wo[:, i]
    return _rms(x, get("decoder/decoder_norm/scale"), eps) @ get("decoder/logits_dense/kernel")


@pytest.mark.parametrize("round_trip", ["maxtext"], indirect=True)
def test_maxtext_reference_forward_gives_hf_logits(round_trip):
    logits = maxtext_reference_logits(round_trip["out"], TOKENS)
    _assert_close(logits[None], round_trip["logits"])
    # planted: a reader that ignores the folded 1/sqrt(head_dim) (MaxText #1774's class of bug) moves logits by O(1)
    wrong = maxtext_reference_logits(round_trip["out"], TOKENS, query_scaled=False)
    assert np.max(np.abs(wrong[None] - round_trip["logits"])) > 100 * _tolerance(round_trip["logits"]).atol


# ------------------------------------------------------------------------------------------ other configurations

def hf_reference_logits(directory, tokens):
    """Float64 logits of a Llama checkpoint directory (HF names, config.json) by posenc's reference forward:
    transformers' LlamaDecoderLayer order (RMSNorm, GQA attention with rotate-half RoPE on the first
    `head_dim * partial_rotary_factor` channels, SiLU-gated MLP), `posenc_np.apply_rope` for the rotation. It also
    covers partial rotary, which transformers 5.24's `apply_rotary_pos_emb` for Llama does not compute."""
    cfg = json.loads((directory / "config.json").read_text())
    t = {n: a.astype(np.float64) for n, a in _tensors(directory).items()}
    heads, kv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    partial = cfg.get("partial_rotary_factor", params.get("partial_rotary_factor", 1.0))
    scaling = {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor")}
    base = cfg.get("rope_theta") or params.get("rope_theta")
    rope = dict(base=float(base), scaling=scaling if scaling.get("rope_type", "default") != "default" else None,
                rotary_dim=int(d * partial), layout="half")
    x = t["model.embed_tokens.weight"][tokens[0]]
    seq, eps = x.shape[0], cfg["rms_norm_eps"]
    positions, mask = np.arange(seq), np.triu(np.full((seq, seq), -np.inf), 1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _rms(x, t[p + "input_layernorm.weight"], eps)
        q, k, v = ((h @ t[p + f"self_attn.{n}_proj.weight"].T).reshape(seq, -1, d).transpose(1, 0, 2) for n in "qkv")
        q, k = apply_rope(q, positions, **rope), apply_rope(k, positions, **rope)
        k, v = np.repeat(k, heads // kv, axis=0), np.repeat(v, heads // kv, axis=0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(d) + mask
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        x = x + (weights @ v).transpose(1, 0, 2).reshape(seq, -1) @ t[p + "self_attn.o_proj.weight"].T
        h = _rms(x, t[p + "post_attention_layernorm.weight"], eps)
        gate = h @ t[p + "mlp.gate_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * (h @ t[p + "mlp.up_proj.weight"].T)) @ t[p + "mlp.down_proj.weight"].T
    return (_rms(x, t["model.norm.weight"], eps) @ t["lm_head.weight"].T)[None]


def test_reference_forward_is_transformers(hf):
    """The reference the partial-rotary check uses gives transformers' logits on the full-rotary model."""
    _assert_close(hf_reference_logits(hf[0], TOKENS), hf[2])


def test_partial_rotary_goes_to_megatron_and_back(tmp_path):
    """partial_rotary_factor 0.5 -> rotary_percent 0.5 (rows in HF order, the pass-through half untouched), and
    Megatron's GPTModel gives the reference forward's logits; torchtitan and MaxText rotate the whole head and
    refuse it (exit 2, nothing written)."""
    src = tmp_path / "hf"
    _save_hf(src, partial_rotary_factor=0.5)
    assert cli("port", src, tmp_path / "mg", "--preset", "hf-llama-to-megatron") == 0
    assert json.loads((tmp_path / "mg" / "transformer_config.json").read_text())["rotary_percent"] == 0.5
    assert cli("port", tmp_path / "mg", tmp_path / "back", "--preset", "megatron-to-hf-llama") == 0
    a, b = _tensors(src), _tensors(tmp_path / "back")
    assert all(np.array_equal(a[n], b[n]) for n in a) and sorted(a) == sorted(b)
    assert json.loads((tmp_path / "back" / "config.json").read_text())["partial_rotary_factor"] == 0.5
    reference = hf_reference_logits(src, TOKENS)
    full = json.loads((src / "config.json").read_text())
    full.pop("partial_rotary_factor", None)
    full.get("rope_parameters", {}).pop("partial_rotary_factor", None)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "config.json").write_text(json.dumps(full))
    (tmp_path / "full" / "model.safetensors").symlink_to(src / "model.safetensors")
    assert np.max(np.abs(hf_reference_logits(tmp_path / "full", TOKENS) - reference)) > 100 * _tolerance(reference).atol
    if importlib.util.find_spec("megatron") is not None:
        _assert_close(_run_stack(MEGATRON_RUN, tmp_path / "mg", tmp_path), reference)
    for stack in ("torchtitan", "maxtext"):
        assert cli("port", src, tmp_path / stack, "--preset", f"hf-llama-to-{stack}") == 2
        assert not (tmp_path / stack).exists()


@pytest.mark.parametrize("stack, scaling, why", [
    ("maxtext", {**LLAMA3, "original_max_position_embeddings": 4096}, "LLaMARotaryEmbedding fixes"),
    ("megatron", {**LLAMA3, "low_freq_factor": 2.0}, "_apply_scaling takes only the factor"),
    ("maxtext", {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}, "no equivalent"),
])
def test_settings_the_target_cannot_express_are_refused(tmp_path, capsys, stack, scaling, why):
    src = tmp_path / "hf"
    _save_hf(src, rope_parameters=scaling)
    capsys.readouterr()
    assert cli("port", src, tmp_path / "out", "--preset", f"hf-llama-to-{stack}") == 2
    assert why in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["hf"]  # nothing written, no temporary left


@pytest.mark.parametrize("stack", STACKS)
def test_bfloat16_round_trip(tmp_path, stack):
    src = tmp_path / "hf"
    _save_hf(src, dtype=torch.bfloat16)
    assert cli("port", src, tmp_path / "s", "--preset", f"hf-llama-to-{stack}") == 0
    assert cli("port", tmp_path / "s", tmp_path / "back", "--preset", f"{stack}-to-hf-llama") == 0
    a, b = _tensors(src), _tensors(tmp_path / "back")
    assert all(a[n].dtype.name == "bfloat16" and np.array_equal(a[n].view(np.uint16), b[n].view(np.uint16))
               for n in a)


def test_maxtext_query_scale_rounds_once_when_sqrt_head_dim_is_not_a_power_of_two(tmp_path):
    """head_dim 32: 1/sqrt(32) is inexact; `unpacked` compares the query within 2 ulps, everything else bit for bit."""
    src = tmp_path / "hf"
    _save_hf(src, head_dim=32, num_attention_heads=2, num_key_value_heads=1)
    assert cli("port", src, tmp_path / "mx", "--preset", "hf-llama-to-maxtext", "--json", tmp_path / "r.json") == 0
    checks = json.loads((tmp_path / "r.json").read_text())["checks"]
    query = [c for c in checks if c["kind"] == "unpacked" and c["name"].endswith("q_proj.weight")]
    assert query and all(c["atol"] > 0 and c["passed"] for c in query)
    assert all(c["atol"] == 0 for c in checks if c["kind"] == "unpacked" and c not in query)


# ------------------------------------------------------------------------------------------ planted bugs

def _planted_port(src, target, preset_name, **rules):
    preset = get_preset(preset_name, open_reader(src))
    for key, value in rules.items():
        setattr(preset.rules, key, value)
    return port(src, target, preset.rules, rope=preset.rope, sidecar=preset.sidecar, extra=preset.extra,
                target_format=preset.target_format, layout=preset.layout, stack_config=preset.stack_config)


def test_missing_permute_is_caught_before_target_is_written(hf, tmp_path):
    """torchtitan PR #1441: HF rows written for ComplexRoPE without the permute: rope-logits fail, TARGET is
    kept aside as TARGET.unverified."""
    result = _planted_port(hf[0], tmp_path / "tt", "hf-llama-to-torchtitan", rope_to="half")
    assert not result.verified and not (tmp_path / "tt").exists() and (tmp_path / "tt.unverified").is_dir()
    failed = {c.kind for c in result.checks if not c.passed}
    assert failed == {"rope-logits"}


def test_unneeded_permute_is_caught(tmp_path):
    """MaxText #1774: a permutation applied where the target keeps HF's rows (rope_type default) is caught."""
    src = tmp_path / "hf"
    _save_hf(src, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    preset = get_preset("hf-llama-to-maxtext", open_reader(src))
    assert preset.rope["target"] == "half" and preset.stack_config["rope_type"] == "default"
    result = _planted_port(src, tmp_path / "mx", "hf-llama-to-maxtext", rope_to="interleaved")
    assert not result.verified and {c.kind for c in result.checks if not c.passed} == {"rope-logits"}


# ------------------------------------------------------------------------------------------ sources

@pytest.mark.parametrize("round_trip", ["megatron"], indirect=True)
def test_nemo2_checkpoint_is_read_with_its_model_yaml(round_trip, tmp_path):
    """A NeMo 2 checkpoint: weights/ (torch_dist, keys under `module.`) and context/model.yaml (Llama31Config)."""
    import yaml

    from posenc.formats import write_checkpoint
    from posenc.port.stack_config import target_config

    stored = _tensors(round_trip["out"])
    nemo = tmp_path / "nemo"
    write_checkpoint(nemo / "weights", "torch_dist",
                     [(f"module.{n}", a.shape, a.dtype.name, lambda a=a: a) for n, a in stored.items()])
    (nemo / "context").mkdir()
    hf_config = json.loads((round_trip["src"] / "config.json").read_text())
    (nemo / "context" / "model.yaml").write_text(yaml.safe_dump(target_config("nemo", hf_config)))
    assert detect_format(nemo) == "torch_dist"
    assert cli("port", nemo, tmp_path / "back", "--preset", "megatron-to-hf-llama") == 0
    a, b = _tensors(round_trip["src"]), _tensors(tmp_path / "back")
    assert all(np.array_equal(a[n], b[n]) for n in a)


def test_reading_is_one_tensor_at_a_time(round_trip, monkeypatch):
    """Each `get` loads one DCP item (one `dcp.load` of a one-key state dict) or one Orbax leaf."""
    if round_trip["stack"] == "maxtext":
        import orbax.checkpoint as ocp

        calls = []
        original = ocp.PyTreeCheckpointer.restore

        def counting(self, path, *args, **kwargs):
            item = kwargs["args"].item
            calls.append(item)
            return original(self, path, *args, **kwargs)

        monkeypatch.setattr(ocp.PyTreeCheckpointer, "restore", counting)
        reader = open_reader(round_trip["out"])
        reader.get("params/params/decoder/decoder_norm/scale")
        assert calls == [{"params": {"params": {"decoder": {"decoder_norm": {"scale": calls[0]["params"]["params"][
            "decoder"]["decoder_norm"]["scale"]}}}}}]
        return
    import torch.distributed.checkpoint as dcp

    keys = []
    original = dcp.load
    monkeypatch.setattr(dcp, "load", lambda state, **kw: (keys.append(sorted(state)), original(state, **kw))[1])
    reader = open_reader(round_trip["out"])
    name = reader.names()[1]
    reader.get(name)
    assert keys == [[name]]


def test_bad_directories_are_named(tmp_path, capsys):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / ".metadata").write_bytes(b"not a pickle")
    with pytest.raises(UsageError, match="broken"):
        open_reader(broken)
    capsys.readouterr()
    assert cli("port", broken, tmp_path / "out", "--preset", "torchtitan-to-hf-llama") == 2
    assert "broken" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_missing_stack_config_is_named(round_trip, tmp_path, capsys):
    stack = round_trip["stack"]
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(round_trip["out"], copy)
    (copy / {"torchtitan": "job_config.json", "maxtext": "maxtext.yml",
             "megatron": "transformer_config.json"}[stack]).unlink()
    capsys.readouterr()
    assert cli("port", copy, tmp_path / "back", "--preset", f"{stack}-to-hf-llama") == 2
    assert "config" in capsys.readouterr().err and not (tmp_path / "back").exists()


def test_existing_target_is_never_overwritten(round_trip, tmp_path, capsys):
    target = tmp_path / "taken"
    target.mkdir()
    (target / "keep").write_text("x")
    stack = round_trip["stack"]
    assert cli("port", round_trip["src"], target, "--preset", f"hf-llama-to-{stack}") == 2
    assert os.listdir(target) == ["keep"]


def test_posenc_spec_reads_the_written_config_as_the_hf_config(round_trip, capsys):
    """`posenc spec STACK_CONFIG config.json` exits 0: the written config means the HF config's encoding."""
    name = {"torchtitan": "job_config.json", "maxtext": "maxtext.yml", "megatron": "transformer_config.json"}
    capsys.readouterr()
    assert cli("spec", round_trip["out"] / name[round_trip["stack"]], round_trip["src"] / "config.json") == 0
    assert "SAME encoding" in capsys.readouterr().out


def test_a_file_name_is_not_taken_as_a_stack_directory(hf, tmp_path, capsys):
    capsys.readouterr()
    assert cli("port", hf[0], tmp_path / "out.safetensors", "--preset", "hf-llama-to-torchtitan") == 2
    assert "writes dcp" in capsys.readouterr().err and not (tmp_path / "out.safetensors").exists()


@pytest.mark.parametrize("stack", STACKS)
def test_tied_embeddings_round_trip(tmp_path, stack):
    """tie_word_embeddings: no lm_head in SOURCE; torchtitan `enable_weight_tying`, MaxText `logits_via_embedding`,
    Megatron `share_embeddings_and_output_weights`; the way back says tied again."""
    src = tmp_path / "hf"
    _save_hf(src, tie_word_embeddings=True)
    assert cli("port", src, tmp_path / "s", "--preset", f"hf-llama-to-{stack}") == 0
    assert cli("port", tmp_path / "s", tmp_path / "back", "--preset", f"{stack}-to-hf-llama") == 0
    a, b = _tensors(src), _tensors(tmp_path / "back")
    assert "lm_head.weight" not in b and sorted(a) == sorted(b) and all(np.array_equal(a[n], b[n]) for n in a)
    assert json.loads((tmp_path / "back" / "config.json").read_text())["tie_word_embeddings"] is True


def test_the_way_back_keeps_the_scaling(round_trip):
    """NeMo #12497 / #14523 wrote `rope_scaling: null` on export: the HF config written back carries llama3's dict."""
    back = json.loads((round_trip["back"] / "config.json").read_text())
    scaling = back.get("rope_scaling") or back.get("rope_parameters")
    assert {k: scaling[k] for k in ("rope_type", "factor", "low_freq_factor", "high_freq_factor",
                                     "original_max_position_embeddings")} == \
        {k: v for k, v in LLAMA3.items() if k != "rope_theta"}


def test_dropped_linear_scaling_is_caught_by_the_angle_check(tmp_path):
    """Megatron-Bridge #5097: linear scaling dropped from the written config. Planted into the config a port
    writes, the `angles` check fails and TARGET is kept aside."""
    src = tmp_path / "hf"
    _save_hf(src, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0})
    preset = get_preset("hf-llama-to-megatron", open_reader(src))
    assert preset.stack_config["seq_len_interpolation_factor"] == 4
    del preset.stack_config["seq_len_interpolation_factor"]
    result = port(src, tmp_path / "mg", preset.rules, rope=preset.rope, sidecar=preset.sidecar, extra=preset.extra,
                  target_format=preset.target_format, layout=preset.layout, stack_config=preset.stack_config)
    assert not result.verified and {c.kind for c in result.checks if not c.passed} == {"angles"}
    assert not (tmp_path / "mg").exists()


@pytest.mark.parametrize("round_trip", ["megatron"], indirect=True)
def test_a_model_tensor_without_a_place_is_refused(round_trip, tmp_path, capsys):
    """A bias the Llama layout has no place for is an error (exit 2), never dropped silently."""
    from posenc.formats import write_checkpoint

    stored = _tensors(round_trip["out"])
    stored["decoder.layers.self_attention.linear_qkv.bias"] = np.zeros((2, 128), np.float32)
    extra = tmp_path / "extra"
    write_checkpoint(extra, "torch_dist", [(n, a.shape, a.dtype.name, lambda a=a: a) for n, a in stored.items()])
    (extra / "transformer_config.json").write_text((round_trip["out"] / "transformer_config.json").read_text())
    capsys.readouterr()
    assert cli("port", extra, tmp_path / "back", "--preset", "megatron-to-hf-llama") == 2
    assert "linear_qkv.bias" in capsys.readouterr().err and not (tmp_path / "back").exists()


def test_flags_that_would_override_the_config_are_refused(hf, tmp_path, capsys):
    capsys.readouterr()
    assert cli("port", hf[0], tmp_path / "tt", "--preset", "hf-llama-to-torchtitan", "--rope-theta", "10000") == 2
    assert "--rope-theta" in capsys.readouterr().err and not (tmp_path / "tt").exists()


@pytest.mark.parametrize("round_trip", ["torchtitan"], indirect=True)
def test_a_training_step_directory_is_read_for_its_model(round_trip, tmp_path):
    """A torchtitan `step-N/` holds optimizer state and `train_state` (bytes) beside the model: only the model's
    tensors are read, and the job config is found in the parent folder."""
    from posenc.formats import write_checkpoint

    stored = _tensors(round_trip["out"])
    entries = [(n, a.shape, a.dtype.name, lambda a=a: a) for n, a in stored.items()]
    moment = np.ones((4,), np.float32)
    entries.append(("optimizer.state.layers.0.attention.wo.weight.exp_avg", (4,), "float32", lambda: moment))
    step = tmp_path / "checkpoint" / "step-10"
    write_checkpoint(step, "dcp", entries, {"objects": {"train_state": {"step": 10}}})
    (tmp_path / "checkpoint" / "job_config.json").write_text((round_trip["out"] / "job_config.json").read_text())
    assert cli("port", step, tmp_path / "back", "--preset", "torchtitan-to-hf-llama") == 0
    a, b = _tensors(round_trip["src"]), _tensors(tmp_path / "back")
    assert sorted(a) == sorted(b) and all(np.array_equal(a[n], b[n]) for n in a)
