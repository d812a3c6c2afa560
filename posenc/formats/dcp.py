"""torch distributed checkpoints (DCP) in and out, as torchtitan writes them, and Megatron-core's `torch_dist`
(DCP underneath, with `metadata.json` and `common.pt` beside it), through `torch.distributed.checkpoint` in
one process: `FileSystemReader` / `FileSystemWriter` with `no_dist=True`, no process group.

On disk (torch 2.13 `torch/distributed/checkpoint/filesystem.py`): `.metadata` (the pickled `Metadata`:
every key's global size, dtype and chunks) and `__R_S.distcp` data files (rank R, file S). Reading takes the
shapes and dtypes from `.metadata` alone and loads one tensor per `dcp.load` call (a state dict of one
preallocated tensor: DCP reads only that key's chunks), so the peak is about one tensor. Writing hands
`dcp.save` the whole state dict, which it requires: the peak is the whole checkpoint, as for `.pt` output.
Non-tensor items (`BytesStorageMetadata`: torchtitan's `train_state`, Transformer Engine's `_extra_state`) are
not tensors of the model and are not listed.

torchtitan (`torchtitan/components/checkpoint.py`, `scripts/checkpoint_conversion/convert_from_hf.py` at
0.3.0) saves the model's flat state dict (`tok_embeddings.weight`, `layers.0.attention.wq.weight`, ...),
its step directories `step-N/` hold that plus optimizer and train state under their own keys.

Megatron-core 0.16.1 `dist_checkpointing` (`strategies/torch.py`, `serialization.py`): the same DCP files
plus `metadata.json` (`{"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend":
"torch", "common_backend_version": 1}`, `core.py` `CheckpointingConfig`) and `common.pt` (the state that is not
a ShardedTensor, `torch.save`d by rank 0). Its `save` and `load` need `torch.distributed` initialised
(`parallel_state`, `get_rank` in `serialization.py` and the strategies), so posenc writes the files it writes
through torch DCP directly and reads them the same way; Megatron's own loader reads the result (tested).
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np

from ..errors import UsageError
from .base import Reader, checked, dtype_name

__all__ = ["read_dcp", "write_dcp", "read_torch_dist", "write_torch_dist", "is_dcp_dir", "is_torch_dist_dir",
           "torch_dist_dir",
           "TORCH_DIST_METADATA"]

#: metadata.json of a Megatron-core torch_dist checkpoint (megatron/core/dist_checkpointing/core.py, 0.16.1)
TORCH_DIST_METADATA = {"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch",
                       "common_backend_version": 1}


def is_dcp_dir(path) -> bool:
    """A directory holding DCP's `.metadata` (torchtitan's checkpoint; also the inside of torch_dist)."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, ".metadata"))


def torch_dist_dir(path):
    """The torch_dist directory `path` names: itself, or a NeMo 2 checkpoint's `weights/` (beside `context/`); None
    when neither is one."""
    for candidate in (str(path), os.path.join(str(path), "weights")):
        if is_torch_dist_dir(candidate):
            return candidate
    return None


def is_torch_dist_dir(path) -> bool:
    """A DCP directory whose `metadata.json` names the `torch_dist` backend (Megatron-core / NeMo 2 weights)."""
    meta = os.path.join(str(path), "metadata.json")
    if not (is_dcp_dir(path) and os.path.isfile(meta)):
        return False
    try:
        with open(meta) as handle:
            return json.load(handle).get("sharded_backend") == "torch_dist"
    except (OSError, json.JSONDecodeError, AttributeError):
        return False


def _torch_dtype(name):
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
            "float64": torch.float64, "int64": torch.int64, "int32": torch.int32, "int16": torch.int16,
            "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}[name]


