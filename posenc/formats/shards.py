"""Sharded Hugging Face checkpoints in and out, and Meta's model-parallel `consolidated.*.pth` merged.

Reading: SOURCE may be a checkpoint directory (its `model.safetensors.index.json`, else its single
`model.safetensors`) or the index itself. The index's `weight_map` names the shard of every tensor;
every shard must exist and hold exactly the tensors the index gives it (a missing shard, a tensor
the index lists but no shard holds, or one a shard holds that the index does not list is a UsageError).
Each shard is memory-mapped one tensor at a time, as a single safetensors file is.

Writing: as transformers' `save_pretrained(max_shard_size=...)` (`huggingface_hub`'s
`split_torch_state_dict_into_shards`): tensors in order, a new shard when the next tensor would take
the current one over the limit (a tensor larger than the limit gets a shard of its own), files
`model-00001-of-00003.safetensors` ... and `model.safetensors.index.json` with
`{"metadata": {"total_size": bytes}, "weight_map": {name: file}}`; a checkpoint that fits in one shard
is one `model.safetensors` and no index. Sizes like `"5GB"` are decimal (10^9), `"2GiB"` binary, as HF.

Meta merge (`meta_merge_reader`): Meta's `llama/model.py` builds its layers from fairscale's
`ColumnParallelLinear` (weight split along the output rows, dim 0: `wq`, `wk`, `wv`, `w1`, `w3`,
`output`), `RowParallelLinear` (split along the input columns, dim 1: `wo`, `w2`) and
`ParallelEmbedding` (split along the embedding dim 1; Llama 3's `VocabParallelEmbedding` along the
vocabulary, dim 0); norms are replicated. transformers' `convert_llama_weights_to_hf.py` (`write_model`,
v4.x) concatenates exactly so (`concat_dim = 0 if is_llama_3 else 1` for `tok_embeddings`). The
embedding's axis is read from the shapes: the one whose sizes add up to params.json's `dim` is the
split one. Replicated tensors must be equal in every shard.
"""

from __future__ import annotations

import glob
import json
import os
import re

import numpy as np

from ..errors import UsageError
from .base import Reader, nbytes, read_guarded
from .pt import read_pt
from .safetensors import read_safetensors, write_safetensors

__all__ = ["INDEX_NAME", "parse_size", "resolve_checkpoint", "read_index", "plan_shards", "write_shards",
           "meta_shard_paths", "meta_merge_reader", "META_SPLIT_AXIS"]

INDEX_NAME = "model.safetensors.index.json"
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20,
          "GIB": 2**30, "TIB": 2**40}


def parse_size(value) -> int:
    """`"5GB"` -> 5 * 10**9, `"500MiB"` -> 500 * 2**20, `1000` -> 1000 (transformers' convention)."""
    if isinstance(value, int):
        size = value
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(value))
        if not match or match.group(2).upper() not in _UNITS:
            raise UsageError(f"--max-shard-size {value!r}: expected a size like 5GB, 500MB, 2GiB or a byte count")
        size = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if size < 1:
        raise UsageError(f"--max-shard-size {value!r} must be at least one byte")
    return size


def resolve_checkpoint(path):
    """`(file, format)` SOURCE names: a directory becomes its index (or its single model.safetensors)."""
    path = str(path)
    if os.path.isdir(path):
        index = os.path.join(path, INDEX_NAME)
        single = os.path.join(path, "model.safetensors")
        if os.path.isfile(index):
            return index, "safetensors-index"
        if os.path.isfile(single):
            return single, "safetensors"
        raise UsageError(f"directory {path!r} holds neither {INDEX_NAME} nor model.safetensors")
    if path.endswith(".index.json"):
        return path, "safetensors-index"
    return path, None


def read_index(path):
    """A `Reader` over every shard an HF `model.safetensors.index.json` lists."""
    try:
        with open(path) as handle:
            index = json.load(handle)
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"cannot read index {path!r}: {error}") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise UsageError(f"index {path!r} has no weight_map")
    directory = os.path.dirname(os.path.abspath(path))
    files = list(dict.fromkeys(weight_map.values()))
    missing = [f for f in files if not os.path.isfile(os.path.join(directory, f))]
    if missing:
        raise UsageError(f"index {path!r} names shard(s) that do not exist: {', '.join(missing)}")
    shards = {}
    for name in files:
        try:
            shards[name] = read_safetensors(os.path.join(directory, name))
        except Exception as error:  # noqa: BLE001 - any library error on a corrupt shard
            raise UsageError(f"cannot read shard {name!r} of {path!r}: {type(error).__name__}: {error}") from None
    for file, shard in shards.items():
        listed = {n for n, f in weight_map.items() if f == file}
        held = set(shard.names())
        if listed - held:
            raise UsageError(f"shard {file!r} lacks tensor(s) the index gives it: "
                             f"{', '.join(sorted(listed - held)[:5])}")
        if held - listed:
            raise UsageError(f"shard {file!r} holds tensor(s) the index does not list: "
                             f"{', '.join(sorted(held - listed)[:5])}")
    order = [n for file in files for n in shards[file].names() if weight_map[n] == file]
    shapes = {n: shards[weight_map[n]].shape(n) for n in order}
    dtypes = {n: shards[weight_map[n]].dtype(n) for n in order}
    reader = Reader(path, shapes, dtypes, lambda n: shards[weight_map[n]].get(n), index.get("metadata") or {})
    reader.shards = {n: weight_map[n] for n in order}
    return reader


