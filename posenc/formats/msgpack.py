"""Flax msgpack parameter trees in and out (`flax.serialization`). Names are the nested dict's keys joined
by "/" (`params/embeddings/word_embeddings/embedding`); the whole tree is held in memory both ways."""

from __future__ import annotations

import numpy as np

from ..errors import UsageError
from .base import Reader, checked, dtype_name

__all__ = ["read_msgpack", "write_msgpack"]


def read_msgpack(path) -> Reader:
    """A `Reader` over the leaves of a msgpack tree."""
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
    return Reader(path, {k: v.shape for k, v in flat.items()}, {k: dtype_name(v.dtype) for k, v in flat.items()},
                  flat.__getitem__)


def write_msgpack(path, entries, metadata) -> None:
    """Write `entries` as a nested tree (names split at "/") with `msgpack_serialize`."""
    from flax import serialization

    tree = {}
    for name, shape, dtype, thunk in entries:
        *parents, leaf = name.split("/")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UsageError(f"msgpack name {name!r} nests under a tensor")
        node[leaf] = checked(name, shape, dtype, thunk())
    with open(path, "wb") as f:
        f.write(serialization.msgpack_serialize(tree))
