"""`apply_rope` through a kernel with transformers' `apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`."""

from __future__ import annotations

import numpy as np

from ..adapters import NotSupported, adapter

__all__ = ["rotary_kernel_apply_rope", "hf_tables"]


def hf_tables(positions, x_shape, rotary_dim, **rope_kwargs):
    """`(cos, sin, unsqueeze_dim)`: float64 `[batch, seq, rotary_dim]` tables of `posenc_np.rope_cos_sin` for
    `x [batch, heads, seq, dim]` (`unsqueeze_dim=1`) or `[batch, seq, heads, dim]` (`unsqueeze_dim=2`).

    `positions` broadcast against `x_shape[:-1]` as in `apply_rope` (with the leading axis of a
    multi-axis section); positions that vary over the heads axis have no such table (NotSupported).
    """
    from posenc_np import rope_cos_sin

    if len(x_shape) != 4:
        raise NotSupported(f"a rotary kernel takes 4-D q/k; x has shape {list(x_shape)}")
    cos, sin = rope_cos_sin(positions, rotary_dim, **rope_kwargs)
    lead = cos.shape[:-1]
    if len(lead) > 3:
        raise NotSupported(f"positions of shape {list(np.shape(positions))} have no [batch, seq] table")
    lead = (1,) * (3 - len(lead)) + lead
    batch = x_shape[0]
    if lead[1] == 1:  # [b|1, 1, seq]: heads on axis 1
        unsqueeze_dim, rows = 1, (lead[0], lead[2])
        seq = x_shape[2]
    elif lead[2] == 1:  # [b|1, seq, 1]: heads on axis 2
        unsqueeze_dim, rows = 2, (lead[0], lead[1])
        seq = x_shape[1]
    else:
        raise NotSupported(f"positions of shape {list(np.shape(positions))} vary over the heads axis of "
                           f"x {list(x_shape)}: a [batch, seq] table cannot express them")
    shape = (batch, seq, rotary_dim)

    def table(t):
        return np.ascontiguousarray(np.broadcast_to(t.reshape(*rows, rotary_dim), shape))

    return table(cos), table(sin), unsqueeze_dim


def rotary_kernel_apply_rope(fn, *, framework: str, layout: str):
    """The contract's `apply_rope` calling `fn(q, k, cos, sin, unsqueeze_dim=...)`: see
    `Implementation.from_rotary_kernel`. Returns `(q_embed, k_embed)`, `k`'s heads put back in order, each
    to be compared with the spec's `apply_rope(x, ...)`."""
    kernel_layout = layout

    def apply_rope(x, positions, *, base=10000.0, layout=kernel_layout, rotary_dim=None, scaling=None,
                   rotary_pct=None, mrope_section=None, mrope_interleaved=False, mrope_frequencies="shared"):
        from posenc_np.rope import resolve_rotary_dim

        ad = adapter(framework)
        x_np = np.asarray(ad.to_numpy(x))
        r = resolve_rotary_dim(x_np.shape[-1], rotary_dim, rotary_pct)
        cos, sin, unsqueeze_dim = hf_tables(np.asarray(ad.to_numpy(positions)), x_np.shape, r, base=base,
                                            scaling=scaling, layout=layout, mrope_section=mrope_section,
                                            mrope_interleaved=mrope_interleaved,
                                            mrope_frequencies=mrope_frequencies)
        q = x if r == x_np.shape[-1] else x[..., :r]
        k = ad.from_numpy(np.flip(x_np[..., :r], axis=unsqueeze_dim).copy())
        cos_t, sin_t = (ad.from_numpy(t.astype(x_np.dtype)) for t in (cos, sin))
        q_embed, k_embed = fn(q, k, cos_t, sin_t, unsqueeze_dim=unsqueeze_dim)
        rest = x_np[..., r:]
        q_out = np.concatenate([np.asarray(ad.to_numpy(q_embed)), rest], axis=-1)
        k_out = np.concatenate([np.flip(np.asarray(ad.to_numpy(k_embed)), axis=unsqueeze_dim), rest], axis=-1)
        return ad.from_numpy(q_out), ad.from_numpy(k_out)

    apply_rope.__qualname__ = f"from_rotary_kernel({getattr(fn, '__qualname__', fn)!s})"
    return apply_rope
