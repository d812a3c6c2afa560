"""The base layer of every checkpoint format: `Reader`, dtype names, the consistency check of a produced
tensor, and the page dropping that keeps streamed reads and writes at about one tensor of memory.

Every reader is a `Reader`: `names()`, `shape(name)`, `dtype(name)`, `get(name)` -> NumPy array, so the
porter can plan the whole output from shapes alone and then move one tensor at a time. Dtype names are
NumPy's (`"float32"`, `"int64"`), with `"bfloat16"` through ml_dtypes.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from posenc_np.backend import numpy_dtype

from ..errors import UsageError

__all__ = ["Reader", "np_dtype", "dtype_name", "nbytes", "checked", "drop_pages", "read_guarded"]


def np_dtype(name) -> np.dtype:
    """The NumPy dtype of a dtype name; bfloat16 is ml_dtypes'."""
    return numpy_dtype(name) if name in ("bfloat16", "float16", "float32", "float64") else np.dtype(name)


def dtype_name(dtype) -> str:
    """The name `Reader.dtype` reports for a NumPy dtype."""
    dtype = np.dtype(dtype)
    return "bfloat16" if dtype.name == "bfloat16" else dtype.name


def nbytes(shape, dtype) -> int:
    """Bytes of a tensor of `shape` and dtype name `dtype`."""
    return int(np.prod(shape, dtype=np.int64)) * np_dtype(dtype).itemsize


def drop_pages(*arrays) -> None:
    """Let the kernel drop the resident pages of memory-mapped inputs already consumed.

    Pages of a file mapping count in the process's RSS for as long as the mapping lives; a tensor read
    block by block would otherwise end up fully resident. Re-reading a dropped page refaults it from
    the page cache. Arrays that are not memory maps are left alone.
    """
    for array in arrays:
        while array is not None and getattr(array, "_mmap", None) is None:
            array = getattr(array, "base", None)  # a view of a memory map
        handle = getattr(array, "_mmap", None)
        if handle is not None and hasattr(mmap, "MADV_DONTNEED"):
            handle.madvise(mmap.MADV_DONTNEED)


def checked(name, shape, dtype, array) -> np.ndarray:
    """`array` contiguous, after checking it is the `shape` and dtype name `dtype` the plan promised."""
    array = np.ascontiguousarray(array)
    if tuple(array.shape) != tuple(shape) or dtype_name(array.dtype) != dtype:
        raise RuntimeError(f"internal: {name} planned as {shape} {dtype}, produced {array.shape} {array.dtype}")
    return array


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


def read_guarded(read, path, fmt) -> Reader:
    """`read(path)`, with one UsageError (exit 2) for a missing file or any library's error on a corrupt one."""
    path = str(path)
    if not os.path.isfile(path):
        raise UsageError(f"{path!r} does not exist or is not a file")
    try:
        return read(path)
    except UsageError:
        raise
    except Exception as error:  # a corrupt file reaches us as any of the libraries' exception types
        raise UsageError(f"cannot read {path!r} as {fmt}: {type(error).__name__}: {error}") from None
