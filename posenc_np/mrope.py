"""Rotary over several position axes (M-RoPE, 2-D vision RoPE, 3-axis diffusion RoPE): the specification.

A multi-axis RoPE gives every token one position per axis (`positions [A, ..., seq]`: temporal, height,
width for Qwen-VL text; row, column for a vision tower; FLUX's (index, row, column)). The rotation is
1-D RoPE's pair rotation; what changes is, for each pair `j` of the `r/2` rotated pairs,

* which axis `a(j)` it takes its position from (`mrope_section`, `mrope_interleaved`), and
* which inverse frequency `inv(j)` it turns with (`mrope_frequencies`):

so its angle is `t_j = positions[a(j)] * inv(j)`. `posenc_np.rope.apply_rope` / `rope_cos_sin` take
these keywords; this module holds their validation, the pair -> axis and pair -> frequency maps, and
`mrope_position_ids` (Qwen2.5-VL's position ids for a text/image/video sequence) and `tmrope_position_ids`
(Qwen3-Omni's, with audio).

Pair -> axis (`section = (s_0, ..., s_{A-1})`, pairs per axis, `sum = r/2`):

* contiguous (Qwen2-VL, Qwen2.5-VL; transformers 5.24 `Qwen2VLRotaryEmbedding.recomposition_frequencies`:
  `freq.split(mrope_section)`, chunk `i` takes stream `i % 3`): pairs `[0, s_0)` take axis 0, the next `s_1`
  axis 1, ... In the half layout the two channels of pair `j` are `j` and `j + r/2`, which is why HF's older
  `apply_multimodal_rotary_pos_emb` repeats the *list* (`mrope_section * 2` = `[16, 24, 24, 16, 24, 24]`)
  over the `r` channels.
* interleaved (`mrope_interleaved=True`, Qwen3-VL; transformers 5.24 `Qwen3VLTextRotaryEmbedding`): pair `j`
  takes axis `a = j % A` when `a > 0` and `j < A * s_a`, axis 0 otherwise (for A = 3: height on
  `slice(1, 3 * s_h, 3)`, width on `slice(2, 3 * s_w, 3)`, time elsewhere). Axis `a > 0` gets `s_a` pairs
  when `A * s_a - a <= r/2` (every released config: `[24, 20, 20]`); otherwise fewer, exactly as HF's slices.

Pair -> frequency (`k` = rank of pair `j` among the pairs of its axis):

* `"shared"` (M-RoPE): pair `j` keeps its 1-D frequency `inv_j` (all the scaling types apply unchanged).
* `"per-axis"` (Qwen2-VL / Qwen2.5-VL vision tower `Qwen2VLVisionRotaryEmbedding.compute_axial_rope_parameters`
  with `dim = head_dim // 2`; diffusers `FluxPosEmbed` / `get_1d_rotary_pos_embed` with `axes_dim = 2 * s`): each
  axis is a 1-D RoPE of its own width `2 * s_a`: `inv = base ** (-2k / (2 s_a))` (the scaling applies per
  axis, with `rotary_dim = 2 * s_a`).
* `"strided"` (Pixtral, transformers 5.24 `PixtralVisionRotaryEmbedding`: `cat(inv_freq[0::2], inv_freq[1::2])`
  split in two): axis `a` takes the 1-D frequencies `a, a + A, a + 2A, ...` (height the even, width the
  odd ones for A = 2); needs `s_a = ceil((r/2 - a) / A)`.

`mrope_section` may also be an integer `A`: the `r/2` pairs are shared evenly by `A` axes, the first
`(r/2) % A` axes taking one more (`torch.chunk`'s split for A = 2): the vision towers size their two halves
from the head dim this way.
"""

from __future__ import annotations

import itertools
import numbers

import numpy as np

from ._validate import check_choice, check_positive_float, check_positive_int

__all__ = [
    "MROPE_FREQUENCIES",
    "resolve_mrope_section",
    "resolve_mrope_axes",
    "mrope_interleaved_axes",
    "mrope_axis_of_pair",
    "mrope_frequency_order",
    "mrope_channel_axes",
    "check_mrope_positions",
    "mrope_position_ids",
    "audio_output_lengths",
    "tmrope_position_ids",
]

MROPE_FREQUENCIES = ("shared", "per-axis", "strided")


