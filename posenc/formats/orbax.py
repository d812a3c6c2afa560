"""Orbax PyTree checkpoints in and out (orbax-checkpoint 0.12.8), as MaxText writes them.

On disk (`orbax/checkpoint/_src/checkpointers/checkpointer.py`, `type_handlers`): a directory with
`_METADATA` (the tree's structure), `_CHECKPOINT_METADATA`, `manifest.ocdbt`, `ocdbt.process_0/` and `d/`
(tensorstore's OCDBT key-value store holding every array as zarr). MaxText's `CheckpointManager` saves each
step as `<dir>/<step>/items/` (`ocp.args.Composite(items=PyTreeSave(state))`, MaxText
`checkpointing.py`), whose tree is the `TrainState`: the model is under `params/params/...`. SOURCE may name
that `items` directory or the step directory holding it.

Names are the tree's keys joined by "/" (`params/params/decoder/layers/self_attention/query/kernel`), like the
`.msgpack` reader's. Reading: shapes and dtypes from the checkpoint's metadata; each tensor by its own
`PyTreeRestore(partial_restore=True)` of one leaf restored as NumPy, so the peak is about one tensor. Writing:
`PyTreeCheckpointer.save` takes the whole tree (the peak is the checkpoint, as for `.msgpack`).
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from ..errors import UsageError
from .base import Reader, checked, dtype_name

__all__ = ["read_orbax", "write_orbax", "is_orbax_dir", "orbax_items_dir"]

_MARKERS = ("_METADATA", "manifest.ocdbt")


def orbax_items_dir(path):
    """The PyTree directory SOURCE names (itself, or its `items/`), or None when it is neither."""
    path = str(path)
    for candidate in (path, os.path.join(path, "items")):
        if os.path.isdir(candidate) and any(os.path.isfile(os.path.join(candidate, m)) for m in _MARKERS):
            return candidate
    return None


def is_orbax_dir(path) -> bool:
    """An Orbax PyTree checkpoint directory (or a MaxText step directory holding one in `items/`)."""
    return orbax_items_dir(path) is not None


def _flatten(tree, prefix=""):
    """`{"a/b/c": leaf}` of a nested dict (Orbax metadata or arrays)."""
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "/"))
        else:
            out[name] = value
    return out


def _nest(name, value):
    """`{"a": {"b": value}}` for the name "a/b"."""
    for key in reversed(name.split("/")):
        value = {key: value}
    return value


def _checkpointer():
    import orbax.checkpoint as ocp

    return ocp.PyTreeCheckpointer()


def read_orbax(path) -> Reader:
    """A `Reader` over an Orbax PyTree checkpoint: one partial restore per tensor."""
    import orbax.checkpoint as ocp

    items = orbax_items_dir(path)
    if items is None:
        raise UsageError(f"{str(path)!r} is not an Orbax checkpoint directory (no {' or '.join(_MARKERS)} in it "
                         "or in its items/)")
    items = os.path.abspath(items)
    try:
        meta = _checkpointer().metadata(items)
        tree = getattr(meta, "item_metadata", meta)
        tree = getattr(tree, "tree", tree)
        leaves = _flatten(dict(tree))
    except Exception as error:  # noqa: BLE001 - tensorstore / orbax errors on a corrupt directory
        raise UsageError(f"cannot read {str(path)!r} as orbax: {type(error).__name__}: {error}") from None
    shapes = {k: tuple(v.shape) for k, v in leaves.items()}
    dtypes = {k: dtype_name(v.dtype) for k, v in leaves.items()}

    def get(name):
        item = _nest(name, np.zeros((), np.float32))
        restore = _nest(name, ocp.RestoreArgs(restore_type=np.ndarray))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = _checkpointer().restore(items, args=ocp.args.PyTreeRestore(
                    item=item, restore_args=restore, partial_restore=True))
        except Exception as error:  # noqa: BLE001 - missing or corrupt array files
            raise UsageError(f"cannot read tensor {name!r} of {items!r}: {type(error).__name__}: {error}") from None
        return np.asarray(_flatten(out)[name])

    return Reader(items, shapes, dtypes, get, {"format": "orbax"})


def write_orbax(path, entries, metadata=None) -> None:
    """Write `entries` (name, shape, dtype name, thunk -> array; names "a/b/c") as an Orbax PyTree directory
    `path`, which must not exist yet (Orbax creates it, itself through a temporary name and a rename)."""
    tree = {}
    for name, shape, dtype, thunk in entries:
        node = tree
        *parents, leaf = name.split("/")
        for key in parents:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise UsageError(f"tensor {name!r}: {key!r} is both a tensor and a tree node")
        node[leaf] = checked(name, shape, dtype, thunk())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _checkpointer().save(os.path.abspath(path), tree)
