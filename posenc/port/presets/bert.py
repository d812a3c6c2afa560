"""BERT presets.

* `hf-bert-to-flax`: HF `BertModel` state dict -> the FlaxBertModel parameter tree (msgpack names joined
  by "/"), Linear kernels transposed to `[in, out]`, LayerNorm weight -> scale.
* `hf-bert-to-keras`: HF `BertModel` -> a Keras 3 `.weights.h5` laid out as `keras_bert_embeddings`
  builds the embeddings (`Embedding`, posenc_tf `LearnedEncoding`, `Embedding`, `LayerNormalization`,
  in that order) followed by one `Dense` / `LayerNormalization` per HF module, in HF's forward order;
  `model.load_weights(TARGET)` loads it.

Both verify the embeddings (word + position + token type, then LayerNorm) computed by torch on the source
and by JAX / Keras on the target against float64 NumPy (`bert_embeddings_reference`).
"""

from __future__ import annotations

import re

import numpy as np

from posenc_np.learned import learned
from posenc_np.testing import compare, tolerance

from ...adapters import adapter
from ..checks import Check
from ..mapping import Rules
from ..preset import Preset, PresetOptions

__all__ = ["hf_bert_to_flax", "hf_bert_to_keras", "keras_bert_embeddings", "bert_embeddings_reference",
           "framework_embeddings", "LAYER_NORM_EPS", "PRESETS"]

LAYER_NORM_EPS = 1e-12  # BERT's layer_norm_eps

_BERT_EMB = ("embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
             "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias")
# one encoder layer's Linear / LayerNorm modules in forward order
_BERT_LAYER = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
               "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm")


def _bert_modules(reader):
    """`(module, kind)` of every known BertModel module in forward order; kind: embedding, norm, dense."""
    layers = sorted({int(m.group(1)) for n in reader.names() if (m := re.match(r"encoder\.layer\.(\d+)\.", n))})
    modules = [("embeddings.word_embeddings", "embedding"), ("embeddings.position_embeddings", "embedding"),
               ("embeddings.token_type_embeddings", "embedding"), ("embeddings.LayerNorm", "norm")]
    modules += [(f"encoder.layer.{i}.{m}", "norm" if "LayerNorm" in m else "dense")
                for i in layers for m in _BERT_LAYER]
    modules.append(("pooler.dense", "dense"))
    return [(m, kind) for m, kind in modules if f"{m}.weight" in reader]


def _bert_rules(reader, options: PresetOptions, target_names):
    """Rules of both BERT presets: `target_names(module, kind)` -> {"weight": name, "bias": name}.

    Strict: a tensor of any other module (a pre-training head, an unknown layer) is an error rather
    than a pass-through that might need a transpose nobody declared.
    """
    rename, transpose = [], []
    for module, kind in _bert_modules(reader):
        for suffix, target in target_names(module, kind).items():
            if f"{module}.{suffix}" in reader:
                rename.append((f"{module}.{suffix}", target))
        if kind == "dense":
            transpose.append(f"{module}.weight")
    resize = []
    if options.resize_positions:
        resize = [("embeddings.position_embeddings.weight", options.resize_positions, options.resize_method)]
    drop = [n for n in reader.names() if n.endswith("position_ids")]
    return Rules(rename=rename, transpose=transpose, resize=resize, drop=drop, require=list(_BERT_EMB), strict=True)


def hf_bert_to_flax(reader, options: PresetOptions):
    leaf = {"embedding": {"weight": "embedding"}, "norm": {"weight": "scale", "bias": "bias"},
            "dense": {"weight": "kernel", "bias": "bias"}}
    rules = _bert_rules(reader, options, lambda module, kind: {
        suffix: module.replace(".", "/") + "/" + name for suffix, name in leaf[kind].items()})
    names = dict(word="embeddings/word_embeddings/embedding", position="embeddings/position_embeddings/embedding",
                 token_type="embeddings/token_type_embeddings/embedding", gamma="embeddings/LayerNorm/scale",
                 beta="embeddings/LayerNorm/bias")
    return Preset(rules, target_format="msgpack", extra=[_embeddings_check("jax", names, options.resize_method)])


def _keras_layer_paths(reader):
    """Keras 3 `.weights.h5` group and layer name of every HF module, in the order `keras_bert_embeddings`
    (then one layer per encoder module, in forward order) creates them: Keras names a group after the
    layer's class in snake case, with `_1`, `_2`... for repeats, and stores the layer name as an attribute."""
    classes = {"embedding": "embedding", "norm": "layer_normalization", "dense": "dense"}
    names = {"embeddings.word_embeddings": "word_embeddings", "embeddings.LayerNorm": "embeddings_layer_norm",
             "embeddings.position_embeddings": "position_embeddings",
             "embeddings.token_type_embeddings": "token_type_embeddings"}
    counts, paths = {}, {}
    for module, kind in _bert_modules(reader):
        cls = "learned_encoding" if module == "embeddings.position_embeddings" else classes[kind]
        n = counts.get(cls, 0)
        counts[cls] = n + 1
        paths[module] = (f"layers/{cls}" + (f"_{n}" if n else ""), names.get(module, module.replace(".", "_")))
    return paths


