"""Keras 3 `.weights.h5` in and out (h5py). Names are HDF5 dataset paths (`layers/dense/vars/0`); Keras 3
marks its opaque 2-byte bfloat16 datasets with a `dtype` attribute, which is honoured both ways."""

from __future__ import annotations

from .base import Reader, checked, dtype_name, np_dtype

__all__ = ["read_keras_h5", "write_keras_h5"]


def read_keras_h5(path) -> Reader:
    """A `Reader` over every dataset of a `.weights.h5`."""
    import h5py

    handle = h5py.File(path, "r")
    shapes, dtypes = {}, {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            bf16 = obj.attrs.get("dtype") == "bfloat16"  # Keras 3's marker for its opaque 2-byte datasets
            shapes[name], dtypes[name] = tuple(obj.shape), "bfloat16" if bf16 else dtype_name(obj.dtype)

    def get(name):
        value = handle[name][()]
        return value.view(np_dtype("bfloat16")) if dtypes[name] == "bfloat16" else value

    handle.visititems(visit)
    return Reader(path, shapes, dtypes, get)


def write_keras_h5(path, entries, metadata) -> None:
    """Keras 3 `.weights.h5`: datasets at `layers/<path>/vars/<i>`; `name` attributes from `metadata["h5_attrs"]`."""
    import h5py

    with h5py.File(path, "w") as f:
        for name, shape, dtype, thunk in entries:
            dataset = f.create_dataset(name, data=checked(name, shape, dtype, thunk()))
            if dtype == "bfloat16":  # as Keras 3 H5IOStore writes bfloat16 variables
                dataset.attrs["dtype"] = "bfloat16"
        for group, attrs in metadata.get("h5_attrs", {}).items():
            node = f.require_group(group)
            for key, value in attrs.items():
                node.attrs[key] = value
        f.require_group("vars")
