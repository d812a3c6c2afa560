"""GGUF files in and out, with the `gguf` package llama.cpp publishes (gguf-py 0.19).

Reading: `gguf.GGUFReader` (a memory map of the file). Tensor names are GGUF's (`token_embd.weight`,
`blk.0.attn_q.weight`...); shapes are NumPy order, i.e. ggml's `ne` reversed, so a torch Linear
`[out, in]` reads back `[out, in]`. F32/F16/F64 tensors are views of the map, BF16 is the map's bytes
viewed as `ml_dtypes.bfloat16`; quantized tensors (Q4_0, Q8_0, K-quants...) are dequantized with
`gguf.quants.dequantize` to float32 and reported as float32 (a port of a quantized file is a port of its
dequantized values). A file whose tensors reach past its end, a bad magic, or a corrupt header is one
UsageError.

Writing: the header, key/values and tensor infos are written by `gguf.GGUFWriter`; the tensor data is
streamed by us one tensor at a time, a block at a time, at GGUF's alignment (what
`GGUFWriter.write_tensor_data` does, without holding a whole tensor's pages). float32, float16,
bfloat16 and float64 tensors are written as F32/F16/BF16/F64; anything else is refused. A tensor the
metadata names in `types` is written in that block type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) by gguf-py's quantizer
(`posenc.formats.gguf_quant`, `--outtype`).

`ROPE_TYPE_OF_ARCH`: llama.cpp does not store the rope type in the file; `llama_model_rope_type()` in
src/llama-model.cpp (ggml-org/llama.cpp commit 00342301d01add50835550e8a916f12097d94517) hard-codes it
per architecture. NORM rotates pairs of consecutive values (posenc layout "interleaved"), NEOX pairs
`i` with `i + n_rot/2` (posenc layout "half"), MROPE is Qwen2-VL's multi-axis NEOX. The keys below are
the architecture strings of `general.architecture` (`gguf.MODEL_ARCH_NAMES`).
"""

from __future__ import annotations

import os

import numpy as np

from posenc_np.backend import numpy_dtype

from ..errors import UsageError
from .base import Reader, checked, drop_pages
from .gguf_quant import quantize

__all__ = ["ROPE_TYPE_OF_ARCH", "ROPE_LAYOUT_OF_TYPE", "rope_type", "read_gguf", "write_gguf", "GGUF_KV_TYPES"]

_NONE = ("clip", "gpt2", "gptj", "mpt", "refact", "bloom", "mamba", "mamba2", "jamba", "jina-bert-v2", "t5",
         "t5encoder", "jais", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", "wavtokenizer-dec", "nemotron_h")
_NORM = ("llama", "llada", "llama4", "deci", "baichuan", "starcoder", "internlm2", "minicpm", "xverse", "command-r",
         "cohere2", "olmo", "arctic", "deepseek", "deepseek2", "plm", "chatglm", "glm4", "granite", "granitemoe",
         "granitehybrid", "chameleon", "bailingmoe", "neo-bert", "smollm3", "arcee", "ernie4_5", "ernie4_5-moe")
_NEOX = ("falcon", "falcon-h1", "grok", "dbrx", "bert", "jina-bert-v3", "nomic-bert", "nomic-bert-moe", "stablelm",
         "bitnet", "qwen", "qwen2", "dream", "qwen2moe", "qwen3", "qwen3moe", "qwen3next", "llada-moe", "olmo2",
         "olmoe", "phi2", "phi3", "phimoe", "plamo", "plamo2", "gemma", "gemma2", "gemma3", "gemma3n",
         "gemma-embedding", "starcoder2", "openelm", "gptneox", "codeshell", "orion", "nemotron", "exaone", "exaone4",
         "minicpm3", "bailingmoe2", "dots1", "hunyuan-moe", "gpt-oss", "hunyuan-dense", "lfm2", "lfm2moe",
         "smallthinker", "glm4moe", "seed_oss", "grovemoe", "apertus")
#: general.architecture -> "none" | "norm" | "neox" | "mrope" (llama.cpp llama_model_rope_type, see above)
ROPE_TYPE_OF_ARCH = {**{a: "none" for a in _NONE}, **{a: "norm" for a in _NORM}, **{a: "neox" for a in _NEOX},
                     "qwen2vl": "mrope"}
#: the posenc layout that each llama.cpp rope type rotates with
ROPE_LAYOUT_OF_TYPE = {"norm": "interleaved", "neox": "half", "mrope": "half"}

# `write_gguf`'s value types: the GGUFWriter method and the Python conversion of each
_KV_WRITERS = {"uint32": ("add_uint32", int), "int32": ("add_int32", int), "uint64": ("add_uint64", int),
               "float32": ("add_float32", float), "bool": ("add_bool", bool), "string": ("add_string", str),
               "array": ("add_array", list)}
#: value types `write_gguf` accepts in its key/value list
GGUF_KV_TYPES = tuple(_KV_WRITERS)


def rope_type(arch: str) -> str:
    """llama.cpp's rope type of a GGUF architecture; UsageError for one the table does not list."""
    if arch not in ROPE_TYPE_OF_ARCH:
        raise UsageError(f"GGUF architecture {arch!r} is not in llama.cpp's llama_model_rope_type table that posenc "
                         f"carries ({len(ROPE_TYPE_OF_ARCH)} architectures); its rope type is unknown")
    return ROPE_TYPE_OF_ARCH[arch]


def read_gguf(path):
    """A `Reader` over a GGUF file; `.metadata` holds every key/value, `.gguf_types` the tensor types."""
    import gguf

    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, IndexError, KeyError, TypeError, OverflowError) as error:  # its parse errors
        raise UsageError(f"{path!r} is not a readable GGUF (truncated or corrupt): gguf.GGUFReader said: "
                         f"{type(error).__name__}: {error}") from None
    size = os.path.getsize(path)
    shapes, dtypes, tensors, types = {}, {}, {}, {}
    for tensor in reader.tensors:
        end = int(tensor.data_offset) + int(tensor.n_bytes)
        if end > size:
            raise UsageError(f"{path!r} is truncated: tensor {tensor.name!r} ends at byte {end}, the file has {size}")
        shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
        kind = tensor.tensor_type
        if kind == gguf.GGMLQuantizationType.BF16:
            dtype = "bfloat16"
        elif kind in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F64):
            dtype = {"F32": "float32", "F16": "float16", "F64": "float64"}[kind.name]
        elif kind.name.startswith("I"):
            dtype = kind.name.lower().replace("i", "int")
        else:
            dtype = "float32"  # dequantized
        shapes[tensor.name], dtypes[tensor.name] = shape, dtype
        tensors[tensor.name], types[tensor.name] = tensor, kind.name

    def get(name):
        tensor = tensors[name]
        kind = tensor.tensor_type
        if kind == gguf.GGMLQuantizationType.BF16:
            return np.asarray(tensor.data).reshape(-1).view(numpy_dtype("bfloat16")).reshape(shapes[name])
        if types[name] in ("F32", "F16", "F64") or types[name].startswith("I"):
            return tensor.data.reshape(shapes[name])
        return gguf.quants.dequantize(np.asarray(tensor.data), kind).reshape(shapes[name]).astype(np.float32)

    metadata = {key: field.contents() for key, field in reader.fields.items() if not key.startswith("GGUF.")}
    out = Reader(path, shapes, dtypes, get, metadata)
    out.gguf_types = types
    return out


