"""The port plan: which source tensor becomes which target tensor, through which conversions.

Rules select source tensors by glob (`*` matches any run of characters, dots included; `?` one
character). A rename rule `SRC=DST` substitutes the text `*` matched, in order, into DST's `*`s.
Conversions apply in this fixed order, each only where declared (nothing is inferred from shapes,
so a square matrix is never transposed silently):

    split (fused QKV rows) -> strip/add offset rows -> resize -> reverse rows -> RoPE row permutation
    -> transpose -> the preset's own ops (`Rules.ops`: fused-QKV reorder, norm shift, cast), in its order

`Rules.generated` adds tensors that no source tensor holds (llama.cpp's `rope_freqs` for llama3
scaling), written and checked like the others.

The RoPE permutation acts on rows (axis 0) of the tensor as the source stores it, i.e. torch
`[out, in]`; a tensor stored `[in, out]` is transposed first with `--transpose` on a separate port.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import numpy as np

from posenc_np.conventions import conventions
from posenc_np.learned import resize_grid, resize_table
from posenc_np.mla import mla_rope_permutation
from posenc_np.rope import ROPE_LAYOUTS, permute_qk_rows

from ..errors import UsageError
from ..formats.base import drop_pages
from ..formats.gguf_quant import rounded

__all__ = ["Op", "Entry", "Rules", "build_plan", "glob_regex", "glob_match"]


@functools.lru_cache(maxsize=None)
def glob_regex(pattern: str):
    """The anchored regex of a glob: `*` captures any text (dots included), `?` matches one character."""
    out = []
    for char in pattern:
        out.append("(.*?)" if char == "*" else "." if char == "?" else re.escape(char))
    return re.compile("".join(out) + r"\Z")


def glob_match(name: str, pattern: str) -> bool:
    """`fnmatch.fnmatchcase`'s argument order, with `glob_regex`'s syntax."""
    return glob_regex(pattern).match(name) is not None


def _fill(template: str, groups) -> str:
    groups = list(groups)
    stars = template.count("*")
    if stars > len(groups):
        raise UsageError(f"rename target {template!r} has {stars} '*' but its pattern captured {len(groups)}")
    parts = template.split("*")
    return "".join(p + (groups[i] if i < stars else "") for i, p in enumerate(parts))


TABLE_METHODS = ("linear", "nearest", "cubic")
#: the ViT grid-resize conventions `--resize GLOB=HxW --resize-method NAME` takes (posenc_np.conventions)
GRID_CONVENTIONS = ("timm", "hf-vit", "dinov2", "dinov2-reg", "open-clip", "siglip2")


def grid_resize_arguments(old_grid, new_grid, prefix, convention):
    """`(old_grid, new_grid)` and the keywords of `resize_grid` under a named convention (DINOv2's
    `interpolate_offset` becomes its scale-factor grid `(new + offset) / old`)."""
    params = dict(conventions[convention].params)
    offset = conventions[convention].extra.get("interpolate_offset")
    scale = None if offset is None else tuple((n + offset) / o for n, o in zip(new_grid, old_grid, strict=True))
    return old_grid, new_grid, dict(params, scale=scale, prefix_tokens=prefix)


def _resize_grid_op(entry, name, new_grid, convention, prefix):
    """The `resize_grid` op of a ViT position table `[prefix + h * w, dim]` (`[1, rows, dim]` tables, as timm and
    HF store them, are read as their 2-D rows)."""
    import math

    if convention not in GRID_CONVENTIONS:
        raise UsageError(f"--resize {name}={new_grid[0]}x{new_grid[1]} is a grid: --resize-method is one of "
                         f"{', '.join(GRID_CONVENTIONS)}, not {convention!r}")
    shape = entry.shape[1:] if len(entry.shape) == 3 and entry.shape[0] == 1 else entry.shape
    if len(shape) != 2:
        raise UsageError(f"--resize of {name!r} with shape {entry.shape}: a position grid is [rows, dim]")
    rows = shape[0]
    side = math.isqrt(rows)
    prefix = rows - side * side if prefix is None else prefix
    grid = math.isqrt(rows - prefix) if 0 <= prefix < rows else 0
    if grid * grid != rows - prefix or grid == 0:
        raise UsageError(f"--resize of {name!r}: {rows} rows minus {prefix} prefix rows is not a square grid "
                         "(give --prefix-tokens)")
    batched = len(entry.shape) == 3
    if batched:
        entry.ops.append(Op("reshape", tuple(shape)))
    entry.ops.append(Op("resize_grid", ((grid, grid), tuple(new_grid), prefix, convention)))
    if batched:
        entry.ops.append(Op("reshape", (1, prefix + new_grid[0] * new_grid[1], shape[1])))
    entry.tags["resize_grid"] = ((grid, grid), tuple(new_grid), prefix, convention)


@dataclass(frozen=True)
class Op:
    """One conversion: `kind` and its parameters; `shape()` and `apply()` agree by construction."""

    kind: str
    params: tuple = ()

    def shape(self, shape):
        k, p = self.kind, self.params
        if k == "rows":
            return (p[1] - p[0], *shape[1:])
        if k == "strip":
            return (shape[0] - p[0], *shape[1:])
        if k == "pad":
            return (shape[0] + p[0], *shape[1:])
        if k == "resize":
            return (p[0], *shape[1:])
        if k == "resize_grid":
            old, new, prefix, _ = p
            return (prefix + new[0] * new[1], *shape[1:])
        if k == "transpose":
            return tuple(reversed(shape))
        if k == "reshape":
            return tuple(p)
        return tuple(shape)

    def dtype(self, dtype):
        if self.kind == "quantize":  # a block type reads back as float32 (its dequantized values)
            return "float32"
        return self.params[0] if self.kind == "cast" else dtype

    def apply(self, array):
        k, p = self.kind, self.params
        if k == "rows":
            return array[p[0]:p[1]]
        if k == "strip":
            return array[p[0]:]
        if k == "pad":  # the rows an offset convention never reads (fairseq/RoBERTa padding rows) are zero
            return np.concatenate([np.zeros((p[0], *array.shape[1:]), array.dtype), array])
        if k == "resize":
            return resize_table(array, p[0], method=p[1])
        if k == "resize_grid":
            old, new, keywords = grid_resize_arguments(*p)
            return resize_grid(array, old, new, **keywords).astype(array.dtype)
        if k == "reverse":
            return array[::-1]
        if k == "rope":
            heads, source, target, rotary_dim = p
            return permute_qk_rows(array, heads, source=source, target=target, rotary_dim=rotary_dim)
        if k == "transpose":
            return _transpose(array)
        if k == "cast":  # llama.cpp keeps 1-D tensors and norms in F32 (convert_hf_to_gguf.py prepare_tensors)
            return np.asarray(array).astype(p[0])
        if k == "dequantized":  # a quantized GGUF tensor: the reader already gives gguf.quants.dequantize's values
            return array
        if k == "quantize":  # GGUF --outtype q8_0, ...: the values the file holds (gguf-py's quantizers)
            return rounded(array, p[0])
        if k == "shift":  # Gemma's RMSNorm scales by (1 + w); llama.cpp stores w + 1 (GemmaModel.modify_tensors)
            return (np.asarray(array) + np.asarray(p[0], dtype=array.dtype)).astype(array.dtype)
        if k in ("qkv-blocks", "qkv-heads"):
            return _qkv_reorder(np.asarray(array), p[0], to_blocks=k == "qkv-blocks")
        if k == "reshape":
            return np.ascontiguousarray(array).reshape(p)
        if k == "mla-rope":  # MLA: per head, only the TRAILING rotary_dim rows (the rope slice) are permuted
            heads, head_dim, rotary_dim, source, target = p
            perm = mla_rope_permutation(head_dim, rotary_dim, source=source, target=target)
            return np.ascontiguousarray(np.asarray(array).reshape(heads, head_dim, *array.shape[1:])[:, perm]
                                        ).reshape(array.shape)
        raise AssertionError(k)

    def __str__(self):
        return self.kind if not self.params else f"{self.kind}({', '.join(map(str, self.params))})"


def _transpose(array, elements=1 << 20):
    """A contiguous transpose that copies a 2-D memory map block by block, dropping each block's pages,
    so the peak is the output plus one block rather than the output plus the whole input."""
    if array.ndim != 2 or getattr(array, "_mmap", None) is None:
        return np.ascontiguousarray(np.transpose(array))
    out = np.empty(array.shape[::-1], array.dtype)
    step = max(1, elements // max(1, array.shape[1]))
    for start in range(0, array.shape[0], step):
        out[:, start:start + step] = array[start:start + step].T
        drop_pages(array)
    return out


def _qkv_reorder(array, heads, *, to_blocks):
    """GPT-NeoX's fused `query_key_value` rows, per head `[q_h; k_h; v_h]` (HF GPTNeoXAttention
    `view(..., heads, 3 * head_dim)`), <-> three blocks `[Q; K; V]` (llama.cpp gptneox `attn_qkv`;
    convert_hf_to_gguf.py GPTNeoXModel.modify_tensors). Works on weights `[3 * hidden, in]` and biases."""
    rest = array.shape[1:]
    head_dim = array.shape[0] // (3 * heads)
    if to_blocks:
        return np.ascontiguousarray(array.reshape(heads, 3, head_dim, *rest).swapaxes(0, 1)).reshape(array.shape)
    return np.ascontiguousarray(array.reshape(3, heads, head_dim, *rest).swapaxes(0, 1)).reshape(array.shape)


@dataclass
class Entry:
    """One output tensor."""

    target: str
    source: str
    source_shape: tuple
    dtype: str
    ops: list = field(default_factory=list)
    tags: dict = field(default_factory=dict)  # what verification needs: role, pairing key, ...

    @property
    def shape(self):
        shape = tuple(self.source_shape)
        for op in self.ops:
            shape = op.shape(shape)
        return shape

    def produce(self, reader):
        if self.source is None:
            return self.tags["generated"]
        array = reader.get(self.source)
        for op in self.ops:
            array = op.apply(array)
        return array


@dataclass
class Rules:
    """Declared conversions (CLI options or a preset). Globs match SOURCE names."""

    rename: list = field(default_factory=list)      # (glob, template)
    drop: list = field(default_factory=list)        # glob
    transpose: list = field(default_factory=list)   # glob
    split: list = field(default_factory=list)       # (glob, [template, ...], [rows, ...], [role, ...])
    strip: list = field(default_factory=list)       # (glob, n)
    pad: list = field(default_factory=list)         # (glob, n)
    resize: list = field(default_factory=list)      # (glob, new_len or (h, w), method or grid convention)
    prefix_tokens: int | None = None                # rows before a resized grid (None: inferred)
    reverse: list = field(default_factory=list)     # glob
    rope_q: list = field(default_factory=list)      # glob (rows of q heads)
    rope_k: list = field(default_factory=list)      # glob (rows of k / kv heads)
    heads: int | None = None
    kv_heads: int | None = None
    rope_from: str | None = None
    rope_to: str | None = None
    rotary_dim: int | None = None
    require: list = field(default_factory=list)     # source names a preset cannot do without
    tags: list = field(default_factory=list)        # (glob, dict) merged into matching entries' tags
    target_name: object = None                      # callable applied to every renamed target name
    strict: bool = False                            # every kept tensor must match a rename (presets)
    ops: list = field(default_factory=list)         # (glob, Op) applied last, in order (presets)
    generated: list = field(default_factory=list)   # (target name, array): tensors no source tensor holds


def _matches(globs, name):
    return any(glob_match(name, g) for g in globs)


def _used(globs, names, what):
    for g in globs:
        if not any(glob_match(n, g) for n in names):
            raise UsageError(f"{what} pattern {g!r} matches no tensor of SOURCE")


def build_plan(reader, rules: Rules) -> list[Entry]:
    """The output entries in source order; UsageError for unmatched patterns, bad shapes, collisions.

    Passes: the rules checked against SOURCE's names, each tensor split or renamed (with its role and tags)
    and converted, the q/k norms permuted, the generated tensors added, then no two entries on one target."""
    _check_rules(reader, rules)
    entries, unknown = [], []
    for name in reader.names():
        if _matches(rules.drop, name):
            continue
        splits = [s for s in rules.split if glob_match(name, s[0])]
        if splits:
            entries += _split_entries(reader, name, splits[0], rules)
            continue
        entry, known = _renamed_entry(reader, name, rules)
        entries.append(entry)
        if not known:
            unknown.append(name)
    if rules.strict and unknown:
        raise UsageError(f"the preset has no name for SOURCE tensor(s) {_shown(unknown)}: not the checkpoint layout "
                         "it converts (use conversion options, with --drop for tensors to leave out)")
    _permute_qk_norms(entries, rules)
    for name, array in rules.generated:
        array = np.ascontiguousarray(array)
        entries.append(Entry(name, None, array.shape, _dtype_of(array), [], {"generated": array, "role": None}))
    seen = {}
    for entry in entries:
        if entry.target in seen:
            raise UsageError(f"two source tensors map to {entry.target!r}: {seen[entry.target]!r} and {entry.source!r}")
        seen[entry.target] = entry.source
    return entries


def _shown(names):
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _check_rules(reader, rules):
    """Required tensors present, RoPE options complete, every glob of every rule matching a SOURCE name."""
    names = reader.names()
    missing = [n for n in rules.require if n not in reader]
    if missing:
        raise UsageError(f"SOURCE {reader.path!r} lacks required tensor(s) {_shown(missing)}")
    _check_rope_options(rules)
    for what, globs in (("--rename", [g for g, _ in rules.rename]), ("--drop", rules.drop),
                        ("--transpose", rules.transpose), ("--split", [s[0] for s in rules.split]),
                        ("--strip-offset", [g for g, _ in rules.strip]), ("--add-offset", [g for g, _ in rules.pad]),
                        ("--resize", [r[0] for r in rules.resize]), ("--reverse", rules.reverse),
                        ("--rope-q", rules.rope_q), ("--rope-k", rules.rope_k)):
        _used(globs, names, what)


def _split_entries(reader, name, split, rules) -> list[Entry]:
    """The q, k, v entries of a fused tensor split by rows (q: heads, k and v: kv heads, of one head dim)."""
    shape, dtype = reader.shape(name), reader.dtype(name)
    glob, templates, rows, roles = split
    groups = glob_regex(glob).match(name).groups()
    if rows is None and shape and rules.heads:
        kv = rules.kv_heads or rules.heads
        head_dim = shape[0] // (rules.heads + 2 * kv)
        rows = [rules.heads * head_dim, kv * head_dim, kv * head_dim]
    if not shape or rows is None or sum(rows) != shape[0]:
        raise UsageError(f"--split of {name!r}: parts of {rows} rows do not add up to its shape {shape}")
    entries, start = [], 0
    for template, count, role in zip(templates, rows, roles, strict=True):
        target = _fill(template, groups)
        target = rules.target_name(target) if rules.target_name else target
        entry = Entry(target, name, shape, dtype, [Op("rows", (start, start + count))], {"key": groups, "role": role})
        start += count
        entries.append(_convert(entry, rules, name, role))
    return entries


def _renamed_entry(reader, name, rules) -> tuple[Entry, bool]:
    """`(entry, renamed)`: the tensor under its first matching rename (its own name if none matches), with its
    q/k role (q and k of one layer share their glob captures, the pair's key) and tags, converted."""
    target, renamed = name, False
    for glob, template in rules.rename:
        match = glob_regex(glob).match(name)
        if match:
            target, renamed = _fill(template, match.groups()), True
            break
    if rules.target_name:
        target = rules.target_name(target)
    role, key = None, (name,)
    for role_name, globs in (("q", rules.rope_q), ("k", rules.rope_k)):
        for glob in globs:
            if match := glob_regex(glob).match(name):
                role, key = role_name, match.groups()
    tags = {"key": key, "role": role}
    for glob, extra in rules.tags:
        if glob_match(name, glob):
            tags.update(extra)
    entry = Entry(target, name, reader.shape(name), reader.dtype(name), [], tags)
    return _convert(entry, rules, name, role), renamed


def _permute_qk_norms(entries, rules):
    """The per-channel q/k norms beside permuted q/k projections get the same permutation: `X.q_norm.weight`
    beside `X.q_proj.weight` (Gemma 3, Qwen3: `[head_dim]`, applied per head; OLMo 2: `[heads * head_dim]`,
    applied to the whole projection). RMSNorm's statistic does not depend on the channel order, so the
    permuted weight keeps each channel's scale on the channel it scaled; without it the norm would scale
    rotated pairs with another pair's weights."""
    by_source = {e.source: e for e in entries if e.source is not None}
    for entry in list(entries):
        rope = [op for op in entry.ops if op.kind == "rope"]
        if entry.tags.get("role") not in ("q", "k") or not rope or entry.source is None:
            continue
        prefix, _, leaf = entry.source.rpartition(".")
        module = prefix.rpartition(".")[0]
        norm = by_source.get(f"{module}.{entry.tags['role']}_norm.{leaf}") if module else None
        if norm is None or any(op.kind == "rope" for op in norm.ops):
            continue
        heads, source, target, rotary_dim = rope[0].params
        head_dim = entry.tags["head_dim"]
        if norm.shape == (head_dim,):
            count = 1
        elif norm.shape == (heads * head_dim,):
            count = heads
        else:
            raise UsageError(f"{norm.source!r} (shape {norm.shape}) beside the permuted {entry.source!r}: neither one "
                             f"head ({head_dim}) nor {heads} heads ({heads * head_dim}) of channels")
        norm.ops.append(Op("rope", (count, source, target, rotary_dim)))
        norm.tags.update(role=f"{entry.tags['role']}_norm", key=entry.tags["key"])


def _dtype_of(array):
    return "bfloat16" if array.dtype.name == "bfloat16" else array.dtype.name


def _check_rope_options(rules):
    if not (rules.rope_q or rules.rope_k or (rules.split and (rules.rope_from or rules.rope_to))):
        return
    if rules.rope_from not in ROPE_LAYOUTS or rules.rope_to not in ROPE_LAYOUTS:
        raise UsageError(f"--rope-q/--rope-k need --rope-from and --rope-to, each one of {', '.join(ROPE_LAYOUTS)} "
                         f"(got {rules.rope_from!r}, {rules.rope_to!r})")
    if not rules.heads or rules.heads < 1:
        raise UsageError("--rope-q/--rope-k need --heads (the number of query heads)")
    if rules.kv_heads is not None and (rules.kv_heads < 1 or rules.heads % rules.kv_heads):
        raise UsageError(f"--kv-heads {rules.kv_heads} must divide --heads {rules.heads} (grouped-query attention)")


def _convert(entry, rules, name, role):
    shape = entry.shape
    for glob, n in rules.strip:
        if glob_match(name, glob):
            if len(shape) != 2 or not 0 < n < shape[0]:
                raise UsageError(f"--strip-offset {n} of {name!r} with shape {shape}: needs a 2-D table with more rows")
            entry.ops.append(Op("strip", (n,)))
            entry.tags["offset"] = n
    for glob, n in rules.pad:
        if glob_match(name, glob):
            if len(shape) != 2 or n < 1:
                raise UsageError(f"--add-offset {n} of {name!r} with shape {shape}: needs a 2-D table and n >= 1")
            entry.ops.append(Op("pad", (n,)))
            entry.tags["offset"] = -n
    for glob, new_len, method in rules.resize:
        if glob_match(name, glob):
            if isinstance(new_len, tuple):
                _resize_grid_op(entry, name, new_len, method or "timm", rules.prefix_tokens)
                continue
            if len(entry.shape) != 2 or new_len < 1:
                raise UsageError(f"--resize of {name!r} with shape {entry.shape}: needs a 2-D table and a length >= 1")
            method = method or "linear"
            if method not in TABLE_METHODS:
                raise UsageError(f"--resize {glob}={new_len} is a table's length: --resize-method is one of "
                                 f"{', '.join(TABLE_METHODS)}, not {method!r} (a grid is --resize GLOB=HxW)")
            entry.tags["resize"] = (entry.shape[0], new_len, method)
            entry.ops.append(Op("resize", (new_len, method)))
    if _matches(rules.reverse, name):
        entry.ops.append(Op("reverse"))
        entry.tags["reversed"] = True
    if role in ("q", "k") and rules.rope_from:
        heads = rules.heads if role == "q" else (rules.kv_heads or rules.heads)
        rows = entry.shape[0]
        if rows % heads or (rows // heads) % 2:
            raise UsageError(f"RoPE permutation of {name!r} ({role}, shape {entry.shape}): {heads} heads do not "
                             "split its rows into even head dims")
        if rules.rotary_dim is not None and rules.rotary_dim > rows // heads:
            raise UsageError(f"--rotary-dim {rules.rotary_dim} exceeds the head dim {rows // heads} of {name!r}")
        entry.tags.update(heads=heads, head_dim=rows // heads)
        entry.ops.append(Op("rope", (heads, rules.rope_from, rules.rope_to, rules.rotary_dim)))
    if _matches(rules.transpose, name):
        if len(entry.shape) < 2:
            raise UsageError(f"--transpose of {name!r}: shape {entry.shape} has fewer than 2 axes")
        entry.ops.append(Op("transpose"))
        entry.tags["transposed"] = True
    for glob, op in rules.ops:
        if glob_match(name, glob):
            entry.ops.append(op)
            entry.dtype = op.dtype(entry.dtype)
    return entry
