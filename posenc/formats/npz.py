"""NumPy `.npz` in and out: members memory-mapped on reading, streamed into the zip on writing (never pickled)."""

from __future__ import annotations

import math
import zipfile

import numpy as np

from ..errors import UsageError
from .base import Reader, checked, dtype_name

__all__ = ["read_npz", "write_npz"]


def read_npz(path) -> Reader:
    """A `Reader` over an `.npz`; every member's header is checked against its size before any allocation."""
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
            shapes[name], dtypes[name] = tuple(shape), dtype_name(dtype)
    return Reader(path, shapes, dtypes, lambda name: archive[name])


def write_npz(path, entries, metadata) -> None:
    """Write `entries` as an uncompressed `.npz`, one member at a time; bfloat16 is refused (NumPy cannot read it)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, shape, dtype, thunk in entries:
            if dtype == "bfloat16":
                raise UsageError(f"tensor {name!r} is bfloat16, which .npz cannot store with its dtype; "
                                 "write safetensors instead")
            with zf.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, checked(name, shape, dtype, thunk()), allow_pickle=False)