def resolve_mrope_section(mrope_section, rotary_dim: int) -> tuple:
    """The pairs per axis as a tuple of ints summing to `rotary_dim // 2`.

    Args:
        mrope_section: a sequence of positive pair counts (the HF config key), or an integer number of
            axes sharing the pairs evenly (the first `(r/2) % A` axes take one more).
        rotary_dim: the (even, validated) rotated width `r`.

    Raises:
        TypeError: not a sequence of integers or an integer.
        ValueError: fewer than 1 axis, a count < 1, or counts that do not sum to `r/2`.
    """
    pairs = rotary_dim // 2
    if isinstance(mrope_section, numbers.Integral) and not isinstance(mrope_section, bool):
        axes = check_positive_int("mrope_section", mrope_section)
        if axes > pairs:
            raise ValueError(f"mrope_section={axes} axes cannot share rotary_dim // 2 = {pairs} pairs")
        return tuple(pairs // axes + (a < pairs % axes) for a in range(axes))
    if isinstance(mrope_section, (str, bytes)) or not hasattr(mrope_section, "__len__"):
        raise TypeError(f"mrope_section={mrope_section!r} must be a sequence of pair counts or a number of axes")
    section = tuple(mrope_section)
    if not section or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 1 for s in section):
        raise ValueError(f"mrope_section={list(section)!r} must be a non-empty list of positive integers")
    section = tuple(int(s) for s in section)
    if sum(section) != pairs:
        raise ValueError(f"mrope_section={list(section)} sums to {sum(section)} pairs, but rotary_dim={rotary_dim} "
                         f"has {pairs}: the section counts frequency pairs (half the rotated channels), not channels")
    return section


def resolve_mrope_axes(mrope_axes, rotary_dim: int) -> np.ndarray:
    """An explicit pair -> axis table (`mrope_axes`) as int64 `[rotary_dim // 2]`.

    The general form of `mrope_section`: pair `j` takes its angle from position axis `mrope_axes[j]`, with
    its 1-D frequency; the positions' leading axis has `max(mrope_axes) + 1` entries. It says what no section
    says: ERNIE-4.5-VL's height/width alternation over the first `s_h + s_w` pairs, or Qwen3-VL's interleave
    with a section that covers fewer pairs than the rotary width (the rest on axis 0).

    Raises:
        TypeError: not a sequence.
        ValueError: not `rotary_dim // 2` entries, or an entry that is not an integer >= 0.

    Examples:
        >>> resolve_mrope_axes([1, 2, 1, 2, 0, 0], 12).tolist()
        [1, 2, 1, 2, 0, 0]
    """
    pairs = rotary_dim // 2
    if isinstance(mrope_axes, (str, bytes)) or not hasattr(mrope_axes, "__len__"):
        raise TypeError(f"mrope_axes={mrope_axes!r} must be a sequence of axis indices, one per rotary pair")
    axes = list(np.asarray(mrope_axes).tolist()) if isinstance(mrope_axes, np.ndarray) else list(mrope_axes)
    if len(axes) != pairs or any(isinstance(a, bool) or not isinstance(a, numbers.Integral) or a < 0 for a in axes):
        raise ValueError(f"mrope_axes must hold rotary_dim // 2 = {pairs} axis indices >= 0, got {axes}")
    return np.asarray(axes, dtype=np.int64)


def mrope_interleaved_axes(section, pairs: int) -> list:
    """HF's Qwen3-VL pair -> axis map over `pairs` pairs, whatever the section sums to: pair `j` takes axis
    `a >= 1` when `j % A == a` and `j < A * section[a]`, else axis 0 (`recomposition_frequencies` of
    transformers 5.24 `qwen3_5/modeling_qwen3_5.py`: slices `slice(a, 3 * section[a], 3)` over every pair).

    Examples:
        >>> mrope_interleaved_axes([1, 1, 1], 6)
        [0, 1, 2, 0, 0, 0]
    """
    axes = [0] * pairs
    for a in range(1, len(section)):
        for j in range(a, min(pairs, len(section) * section[a]), len(section)):
            axes[j] = a
    return axes


