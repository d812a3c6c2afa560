"""Checkpoint files in and out: safetensors (single, sharded with an index, or a checkpoint directory),
.npz, PyTorch state dicts, Keras .weights.h5, Flax msgpack, GGUF (`ggufio`), Meta model-parallel shards
(`shards`).

Every reader is a `Reader`: `names()`, `shape(name)`, `dtype(name)`, `get(name)` -> NumPy array, so
the porter can plan the whole output from shapes alone and then move one tensor at a time.
Streaming (peak memory about one tensor plus its converted copy) holds for safetensors and `.npz`
in both directions and for `.weights.h5` output; `.pt` input is memory-mapped by `torch.load(mmap=True)`;
`.pt` and `.msgpack` output need the whole state in memory (`torch.save`, `msgpack_serialize` take one
object). Frameworks are imported inside the functions: posenc_np imports with NumPy only.

Names: a state dict is flat (`a.b.weight`); `.weights.h5` names are HDF5 dataset paths
(`layers/dense/vars/0`); msgpack names are the nested dict's keys joined by "/"
(`params/embeddings/word_embeddings/embedding`).
"""

from __future__ import annotations

import json
import math
import os
import struct
import zipfile

import numpy as np

from posenc_np._dtypes import numpy_dtype
from ..errors import UsageError

__all__ = ["FORMATS", "detect_format", "open_reader", "write_checkpoint", "Reader", "drop_pages"]

FORMATS = ("safetensors", "npz", "pt", "keras-h5", "msgpack", "gguf", "safetensors-index", "safetensors-dir")
_SUFFIXES = ((".weights.h5", "keras-h5"), (".safetensors", "safetensors"), (".npz", "npz"), (".pt", "pt"),
             (".pth", "pt"), (".bin", "pt"), (".msgpack", "msgpack"), (".gguf", "gguf"),
             (".index.json", "safetensors-index"))

# safetensors dtype codes <-> NumPy (bfloat16 through ml_dtypes, which the frameworks install)
_ST_CODES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
             "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def _np_dtype(name):
    return numpy_dtype(name) if name in ("bfloat16", "float16", "float32", "float64") else np.dtype(name)


def _dtype_name(dtype) -> str:
    dtype = np.dtype(dtype)
    return "bfloat16" if dtype.name == "bfloat16" else dtype.name


def drop_pages(*arrays) -> None:
    """Let the kernel drop the resident pages of memory-mapped inputs already consumed.

    Pages of a file mapping count in the process's RSS for as long as the mapping lives; a tensor read
    block by block would otherwise end up fully resident. Re-reading a dropped page refaults it from
    the page cache. Arrays that are not memory maps are left alone.
    """
    import mmap

    for array in arrays:
        while array is not None and getattr(array, "_mmap", None) is None:
            array = getattr(array, "base", None)  # a view of a memory map
        handle = getattr(array, "_mmap", None)
        if handle is not None and hasattr(mmap, "MADV_DONTNEED"):
            handle.madvise(mmap.MADV_DONTNEED)


def detect_format(path) -> str:
    """The format a file name implies (`.weights.h5` before `.h5`); UsageError for any other name.

    A name ending in `/` (or an existing directory) is a Hugging Face checkpoint directory,
    "safetensors-dir": read through its index, written like `save_pretrained`."""
    if str(path).endswith(os.sep) or os.path.isdir(str(path)):
        return "safetensors-dir"
    lower = str(path).lower()
    for suffix, fmt in _SUFFIXES:
        if lower.endswith(suffix):
            return fmt
    raise UsageError(f"{str(path)!r}: unknown checkpoint format; the name must end in one of "
                     f"{', '.join(s for s, _ in _SUFFIXES)}")


class Reader:
    """Lazy access to the tensors of one checkpoint."""

    def __init__(self, path, shapes, dtypes, getter, metadata=None):
        self.path = str(path)
        self._shapes, self._dtypes, self._get = shapes, dtypes, getter
        self.metadata = metadata or {}

    def names(self) -> list[str]:
        return list(self._shapes)

    def __contains__(self, name):
        return name in self._shapes

    def shape(self, name) -> tuple:
        return tuple(self._shapes[name])

    def dtype(self, name) -> str:
        return self._dtypes[name]

    def get(self, name) -> np.ndarray:
        return self._get(name)


