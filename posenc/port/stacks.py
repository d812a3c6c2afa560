"""The training stacks' checkpoint layouts (torchtitan, MaxText, Megatron-core) against Hugging Face Llama, and the
port of a checkpoint directory to or from one of them.

Every layout is two maps between the stack's tensors and the *canonical* tensors: HF `LlamaForCausalLM` names,
one tensor per layer, torch `[out, in]` orientation, query unscaled, q/k rows still in the stack's RoPE row
order. The RoPE row permutation is the port's own (`mapping.Rules` rope_q/rope_k, checked by `rope-logits`),
never a layout's:

* `unpack(reader)`: a `Reader` of canonical tensors computed from the stack's (SOURCE of `X-to-hf-llama`);
* `pack(tensors)`: the stack's tensors computed from canonical ones (TARGET of `hf-llama-to-X`).

Layouts (the sources are cited at each class):

* torchtitan 0.3.0 (`TorchtitanLayout`): the flat model state dict in a DCP directory, one tensor per layer,
  q/k rows in Meta's interleaved order (`ComplexRoPE`).
* MaxText (`MaxTextLayout`): an Orbax tree under `params/params/`, layers scanned (stacked on axis 1 of every
  decoder kernel, `param_scan_axis: 1`), kernels `[in, out]` with heads split out (`query/kernel` `[embed,
  layers, heads, head_dim]`, `out/kernel` `[heads, layers, head_dim, embed]`), the query kernel pre-scaled by
  1/sqrt(head_dim).
* Megatron-core 0.16.1 (`MegatronLayout`): `torch_dist`, layers stacked on axis 0 (`TransformerBlock.
  sharded_state_dict`: key `decoder.layers.X` with `sharded_offsets (0, layer, num_layers)`), q/k/v fused in
  `linear_qkv` grouped per query group, `linear_fc1 = [gate; up]`, the layer norms fused into the following
  linear (`layer_norm_weight`, Transformer Engine's `TELayerNormColumnParallelLinear`).

Memory: a stacked tensor (all layers of one kind) is read once per group of canonical tensors cut from it (a
one-entry cache, canonical names ordered by the stacked tensor they come from), so reading holds about one
stacked tensor; writing DCP and Orbax takes the whole state (`posenc.formats.dcp`, `posenc.formats.orbax`).

`posenc.port.core` writes a stack TARGET: the packed tensors (`pack_entries`) and the stack's config file into a
temporary sibling directory, verified (`verify_stack`), then renamed (a failed verification keeps it as
TARGET.unverified). Verification:
`packed` (every stored tensor equals the packing of the canonical tensors, bit for bit), the port's plan checks
on the canonical tensors (`written`, `rope-logits`), and `unpacked` (the stored tensors unpacked again equal the
canonical ones: exact, except MaxText's query when sqrt(head_dim) is not a power of two, where the 1/sqrt(head_dim)
scaling rounds: within 2 ulps of the dtype, relative to the tensor's largest magnitude).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..errors import UsageError
from ..formats import open_reader, write_checkpoint
from ..formats.base import Reader, dtype_name
from .checks import Check
from .hf_config import heads as hf_heads

__all__ = ["Dims", "dims_of", "canonical_names", "StackLayout", "TorchtitanLayout", "MaxTextLayout",
           "MegatronLayout", "LAYOUTS", "pack_entries", "verify_stack", "read_stack_config_file"]

#: canonical per-layer tensors: short role -> HF `LlamaForCausalLM` name under `model.layers.N.`
LAYER = {"q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
         "o": "self_attn.o_proj.weight", "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight",
         "down": "mlp.down_proj.weight", "norm1": "input_layernorm.weight", "norm2": "post_attention_layernorm.weight"}
TOP = {"embed": "model.embed_tokens.weight", "norm": "model.norm.weight", "head": "lm_head.weight"}


def hf_name(layer, role) -> str:
    """The canonical (HF) name of `role` in `layer`."""
    return f"model.layers.{layer}.{LAYER[role]}"


@dataclass(frozen=True)
class Dims:
    """The sizes a layout needs, from the HF config (`dims_of`)."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    ffn: int
    vocab: int
    tied: bool

    def shape(self, role) -> tuple:
        """The canonical shape of a role's tensor."""
        h, q, kv, f = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.ffn
        return {"q": (q, h), "k": (kv, h), "v": (kv, h), "o": (h, q), "gate": (f, h), "up": (f, h), "down": (h, f),
                "norm1": (h,), "norm2": (h,), "embed": (self.vocab, h), "norm": (h,), "head": (self.vocab, h)}[role]


