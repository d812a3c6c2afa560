"""Randomized positions in PyTorch. Spec: `posenc_np.randomized_positions`."""

from __future__ import annotations

import torch

from posenc_np.backend import check_finite, check_float_dtype
from posenc_np.randomized import check_noise_axes, check_randomized_args, check_seed

from ._common import as_tensor, is_tracing

__all__ = ["randomized_positions", "sample_randomized_positions"]


def randomized_positions(noise, seq_len):
    """int32 `[..., seq_len]`: the sorted indices of the `seq_len` largest noise values; see the spec.

    `torch.topk` then a sort of the indices: no data-dependent shapes, so torch.compile is static.

    NaN/inf noise raises the spec's ValueError eagerly; under torch.compile a row holding one returns -1
    in every position (no framework orders NaN like another).
    """
    noise = as_tensor(noise)
    check_float_dtype("noise", noise.dtype, noise.is_floating_point())
    check_noise_axes(noise.ndim)
    check_randomized_args(seq_len, noise.shape[-1])
    if not is_tracing(noise):
        check_finite("noise", noise.detach().float().cpu().numpy())
    indices = torch.topk(noise.float(), seq_len, dim=-1, sorted=False).indices.sort(dim=-1).values.int()
    # under torch.compile (no raise on data): a row holding NaN/inf gets -1 everywhere, as documented
    return torch.where(torch.isfinite(noise).all(-1, keepdim=True), indices, -1)


def sample_randomized_positions(seq_len, max_len, *, seed, batch_shape=(), device=None):
    """`[*batch_shape, seq_len]` sorted random positions from `0 .. max_len - 1`, from
    `torch.Generator().manual_seed(seed)` uniform noise (a different stream than NumPy's)."""
    seq_len, max_len = check_randomized_args(seq_len, max_len)
    generator = torch.Generator(device=device or "cpu").manual_seed(check_seed(seed))
    noise = torch.rand(*tuple(batch_shape), max_len, generator=generator, device=device)
    return randomized_positions(noise, seq_len)
