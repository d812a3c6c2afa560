"""Per-layer schedules in MLX: the spec reader, and one RotaryEmbedding module (or None) per layer."""

from __future__ import annotations

from posenc_np.schedule import modules_per_layer, rope_schedule_from_hf_config

from .rope import RotaryEmbedding

__all__ = ["rope_schedule_from_hf_config", "rope_modules_from_schedule"]


def rope_modules_from_schedule(schedule, *, max_len=None):
    """`[RotaryEmbedding(**entry) or None for entry in schedule]`; equal entries share one module.

    Args:
        schedule: the list of `rope_schedule_from_hf_config` (entries `None` or `apply_rope` kwargs).
        max_len: passed to every module (a float32 cos/sin cache of that many positions).

    Returns:
        list like `schedule`: `None` for NoPE layers, else a `posenc_mlx.RotaryEmbedding`.
    """
    return modules_per_layer(schedule, lambda entry: RotaryEmbedding(**entry, max_len=max_len))