def to_numpy(tensor) -> np.ndarray:
    """A CPU torch tensor as NumPy, bfloat16 bit for bit through ml_dtypes (torch has no NumPy bfloat16)."""
    import ml_dtypes
    import torch

    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def to_torch(array):
    """NumPy -> torch, bfloat16 bit for bit."""
    import torch

    array = np.ascontiguousarray(array)
    if not array.flags.writeable:  # a memory map of SOURCE: torch wants writable memory, SOURCE is never written
        array = array.copy()
    if dtype_name(array.dtype) == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def _quiet(fn, *args, **kwargs):
    """DCP warns that no process group is initialised; in one process that is the intent."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*single process.*")
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        return fn(*args, **kwargs)


def read_dcp(path, *, what="dcp") -> Reader:
    """A `Reader` over a DCP directory: shapes and dtypes from `.metadata`, one `dcp.load` per tensor."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    path = str(path)
    if not is_dcp_dir(path):
        raise UsageError(f"{path!r} is not a torch distributed checkpoint directory (no .metadata in it)")
    try:
        metadata = dcp.FileSystemReader(path).read_metadata()
    except Exception as error:  # noqa: BLE001 - a corrupt .metadata surfaces as pickle/OS errors
        raise UsageError(f"cannot read {path!r} as {what}: {type(error).__name__}: {error}") from None
    shapes, dtypes = {}, {}
    for key, item in metadata.state_dict_metadata.items():
        if isinstance(item, TensorStorageMetadata):
            shapes[key] = tuple(item.size)
            dtypes[key] = str(item.properties.dtype).replace("torch.", "")

    def get(name):
        buffer = {name: torch.empty(shapes[name], dtype=_torch_dtype(dtypes[name]))}
        try:
            _quiet(dcp.load, buffer, storage_reader=dcp.FileSystemReader(path), no_dist=True)
        except Exception as error:  # noqa: BLE001 - a missing or truncated .distcp file
            raise UsageError(f"cannot read tensor {name!r} of {path!r}: {type(error).__name__}: {error}") from None
        return to_numpy(buffer[name])

    return Reader(path, shapes, dtypes, get, {"format": what})


def write_dcp(path, entries, metadata=None) -> None:
    """Write `entries` (name, shape, dtype name, thunk -> array) as a DCP directory `path` (created here).

    `metadata["objects"]` (name -> Python object) adds non-tensor items, each stored as the bytes of
    `torch.save([object])`, as megatron-core's `_mcore_to_torch_sharded_object` writes a ShardedObject
    (strategies/torch.py)."""
    import torch.distributed.checkpoint as dcp

    state = {}
    for name, shape, dtype, thunk in entries:
        state[name] = to_torch(checked(name, shape, dtype, thunk()))
    for name, value in ((metadata or {}).get("objects") or {}).items():
        state[name] = [value]  # DefaultSavePlanner.transform_object torch.saves it: Megatron's bytes exactly
    os.makedirs(path, exist_ok=True)
    _quiet(dcp.save, state, storage_writer=dcp.FileSystemWriter(path), no_dist=True)


def read_torch_dist(path) -> Reader:
    """A `Reader` over a Megatron-core `torch_dist` checkpoint directory (its DCP tensors; `common.pt` is state,
    not tensors, and is left unread)."""
    found = torch_dist_dir(path)
    if found is None:
        raise UsageError(f"{str(path)!r} is not a Megatron torch_dist checkpoint (needs .metadata and a metadata.json "
                         "with sharded_backend torch_dist, in it or in its weights/ as NeMo 2 writes them)")
    return read_dcp(found, what="torch_dist")


def write_torch_dist(path, entries, metadata=None) -> None:
    """A `torch_dist` checkpoint: the DCP files (with `metadata["objects"]`, Megatron's ShardedObjects),
    `metadata.json` and `common.pt` (`metadata["common"]`, default an empty dict), as megatron-core 0.16.1's
    `dist_checkpointing.save` lays them out."""
    import torch

    write_dcp(path, entries, metadata)
    with open(os.path.join(path, "metadata.json"), "w") as handle:
        json.dump(TORCH_DIST_METADATA, handle)
    torch.save((metadata or {}).get("common", {}), os.path.join(path, "common.pt"))