def mrope_axis_of_pair(section, interleaved: bool = False) -> np.ndarray:
    """int64 `[r/2]`: the position axis each rotary pair takes its angle from (see the module docstring).

    Examples:
        >>> mrope_axis_of_pair((2, 1, 1)).tolist(), mrope_axis_of_pair((2, 1, 1), True).tolist()
        ([0, 0, 1, 2], [0, 1, 2, 0])
    """
    section = tuple(section)
    axes, pairs = len(section), sum(section)
    if not interleaved:
        return np.repeat(np.arange(axes), section).astype(np.int64)
    j = np.arange(pairs)
    axis = np.zeros(pairs, dtype=np.int64)
    for a in range(1, axes):
        axis[(j % axes == a) & (j < axes * section[a])] = a
    return axis


def mrope_frequency_order(section, axis_of_pair, frequencies: str) -> np.ndarray | None:
    """For `"strided"`: int64 `[r/2]`, the 1-D frequency index each pair takes; None for the other modes.

    Raises:
        ValueError: a section that is not the strided split (`s_a = ceil((r/2 - a) / A)`).
    """
    check_choice("mrope_frequencies", frequencies, MROPE_FREQUENCIES)
    if frequencies != "strided":
        return None
    section = tuple(section)
    axes, pairs = len(section), sum(section)
    expected = tuple(len(range(a, pairs, axes)) for a in range(axes))
    if section != expected:
        raise ValueError(f"mrope_frequencies='strided' gives axis a the 1-D frequencies a, a+{axes}, ...: "
                         f"mrope_section must be {list(expected)}, got {list(section)}")
    order = np.empty(pairs, dtype=np.int64)
    for a in range(axes):
        mine = np.flatnonzero(axis_of_pair == a)
        order[mine] = np.arange(a, pairs, axes)
    return order


def mrope_channel_axes(rotary_dim, *, mrope_section, mrope_interleaved=False, layout="half") -> np.ndarray:
    """int64 `[rotary_dim]`: the position axis of each rotated channel (both channels of a pair share it).

    The table of docs/conventions.md "Multi-axis RoPE" and `posenc plot` are drawn from this.

    Examples:
        >>> mrope_channel_axes(8, mrope_section=[2, 1, 1]).tolist()
        [0, 0, 1, 2, 0, 0, 1, 2]
        >>> mrope_channel_axes(8, mrope_section=[2, 1, 1], layout="interleaved").tolist()
        [0, 0, 0, 0, 1, 1, 2, 2]
    """
    section = resolve_mrope_section(mrope_section, rotary_dim)
    axis = mrope_axis_of_pair(section, mrope_interleaved)
    check_choice("layout", layout, ("half", "interleaved"))
    return np.concatenate([axis, axis]) if layout == "half" else np.repeat(axis, 2)


def check_mrope_positions(positions_shape, num_axes: int) -> None:
    """Multi-axis positions carry a leading axis of size `len(mrope_section)`."""
    shape = tuple(positions_shape)
    if not shape or shape[0] != num_axes:
        raise ValueError(f"positions of shape {shape} need a leading axis of size {num_axes} (one position per "
                         f"axis of mrope_section: [{num_axes}, ..., seq])")


# --- Qwen2.5-VL position ids ---------------------------------------------------------------------------------


def _int_matrix(name, value, *, cols=None):
    array = np.asarray(value)
    if array.dtype.kind not in "iu":
        if array.dtype.kind != "f" or np.any(array != np.round(array)):
            raise TypeError(f"{name} must be an integer array, got dtype {array.dtype}")
        array = array.astype(np.int64)
    if array.ndim != 2 or (cols is not None and array.shape[1] != cols):
        want = f"[n, {cols}]" if cols is not None else "[batch, seq]"
        raise ValueError(f"{name} must have shape {want}, got {array.shape}")
    return array.astype(np.int64)


def _mask_matrix(attention_mask, shape):
    """The 0/1 `attention_mask` of `shape` as bool (None: every token kept)."""
    if attention_mask is None:
        return np.ones(shape, dtype=bool)
    raw = _int_matrix("attention_mask", attention_mask)
    if raw.shape != tuple(shape) or np.any((raw != 0) & (raw != 1)):
        raise ValueError(f"attention_mask must be 0/1 of shape {tuple(shape)}, got shape {raw.shape}")
    return raw.astype(bool)


def _grid_rows(name, grid_thw, merge):
    """int64 `[n, 3]` (t, h, w) rows, positive with h and w divisible by the merge (None: no rows)."""
    if grid_thw is None:
        return np.zeros((0, 3), np.int64)
    grid = _int_matrix(name, grid_thw, cols=3)
    if grid.size and (grid.min() < 1 or np.any(grid[:, 1:] % merge)):
        raise ValueError(f"{name} rows must be positive with h and w divisible by spatial_merge_size={merge}, "
                         f"got {grid.tolist()}")
    return grid