def open_reader(path, fmt=None) -> Reader:
    """Open SOURCE for reading; one UsageError (exit 2) for a missing, unreadable or unsafe file.

    SOURCE may also be a Hugging Face checkpoint directory or its `model.safetensors.index.json`
    (`shards.read_index`), a GGUF file, or Meta's `consolidated.NN.pth` model-parallel shards (a
    directory of them, or `consolidated.00.pth` with its siblings), merged by `shards.meta_merge_reader`."""
    from . import shards

    path = str(path)
    if fmt is None:
        meta = shards.meta_shard_paths(path) if os.path.isdir(path) or os.path.isfile(path) else None
        if meta and (len(meta) > 1 or os.path.isdir(path)):
            return shards.meta_merge_reader(meta, _params_dim(meta[0]))
        path, fmt = shards.resolve_checkpoint(path)
    if not os.path.isfile(path):
        raise UsageError(f"{path!r} does not exist or is not a file")
    fmt = fmt or detect_format(path)
    try:
        return _READERS[fmt](path)
    except UsageError:
        raise
    except Exception as error:  # a corrupt file reaches us as any of the libraries' exception types
        raise UsageError(f"cannot read {path!r} as {fmt}: {type(error).__name__}: {error}") from None


def _params_dim(shard_path):
    """params.json's `dim` beside Meta shards (None without it): the embedding's split axis needs it."""
    path = os.path.join(os.path.dirname(os.path.abspath(shard_path)), "params.json")
    try:
        with open(path) as handle:
            return json.load(handle).get("dim")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None


def _read_safetensors(path):
    from safetensors import safe_open

    with safe_open(path, framework="np"):  # validates the header and the data offsets
        pass
    with open(path, "rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
    metadata = header.pop("__metadata__", None) or {}
    start = 8 + size
    shapes = {k: tuple(v["shape"]) for k, v in header.items()}
    dtypes = {k: _ST_CODES.get(v["dtype"], v["dtype"]) for k, v in header.items()}

    def get(name):
        # one memory map per tensor, released with the array: a map of the whole file would keep every
        # page read so far resident, and peak RSS would grow to the checkpoint's size
        begin, end = header[name]["data_offsets"]
        dtype = _np_dtype(dtypes[name])
        if end == begin:
            return np.zeros(shapes[name], dtype)
        # a SOURCE truncated since its header was read: touching a mapped page past the end of the file would
        # kill the process with SIGBUS; one message instead (docs/reliability.md: the window left is the copy
        # of one tensor)
        size = os.path.getsize(path)
        if size < start + end:
            raise UsageError(f"{path!r} changed while being read: tensor {name!r} ends at byte {start + end}, "
                             f"the file now has {size}")
        return np.memmap(path, dtype=dtype, mode="r", offset=start + begin, shape=shapes[name])

    return Reader(path, shapes, dtypes, get, metadata)


def _read_npz(path):
    archive = np.load(path, allow_pickle=False, mmap_mode="r")
    shapes, dtypes = {}, {}
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            if not info.filename.endswith(".npy"):
                continue
            with zf.open(info) as member:
                version = np.lib.format.read_magic(member)
                read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                        else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read(member)
            name = info.filename[:-4]
            needed = math.prod(shape) * dtype.itemsize  # Python ints: a hostile shape cannot overflow
            if needed > info.file_size:  # np.load would allocate the claimed size before reading (bounded RSS)
                raise UsageError(f"{path!r}: array {name!r} claims shape {tuple(shape)} ({needed} bytes), the "
                                 f"archive member holds {info.file_size} bytes: truncated or corrupt")
            if dtype.kind == "V":
                raise UsageError(f"{path!r}: array {name!r} has an untyped dtype {dtype} (NumPy stores bfloat16 "
                                 "this way and cannot read it back); use safetensors for bfloat16")
            shapes[name], dtypes[name] = tuple(shape), _dtype_name(dtype)
    return Reader(path, shapes, dtypes, lambda name: archive[name])


def _read_pt(path):
    import pickle

    import torch

    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as error:
            if "mmap" not in str(error):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)  # legacy (non-zip) files cannot mmap
    except pickle.UnpicklingError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise UsageError(f"{path!r} needs unpickling of arbitrary Python objects, which posenc refuses "
                         f"(torch.load weights_only=True said: {first}); re-save it as a plain state dict "
                         "of tensors or as safetensors") from None
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise UsageError(f"{path!r} is not a flat state dict of tensors (got {type(state).__name__}); "
                         "save `model.state_dict()`")
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    dtypes = {k: str(v.dtype).removeprefix("torch.") for k, v in state.items()}
    return Reader(path, shapes, dtypes, lambda name: _torch_to_numpy(state[name]))


def _torch_to_numpy(tensor):
    import torch

    if tensor.dtype == torch.bfloat16:
        return tensor.detach().view(torch.int16).numpy().view(_np_dtype("bfloat16"))
    return tensor.detach().numpy()