def dims_of(config) -> Dims:
    """`Dims` of an HF Llama config dict; UsageError naming a missing key."""
    try:
        heads, kv_heads, head_dim = hf_heads(config)
        return Dims(layers=int(config["num_hidden_layers"]), heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                    hidden=int(config["hidden_size"]), ffn=int(config["intermediate_size"]),
                    vocab=int(config["vocab_size"]), tied=bool(config.get("tie_word_embeddings", False)))
    except (KeyError, TypeError, ValueError) as error:
        raise UsageError(f"the model config lacks or mistypes {error}: needed for the tensor shapes") from None


def canonical_names(dims: Dims) -> list:
    """Every canonical tensor name of a model of `dims`, top-level tensors first."""
    top = [TOP["embed"], TOP["norm"]] + ([] if dims.tied else [TOP["head"]])
    return top + [hf_name(i, role) for role in LAYER for i in range(dims.layers)]


class _Cache:
    """`reader.get` keeping the last tensor read: canonical tensors cut from one stacked tensor in a row read it once."""

    def __init__(self, reader):
        self.reader, self.key, self.value = reader, None, None

    def get(self, key):
        if key != self.key:
            self.key, self.value = None, None  # release the previous tensor before reading the next
            self.value, self.key = self.reader.get(key), key
        return self.value


def _view(reader, parts) -> Reader:
    """A Reader of canonical tensors: `parts` maps each name to `(stack key, shape, fn(stack array) -> array)`; each
    keeps its stack tensor's dtype (the cuts, transposes and the query rescale round back to it)."""
    cache = _Cache(reader)
    shapes = {name: tuple(shape) for name, (_, shape, _) in parts.items()}
    dtypes = {name: reader.dtype(key) for name, (key, _, _) in parts.items()}

    def get(name):
        key, shape, fn = parts[name]
        return np.ascontiguousarray(fn(cache.get(key)))

    view = Reader(reader.path, shapes, dtypes, get, dict(reader.metadata))
    view.stack_reader = reader
    return view


class StackLayout:
    """One stack's layout for a model of `dims`. Subclasses set `dialect` (posenc.port.stack_config), `fmt`
    (posenc.formats), `config_name` (the config file written beside the tensors), `name` (for messages) and
    `MODEL_PREFIXES`, and define `keys`, `parts`, `stack_shapes` and `pack` (the base class has no layout of its
    own: each of those raises NotImplementedError here)."""

    dialect = fmt = config_name = None
    name = None

    def __init__(self, dims: Dims):
        self.dims = dims

    # -- reading
    def keys(self, reader) -> dict:
        """role -> stack key found in `reader` (subclasses: the names and their accepted variants)."""
        raise NotImplementedError

    def parts(self, keys) -> dict:
        """canonical name -> (stack key, canonical shape, fn): how each canonical tensor is cut from the stack's."""
        raise NotImplementedError

    def unpack(self, reader) -> Reader:
        """The canonical view of a stack checkpoint; UsageError naming the tensors it lacks or whose shape differs."""
        keys = self.keys(reader)
        parts = self.parts(keys)
        consumed = set(keys.values())
        unknown = [n for n in reader.names() if n not in consumed and self.is_model_tensor(n)]
        if unknown:
            raise UsageError(f"{reader.path!r}: {self.name} model tensor(s) {', '.join(unknown[:5])} have no place in "
                             "a Llama checkpoint (biases, extra modules, unscanned layers): not converted silently")
        expected = self.stack_shapes()
        for role, key in keys.items():
            want = expected.get(role)
            if want is not None and reader.shape(key) != want:
                raise UsageError(f"{reader.path!r}: {self.name} tensor {key!r} has shape {reader.shape(key)}; the "
                                 f"config implies {want}")
        return _view(reader, parts)

    def stack_shapes(self) -> dict:
        """role -> the shape the stack stores it in, for `dims` (checked against the checkpoint before reading)."""
        raise NotImplementedError

    #: name prefixes of the model's own tensors (other items: optimizer, schedulers, train state, are not read)
    MODEL_PREFIXES = ()

    def is_model_tensor(self, name) -> bool:
        """Whether `name` belongs to the model (so an unread one is an error, not optimizer state)."""
        return name.startswith(self.MODEL_PREFIXES)

    # -- writing
    def pack(self, tensors) -> list:
        """`[(stack name, shape, dtype, thunk)]` from `tensors`: canonical name -> (shape, dtype, thunk)."""
        raise NotImplementedError

    def write(self, directory, packed, config) -> str:
        """Write the packed tensors and `config` into `directory`; returns the path its reader opens."""
        write_checkpoint(directory, self.fmt, packed)
        self._write_config(directory, config)
        return directory

    def _write_config(self, directory, config):
        with open(os.path.join(directory, self.config_name), "w") as handle:
            json.dump(config, handle, indent=2)
            handle.write("\n")

    def rounded(self) -> set:
        """Canonical names whose pack/unpack round trip rounds (compared within rounding, not bit for bit)."""
        return set()