_GGML = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64"}


def _add_tensor_info(writer, name, shape, dtype, block_type):
    """The tensor info of one entry: its float type, or the byte shape of its blocks when quantized."""
    import gguf

    if dtype not in _GGML:
        raise UsageError(f"tensor {name!r}: dtype {dtype} cannot be written to GGUF (float32, float16, bfloat16, "
                         "float64 only)")
    if block_type is not None:  # rows of (columns / block size) blocks
        size, per_block = gguf.GGML_QUANT_SIZES[getattr(gguf.GGMLQuantizationType, block_type)]
        byte_shape = (*shape[:-1], shape[-1] // size * per_block)
        writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape, dtype=np.int64)),
                               raw_dtype=getattr(gguf.GGMLQuantizationType, block_type))
        return
    nbytes = int(np.prod(shape, dtype=np.int64)) * numpy_dtype(dtype).itemsize
    writer.add_tensor_info(name, tuple(shape), numpy_dtype(dtype), nbytes,
                           raw_dtype=getattr(gguf.GGMLQuantizationType, _GGML[dtype]))


def write_gguf(path, entries, metadata, *, block=1 << 24):
    """Write `entries` (name, shape, dtype, thunk); `metadata["gguf"] = {"arch": ..., "kv": [(key, value, type)]}`,
    and `"types"`: GGUF name -> block type (Q8_0, Q4_0, ...) for tensors written quantized by
    `gguf_quant.quantize` (their thunks give the float values; `--outtype`, `posenc.formats.gguf_quant`)."""
    import gguf

    spec = metadata.get("gguf")
    if not spec or not spec.get("arch"):
        raise UsageError("writing GGUF needs an architecture and its metadata: use a preset (hf-llama-to-gguf, "
                         "hf-qwen2-to-gguf, ...)")
    writer = gguf.GGUFWriter(path, spec["arch"])
    for key, value, kind in spec.get("kv", ()):
        if kind not in _KV_WRITERS:
            raise AssertionError(f"internal: GGUF value type {kind!r} of {key!r}")
        method, convert = _KV_WRITERS[kind]
        getattr(writer, method)(key, convert(value))
    block_types = spec.get("types", {})  # GGUF name -> block type (gguf_quant.QUANTIZED) of --outtype q8_0, ...
    for name, shape, dtype, _ in entries:
        _add_tensor_info(writer, name, shape, dtype, block_types.get(name))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    out = writer.fout[0]
    try:
        for name, shape, dtype, thunk in entries:
            array = checked(name, shape, dtype, thunk())
            if name in block_types:
                array = quantize(array, block_types[name])
            writer.write_padding(out, out.tell())  # each tensor starts at the file's alignment
            flat = array.reshape(-1).view(np.uint8)
            for start in range(0, flat.size, block):
                out.write(memoryview(flat[start:start + block]))
                drop_pages(array)
            writer.write_padding(out, flat.size)
            del array, flat
    finally:
        writer.close()