def _read_h5(path):
    import h5py

    handle = h5py.File(path, "r")
    shapes, dtypes = {}, {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            bf16 = obj.attrs.get("dtype") == "bfloat16"  # Keras 3's marker for its opaque 2-byte datasets
            shapes[name], dtypes[name] = tuple(obj.shape), "bfloat16" if bf16 else _dtype_name(obj.dtype)

    def get(name):
        value = handle[name][()]
        return value.view(_np_dtype("bfloat16")) if dtypes[name] == "bfloat16" else value

    handle.visititems(visit)
    return Reader(path, shapes, dtypes, get)


def _read_msgpack(path):
    from flax import serialization

    with open(path, "rb") as f:
        tree = serialization.msgpack_restore(f.read())
    flat = {}

    def walk(prefix, node):
        if isinstance(node, dict):
            for key, value in node.items():
                walk(f"{prefix}/{key}" if prefix else str(key), value)
        else:
            flat[prefix] = np.asarray(node)

    walk("", tree)
    return Reader(path, {k: v.shape for k, v in flat.items()}, {k: _dtype_name(v.dtype) for k, v in flat.items()},
                  flat.__getitem__)


def _read_gguf(path):
    from .ggufio import read_gguf

    return read_gguf(path)


def _read_index(path):
    from .shards import read_index

    return read_index(path)


_READERS = {"safetensors": _read_safetensors, "npz": _read_npz, "pt": _read_pt, "keras-h5": _read_h5,
            "msgpack": _read_msgpack, "gguf": _read_gguf, "safetensors-index": _read_index}


def write_checkpoint(path, fmt, entries, metadata=None):
    """Write `entries` (name, shape, dtype name, thunk -> array), pulling one tensor at a time."""
    _WRITERS[fmt](path, entries, metadata or {})


def _write_safetensors(path, entries, metadata):
    codes = {v: k for k, v in _ST_CODES.items()}
    header, offset = {}, 0
    for name, shape, dtype, _ in entries:
        if dtype not in codes:
            raise UsageError(f"tensor {name!r}: dtype {dtype} cannot be stored in safetensors")
        size = int(np.prod(shape, dtype=np.int64)) * _np_dtype(dtype).itemsize
        header[name] = {"dtype": codes[dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data must start 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name, shape, dtype, thunk in entries:
            array = _checked(name, shape, dtype, thunk())
            flat = array.reshape(-1).view(np.uint8)  # no copy of a contiguous array
            for start in range(0, flat.size, 1 << 24):
                f.write(memoryview(flat[start:start + (1 << 24)]))
                drop_pages(array)  # an unchanged tensor is still the source's memory map
            del array, flat  # before the next tensor is produced: two converted tensors never coexist


def _checked(name, shape, dtype, array):
    array = np.ascontiguousarray(array)
    if tuple(array.shape) != tuple(shape) or _dtype_name(array.dtype) != dtype:
        raise RuntimeError(f"internal: {name} planned as {shape} {dtype}, produced {array.shape} {array.dtype}")
    return array


def _write_npz(path, entries, metadata):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, shape, dtype, thunk in entries:
            if dtype == "bfloat16":
                raise UsageError(f"tensor {name!r} is bfloat16, which .npz cannot store with its dtype; "
                                 "write safetensors instead")
            with zf.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, _checked(name, shape, dtype, thunk()), allow_pickle=False)


def _write_pt(path, entries, metadata):
    import torch

    state = {}
    for name, shape, dtype, thunk in entries:
        array = _checked(name, shape, dtype, thunk())
        if dtype == "bfloat16":
            state[name] = torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
        else:
            state[name] = torch.from_numpy(array.copy())
    torch.save(state, path)


def _write_h5(path, entries, metadata):
    """Keras 3 `.weights.h5`: datasets at `layers/<path>/vars/<i>`; `name` attributes from metadata."""
    import h5py

    with h5py.File(path, "w") as f:
        for name, shape, dtype, thunk in entries:
            dataset = f.create_dataset(name, data=_checked(name, shape, dtype, thunk()))
            if dtype == "bfloat16":  # as Keras 3 H5IOStore writes bfloat16 variables
                dataset.attrs["dtype"] = "bfloat16"
        for group, attrs in metadata.get("h5_attrs", {}).items():
            node = f.require_group(group)
            for key, value in attrs.items():
                node.attrs[key] = value
        f.require_group("vars")


def _write_msgpack(path, entries, metadata):
    from flax import serialization

    tree = {}
    for name, shape, dtype, thunk in entries:
        *parents, leaf = name.split("/")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UsageError(f"msgpack name {name!r} nests under a tensor")
        node[leaf] = _checked(name, shape, dtype, thunk())
    with open(path, "wb") as f:
        f.write(serialization.msgpack_serialize(tree))


def _write_gguf(path, entries, metadata):
    from .ggufio import write_gguf

    write_gguf(path, entries, metadata)


_WRITERS = {"safetensors": _write_safetensors, "npz": _write_npz, "pt": _write_pt, "keras-h5": _write_h5,
            "msgpack": _write_msgpack, "gguf": _write_gguf}