def _find(reader, candidates, what):
    """The first of `candidates` that `reader` holds; UsageError naming them all when none is."""
    for name in candidates:
        if name in reader:
            return name
    raise UsageError(f"{reader.path!r} holds no {what} tensor (looked for {', '.join(candidates)}); "
                     f"it holds {', '.join(reader.names()[:6])}{' ...' if len(reader.names()) > 6 else ''}")


# ------------------------------------------------------------------------------------------ torchtitan

class TorchtitanLayout(StackLayout):
    """torchtitan 0.3.0 Llama 3 (`models/llama3/state_dict_adapter.py` `from_hf_map`): `tok_embeddings.weight`,
    `layers.N.attention.qkv_linear.wq/wk/wv.weight`, `layers.N.attention.wo.weight`, `feed_forward.w1` (gate),
    `w3` (up), `w2` (down), `attention_norm`, `ffn_norm`, `norm.weight`, `lm_head.weight`; q/k rows in Meta's
    interleaved order (the adapter's `_reverse_permute` from HF). Earlier torchtitan (and Meta's own names) use
    `attention.wq` and `output.weight`: read too."""

    dialect, fmt, config_name, name = "torchtitan", "dcp", "job_config.json", "torchtitan"
    LAYER_KEYS = {"q": "attention.qkv_linear.wq.weight", "k": "attention.qkv_linear.wk.weight",
                  "v": "attention.qkv_linear.wv.weight", "o": "attention.wo.weight", "gate": "feed_forward.w1.weight",
                  "up": "feed_forward.w3.weight", "down": "feed_forward.w2.weight", "norm1": "attention_norm.weight",
                  "norm2": "ffn_norm.weight"}
    LEGACY = {"q": "attention.wq.weight", "k": "attention.wk.weight", "v": "attention.wv.weight"}
    TOP_KEYS = {"embed": ("tok_embeddings.weight",), "norm": ("norm.weight",), "head": ("lm_head.weight", "output.weight")}
    MODEL_PREFIXES = ("layers.", "tok_embeddings.", "norm.", "lm_head.", "output.")

    def keys(self, reader):
        keys = {role: _find(reader, names, role) for role, names in self.TOP_KEYS.items()
                if role != "head" or not self.dims.tied}
        for i in range(self.dims.layers):
            for role, key in self.LAYER_KEYS.items():
                names = [f"layers.{i}.{key}"] + ([f"layers.{i}.{self.LEGACY[role]}"] if role in self.LEGACY else [])
                keys[(i, role)] = _find(reader, names, f"layer {i} {role}")
        return keys

    def stack_shapes(self):
        out = {role: self.dims.shape(role) for role in self.TOP_KEYS}
        out.update({(i, role): self.dims.shape(role) for i in range(self.dims.layers) for role in LAYER})
        return out

    def parts(self, keys):
        same = lambda a: a  # noqa: E731 - torchtitan stores HF's orientation
        out = {TOP[role]: (keys[role], self.dims.shape(role), same) for role in self.TOP_KEYS if role in keys}
        out.update({hf_name(i, role): (keys[(i, role)], self.dims.shape(role), same)
                    for role in LAYER for i in range(self.dims.layers)})
        return out

    def pack(self, tensors):
        names = {TOP["embed"]: "tok_embeddings.weight", TOP["norm"]: "norm.weight", TOP["head"]: "lm_head.weight"}
        names.update({hf_name(i, role): f"layers.{i}.{key}" for i in range(self.dims.layers)
                      for role, key in self.LAYER_KEYS.items()})
        return [(names[n], *tensors[n]) for n in canonical_names(self.dims)]


