"""`read_gguf`: a `.gguf` file's metadata and rope tensors, as llama.cpp's loader reads them, to a `ModelSpec`."""

from __future__ import annotations

import math

import numpy as np

from ...errors import UsageError
from ...formats import open_reader
from ...formats.gguf import rope_type
from ..canonical import Finding, LayerSpec, ModelSpec

__all__ = ["read_gguf", "GGUF_PERMUTED_ARCHS", "GGUF_NATIVE_NORM_ARCHS"]

#: llama.cpp NORM architectures whose convert_hf_to_gguf.py permutes HF's rotate-half q/k rows into Meta's
#: interleaved order (`LlamaModel.permute` and the same in the classes listed): NORM on those rows = HF "half".
GGUF_PERMUTED_ARCHS = frozenset({"llama", "deci", "granite", "granitemoe", "granitehybrid", "baichuan", "internlm2",
                                 "minicpm", "xverse", "olmo", "arcee", "smollm3", "plm", "bailingmoe", "llada"})
#: NORM architectures whose HF code itself rotates interleaved pairs (no permutation in the converter).
GGUF_NATIVE_NORM_ARCHS = frozenset({"llama4", "command-r", "cohere2", "chatglm", "glm4", "ernie4_5", "ernie4_5-moe",
                                    "deepseek", "deepseek2"})



def read_gguf(path) -> ModelSpec:
    """Read a `.gguf` file's rotary settings from its metadata and rope tensors, as llama.cpp does.

    Keys (gguf-py `Keys.Rope`, llama.cpp src/llama-model.cpp `load_hparams`): `general.architecture`,
    `<arch>.block_count`, `<arch>.context_length`, `<arch>.embedding_length`, `<arch>.attention.head_count`,
    `<arch>.attention.key_length`, `<arch>.rope.dimension_count` (default: the head dim),
    `<arch>.rope.freq_base` (default 10000, with a lint finding), `<arch>.rope.scaling.type` (none, linear,
    yarn, longrope), `.factor`, `.original_context_length`, `.attn_factor`, `.yarn_beta_fast/slow`,
    `<arch>.rope.dimension_sections` (multi-axis). Tensors `rope_freqs.weight` (llama3: divides the
    frequencies, `llamacpp-freq-factors`), `rope_factors_long.weight` / `rope_factors_short.weight`
    (LongRoPE). The layout is the rope type llama.cpp hard-codes per architecture
    (`llama_model_rope_type`, ggml-org/llama.cpp src/llama-model.cpp; verified at commit a5410f04 for
    the architectures it lists then, the full table `posenc.formats.gguf.ROPE_TYPE_OF_ARCH` at 00342301);
    llama.cpp's YaRN always floors and ceils the correction range (ggml `ggml_rope_yarn_corr_dims`).

    The file is opened by `posenc.formats.gguf` (the reader `posenc port` uses: one message for a missing,
    truncated or corrupt file), whose UsageError is re-raised as this reader's ValueError.

    Raises:
        ValueError: not a readable GGUF file, no architecture, an architecture whose rope type is not in the
            table, a scaling type llama.cpp does not know.
    """

    try:
        reader = open_reader(str(path), "gguf")
    except UsageError as error:  # its messages name the file
        raise ValueError(str(error)) from None
    arch = reader.metadata.get("general.architecture")
    if not arch:
        raise ValueError(f"{str(path)!r}: no general.architecture key")
    try:
        kind = rope_type(arch)
    except UsageError as error:
        raise ValueError(f"{path}: {error}") from None
    fields, where, findings = reader.metadata, f"{path}: architecture {arch!r}", []
    key = lambda name: f"{arch}.{name}"  # noqa: E731
    num_layers = fields.get(key("block_count"))
    if not num_layers:
        raise ValueError(f"{where}: no {key('block_count')}")
    if kind == "none":
        return ModelSpec(source=str(path), dialect="gguf", follows="llama.cpp llama_model_rope_type (NONE)",
                         layers=[LayerSpec(rope=False)] * int(num_layers), findings=findings)
    head_dim, rotary_dim, base = _rotary_dims(fields, key, where, findings)
    scaling, context, original = _scaling(fields, reader, key, where, findings)
    layer = LayerSpec(rope=True, layout="interleaved" if kind == "norm" else "half", rotary_dim=rotary_dim,
                      head_dim=head_dim, base=base, scaling=scaling, mrope_section=_mrope_section(fields, key, kind,
                                                                                                   where))
    layer.plan()  # validate now (bad factor lengths, bad values)
    return ModelSpec(source=str(path), dialect="gguf",
                     follows="llama.cpp src/llama-model.cpp load_hparams / llama_model_rope_type; gguf-py Keys.Rope",
                     layers=[layer] * int(num_layers), row_order=_row_order(arch, kind, findings),
                     max_position_embeddings=None if context is None else int(context),
                     original_max_position_embeddings=None if original is None else int(original), findings=findings)