def plan_shards(entries, max_shard_size):
    """Lists of entries per shard: huggingface_hub's `split_state_dict_into_shards_factory` rule (what
    save_pretrained uses): in order, a new shard when the next tensor would take the current one over
    the limit; a tensor larger than the limit gets a shard of its own and the current shard goes on."""
    shards, current, size = [], [], 0
    for entry in entries:
        tensor_bytes = nbytes(entry[1], entry[2])
        if tensor_bytes > max_shard_size:
            shards.append([entry])
            continue
        if current and size + tensor_bytes > max_shard_size:
            shards.append(current)
            current, size = [], 0
        current.append(entry)
        size += tensor_bytes
    if current or not shards:
        shards.append(current)
    return shards


def write_shards(directory, entries, metadata, max_shard_size, prefix="model"):
    """Write `entries` into `directory` as HF shards (or one `{prefix}.safetensors`); returns the file names."""
    shards = plan_shards(entries, max_shard_size)
    if len(shards) == 1:
        name = f"{prefix}.safetensors"
        write_safetensors(os.path.join(directory, name), shards[0], metadata)
        return [name]
    names, weight_map = [], {}
    for i, shard in enumerate(shards):
        name = f"{prefix}-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(directory, name), shard, {"format": "pt", **metadata})
        names.append(name)
        weight_map.update({entry[0]: name for entry in shard})
    total = sum(nbytes(e[1], e[2]) for e in entries)
    index = f"{prefix}.safetensors.index.json"
    with open(os.path.join(directory, index), "w") as handle:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, handle, indent=2, sort_keys=True)
        handle.write("\n")
    return names + [index]


# ---------------------------------------------------------------- Meta model-parallel shards

#: tensor name pattern -> axis Meta's model-parallel layers split it along (None: replicated)
META_SPLIT_AXIS = ((r"layers\.\d+\.attention\.w[qkv]\.weight", 0), (r"layers\.\d+\.attention\.wo\.weight", 1),
                   (r"layers\.\d+\.feed_forward\.w[13]\.weight", 0), (r"layers\.\d+\.feed_forward\.w2\.weight", 1),
                   (r"output\.weight", 0), (r"tok_embeddings\.weight", "embedding"),
                   (r"(layers\.\d+\.(attention|ffn)_norm|norm)\.weight", None), (r"rope\.freqs", None))


def meta_shard_paths(path):
    """The `consolidated.NN.pth` files SOURCE names: the directory's, or the siblings of one of them."""
    path = str(path)
    directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(path) and not re.fullmatch(r"consolidated\.\d+\.pth", os.path.basename(path)):
        return None
    found = sorted(glob.glob(os.path.join(directory, "consolidated.*.pth")))
    found = [f for f in found if re.fullmatch(r"consolidated\.\d+\.pth", os.path.basename(f))]
    if not found:
        return None
    numbers = [int(os.path.basename(f).split(".")[1]) for f in found]
    if numbers != list(range(len(found))):
        raise UsageError(f"{directory!r}: Meta shards must be consolidated.00.pth .. consolidated.{len(found) - 1:02d}"
                         f".pth without gaps; found {', '.join(os.path.basename(f) for f in found)}")
    return found


def meta_merge_reader(paths, dim):
    """A Reader that concatenates Meta's model-parallel shards along the axes of `META_SPLIT_AXIS`."""
    readers = [read_guarded(read_pt, p, "pt") for p in paths]
    if len(readers) == 1:
        return readers[0]
    names = readers[0].names()
    for path, reader in zip(paths[1:], readers[1:], strict=True):
        if reader.names() != names:
            diff = sorted(set(names) ^ set(reader.names()))
            raise UsageError(f"Meta shard {os.path.basename(path)!r} holds other tensors than consolidated.00.pth "
                             f"({', '.join(diff[:5])})")
    axes, shapes = {}, {}
    for name in names:
        rule = next((axis for pattern, axis in META_SPLIT_AXIS if re.fullmatch(pattern, name)), "unknown")
        if rule == "unknown":
            raise UsageError(f"Meta shard tensor {name!r}: its model-parallel split axis is not known to posenc")
        parts = [r.shape(name) for r in readers]
        if rule == "embedding":
            if dim is None:
                raise UsageError("merging Meta's tok_embeddings needs params.json's dim beside SOURCE")
            rule = 1 if sum(p[1] for p in parts) == dim and parts[0][1] != dim else 0
        axes[name] = rule
        if rule is None:
            shapes[name] = parts[0]
        else:
            shape = list(parts[0])
            shape[rule] = sum(p[rule] for p in parts)
            shapes[name] = tuple(shape)

    def get(name):
        axis = axes[name]
        if axis is None:
            first = np.asarray(readers[0].get(name))
            for path, reader in zip(paths[1:], readers[1:], strict=True):
                if not np.array_equal(np.asarray(reader.get(name)), first):
                    raise UsageError(f"replicated tensor {name!r} differs in {os.path.basename(path)!r}")
            return first
        return np.concatenate([np.asarray(r.get(name)) for r in readers], axis=axis)

    merged = Reader(paths[0], shapes, {n: readers[0].dtype(n) for n in names}, get)
    merged.meta_axes = axes
    return merged