# ------------------------------------------------------------------------------------------ MaxText

class MaxTextLayout(StackLayout):
    """MaxText's Llama decoder (`MaxText/llama_or_mistral_ckpt.py`, `utils/ckpt_conversion/utils/param_mapping.py`
    LLAMA31 hooks; MaxText `layers/llama2.py`): under `params/params/` (the `TrainState`'s params), with
    `scan_layers: True` every decoder weight is stacked on axis 1 (`param_scan_axis`):

    * `token_embedder/embedding` `[vocab, embed]`; `decoder/decoder_norm/scale` `[embed]`;
      `decoder/logits_dense/kernel` `[embed, vocab]` (absent with `logits_via_embedding`);
    * `decoder/layers/self_attention/query/kernel` `[embed, layers, heads, head_dim]`, stored times
      1/sqrt(head_dim) (the hook `scale_query_layer`; MaxText's attention then scales by 1), `key/kernel` and
      `value/kernel` `[embed, layers, kv_heads, head_dim]`, `out/kernel` `[heads, layers, head_dim, embed]`;
    * `decoder/layers/mlp/wi_0/kernel` (gate) and `wi_1` (up) `[embed, layers, mlp]`, `wo/kernel` `[mlp, layers, embed]`;
    * `decoder/layers/pre_self_attention_layer_norm/scale`, `post_self_attention_layer_norm/scale` `[embed, layers]`.

    The query scale is applied in float64 and rounded once to the tensor's dtype; it is exact when sqrt(head_dim)
    is a power of two (head_dim 16, 64, 256), else one rounding each way (`rounded`)."""

    dialect, fmt, config_name, name = "maxtext", "orbax", "maxtext.yml", "MaxText"
    PREFIX = "params/params/"
    LAYER_KEYS = {"q": "decoder/layers/self_attention/query/kernel", "k": "decoder/layers/self_attention/key/kernel",
                  "v": "decoder/layers/self_attention/value/kernel", "o": "decoder/layers/self_attention/out/kernel",
                  "gate": "decoder/layers/mlp/wi_0/kernel", "up": "decoder/layers/mlp/wi_1/kernel",
                  "down": "decoder/layers/mlp/wo/kernel", "norm1": "decoder/layers/pre_self_attention_layer_norm/scale",
                  "norm2": "decoder/layers/post_self_attention_layer_norm/scale"}
    TOP_KEYS = {"embed": "token_embedder/embedding", "norm": "decoder/decoder_norm/scale",
                "head": "decoder/logits_dense/kernel"}
    MODEL_PREFIXES = ("params/params/",)

    @property
    def scale(self) -> float:
        return math.sqrt(self.dims.head_dim)

    def rounded(self):
        exact = math.log2(self.scale).is_integer()
        return set() if exact else {hf_name(i, "q") for i in range(self.dims.layers)}

    def stack_shapes(self):
        d = self.dims
        h, n = d.hidden, d.layers
        out = {"embed": (d.vocab, h), "norm": (h,), "head": (h, d.vocab),
               "q": (h, n, d.heads, d.head_dim), "k": (h, n, d.kv_heads, d.head_dim), "v": (h, n, d.kv_heads, d.head_dim),
               "o": (d.heads, n, d.head_dim, h), "gate": (h, n, d.ffn), "up": (h, n, d.ffn), "down": (d.ffn, n, h),
               "norm1": (h, n), "norm2": (h, n)}
        return out if not d.tied else {k: v for k, v in out.items() if k != "head"}

    def keys(self, reader):
        norm = [n for n in reader.names() if n.endswith(self.TOP_KEYS["norm"])]
        if not norm:
            raise UsageError(f"{reader.path!r} holds no MaxText decoder ({self.TOP_KEYS['norm']}); scanned layers "
                             "(scan_layers: True) are read")
        prefix = norm[0][: -len(self.TOP_KEYS["norm"])]
        keys = {role: _find(reader, [prefix + key], role) for role, key in {**self.TOP_KEYS, **self.LAYER_KEYS}.items()
                if role != "head" or not self.dims.tied}
        return keys

    def parts(self, keys):
        d, scale = self.dims, self.scale

        def layer(role, i):
            def cut(array):
                a = np.asarray(array)
                if role in ("norm1", "norm2"):
                    return a[:, i]
                if role == "o":  # [heads, L, head_dim, embed] -> [embed, heads * head_dim]
                    return a[:, i].reshape(d.heads * d.head_dim, d.hidden).T
                if role == "down":
                    return a[:, i].T
                kernel = a[:, i].reshape(d.hidden, -1)  # [embed, out]
                if role == "q":  # undo the folded 1/sqrt(head_dim), in float64, one rounding
                    kernel = (kernel.astype(np.float64) * scale).astype(a.dtype)
                return kernel.T
            return cut

        out = {TOP["embed"]: (keys["embed"], d.shape("embed"), lambda a: a),
               TOP["norm"]: (keys["norm"], d.shape("norm"), lambda a: a)}
        if "head" in keys:
            out[TOP["head"]] = (keys["head"], d.shape("head"), lambda a: np.asarray(a).T)
        out.update({hf_name(i, role): (keys[role], d.shape(role), layer(role, i))
                    for role in LAYER for i in range(d.layers)})
        return out

    def pack(self, tensors):
        d, scale = self.dims, self.scale

        def stacked(role):
            def build():
                per = []
                for i in range(d.layers):
                    a = np.asarray(tensors[hf_name(i, role)][2]())
                    if role in ("norm1", "norm2"):
                        per.append(a)
                    elif role == "o":
                        per.append(a.T.reshape(d.heads, d.head_dim, d.hidden))
                    elif role == "down":
                        per.append(a.T)
                    else:
                        kernel = a.T
                        if role == "q":
                            kernel = (kernel.astype(np.float64) / scale).astype(a.dtype)
                        per.append(kernel.reshape(d.hidden, -1, d.head_dim) if role in ("q", "k", "v") else kernel)
                return np.ascontiguousarray(np.stack(per, axis=1))
            return build

        shapes = self.stack_shapes()
        out = [(self.PREFIX + self.TOP_KEYS["embed"], shapes["embed"], tensors[TOP["embed"]][1], tensors[TOP["embed"]][2]),
               (self.PREFIX + self.TOP_KEYS["norm"], shapes["norm"], tensors[TOP["norm"]][1], tensors[TOP["norm"]][2])]
        if not d.tied:
            head = tensors[TOP["head"]]
            out.append((self.PREFIX + self.TOP_KEYS["head"], shapes["head"], head[1],
                        lambda: np.ascontiguousarray(np.asarray(head[2]()).T)))
        for role, key in self.LAYER_KEYS.items():
            out.append((self.PREFIX + key, shapes[role], tensors[hf_name(0, role)][1], stacked(role)))
        return out

    def write(self, directory, packed, config):
        items = os.path.join(directory, "items")  # MaxText's CheckpointManager item: load_parameters_path=TARGET/items
        write_checkpoint(items, self.fmt, packed)
        self._write_config(directory, config)
        return items

    def _write_config(self, directory, config):
        import yaml

        with open(os.path.join(directory, self.config_name), "w") as handle:
            yaml.safe_dump(config, handle, sort_keys=False)


