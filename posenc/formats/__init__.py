"""Checkpoint files in and out: safetensors (single, sharded with an index, or a checkpoint directory),
.npz, PyTorch state dicts, Keras .weights.h5, Flax msgpack, GGUF, Meta model-parallel shards.

This package knows no preset and no verification; `posenc port` and `posenc spec` both read through it.
One module per format (`safetensors`, `npz`, `pt`, `keras_h5`, `msgpack`, `gguf`), `shards` for HF
indexes and Meta's shards, `base` for the `Reader` they all return; this module dispatches by name.

Streaming (peak memory about one tensor plus its converted copy) holds for safetensors and `.npz`
in both directions and for `.weights.h5` output; `.pt` input is memory-mapped by `torch.load(mmap=True)`;
`.pt` and `.msgpack` output need the whole state in memory (`torch.save`, `msgpack_serialize` take one
object). Frameworks are imported inside the functions that need them.

Names: a state dict is flat (`a.b.weight`); `.weights.h5` names are HDF5 dataset paths
(`layers/dense/vars/0`); msgpack names are the nested dict's keys joined by "/"
(`params/embeddings/word_embeddings/embedding`).
"""

from __future__ import annotations

import json
import os

from ..errors import UsageError
from . import shards
from .base import Reader, drop_pages, read_guarded
from .dcp import is_dcp_dir, read_dcp, read_torch_dist, torch_dist_dir, write_dcp, write_torch_dist
from .gguf import read_gguf, write_gguf
from .keras_h5 import read_keras_h5, write_keras_h5
from .msgpack import read_msgpack, write_msgpack
from .npz import read_npz, write_npz
from .orbax import is_orbax_dir, read_orbax, write_orbax
from .pt import read_pt, write_pt
from .safetensors import read_safetensors, write_safetensors

__all__ = ["FORMATS", "DIRECTORY_FORMATS", "detect_format", "directory_format", "open_reader", "write_checkpoint",
           "Reader", "drop_pages"]

FORMATS = ("safetensors", "npz", "pt", "keras-h5", "msgpack", "gguf", "safetensors-index", "safetensors-dir", "dcp",
           "orbax", "torch_dist")
#: formats that are directories: torch DCP (torchtitan), Orbax (MaxText), Megatron torch_dist
DIRECTORY_FORMATS = ("torch_dist", "dcp", "orbax")
_SUFFIXES = ((".weights.h5", "keras-h5"), (".safetensors", "safetensors"), (".npz", "npz"), (".pt", "pt"),
             (".pth", "pt"), (".bin", "pt"), (".msgpack", "msgpack"), (".gguf", "gguf"),
             (".index.json", "safetensors-index"))
_READERS = {"safetensors": read_safetensors, "npz": read_npz, "pt": read_pt, "keras-h5": read_keras_h5,
            "msgpack": read_msgpack, "gguf": read_gguf, "safetensors-index": shards.read_index,
            "dcp": read_dcp, "orbax": read_orbax, "torch_dist": read_torch_dist}
_WRITERS = {"safetensors": write_safetensors, "npz": write_npz, "pt": write_pt, "keras-h5": write_keras_h5,
            "msgpack": write_msgpack, "gguf": write_gguf, "dcp": write_dcp, "orbax": write_orbax,
            "torch_dist": write_torch_dist}


def directory_format(path):
    """The training-stack format of an existing directory (`torch_dist` before `dcp`: Megatron's is DCP plus
    its metadata.json), or None."""
    path = str(path)
    if torch_dist_dir(path):
        return "torch_dist"  # a NeMo 2 checkpoint too (its weights/)
    if is_dcp_dir(path):
        return "dcp"
    if is_orbax_dir(path):
        return "orbax"
    return None


def detect_format(path) -> str:
    """The format a file name implies (`.weights.h5` before `.h5`); UsageError for any other name.

    An existing directory holding a torch distributed checkpoint is "dcp" (torchtitan), one with Megatron's
    metadata.json too "torch_dist", an Orbax checkpoint "orbax" (MaxText). Any other name ending in `/` (or
    existing directory) is a Hugging Face checkpoint directory, "safetensors-dir": read through its index,
    written like `save_pretrained`."""
    if os.path.isdir(str(path)) and directory_format(path):
        return directory_format(path)
    if str(path).endswith(os.sep) or os.path.isdir(str(path)):
        return "safetensors-dir"
    lower = str(path).lower()
    for suffix, fmt in _SUFFIXES:
        if lower.endswith(suffix):
            return fmt
    raise UsageError(f"{str(path)!r}: unknown checkpoint format; the name must end in one of "
                     f"{', '.join(s for s, _ in _SUFFIXES)}, or name a checkpoint directory (an existing "
                     f"directory, or a name ending in {os.sep})")


def open_reader(path, fmt=None) -> Reader:
    """Open SOURCE for reading; one UsageError (exit 2) for a missing, unreadable or unsafe file.

    SOURCE may also be a Hugging Face checkpoint directory or its `model.safetensors.index.json`
    (`shards.read_index`), a GGUF file, or Meta's `consolidated.NN.pth` model-parallel shards (a
    directory of them, or `consolidated.00.pth` with its siblings), merged by `shards.meta_merge_reader`."""
    path = str(path)
    if fmt is None and os.path.isdir(path) and directory_format(path):
        fmt = directory_format(path)
    if fmt in DIRECTORY_FORMATS:
        return _READERS[fmt](path)
    if fmt is None:
        meta = shards.meta_shard_paths(path) if os.path.isdir(path) or os.path.isfile(path) else None
        if meta and (len(meta) > 1 or os.path.isdir(path)):
            return shards.meta_merge_reader(meta, _params_dim(meta[0]))
        path, fmt = shards.resolve_checkpoint(path)
    if not os.path.isfile(path):
        raise UsageError(f"{path!r} does not exist or is not a file")
    fmt = fmt or detect_format(path)
    return read_guarded(_READERS[fmt], path, fmt)


def _params_dim(shard_path):
    """params.json's `dim` beside Meta shards (None without it): the embedding's split axis needs it."""
    path = os.path.join(os.path.dirname(os.path.abspath(shard_path)), "params.json")
    try:
        with open(path) as handle:
            return json.load(handle).get("dim")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None


def write_checkpoint(path, fmt, entries, metadata=None):
    """Write `entries` (name, shape, dtype name, thunk -> array), pulling one tensor at a time."""
    _WRITERS[fmt](path, entries, metadata or {})