def _seconds_per_grid(name, seconds_per_grid, num_videos):
    """float64 `[num_videos]` seconds per temporal grid step (None: 1.0 each, as HF)."""
    if seconds_per_grid is None:
        return np.ones(num_videos)
    seconds = np.asarray(seconds_per_grid, dtype=np.float64).reshape(-1)
    if seconds.shape != (num_videos,) or not np.all(np.isfinite(seconds)):
        raise ValueError(f"{name} must hold one finite value per video ({num_videos}), got "
                         f"{np.asarray(seconds_per_grid).tolist()}")
    return seconds


def _vision_grid_ids(t_index, h, w):
    """`[3, len(t_index) * h * w]`: (t_index[k], i, j) over the merged grid in (t, h, w) row-major order."""
    tt, hh, ww = np.meshgrid(np.asarray(t_index), np.arange(h), np.arange(w), indexing="ij")
    return np.stack([tt.ravel(), hh.ravel(), ww.ravel()])


def mrope_position_ids(mm_token_type_ids, *, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None,
                       attention_mask=None, spatial_merge_size=2, tokens_per_second=None):
    """Qwen2.5-VL's 3-axis position ids (temporal, height, width) of a text/image/video token sequence.

    Formula (per batch row, after dropping the tokens whose `attention_mask` is 0): the tokens are
    grouped into runs of equal type. With `p` the next free position (0 at the start):

    * a text run of `n` tokens gets `p, p+1, ..., p+n-1` on all three axes; `p += n`;
    * an image or video run takes the next row `(t, h, w)` of `image_grid_thw` / `video_grid_thw`
      (consumed in order over the whole batch, images and videos separately), `h' = h / m`, `w' = w / m`
      (`m = spatial_merge_size`), and covers the `t * h' * w'` grid in (t, h, w) row-major order:
      temporal `p + trunc(k * dt)` for frame `k` (`dt = tokens_per_second * second_per_grid_ts[v]` for the
      v-th video, `dt = 1` for images), height `p + i`, width `p + j`; then `p += max(h', w')`.

    Masked tokens get position 0 on every axis. `deltas[b] = max(ids of row b) + 1 - n_b` (`n_b` the
    unmasked length) is what decoding adds to the cache length (HF `rope_deltas`).

    Follows transformers 5.24 `models/qwen2_5_vl/modeling_qwen2_5_vl.py` `Qwen2_5_VLModel.get_rope_index` /
    `get_vision_position_ids` (note `p += max(h', w')` after a vision run, not past the largest temporal id),
    Qwen2.5-VL technical report (arXiv:2502.13923) section 2.1.3 (absolute time alignment).

    Args:
        mm_token_type_ids: int `[batch, seq]`: 0 text, 1 image, 2 video token.
        image_grid_thw: int `[num_images, 3]` (t, h, w in patches, before merging), one row per image run.
        video_grid_thw: int `[num_videos, 3]`, one row per video run.
        second_per_grid_ts: float `[num_videos]`: seconds per temporal grid step (None: 1.0 each, as HF).
        attention_mask: 0/1 `[batch, seq]` (left or right padding), or None.
        spatial_merge_size: `m`, the vision tower's patch merge (config `vision_config.spatial_merge_size`).
        tokens_per_second: config `vision_config.tokens_per_second`; required when there are videos.

    Returns:
        `(position_ids int64 [3, batch, seq], deltas int64 [batch, 1])`.

    Raises:
        ValueError: token types outside {0, 1, 2}; more or fewer image/video runs than grid rows; a run whose
            length is not `t * h' * w'`; `h`/`w` not divisible by `m`; videos without `tokens_per_second`;
            `second_per_grid_ts` not one value per video; a mask that is not 0/1 of the same shape.
        TypeError: non-integer token types, grids or mask.

    Note:
        HF forms `trunc(k * dt)` in the dtype of `second_per_grid_ts` (float32 from the processor); this
        computes in float64, which can differ only when `k * dt` lands within float32 rounding of an integer.

    Examples:
        >>> ids, deltas = mrope_position_ids([[0, 0, 1, 1, 1, 1, 0]], image_grid_thw=[[1, 4, 4]])
        >>> ids[:, 0].tolist(), deltas.tolist()
        ([[0, 1, 2, 2, 2, 2, 4], [0, 1, 2, 2, 3, 3, 4], [0, 1, 2, 3, 2, 3, 4]], [[-2]])
    """
    types = _int_matrix("mm_token_type_ids", mm_token_type_ids)
    if types.size and (types.min() < 0 or types.max() > 2):
        raise ValueError(f"mm_token_type_ids must hold 0 (text), 1 (image) or 2 (video), got values "
                         f"{sorted(set(types.ravel().tolist()) - {0, 1, 2})}")
    merge = check_positive_int("spatial_merge_size", spatial_merge_size)
    mask = _mask_matrix(attention_mask, types.shape)
    grids = {1: _grid_rows("image_grid_thw", image_grid_thw, merge),
             2: _grid_rows("video_grid_thw", video_grid_thw, merge)}
    names = {1: "image_grid_thw", 2: "video_grid_thw"}
    num_videos = len(grids[2])
    seconds = _seconds_per_grid("second_per_grid_ts", second_per_grid_ts, num_videos)
    if num_videos and tokens_per_second is None:
        raise ValueError("tokens_per_second is required when there are videos (config vision_config.tokens_per_second)")

    batch, seq = types.shape
    position_ids = np.zeros((3, batch, seq), dtype=np.int64)
    deltas = np.zeros((batch, 1), dtype=np.int64)
    used = {1: 0, 2: 0}
    for b in range(batch):
        kept = types[b][mask[b]]
        pieces, p = [], 0
        for kind, run in itertools.groupby(kept.tolist()):
            n = len(list(run))
            if kind == 0:
                pieces.append(np.broadcast_to(p + np.arange(n), (3, n)))
                p += n
                continue
            if used[kind] >= len(grids[kind]):
                raise ValueError(f"the token types hold more {'image' if kind == 1 else 'video'} runs than "
                                 f"{names[kind]} has rows ({len(grids[kind])})")
            t, h, w = grids[kind][used[kind]].tolist()
            h, w = h // merge, w // merge
            if n != t * h * w:
                raise ValueError(f"a run of {n} {'image' if kind == 1 else 'video'} tokens does not match "
                                 f"{names[kind]} row {used[kind]} {grids[kind][used[kind]].tolist()}: "
                                 f"t * (h/{merge}) * (w/{merge}) = {t * h * w}")
            dt = 1.0 if kind == 1 else float(tokens_per_second) * seconds[used[kind]]
            used[kind] += 1
            pieces.append(_vision_grid_ids(np.trunc(np.arange(t) * dt).astype(np.int64), h, w) + p)
            p += max(h, w)
        ids = np.concatenate(pieces, axis=1) if pieces else np.zeros((3, 0), np.int64)
        position_ids[:, b, mask[b]] = ids
        deltas[b, 0] = (ids.max() + 1 if ids.size else 0) - len(kept)
    for kind in (1, 2):
        if used[kind] != len(grids[kind]):
            raise ValueError(f"{names[kind]} has {len(grids[kind])} rows but the token types hold {used[kind]} "
                             f"{'image' if kind == 1 else 'video'} runs")
    return position_ids, deltas


