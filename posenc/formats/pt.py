"""PyTorch state dicts in and out: read with `torch.load(weights_only=True, mmap=True)` (never arbitrary
unpickling), written with `torch.save` (which takes the whole state at once)."""

from __future__ import annotations

import pickle

import numpy as np

from ..errors import UsageError
from .base import Reader, checked, np_dtype

__all__ = ["read_pt", "write_pt", "torch_to_numpy"]


def read_pt(path) -> Reader:
    """A `Reader` over a flat state dict of tensors; a file that needs arbitrary unpickling is refused."""
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
    return Reader(path, shapes, dtypes, lambda name: torch_to_numpy(state[name]))


def torch_to_numpy(tensor) -> np.ndarray:
    """A CPU tensor as NumPy without a copy; bfloat16 as ml_dtypes' bfloat16."""
    import torch

    if tensor.dtype == torch.bfloat16:
        return tensor.detach().view(torch.int16).numpy().view(np_dtype("bfloat16"))
    return tensor.detach().numpy()


def write_pt(path, entries, metadata) -> None:
    """Write `entries` as a state dict with `torch.save`."""
    import torch

    state = {}
    for name, shape, dtype, thunk in entries:
        array = checked(name, shape, dtype, thunk())
        if dtype == "bfloat16":
            state[name] = torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
        else:
            state[name] = torch.from_numpy(array.copy())
    torch.save(state, path)