def _rotary_dims(fields, key, where, findings):
    """`(head_dim, rotary_dim, base)` from the attention and rope keys, llama.cpp's defaults as findings."""
    heads = fields.get(key("attention.head_count"))
    if isinstance(heads, list):
        heads = heads[0]
    head_dim = fields.get(key("attention.key_length"))
    if head_dim is None:
        if not heads or not fields.get(key("embedding_length")):
            raise ValueError(f"{where}: neither attention.key_length nor embedding_length and head_count")
        head_dim = int(fields[key("embedding_length")]) // int(heads)
    rotary_dim = fields.get(key("rope.dimension_count"))
    if rotary_dim is None:
        findings.append(Finding(key("rope.dimension_count"), f"absent: llama.cpp rotates the whole head dim "
                                f"({head_dim})"))
        rotary_dim = head_dim
    base = fields.get(key("rope.freq_base"))
    if base is None:
        findings.append(Finding(key("rope.freq_base"), "absent: llama.cpp uses 10000 silently"))
        base = 10000.0
    if fields.get(key("rope.freq_base_swa")) is not None:
        findings.append(Finding(key("rope.freq_base_swa"), "sliding-window layers use another base in llama.cpp; "
                                "posenc spec reads the global base for every layer"))
    return int(head_dim), int(rotary_dim), float(base)


def _factors(reader, name):
    return np.asarray(reader.get(name), dtype=np.float64).reshape(-1)


def _scaling(fields, reader, key, where, findings):
    """`(scaling, context_length, original_context_length)`: the rope tensors and `rope.scaling.*` keys as the
    scaling dict posenc computes (`llamacpp-freq-factors`, linear, yarn with llama.cpp's truncation, longrope)."""
    context = fields.get(key("context_length"))
    kind = fields.get(key("rope.scaling.type"), "none")
    factor = fields.get(key("rope.scaling.factor"))
    original = fields.get(key("rope.scaling.original_context_length"))
    attn = fields.get(key("rope.scaling.attn_factor"))
    scaling = None
    if "rope_freqs.weight" in reader:
        scaling = {"rope_type": "llamacpp-freq-factors", "freq_factors": _factors(reader, "rope_freqs.weight").tolist()}
        if kind not in ("none", None):
            raise ValueError(f"{where}: rope_freqs tensor and rope.scaling.type={kind!r} together are not modelled")
    elif kind == "linear":
        scaling = {"rope_type": "linear", "factor": float(factor)}
    elif kind == "yarn":
        if original is None:
            raise ValueError(f"{where}: yarn without {key('rope.scaling.original_context_length')}")
        scaling = {"rope_type": "yarn", "factor": float(factor), "original_max_position_embeddings": int(original),
                   "truncate": True, "beta_fast": float(fields.get(key("rope.scaling.yarn_beta_fast"), 32.0)),
                   "beta_slow": float(fields.get(key("rope.scaling.yarn_beta_slow"), 1.0))}
        if attn is not None:  # llama.cpp multiplies its own 0.1 ln(s) + 1 by this factor
            scaling["attention_factor"] = float(attn) * (0.1 * math.log(float(factor)) + 1.0)
    elif kind == "longrope" or "rope_factors_long.weight" in reader:
        if "rope_factors_long.weight" not in reader or "rope_factors_short.weight" not in reader:
            raise ValueError(f"{where}: longrope needs rope_factors_long and rope_factors_short tensors")
        if original is None or context is None:
            raise ValueError(f"{where}: longrope needs context_length and rope.scaling.original_context_length")
        scaling = {"rope_type": "longrope", "original_max_position_embeddings": int(original),
                   "factor": float(context) / float(original),
                   "long_factor": _factors(reader, "rope_factors_long.weight").tolist(),
                   "short_factor": _factors(reader, "rope_factors_short.weight").tolist()}
        if attn is not None:
            scaling["attention_factor"] = float(attn)
        findings.append(Finding("rope_factors_long", "llama.cpp picks long or short factors once per context "
                                "(n_ctx > original), not per sequence as transformers does", lint=False))
    elif kind not in ("none", None):
        raise ValueError(f"{where}: rope.scaling.type={kind!r} is not one llama.cpp knows (none, linear, yarn, "
                         "longrope)")
    return scaling, context, original


def _mrope_section(fields, key, kind, where):
    """`rope.dimension_sections` without its zero entries for a multi-axis rope, else None."""
    section = fields.get(key("rope.dimension_sections"))
    if kind != "mrope" and not section:
        return None
    mrope = tuple(int(s) for s in (section or []) if int(s) > 0) or None
    if mrope is None:
        raise ValueError(f"{where}: multi-axis rope type without rope.dimension_sections")
    return mrope


def _row_order(arch, kind, findings):
    """"meta" when llama.cpp's converter permuted HF's q/k rows for this NORM architecture, else "hf"."""
    if kind != "norm":
        return "hf"
    if arch in GGUF_PERMUTED_ARCHS:
        return "meta"
    if arch not in GGUF_NATIVE_NORM_ARCHS:
        findings.append(Finding("general.architecture", f"NORM architecture {arch!r}: whether the converter "
                                "permuted HF's q/k rows is not listed; read as not permuted"))
    return "hf"