# --- Qwen3-Omni position ids (TMRoPE) ------------------------------------------------------------------------


def audio_output_lengths(audio_seqlens, n_window=50):
    """Qwen3-Omni's audio-encoder output length (tokens) per input of `audio_seqlens` mel frames: int64.

    Formula (chunks of `c = 2 * n_window` frames, 13 tokens per full chunk; the remainder `r = L % c` passes
    three stride-2 convolutions): `f(r) = ((((r - 1) // 2 + 1) - 1) // 2 + 1 - 1) // 2 + 1`, output
    `f(r) + 13 * (L // c)`. transformers 5.24 `qwen3_omni_moe/modeling_qwen3_omni_moe.py`
    `_get_feat_extract_output_lengths`.

    Examples:
        >>> audio_output_lengths([100, 250, 37]).tolist()
        [13, 33, 5]
    """
    lengths = np.asarray(audio_seqlens)
    if lengths.dtype.kind not in "iu":
        raise TypeError(f"audio_seqlens must be integer mel-frame counts, got dtype {lengths.dtype}")
    chunk = 2 * check_positive_int("n_window", n_window)
    rest = lengths.astype(np.int64) % chunk
    feat = (rest - 1) // 2 + 1
    return ((feat - 1) // 2 + 1 - 1) // 2 + 1 + (lengths // chunk) * 13


def _merge_by_time(video, audio):
    """HF's audio-in-video merge of two time-sorted `[3, n]` id blocks (video first on equal temporal ids),
    and the block HF appends last (the tail left when the other block runs out)."""
    merged = np.concatenate([video, audio], axis=1)
    source = np.repeat([0, 1], [video.shape[1], audio.shape[1]])
    order = np.argsort(merged[0], kind="stable")
    merged, source = merged[:, order], source[order]
    changes = np.flatnonzero(source[1:] != source[:-1])
    return merged, merged[:, changes[-1] + 1:] if changes.size else merged


def _check_segment(tokens, begin, n, ids, kind):
    """The `n` tokens from `begin` are exactly one run of the segment's tokens: HF only counts them (its
    forward pass then fails on a feature count), so a grid that does not match the tokens is refused here."""
    allowed = {"image": [ids["image"]], "video": [ids["video"]], "audio": [ids["audio"]],
               "both": [ids["video"], ids["audio"]]}[kind]
    run = np.isin(tokens[begin:], allowed)
    length = int(np.argmin(run)) if not run.all() else len(run)
    if length != n:
        grid = {"image": "image_grid_thw", "video": "video_grid_thw", "audio": "audio_seqlens",
                "both": "video_grid_thw with audio_seqlens"}[kind]
        raise ValueError(f"input_ids: the {kind} segment at {begin} holds {length} tokens but {grid} gives {n}")


def _omni_row(tokens, ids, grids, audio_lens, seconds, used, *, merge, per_second, audio_in_video):
    """The `[3, n]` ids of one unmasked row (see `tmrope_position_ids`); advances the `used` counters."""
    pieces, last, st = [], [], 0  # last: the block HF's `llm_pos_ids_list[-1]` is, where the next id starts

    def nxt():
        return last[-1].max() + 1 if last else 0

    def add(block, tail=None):
        pieces.append(block)
        last.append(block if tail is None else tail)

    def ramp(n, start):
        return np.broadcast_to(start + np.arange(n, dtype=np.float64), (3, n))

    def take(kind):
        if used[kind] >= len(grids[kind] if kind != "audio" else audio_lens):
            name = {"image": "image_grid_thw", "video": "video_grid_thw", "audio": "audio_seqlens"}[kind]
            raise ValueError(f"input_ids hold more {kind} segments than {name} has entries")
        used[kind] += 1
        return used[kind] - 1

    def grid_ids(kind, start):
        i = take(kind)
        t, h, w = grids[kind][i].tolist()
        step = per_second * (1.0 if kind == "image" else seconds[i])
        return _vision_grid_ids(np.arange(t) * step, h // merge, w // merge) + start, t * (h // merge) * (w // merge)

    starts = np.flatnonzero(tokens == ids["vision_start"])
    if starts.size and starts[-1] + 1 >= len(tokens):
        raise ValueError("input_ids end with vision_start_token_id: no image or video token follows it")
    after = tokens[starts + 1]
    audios = int(np.sum(tokens == ids["audio_start"]))
    images = int(np.sum(after == ids["image"]))
    videos = int(np.sum(after == (ids["audio_start"] if audio_in_video else ids["video"])))
    listed = tokens.tolist()
    remain = {"image": images, "video": videos, "audio": audios}
    far = len(listed) + 1
    for _ in range(images + audios + (0 if audio_in_video else videos)):
        start = nxt()
        vision_at = (listed.index(ids["vision_start"], st) if (ids["image"] in listed or ids["video"] in listed)
                     and (remain["video"] > 0 or remain["image"] > 0) else far)
        audio_at = listed.index(ids["audio_start"], st) if ids["audio"] in listed and remain["audio"] > 0 else far
        at = min(vision_at, audio_at)
        if at == far:
            raise ValueError("input_ids hold fewer segments than their vision_start / audio_start tokens announce")
        if at > st:
            add(ramp(at - st, start))
            start += at - st
        both = at == vision_at and vision_at + 1 == audio_at
        edge = 2 if both else 1
        add(ramp(edge, start))
        start += edge
        if at == audio_at:
            kind, n = "audio", int(audio_lens[take("audio")])
            add(ramp(n, start))
            remain["audio"] -= 1
        elif listed[at + 1] in (ids["image"], ids["video"]):
            kind = "image" if listed[at + 1] == ids["image"] else "video"
            block, n = grid_ids(kind, start)
            add(block)
            remain[kind] -= 1
        elif both:
            kind = "both"
            video, n_video = grid_ids("video", start)
            n_audio = int(audio_lens[take("audio")])
            add(*_merge_by_time(video, ramp(n_audio, start)))
            n = n_video + n_audio
            remain["video"] -= 1
            remain["audio"] -= 1
        else:
            raise ValueError(f"input_ids: token {listed[at + 1]} after vision_start_token_id at {at} is not "
                             f"image_token_id, video_token_id or (use_audio_in_video) audio_start_token_id")
        _check_segment(tokens, at + edge, n, ids, kind)
        st = at + 2 * edge + n
        add(ramp(edge, nxt()))
    if st < len(listed):
        add(ramp(len(listed) - st, nxt()))
    return np.concatenate([np.asarray(p, np.float64) for p in pieces], axis=1) if pieces else np.zeros((3, 0))


def tmrope_position_ids(input_ids, *, image_token_id, video_token_id, audio_token_id, vision_start_token_id,
                        audio_start_token_id, image_grid_thw=None, video_grid_thw=None, audio_seqlens=None,
                        second_per_grids=None, attention_mask=None, use_audio_in_video=False, spatial_merge_size=2,
                        position_id_per_seconds=25, n_window=50):
    """Qwen3-Omni's time-aligned 3-axis position ids (TMRoPE) of a text/image/video/audio token sequence.

    Formula (per batch row, after dropping the tokens whose `attention_mask` is 0; `next` = 1 + the largest id
    of the block placed last, 0 at the start). The row is cut at each `vision_start_token_id` /
    `audio_start_token_id` into segments, in order:

    * text (and the segment's start and end tokens: 1 each, 2 each for audio-in-video) gets 1-D ids
      `next, next+1, ...` on all three axes;
    * audio of `L` mel frames: `audio_output_lengths(L, n_window)` tokens with 1-D ids;
    * an image / video takes the next row `(t, h, w)` of its grid (images and videos counted separately over
      the whole batch; `h' = h / m`, `w' = w / m`, `m = spatial_merge_size`): its `t * h' * w'` tokens in
      (t, h, w) row-major order get temporal `start + k * s * position_id_per_seconds` for frame `k`
      (`s = second_per_grids[v]` for the v-th video, 1 for images), height `start + i`, width `start + j`;
    * audio-in-video (`<vision_start><audio_start>`, with `use_audio_in_video`): the video block and the audio
      ramp both start at `start` and are merged by temporal id (video first on ties); the end tokens follow
      the block left over when the other runs out.

    Without any image or video grid every token gets its 1-D index among the kept ones (masked tokens 1).
    Masked tokens get 0 otherwise. `deltas[b] = max(ids of row b) + 1 - n_b` (HF `rope_deltas`).

    Follows transformers 5.24 `models/qwen3_omni_moe/modeling_qwen3_omni_moe.py`
    `Qwen3OmniMoePreTrainedModelForConditionalGeneration.get_rope_index` / `get_llm_pos_ids_for_vision` /
    `_get_feat_extract_output_lengths`; Qwen2.5-Omni technical report (arXiv:2503.20215) section 2.2 (TMRoPE,
    one temporal id per 40 ms).

    Args:
        input_ids: int `[batch, seq]` token ids.
        image_token_id, video_token_id, audio_token_id, vision_start_token_id, audio_start_token_id: the
            thinker config's token ids.
        image_grid_thw: int `[num_images, 3]` (t, h, w in patches, before merging), one row per image.
        video_grid_thw: int `[num_videos, 3]`, one row per video.
        audio_seqlens: int `[num_audios]` mel frames per audio (HF `audio_feature_lengths`).
        second_per_grids: float `[num_videos]` seconds per temporal grid step (HF `video_second_per_grid`);
            required when there are videos.
        attention_mask: 0/1 `[batch, seq]` (left or right padding), or None (all kept).
        use_audio_in_video: the processor's flag: videos are announced by `<vision_start><audio_start>`.
        spatial_merge_size: `m` (config `vision_config.spatial_merge_size`).
        position_id_per_seconds: temporal ids per second (config, 25).
        n_window: the audio encoder's window (config `audio_config.n_window`, 50).

    Returns:
        `(position_ids float64 [3, batch, seq], deltas float64 [batch, 1])`: float like HF's (float32),
        because `k * s * position_id_per_seconds` need not be an integer.

    Raises:
        ValueError: more or fewer image/video/audio segments than grid rows / audio lengths; a token after
            `vision_start_token_id` that starts no segment; segments whose lengths do not add up to the row;
            videos without `second_per_grids`; grids with `h`/`w` not divisible by `m`; a bad mask.
        TypeError: non-integer ids, grids, audio lengths or mask.

    Note:
        HF forms the temporal ids in float32; this computes in float64, which differs only when
        `k * s * position_id_per_seconds` is not a float32 number.

    Examples:
        >>> ids, deltas = tmrope_position_ids([[1, 8, 5, 5, 5, 5, 9, 1]], image_token_id=5, video_token_id=6,
        ...     audio_token_id=7, vision_start_token_id=8, audio_start_token_id=4, image_grid_thw=[[1, 4, 4]])
        >>> ids[:, 0].astype(int).tolist(), deltas.tolist()
        ([[0, 1, 2, 2, 2, 2, 4, 5], [0, 1, 2, 2, 3, 3, 4, 5], [0, 1, 2, 3, 2, 3, 4, 5]], [[-2.0]])
    """
    tokens = _int_matrix("input_ids", input_ids)
    ids = {key: check_positive_int(f"{key}_token_id", value, minimum=0) for key, value in [
        ("image", image_token_id), ("video", video_token_id), ("audio", audio_token_id),
        ("vision_start", vision_start_token_id), ("audio_start", audio_start_token_id)]}
    merge = check_positive_int("spatial_merge_size", spatial_merge_size)
    per_second = check_positive_float("position_id_per_seconds", position_id_per_seconds)
    mask = _mask_matrix(attention_mask, tokens.shape)
    grids = {"image": _grid_rows("image_grid_thw", image_grid_thw, merge),
             "video": _grid_rows("video_grid_thw", video_grid_thw, merge)}
    if image_grid_thw is None and video_grid_thw is None:
        position_ids = np.where(mask, np.cumsum(mask, axis=-1) - 1, 1).astype(np.float64)
        deltas = position_ids.max(axis=-1, keepdims=True, initial=0) + 1 - mask.sum(axis=-1, keepdims=True)
        return np.broadcast_to(position_ids, (3, *tokens.shape)).copy(), deltas
    if len(grids["video"]) and second_per_grids is None:
        raise ValueError("second_per_grids is required when there are videos (HF video_second_per_grid)")
    seconds = _seconds_per_grid("second_per_grids", second_per_grids, len(grids["video"]))
    audio_lens = np.zeros(0, np.int64)
    if audio_seqlens is not None:
        frames = np.asarray(audio_seqlens).reshape(-1)
        if frames.dtype.kind in "iu" and np.any(frames < 1):
            raise ValueError(f"audio_seqlens must be mel-frame counts >= 1, got {frames.tolist()}")
        audio_lens = audio_output_lengths(frames, n_window)
    position_ids = np.zeros((3, *tokens.shape))
    deltas = np.zeros((tokens.shape[0], 1))
    used = {"image": 0, "video": 0, "audio": 0}
    for b in range(tokens.shape[0]):
        kept = tokens[b][mask[b]]
        row = _omni_row(kept, ids, grids, audio_lens, seconds, used, merge=merge, per_second=per_second,
                        audio_in_video=bool(use_audio_in_video))
        if row.shape[1] != len(kept):
            raise ValueError(f"input_ids row {b}: its segments cover {row.shape[1]} positions but the row keeps "
                             f"{len(kept)} tokens (grids or audio_seqlens do not match the tokens)")
        position_ids[:, b, mask[b]] = row
        deltas[b, 0] = (row.max() + 1 if row.size else 0) - len(kept)
    for kind, count in (("image", len(grids["image"])), ("video", len(grids["video"])), ("audio", len(audio_lens))):
        if used[kind] != count:
            raise ValueError(f"{kind}: {count} grid rows / lengths given but input_ids hold {used[kind]} segments")
    return position_ids, deltas
