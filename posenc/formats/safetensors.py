"""safetensors in and out, without the safetensors package holding the data: the header is parsed here
and every tensor is its own memory map, written back one tensor at a time (peak memory about one tensor)."""

from __future__ import annotations

import json
import os
import struct

import numpy as np

from ..errors import UsageError
from .base import Reader, checked, drop_pages, np_dtype

__all__ = ["ST_CODES", "read_safetensors", "write_safetensors"]

#: safetensors dtype codes <-> NumPy (bfloat16 through ml_dtypes, which the frameworks install)
ST_CODES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
            "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def read_safetensors(path) -> Reader:
    """A `Reader` over one `.safetensors` file; `safe_open` validates the header and data offsets first."""
    from safetensors import safe_open

    with safe_open(path, framework="np"):
        pass
    with open(path, "rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
    metadata = header.pop("__metadata__", None) or {}
    start = 8 + size
    shapes = {k: tuple(v["shape"]) for k, v in header.items()}
    dtypes = {k: ST_CODES.get(v["dtype"], v["dtype"]) for k, v in header.items()}

    def get(name):
        # one memory map per tensor, released with the array: a map of the whole file would keep every
        # page read so far resident, and peak RSS would grow to the checkpoint's size
        begin, end = header[name]["data_offsets"]
        dtype = np_dtype(dtypes[name])
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


def write_safetensors(path, entries, metadata) -> None:
    """Write `entries` (name, shape, dtype name, thunk -> array) as one `.safetensors`, one tensor at a time."""
    codes = {v: k for k, v in ST_CODES.items()}
    header, offset = {}, 0
    for name, shape, dtype, _ in entries:
        if dtype not in codes:
            raise UsageError(f"tensor {name!r}: dtype {dtype} cannot be stored in safetensors")
        size = int(np.prod(shape, dtype=np.int64)) * np_dtype(dtype).itemsize
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
            array = checked(name, shape, dtype, thunk())
            flat = array.reshape(-1).view(np.uint8)  # no copy of a contiguous array
            for start in range(0, flat.size, 1 << 24):
                f.write(memoryview(flat[start:start + (1 << 24)]))
                drop_pages(array)  # an unchanged tensor is still the source's memory map
            del array, flat  # before the next tensor is produced: two converted tensors never coexist