def hf_bert_to_keras(reader, options: PresetOptions):
    paths = _keras_layer_paths(reader)
    rules = _bert_rules(reader, options, lambda module, kind: {
        "weight": f"{paths[module][0]}/vars/0", "bias": f"{paths[module][0]}/vars/1"})
    attrs = {f"{group}/vars": {"name": layer_name} for group, layer_name in paths.values()}
    attrs["vars"] = {"name": "functional"}
    names = dict(word="layers/embedding/vars/0", position="layers/learned_encoding/vars/0",
                 token_type="layers/embedding_1/vars/0", gamma="layers/layer_normalization/vars/0",
                 beta="layers/layer_normalization/vars/1")
    return Preset(rules, target_format="keras-h5", extra=[_embeddings_check("tf", names, options.resize_method)],
                  metadata={"h5_attrs": attrs})


def bert_embeddings_reference(word, position, token_type, gamma, beta, ids, positions, types):
    """Float64 NumPy: LayerNorm(word[ids] + position[positions] + token_type[types]) (HF BertEmbeddings)."""
    x = (np.asarray(word, np.float64)[ids] + learned(np.asarray(position, np.float64), positions)
         + np.asarray(token_type, np.float64)[types])
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + LAYER_NORM_EPS) * np.asarray(gamma, np.float64) + np.asarray(beta, np.float64)


def framework_embeddings(framework, tables, ids, positions, types) -> np.ndarray:
    """BERT embeddings `tables` (word, position, token_type, gamma, beta) computed by `framework` through its
    adapter: three table lookups with the backend's `learned` (rows at the given indices), then its LayerNorm."""
    ad = adapter(framework)
    t = {k: ad.from_numpy(np.array(v, np.float32)) for k, v in tables.items()}
    x = sum(ad.module.learned(t[name], ad.from_numpy(index))
            for name, index in (("word", ids), ("position", positions), ("token_type", types)))
    return ad.to_numpy(ad.layer_norm(x, t["gamma"], t["beta"], eps=LAYER_NORM_EPS))


def keras_bert_embeddings(vocab_size, max_len, type_vocab_size, hidden):
    """The Keras 3 BERT embeddings model whose `.weights.h5` layout `hf-bert-to-keras` writes.

    Inputs `(input_ids, token_type_ids, position_ids)`, int32 `[batch, seq]`; output `[batch, seq, hidden]`.
    """
    import keras

    import posenc_tf

    ids, types, positions = (keras.Input((None,), dtype="int32", name=n)
                             for n in ("input_ids", "token_type_ids", "position_ids"))
    word = keras.layers.Embedding(vocab_size, hidden, name="word_embeddings")(ids)
    pos = posenc_tf.LearnedEncoding(max_len, hidden, name="position_embeddings")(positions)
    tt = keras.layers.Embedding(type_vocab_size, hidden, name="token_type_embeddings")(types)
    out = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPS, name="embeddings_layer_norm")(
        keras.layers.Add()([word, pos, tt]))
    return keras.Model([ids, types, positions], out)


def _keras_embeddings(target_path, shapes, ids, positions, types):
    model = keras_bert_embeddings(shapes["word"][0], shapes["position"][0], shapes["token_type"][0],
                                  shapes["word"][1])
    model.load_weights(target_path)  # the Keras 3 loader itself: proves the layout, not just the numbers
    return np.asarray(model([ids.astype(np.int32), types.astype(np.int32), positions.astype(np.int32)]))


def _embeddings_check(framework, target_names, resize_method):
    """Extra verification: BERT embeddings in torch (source) and `framework` (target) vs float64 NumPy."""

    def run(source, target):
        src = {k: source.get(n) for k, n in zip(("word", "position", "token_type", "gamma", "beta"), _BERT_EMB, strict=True)}
        tgt = {k: np.asarray(target.get(n)) for k, n in target_names.items()}
        rows = tgt["position"].shape[0]
        if rows != src["position"].shape[0]:  # resized: the source side resizes with posenc_torch
            src["position"] = adapter("torch").call("resize_table", (np.array(src["position"]), rows),
                                                    {"method": resize_method})
        rng = np.random.default_rng(1)
        positions = np.concatenate([np.arange(8), rng.integers(0, rows, 8), [rows - 1]])[None]
        ids = rng.integers(0, src["word"].shape[0], positions.shape)
        types = rng.integers(0, src["token_type"].shape[0], positions.shape)
        desired = bert_embeddings_reference(*(tgt[k] for k in ("word", "position", "token_type", "gamma", "beta")),
                                            ids, positions, types)
        tol = tolerance("float32", scale=float(np.abs(desired).max()))
        out = []
        torch_out = framework_embeddings("torch", src, ids, positions, types)
        if framework == "jax":
            target_out = framework_embeddings("jax", tgt, ids, positions, types)
        else:
            target_out = _keras_embeddings(target.path, {k: v.shape for k, v in tgt.items()}, ids, positions, types)
        for label, got in (("torch, source", torch_out), (f"{framework}, target", target_out)):
            r = compare(got, desired, tol)
            out.append(Check("embeddings", f"BERT embeddings ({label})", r.max_abs_err, r.atol, r.tol_why, r.passed,
                             f"{positions.shape[1]} probe positions up to {rows - 1}"))
        return out

    return run


#: preset name -> builder
PRESETS = {"hf-bert-to-flax": hf_bert_to_flax, "hf-bert-to-keras": hf_bert_to_keras}