# ------------------------------------------------------------------------------------------ Megatron-core

class MegatronLayout(StackLayout):
    """Megatron-core 0.16.1 GPTModel with Transformer Engine layer specs (`get_gpt_layer_with_transformer_engine_spec`),
    as Megatron-Bridge's `param_mapping.py` `QKVMapping` (l.1654-1670) and `GatedMLPMapping` read it:

    * `embedding.word_embeddings.weight`, `decoder.final_layernorm.weight`, `output_layer.weight`;
    * per layer, stacked on axis 0: `decoder.layers.self_attention.linear_qkv.weight` `[L, (heads + 2 kv) head_dim,
      hidden]`: per query group g the rows `[q heads of g (heads/kv of them); k_g; v_g]`;
      `...linear_qkv.layer_norm_weight` (input norm), `...linear_proj.weight` (o), `decoder.layers.mlp.linear_fc1.weight`
      `[L, 2 ffn, hidden]` = `[gate; up]`, `...linear_fc1.layer_norm_weight` (post-attention norm), `...linear_fc2.weight`.

    Read too: NeMo 2's `module.` prefix and the local (non-TE) spec's separate `input_layernorm.weight` /
    `pre_mlp_layernorm.weight`. q/k rows keep HF's order (`rotary_interleaved: False`)."""

    dialect, fmt, config_name, name = "megatron", "torch_dist", "transformer_config.json", "Megatron"
    QKV, PROJ = "decoder.layers.self_attention.linear_qkv.weight", "decoder.layers.self_attention.linear_proj.weight"
    FC1, FC2 = "decoder.layers.mlp.linear_fc1.weight", "decoder.layers.mlp.linear_fc2.weight"
    NORM1 = ("decoder.layers.self_attention.linear_qkv.layer_norm_weight", "decoder.layers.input_layernorm.weight")
    NORM2 = ("decoder.layers.mlp.linear_fc1.layer_norm_weight", "decoder.layers.pre_mlp_layernorm.weight")
    TOP_KEYS = {"embed": "embedding.word_embeddings.weight", "norm": "decoder.final_layernorm.weight",
                "head": "output_layer.weight"}
    MODEL_PREFIXES = ("decoder.", "embedding.", "output_layer.", "module.decoder.", "module.embedding.",
                      "module.output_layer.")

    def stack_shapes(self):
        d = self.dims
        n, h = d.layers, d.hidden
        out = {"embed": (d.vocab, h), "norm": (h,), "head": (d.vocab, h),
               "qkv": (n, (d.heads + 2 * d.kv_heads) * d.head_dim, h), "o": (n, h, d.heads * d.head_dim),
               "fc1": (n, 2 * d.ffn, h), "down": (n, h, d.ffn), "norm1": (n, h), "norm2": (n, h)}
        return out if not d.tied else {k: v for k, v in out.items() if k != "head"}

    def keys(self, reader):
        prefix = "module." if any(n.startswith("module.") for n in reader.names()) else ""
        found = {"qkv": (self.QKV,), "o": (self.PROJ,), "fc1": (self.FC1,), "down": (self.FC2,),
                 "norm1": self.NORM1, "norm2": self.NORM2, **{k: (v,) for k, v in self.TOP_KEYS.items()}}
        return {role: _find(reader, [prefix + n for n in names], role) for role, names in found.items()
                if role != "head" or not self.dims.tied}

    def _group(self, fused):
        """`[kv, heads/kv + 2, head_dim, hidden]` of one layer's fused rows."""
        d = self.dims
        return np.asarray(fused).reshape(d.kv_heads, d.heads // d.kv_heads + 2, d.head_dim, d.hidden)

    def parts(self, keys):
        d = self.dims
        g = d.heads // d.kv_heads

        def qkv(i, role):
            def cut(a):
                grouped = self._group(a[i])
                if role == "q":
                    return grouped[:, :g].reshape(d.heads * d.head_dim, d.hidden)
                return grouped[:, g if role == "k" else g + 1].reshape(d.kv_heads * d.head_dim, d.hidden)
            return cut

        out = {TOP[r]: (keys[r], d.shape(r), lambda a: a) for r in ("embed", "norm", "head") if r in keys}
        for role in ("q", "k", "v"):
            out.update({hf_name(i, role): (keys["qkv"], d.shape(role), qkv(i, role)) for i in range(d.layers)})
        for role, key, cut in (("o", "o", None), ("down", "down", None), ("norm1", "norm1", None),
                               ("norm2", "norm2", None), ("gate", "fc1", slice(0, d.ffn)),
                               ("up", "fc1", slice(d.ffn, 2 * d.ffn))):
            out.update({hf_name(i, role): (keys[key], d.shape(role),
                                           (lambda a, i=i, cut=cut: a[i] if cut is None else a[i][cut]))
                        for i in range(d.layers)})
        return out

    def pack(self, tensors):
        d = self.dims
        g = d.heads // d.kv_heads

        def get(i, role):
            return np.asarray(tensors[hf_name(i, role)][2]())

        def fused(i):
            q = get(i, "q").reshape(d.kv_heads, g, d.head_dim, d.hidden)
            k = get(i, "k").reshape(d.kv_heads, 1, d.head_dim, d.hidden)
            v = get(i, "v").reshape(d.kv_heads, 1, d.head_dim, d.hidden)
            return np.concatenate([q, k, v], axis=1).reshape(-1, d.hidden)

        def stacked(fn):
            return lambda: np.ascontiguousarray(np.stack([fn(i) for i in range(d.layers)]))

        shapes, dtype = self.stack_shapes(), tensors[hf_name(0, "q")][1]
        out = [(self.TOP_KEYS[r], shapes[r], tensors[TOP[r]][1], tensors[TOP[r]][2])
               for r in ("embed", "norm", "head") if r in shapes]
        out += [(self.QKV, shapes["qkv"], dtype, stacked(fused)),
                (self.NORM1[0], shapes["norm1"], tensors[hf_name(0, "norm1")][1], stacked(lambda i: get(i, "norm1"))),
                (self.PROJ, shapes["o"], tensors[hf_name(0, "o")][1], stacked(lambda i: get(i, "o"))),
                (self.FC1, shapes["fc1"], tensors[hf_name(0, "gate")][1],
                 stacked(lambda i: np.concatenate([get(i, "gate"), get(i, "up")]))),
                (self.NORM2[0], shapes["norm2"], tensors[hf_name(0, "norm2")][1], stacked(lambda i: get(i, "norm2"))),
                (self.FC2, shapes["down"], tensors[hf_name(0, "down")][1], stacked(lambda i: get(i, "down")))]
        return out


    #: the modules whose `_extra_state` megatron-core's sharded_state_dict asks for: one ShardedObject per layer
    EXTRA_STATE = ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")

    def write(self, directory, packed, config):
        """The torch_dist files, with the `_extra_state` ShardedObjects a GPTModel's `sharded_state_dict` loads
        (`decoder.layers.X._extra_state/shard_{layer}_{layers}`, `ShardedObject.unique_key`; the value None, which
        Megatron's local linears return from `get_extra_state` and Transformer Engine's `set_extra_state` ignores)."""
        n = self.dims.layers
        objects = {f"decoder.layers.{m}._extra_state/shard_{i}_{n}": None for m in self.EXTRA_STATE for i in range(n)}
        write_checkpoint(directory, self.fmt, packed, {"objects": objects})
        self._write_config(directory, config)
        return directory


LAYOUTS = {"torchtitan": TorchtitanLayout, "maxtext": MaxTextLayout, "megatron": MegatronLayout}


# ------------------------------------------------------------------------------------------ config files

#: per dialect: the config files looked for, in the checkpoint directory, then its parent(s)
CONFIG_FILES = {"torchtitan": ("job_config.json", "job_config.toml", "config.json", "config.toml"),
                "maxtext": ("maxtext.yml", "model.yml", "config.yml"),
                "megatron": ("transformer_config.json", "transformer_config.yaml", "model_config.yaml",
                             os.path.join("context", "model.yaml"), os.path.join("..", "context", "model.yaml"))}


def _load(path):
    if path.endswith(".json"):
        with open(path) as handle:
            return json.load(handle)
    if path.endswith(".toml"):
        import tomllib

        with open(path, "rb") as handle:
            return tomllib.load(handle)
    import yaml

    with open(path) as handle:
        return yaml.safe_load(handle)


def read_stack_config_file(dialect, directory) -> tuple[dict, str]:
    """`(config dict, path)`: the stack's config beside its checkpoint (`CONFIG_FILES`, the directory first, then
    its parent: torchtitan's `step-N/`, MaxText's `N/items/`, NeMo 2's `weights/`); UsageError naming where it looked."""
    directory = os.path.abspath(str(directory))
    places = [directory, os.path.dirname(directory)]
    tried = []
    for place in places:
        for name in CONFIG_FILES[dialect]:
            path = os.path.normpath(os.path.join(place, name))
            tried.append(path)
            if os.path.isfile(path):
                try:
                    data = _load(path)
                except Exception as error:  # noqa: BLE001 - JSON / TOML / YAML syntax errors
                    raise UsageError(f"cannot read {path!r}: {type(error).__name__}: {error}") from None
                if not isinstance(data, dict):
                    raise UsageError(f"{path!r} is not a mapping of config keys")
                return data, path
    raise UsageError(f"the {dialect} config of {directory!r} was not found; looked for "
                     f"{', '.join(dict.fromkeys(tried))}")


# ------------------------------------------------------------------------------------------ port to a stack

def _same_bits(a, b) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.itemsize in (1, 2, 4, 8):
        unsigned = np.dtype(f"u{a.dtype.itemsize}")
        return bool(np.array_equal(a.view(unsigned), b.view(unsigned)))
    return bool(np.array_equal(a, b))


def _exact(kind, name, actual, desired) -> Check:
    if _same_bits(actual, desired):
        return Check(kind, name, 0.0, 0.0, "exact", True)
    actual, desired = np.asarray(actual), np.asarray(desired)
    if actual.shape != desired.shape or actual.dtype != desired.dtype:
        return Check(kind, name, math.inf, 0.0, "exact", False,
                     f"{actual.shape} {actual.dtype} stored, {desired.shape} {desired.dtype} expected")
    err = float(np.max(np.abs(actual.astype(np.float64) - desired.astype(np.float64)), initial=0.0))
    return Check(kind, name, err, 0.0, "exact", False, "differs")


def _within_rounding(kind, name, actual, desired) -> Check:
    """A value scaled by 1/s and back: two roundings to the dtype, so |err| <= 2 ulp of the largest magnitude."""
    desired = np.asarray(desired)
    eps = float(ml_dtypes.finfo(desired.dtype).eps)
    atol = 2 * eps * float(np.max(np.abs(desired.astype(np.float64)), initial=0.0))
    err = float(np.max(np.abs(np.asarray(actual, np.float64) - desired.astype(np.float64)), initial=0.0))
    return Check(kind, name, err, atol, f"2 ulp of {dtype_name(desired.dtype)} times max |w| (scale and unscale "
                 "by sqrt(head_dim) each round once)", err <= atol)


def pack_entries(entries, reader, layout) -> list:
    """The stack tensors `layout` stores for the planned canonical `entries` (each produced from `reader` on demand);
    UsageError when a canonical tensor the stack stores is missing."""
    tensors = {e.target: (e.shape, e.dtype, (lambda e=e: e.produce(reader))) for e in entries}
    missing = [n for n in canonical_names(layout.dims) if n not in tensors]
    if missing:
        raise UsageError(f"SOURCE lacks canonical tensor(s) {', '.join(missing[:5])} that {layout.name} stores")
    return layout.pack(tensors)


def verify_stack(path, reader, entries, packed, layout, rope, extra, seed, guard) -> list:
    """The checks of a stack TARGET written at `path` (what `layout.write` returned): `packed` bit for bit, the
    plan's checks on the canonical tensors (`guard` wraps each check function: core._guarded), `unpacked` round
    trip, then `extra`."""
    from .checks import verify_plan

    _guarded = guard
    written = open_reader(path, layout.fmt)
    checks = []
    for name, _, _, thunk in packed:
        stored = written.get(name) if name in written else None
        checks.append(Check("packed", name, math.inf, 0.0, "exact", False, "missing in TARGET") if stored is None
                      else _exact("packed", name, stored, thunk()))
    produced = {e.target: e for e in entries}
    canonical = Reader(path, {e.target: e.shape for e in entries}, {e.target: e.dtype for e in entries},
                       lambda n: produced[n].produce(reader))
    checks += _guarded(lambda s, t: verify_plan(entries, s, t, rope=rope, seed=seed))(reader, canonical)
    unpacked = layout.unpack(written)
    rounded = layout.rounded()
    for name in canonical_names(layout.dims):
        actual, desired = unpacked.get(name), produced[name].produce(reader)
        checks.append(_within_rounding("unpacked", name, actual, desired) if name in rounded
                      else _exact("unpacked", name, actual, desired))
    for fn in extra:
        checks += _guarded(fn)(reader, written)
    return checks

