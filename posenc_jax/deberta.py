"""DeBERTa log-bucketed relative positions in JAX. Spec: `posenc_np.make_log_bucket_position`."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from posenc_np.backend import check_integer_dtype, check_integer_positions, check_traced_integer
from posenc_np.deberta import check_deberta_args, deberta_log_range

from ._common import TRACE, is_tracing, position_pair

__all__ = ["make_log_bucket_position", "build_relative_position"]


@partial(jax.jit, static_argnums=(1, 2))  # one compile per shape instead of one per eager op
def _log_bucket(relative, bucket_size, max_position):
    """HF's float32 arithmetic on integer relative positions (the spec's `_log_bucket_float32`)."""
    mid = bucket_size // 2
    sign = jnp.sign(relative)
    abs_pos = jnp.where((relative < mid) & (relative > -mid), mid - 1, jnp.abs(relative))
    ratio = abs_pos.astype(jnp.float32) / jnp.float32(mid)
    log_pos = jnp.ceil(jnp.log(ratio) / jnp.float32(deberta_log_range(bucket_size, max_position))
                       * jnp.float32(mid - 1)) + mid
    return jnp.where(abs_pos <= mid, relative, log_pos.astype(relative.dtype) * sign)


def make_log_bucket_position(relative_pos, bucket_size, max_position):
    """int32 DeBERTa buckets; see `posenc_np.make_log_bucket_position`."""
    check_deberta_args(bucket_size, max_position, required=True)
    relative = jnp.asarray(relative_pos)
    if relative.dtype == jnp.bool_ or jnp.issubdtype(relative.dtype, jnp.complexfloating):  # the spec's TypeError
        check_integer_dtype("relative_pos", relative.dtype, False)
    if jnp.issubdtype(relative.dtype, jnp.floating):
        if is_tracing(relative):
            check_traced_integer("relative_pos", relative.dtype, is_floating=True, where=TRACE)
        relative = jnp.asarray(check_integer_positions("relative_pos", np.asarray(relative, np.float64)))
    return _log_bucket(relative, bucket_size, max_position).astype(jnp.int32)


def build_relative_position(q_positions, k_positions, *, bucket_size=-1, max_position=-1):
    """int32 `[..., q, k]` query - key, log-bucketed when both limits are > 0; see the spec."""
    bucketed = check_deberta_args(bucket_size, max_position)
    q, k = position_pair(q_positions, k_positions, integer=True)
    relative = q[..., :, None] - k[..., None, :]
    return (_log_bucket(relative, bucket_size, max_position) if bucketed else relative).astype(jnp.int32)
