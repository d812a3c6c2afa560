"""`apply_rope` through a kernel with transformers' `apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`."""

from __future__ import annotations

import numpy as np

from ..adapters import NotSupported, adapter

__all__ = ["rotary_kernel_apply_rope", "hf_tables", "hf_position_ids", "rotated_pair"]


def hf_position_ids(positions, x_shape, *, axes: int | None = None):
    """`(position_ids, unsqueeze_dim)`: transformers' `position_ids` `[batch, seq]` (`[axes, batch, seq]` for
    multi-axis RoPE) for `x [batch, heads, seq, dim]` (`unsqueeze_dim=1`) or `[batch, seq, heads, dim]`
    (`unsqueeze_dim=2`), from contract positions broadcasting against `x_shape[:-1]`.

    Raises NotSupported for `x` that is not 4-D and for positions that vary over the heads axis.
    """
    positions = np.asarray(positions)
    if len(x_shape) != 4:
        raise NotSupported(f"transformers' rotary functions take 4-D q/k; x has shape {list(x_shape)}")
    per_axis = positions if axes is not None else positions[None]
    lead = per_axis.shape[1:]
    if len(lead) > 3:
        raise NotSupported(f"positions of shape {list(positions.shape)} have no [batch, seq] form")
    lead = (1,) * (3 - len(lead)) + tuple(lead)
    per_axis = per_axis.reshape((per_axis.shape[0],) + lead)
    if lead[1] == 1:  # [b|1, 1, seq]: heads on axis 1
        unsqueeze_dim, ids = 1, per_axis[:, :, 0, :]
        shape = (x_shape[0], x_shape[2])
    elif lead[2] == 1:  # [b|1, seq, 1]: heads on axis 2
        unsqueeze_dim, ids = 2, per_axis[:, :, :, 0]
        shape = (x_shape[0], x_shape[1])
    else:
        raise NotSupported(f"positions of shape {list(positions.shape)} vary over the heads axis of x "
                           f"{list(x_shape)}: transformers' [batch, seq] position_ids cannot express them")
    ids = np.array(np.broadcast_to(ids, (ids.shape[0], *shape)))  # a writable copy (torch.from_numpy)
    return (ids if axes is not None else ids[0]), unsqueeze_dim


def hf_tables(positions, x_shape, rotary_dim, **rope_kwargs):
    """`(cos, sin, unsqueeze_dim)`: float64 `[batch, seq, rotary_dim]` tables of `posenc_np.rope_cos_sin`
    (attention factor folded in) for the positions of `hf_position_ids`."""
    from posenc_np import rope_cos_sin
    from posenc_np.rope import rope_plan

    axes = rope_plan(rotary_dim, **rope_kwargs).num_axes
    ids, unsqueeze_dim = hf_position_ids(positions, x_shape, axes=axes)
    cos, sin = rope_cos_sin(ids, rotary_dim, **rope_kwargs)
    return cos, sin, unsqueeze_dim


def rotary_kernel_apply_rope(fn, *, framework: str, layout: str, kv_heads=None):
    """The contract's `apply_rope` calling `fn(q, k, cos, sin, unsqueeze_dim=...)`: see
    `Implementation.from_rotary_kernel`. Returns `(q_embed, k_embed)`, `k`'s heads put back in order, each
    to be compared with the spec's `apply_rope(x, ...)`."""
    kernel_layout = layout

    def apply_rope(x, positions, *, layout=kernel_layout, rotary_dim=None, rotary_pct=None, **rope_kwargs):
        """Every other RoPE keyword of the contract (base, scaling, the multi-axis ones) builds the tables."""
        from posenc_np.rope import resolve_rotary_dim

        ad = adapter(framework)
        x_np = np.asarray(ad.to_numpy(x))
        r = resolve_rotary_dim(x_np.shape[-1], rotary_dim, rotary_pct)
        cos, sin, unsqueeze_dim = hf_tables(np.asarray(ad.to_numpy(positions)), x_np.shape, r, layout=layout,
                                            **rope_kwargs)
        cos_t, sin_t = (ad.from_numpy(t.astype(x_np.dtype)) for t in (cos, sin))
        return rotated_pair(ad, x, x_np, r, unsqueeze_dim,
                            lambda q, k: fn(q, k, cos_t, sin_t, unsqueeze_dim=unsqueeze_dim), kv_heads=kv_heads)

    apply_rope.__qualname__ = f"from_rotary_kernel({getattr(fn, '__qualname__', fn)!s})"
    return apply_rope


def rotated_pair(ad, x, x_np, rotary_dim, heads_axis, rotate, *, kv_heads=None):
    """`(q_out, k_out)` of `rotate(q, k) -> (q_embed, k_embed)` with `q = x[..., :rotary_dim]` and `k` the same
    channels with the heads (`heads_axis`) reversed; the pass-through channels are concatenated back (as
    transformers' models do around `apply_rotary_pos_emb`) and `k`'s heads put back in order, so both must
    equal the spec's `apply_rope(x)`.

    With `kv_heads` (grouped-query attention), `k` holds only the last `kv_heads` heads of `x` (reversed), and
    `k_out` is `q_out` with those heads replaced by the rotated keys.
    """
    heads = x_np.shape[heads_axis]
    kv = heads if kv_heads is None else int(kv_heads)
    if not 1 <= kv <= heads:
        raise NotSupported(f"kv_heads={kv_heads} needs x with at least that many heads; x has {heads}")
    keys = np.take(x_np[..., :rotary_dim], np.arange(heads - kv, heads), axis=heads_axis)
    q = x if rotary_dim == x_np.shape[-1] else x[..., :rotary_dim]
    q_embed, k_embed = rotate(q, ad.from_numpy(np.flip(keys, axis=heads_axis).copy()))
    rest = x_np[..., rotary_dim:]
    q_out = np.concatenate([np.asarray(ad.to_numpy(q_embed)), rest], axis=-1)
    k_rot = np.flip(np.asarray(ad.to_numpy(k_embed)), axis=heads_axis)
    k_out = q_out.copy()
    index = [slice(None)] * k_out.ndim
    index[heads_axis], index[-1] = slice(heads - kv, heads), slice(0, rotary_dim)
    k_out[tuple(index)] = k_rot
    return ad.from_numpy(q_out), ad.from_numpy(k_out)
