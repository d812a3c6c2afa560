"""Randomized positions in PyTorch. Spec: `posenc_np.randomized_positions`."""

from __future__ import annotations

import torch

from posenc_np.randomized import check_randomized_args, check_seed

__all__ = ["randomized_positions", "sample_randomized_positions"]


def randomized_positions(noise, seq_len):
    """int32 `[..., seq_len]`: the sorted indices of the `seq_len` largest noise values; see the spec.

    `torch.topk` then a sort of the indices: no data-dependent shapes, so torch.compile is static.
    """
    if noise.ndim < 1 or not noise.is_floating_point():
        raise TypeError(f"noise must be a [..., max_len] float tensor, got shape {tuple(noise.shape)} "
                        f"dtype {noise.dtype}")
    check_randomized_args(seq_len, noise.shape[-1])
    indices = torch.topk(noise.float(), seq_len, dim=-1, sorted=False).indices
    return indices.sort(dim=-1).values.int()


def sample_randomized_positions(seq_len, max_len, *, seed, batch_shape=(), device=None):
    """`[*batch_shape, seq_len]` sorted random positions from `0 .. max_len - 1`, from
    `torch.Generator().manual_seed(seed)` uniform noise (a different stream than NumPy's)."""
    seq_len, max_len = check_randomized_args(seq_len, max_len)
    generator = torch.Generator(device=device or "cpu").manual_seed(check_seed(seed))
    noise = torch.rand(*tuple(batch_shape), max_len, generator=generator, device=device)
    return randomized_positions(noise, seq_len)
