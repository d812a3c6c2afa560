"""`posenc doctor A B`: name the known convention mismatch that turns A into B (docs/conventions.md §8).

Each candidate is a transformation of A; the first one whose result equals B within the tolerance
policy names the mismatch. Candidates, in order:

    identical / within tolerance; dtype rounding (bfloat16, float16); transposition; sign flip;
    row reversal (relative tables: query-key vs key-query); position offset (1..4 rows either way,
    RoBERTa/fairseq's 2); pair layout on the last axis (RoPE interleaved vs half, or sinusoid
    interleaved vs [sin | cos] concatenated); sin/cos order; per-head RoPE row permutation of q/k
    weights (every even head dim that divides the rows); and, for two sinusoid tables, the
    parameters that differ (denominator `dim` vs `dim/2 - 1`, layout, first position); for two RoPE /
    sinusoid tables with estimable frequencies, a constant frequency ratio (linear scaling factor,
    position interpolation) or a base change (NTK).

Multi-axis RoPE (docs/conventions.md §3.16): for two cos/sin tables or rotated q/k of the same tokens
(`[..., seq, r]`, positions `[A, ..., seq]` with different ids per axis), a channel agrees in A and B
exactly when it reads the same axis in both (same frequency, same positions). The pattern of the
channels that differ names the layout mismatch: contiguous vs interleaved sections (Qwen2-VL vs
Qwen3-VL), height and width swapped, or the section doubled by value instead of repeated for the two
halves ("section not doubled"), for the published sections and those of the registered conventions
(any other split would explain too much: a 1-D table with other frequencies differs on all channels
but the first few, which some arbitrary split also predicts).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field

import numpy as np

from posenc_np.backend import dtype_name, numpy_dtype
from posenc_np.conventions import conventions
from posenc_np.mrope import mrope_axis_of_pair
from posenc_np.rope import permute_qk_rows, rope_permutation
from posenc_np.sinusoidal import sinusoidal
from posenc_np.testing import compare, tolerance

from ..errors import UsageError
from ..formats import open_reader
from ..formats.gguf import ROPE_LAYOUT_OF_TYPE, rope_type
from . import hf_config
from .presets.gguf_families import FAMILIES, FAMILY_OF_ARCH, llama3_rope_freqs

__all__ = ["Diagnosis", "diagnose", "diagnose_files", "diagnose_paths", "diagnose_checkpoints", "load_array"]


@dataclass
class Diagnosis:
    explained: bool
    mismatch: str | None          # a short key ("identical", "transpose", ...) or None
    message: str
    details: dict = field(default_factory=dict)

    def text(self):
        head = "identical" if self.mismatch == "identical" else (
            f"explained: {self.mismatch}" if self.explained else "no known mismatch explains the difference")
        return f"{head}\n  {self.message}"

    def as_dict(self):
        return {"explained": self.explained, "mismatch": self.mismatch, "message": self.message,
                "details": {k: (v.item() if isinstance(v, np.generic) else v) for k, v in self.details.items()}}


def load_array(path) -> np.ndarray:
    """A `.npy` (never pickled) or a single-tensor `.safetensors`; UsageError otherwise."""
    path = str(path)
    if not os.path.isfile(path):
        raise UsageError(f"{path!r} does not exist or is not a file")
    if path.endswith(".npy"):
        try:
            array = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as error:
            raise UsageError(f"cannot read {path!r} as .npy: {error}") from None
    elif path.endswith(".safetensors"):
        reader = open_reader(path)
        if len(reader.names()) != 1:
            raise UsageError(f"{path!r} holds {len(reader.names())} tensors; doctor compares one tensor per file")
        array = np.asarray(reader.get(reader.names()[0]))
    else:
        raise UsageError(f"{path!r}: doctor reads .npy or single-tensor .safetensors")
    if array.dtype.kind != "f" and array.dtype.name != "bfloat16":
        raise UsageError(f"{path!r} holds {array.dtype} values; doctor compares float tables or weights")
    return array


def diagnose_files(a, b) -> Diagnosis:
    return diagnose(load_array(a), load_array(b))


def _tol(a, b):
    """The coarser of the two dtypes; angles up to the row count when the data look like sinusoids."""
    names = [dtype_name(x.dtype) for x in (a, b)]
    order = ["float64", "float32", "float16", "bfloat16"]
    coarse = max(names, key=order.index)
    sinusoid_like = a.ndim == 2 and np.abs(a.astype(np.float64)).max() <= 1.0 + 1e-3
    return tolerance(coarse if coarse != "float64" else "float64",
                     scale=float(max(np.abs(b.astype(np.float64)).max(), 1e-30)),
                     max_angle=float(a.shape[0]) if sinusoid_like else 0.0)


def _equal(x, b, tol):
    return x.shape == b.shape and compare(x, b, tol).passed


def _candidates(a):
    """(key, message, transformed A) for every single known mismatch that applies to A's shape."""
    yield "transpose", "B is A transposed (torch Linear [out, in] vs Keras/Flax kernel [in, out], or T5 bias " \
                       "[buckets, heads] vs [heads, buckets])", (a.T if a.ndim == 2 else None)
    yield "sign", "B is -A (a sign flip)", -a
    yield "reversal", "B is A with its rows reversed (relative distance sign: HF BERT relative_key " \
                      "query-key vs Shaw/T5 key-query)", a[::-1]
    dim = a.shape[-1]
    if dim % 2 == 0 and dim >= 4:
        to_half = rope_permutation(dim, source="interleaved", target="half")
        to_inter = rope_permutation(dim, source="half", target="interleaved")
        yield "layout", "pair layout differs on the last axis: A interleaved (sin, cos, sin, cos... / RoPE pairs " \
                        "2i, 2i+1), B concatenated halves ([sin | cos] / RoPE rotate_half)", a[..., to_half]
        yield "layout", "pair layout differs on the last axis: A concatenated halves ([sin | cos] / RoPE " \
                        "rotate_half), B interleaved", a[..., to_inter]
        half = dim // 2
        yield "sin-cos-order", "sin/cos order swapped in a [sin | cos] layout ([cos | sin])", \
            np.concatenate([a[..., half:], a[..., :half]], -1)
        swap = np.arange(dim).reshape(-1, 2)[:, ::-1].ravel()
        yield "sin-cos-order", "sin/cos order swapped in an interleaved layout (cos, sin, ...)", a[..., swap]


def _row_permutations(a):
    """Per-head RoPE row permutations of a `[heads * head_dim, in]` q/k weight."""
    if a.ndim != 2:
        return
    rows = a.shape[0]
    for hd in range(2, rows + 1, 2):
        if rows % hd:
            continue
        heads = rows // hd
        for source, target in (("interleaved", "half"), ("half", "interleaved")):
            perm = rope_permutation(hd, source=source, target=target)
            yield (f"RoPE q/k row layout: A is {source}, B {target} per head (head_dim {hd}, {heads} heads; "
                   f"permute q with the query heads and k with the key/value heads)",
                   a.reshape(heads, hd, -1)[:, perm].reshape(a.shape), hd)


def diagnose(a, b) -> Diagnosis:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape == b.shape and np.array_equal(a, b, equal_nan=True):
        return Diagnosis(True, "identical", f"A and B are equal ({a.shape}, {a.dtype} / {b.dtype})")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    tol = _tol(a, b)
    if a.shape == b.shape:
        r = compare(a64, b64, tol)
        fine = _tol(a.astype(np.float32), b.astype(np.float32))  # float32 compute, no final rounding
        if not compare(a64, b64, fine).passed:
            for name in ("bfloat16", "float16"):
                for x, y, which in ((a64, b64, "B"), (b64, a64, "A")):
                    rounded = x.astype(numpy_dtype(name)).astype(np.float64)
                    if compare(rounded, y, fine).passed:
                        return Diagnosis(True, "dtype", f"{which} is the other rounded to {name} (dtype rounding): "
                                                        f"max |A - B| = {r.max_abs_err:.3g}", {"dtype": name})
        if r.passed:
            return Diagnosis(True, "identical", f"A and B agree within tolerance: max |A - B| = {r.max_abs_err:.3g} "
                                                f"<= {tol}", {"max_abs_err": r.max_abs_err})
    for key, message, x in _candidates(a64):
        if x is not None and _equal(x, b64, tol):
            return Diagnosis(True, key, message)
    found = _offset(a64, b64, tol)
    if found:
        return found
    if a.shape == b.shape:
        for message, x, hd in _row_permutations(a64):
            if _equal(x, b64, tol):
                return Diagnosis(True, "rope-rows", message, {"head_dim": hd})
    found = _sinusoid_params(a64, b64, tol) or _frequency_ratio(a64, b64)
    found = found or (_mrope_layout(a64, b64, tol) if a.shape == b.shape else None)
    if found:
        return found
    r = compare(a64, b64, tol) if a.shape == b.shape else None
    detail = f"max |A - B| = {r.max_abs_err:.3g}" if r else f"shapes {a.shape} vs {b.shape}"
    return Diagnosis(False, None, f"{detail}; none of the catalogued mismatches (transpose, sign, reversal, offset, "
                                  "layout, sin/cos order, RoPE rows, sinusoid denominator, dtype, scaling) explains it")


def _offset(a, b, tol, max_offset=4):
    """B's row p is A's row p + k (or the reverse): learned/sinusoid tables with a first-position offset."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        return None
    for k in range(1, max_offset + 1):
        for x, y, sign in ((a, b, "+"), (b, a, "-")):
            rows = min(x.shape[0] - k, y.shape[0])
            if rows >= 2 and compare(x[k:k + rows], y[:rows], tol).passed:
                return Diagnosis(True, "offset", f"position offset: B's row p is A's row p {sign} {k} "
                                 f"(RoBERTa/fairseq start at padding_idx + 1 = 2; compared {rows} rows)",
                                 {"offset": k if sign == "+" else -k})
    return None


def _sinusoid_params(a, b, tol):
    """Identify both as `sinusoidal(p0 + arange(L), dim, layout, denominator)` and name what differs."""
    def identify(x):
        if x.ndim != 2 or x.shape[1] % 2 or x.shape[1] < 4:
            return None
        for layout, denominator, start in itertools.product(("interleaved", "concat"), ("dim", "half-1"), range(3)):
            ref = sinusoidal(np.arange(start, start + x.shape[0]), x.shape[1], layout=layout, denominator=denominator)
            if compare(x, ref, tol).passed:
                return dict(layout=layout, denominator=denominator, first_position=start)
        return None

    pa = identify(a)
    pb = identify(b) if pa else None
    if not (pa and pb):
        return None
    diff = {k: (pa[k], pb[k]) for k in pa if pa[k] != pb[k]}
    text = "; ".join(f"{k}: A {va!r}, B {vb!r}" for k, (va, vb) in diff.items())
    key = "denominator" if "denominator" in diff else next(iter(diff), "identical")
    note = " (dim: 2i/d, the paper; half-1: i/(d/2 - 1), tensor2tensor/fairseq)" if "denominator" in diff else ""
    return Diagnosis(True, key, f"both are sinusoid tables differing in {text}{note}", {"A": pa, "B": pb})


def _frequencies(x):
    """Per-pair angular frequencies of a RoPE cos table (row p = position p), with a mask of the ones
    the table determines, or None when `x` is not such a table.

    Each column is read at its best-conditioned row: the first row whose angle passes pi/2 (the last
    row when it never does); a column whose angle stays below 0.05 rad there is too flat to measure
    (float32 cannot tell cos(1e-4) from 1)."""
    if x.ndim != 2 or x.shape[0] < 3 or x.shape[1] % 2:
        return None
    half = x.shape[1] // 2
    for pairs, other in ((x[:, :half], x[:, half:]), (x[:, 0::2], x[:, 1::2])):
        if np.allclose(pairs, other, atol=1e-6) and np.all(pairs[0] > 0):
            ratio = np.clip(pairs / pairs[0], -1.0, 1.0)
            negative = ratio < 0
            row = np.where(negative.any(0), negative.argmax(0), len(ratio) - 1)
            theta = np.arccos(ratio[row, np.arange(half)])
            return theta / row, theta > 0.05
    return None


def _frequency_ratio(a, b):
    """Two RoPE cos tables: constant frequency ratio = linear scaling; a geometric trend = a base change."""
    found_a, found_b = _frequencies(a), _frequencies(b)
    if found_a is None or found_b is None or found_a[0].shape != found_b[0].shape:
        return None
    (fa, ma), (fb, mb) = found_a, found_b
    use = ma & mb
    if use.sum() < 3:
        return None
    j = np.arange(len(fa))
    ratio = fa[use] / fb[use]
    if np.allclose(ratio, ratio[0], rtol=1e-3):
        return Diagnosis(True, "scaling", f"RoPE frequencies differ by a constant factor {ratio[0]:.4g}: linear "
                                          f"scaling (position interpolation) with factor {ratio[0]:.4g} on B",
                         {"factor": float(ratio[0])})
    # w_j = base^(-2j/r) = base^(-j/n): log w is linear in j with slope -ln(base) / n
    n = len(fa)
    fits = []
    for f, m in ((fa, ma), (fb, mb)):
        slope, intercept = np.polyfit(j[m], np.log(f[m]), 1)
        fits.append((float(np.exp(-slope * n)), np.allclose(np.log(f[m]), intercept + slope * j[m], atol=1e-3)))
    if all(ok for _, ok in fits):
        return Diagnosis(True, "base", f"RoPE base differs: A ~ {fits[0][0]:.6g}, B ~ {fits[1][0]:.6g} (NTK-aware "
                                       "scaling changes the base)", {"base_a": fits[0][0], "base_b": fits[1][0]})
    return None


#: Published sections (pairs per axis), tried before every other split: Qwen2-VL/2.5-VL, Qwen3-VL, FLUX.
_KNOWN_SECTIONS = ((16, 24, 24), (24, 20, 20), (8, 28, 28))


def _sections(pairs):
    """The published 3-axis sections of `pairs` pairs and those of the registered conventions."""
    found = [s for s in _KNOWN_SECTIONS if sum(s) == pairs]
    for conv in conventions.values():
        section = conv.params.get("mrope_section")
        if isinstance(section, (list, tuple)) and len(section) == 3 and sum(section) == pairs:
            found.append(tuple(section))
    return list(dict.fromkeys(found))


def _mrope_hypotheses(r):
    """(key, message, channel axes of A, channel axes of B) for the multi-axis RoPE layout mismatches."""
    pairs = r // 2
    for section in _sections(pairs):
        for layout, expand in (("half", lambda m: np.concatenate([m, m])), ("interleaved", lambda m: np.repeat(m, 2))):
            contiguous, interleaved = mrope_axis_of_pair(section), mrope_axis_of_pair(section, True)
            name = f"mrope_section={list(section)}, {layout} layout"
            yield ("mrope-interleaving", f"M-RoPE sections: A contiguous (Qwen2-VL), B interleaved (Qwen3-VL) "
                   f"({name}); the channels that read another axis differ", expand(contiguous), expand(interleaved))
            for label, axis in (("contiguous", contiguous), ("interleaved", interleaved)):
                swapped = np.where(axis == 1, 2, np.where(axis == 2, 1, axis))
                yield ("mrope-height-width", f"M-RoPE height and width swapped ({label}, {name}): position_ids "
                       "rows 1 and 2 (or the section's last two entries) exchanged", expand(axis), expand(swapped))
        by_value = np.repeat(np.arange(3), 2 * np.asarray(section))  # np.array(section) * 2 channel blocks
        yield ("mrope-section-not-doubled", f"M-RoPE section doubled by value ([{', '.join(str(2 * s) for s in section)}] "
               f"channel blocks) instead of repeated for the two halves (mrope_section * 2 on the list) "
               f"(mrope_section={list(section)})", np.concatenate([mrope_axis_of_pair(section)] * 2), by_value)


def _mrope_layout(a, b, tol):
    """Name the multi-axis RoPE layout mismatch from the channels where A and B agree (see the module doc)."""
    r = a.shape[-1]
    if a.ndim < 2 or r % 2 or r < 6 or r > 256:
        return None
    differ = np.abs(a - b).reshape(-1, r).max(0) > tol.atol
    if not differ.any() or differ.all():
        return None
    for key, message, axes_a, axes_b in _mrope_hypotheses(r):
        if np.array_equal(differ, axes_a != axes_b):
            return Diagnosis(True, key, message + f": {int(differ.sum())} of {r} channels differ",
                             {"channels_differ": int(differ.sum())})
    return None


# ---------------------------------------------------------------- whole checkpoints

def _is_checkpoint(path) -> bool:
    """A GGUF, an HF checkpoint directory or index, or a .safetensors with more than one tensor."""
    path = str(path)
    if path.endswith((".gguf", ".index.json")) or os.path.isdir(path):
        return True
    if path.endswith(".safetensors") and os.path.isfile(path):
        return len(open_reader(path).names()) > 1
    return False


def diagnose_paths(a, b) -> Diagnosis:
    """`posenc doctor A B`: two tables/weights (`.npy`, single-tensor `.safetensors`) or two checkpoints."""
    if _is_checkpoint(a) and _is_checkpoint(b):
        return diagnose_checkpoints(a, b)
    return diagnose_files(a, b)  # a table against a checkpoint: load_array names the multi-tensor file


class _Checkpoint:
    """One side of a checkpoint comparison: its convention, family, head counts, rope settings."""

    def __init__(self, path):
        self.path = str(path)
        self.reader = open_reader(path)
        md = getattr(self.reader, "metadata", {}) or {}
        if self.reader.path.endswith(".gguf"):
            self.convention = "gguf"
            self.arch = md.get("general.architecture")
            self.rope_type = rope_type(self.arch)
            self.family = FAMILY_OF_ARCH.get(self.arch)
            if self.family is None:
                raise UsageError(f"{self.path!r}: GGUF architecture {self.arch!r} has no posenc family "
                                 f"({', '.join(f.arch for f in FAMILIES.values())})")
            a = self.arch
            self.heads = int(md[f"{a}.attention.head_count"])
            self.kv_heads = int(md.get(f"{a}.attention.head_count_kv", self.heads))
            self.head_dim = int(md.get(f"{a}.attention.key_length", int(md[f"{a}.embedding_length"]) // self.heads))
            self.layers = int(md[f"{a}.block_count"])
            self.base = float(md.get(f"{a}.rope.freq_base", 10000.0))
            self.rotary_dim = int(md.get(f"{a}.rope.dimension_count", self.head_dim))
            self.layout = ROPE_LAYOUT_OF_TYPE.get(self.rope_type)
            self.scaling = None
        else:
            self.convention = "hf"
            config = hf_config.config_beside(self.reader, "doctor")
            self.config = config
            model_type = config.get("model_type")
            self.family = next((f for f in FAMILIES.values() if model_type in f.model_types), None)
            if self.family is None:
                raise UsageError(f"{self.path!r}: HF model_type {model_type!r} has no posenc family")
            self.arch = self.family.arch
            self.rope_type = rope_type(self.arch)
            self.heads, self.kv_heads, self.head_dim = hf_config.heads(config)
            self.layers = int(config["num_hidden_layers"])
            entry = next(e for e in hf_config.schedule(config, "doctor") if e is not None)
            self.base, self.rotary_dim, self.scaling = entry["base"], entry["rotary_dim"], entry["scaling"]
            self.layout = "half"

    def qk_rows(self, i):
        """The q and k weights of layer i as this side stores them (fused tensors split)."""
        r, f = self.reader, self.family
        qr, kr = self.heads * self.head_dim, self.kv_heads * self.head_dim
        if self.convention == "gguf":
            if f.qkv == "separate":
                return np.asarray(r.get(f"blk.{i}.attn_q.weight")), np.asarray(r.get(f"blk.{i}.attn_k.weight"))
            w = np.asarray(r.get(f"blk.{i}.attn_qkv.weight"))
            return w[:qr], w[qr:qr + kr]
        p = f.hf_layer.format(i=i)
        if f.qkv == "separate":
            return np.asarray(r.get(p + "self_attn.q_proj.weight")), np.asarray(r.get(p + "self_attn.k_proj.weight"))
        if f.qkv == "blocks":
            w = np.asarray(r.get(p + "self_attn.qkv_proj.weight"))
            return w[:qr], w[qr:qr + kr]
        w = np.asarray(r.get(p + "attention.query_key_value.weight")).reshape(self.heads, 3, self.head_dim, -1)
        return w[:, 0].reshape(qr, -1), w[:, 1].reshape(kr, -1)


def _ranges(layers):
    """[0, 1, 2, 5] -> "layers 0-2, 5"."""
    out, start = [], None
    for i, layer in enumerate(layers):
        if start is None:
            start = layer
        if i + 1 == len(layers) or layers[i + 1] != layer + 1:
            out.append(f"{start}" if start == layer else f"{start}-{layer}")
            start = None
    return ("layer " if len(layers) == 1 else "layers ") + ", ".join(out)


def _row_relation(a, b, heads, rotary_dim):
    """"same", "permuted" (A half -> B interleaved), "permuted-back" (A interleaved -> B half) or "different"."""
    if a.shape != b.shape:
        return "different"
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    tol = _tol(a, b)
    if compare(a64, b64, tol).passed:
        return "same"
    r = rotary_dim if rotary_dim != a.shape[0] // heads else None
    if compare(permute_qk_rows(a64, heads, source="half", target="interleaved", rotary_dim=r), b64, tol).passed:
        return "permuted"
    if compare(permute_qk_rows(a64, heads, source="interleaved", target="half", rotary_dim=r), b64, tol).passed:
        return "permuted-back"
    return "different"


def diagnose_checkpoints(a, b) -> Diagnosis:
    """Name what makes two checkpoints of one model rotate differently: q/k row order against the rope
    type llama.cpp uses for the architecture, a wrong architecture (rope type), llama3 factors missing
    or different, the base, the rotary dim, per layer where it matters."""
    A, B = _Checkpoint(a), _Checkpoint(b)
    details = {"A": A.convention, "B": B.convention}
    if (A.heads, A.kv_heads, A.head_dim, A.layers) != (B.heads, B.kv_heads, B.head_dim, B.layers):
        return Diagnosis(False, None, f"not the same model shape: A {A.heads} heads / {A.kv_heads} kv / head dim "
                                      f"{A.head_dim} / {A.layers} layers, B {B.heads} / {B.kv_heads} / {B.head_dim} / "
                                      f"{B.layers}")
    findings = _architecture_findings(A, B)
    rows, unexplained = _row_findings(A, B, wrong_arch=any(k == "rope-type" for k, _ in findings))
    findings += rows + _settings_findings(A, B) + _llama3_findings(A, B)
    problems = [(k, t) for k, t in findings if k != "ok"]
    details["findings"] = [t for _, t in findings] + unexplained
    if unexplained:
        return Diagnosis(False, None, "\n  ".join(t for _, t in findings + [("x", u) for u in unexplained]), details)
    if not problems:
        return Diagnosis(True, "consistent", "consistent: " + "; ".join(t for _, t in findings), details)
    return Diagnosis(True, problems[0][0], "\n  ".join(t for _, t in findings), details)


def _architecture_findings(A, B) -> list:
    """A wrong architecture: the rope type llama.cpp hard-codes for it, or only the name."""
    if A.family.arch == B.family.arch:
        return []
    hf, gg = (A, B) if A.convention == "hf" else (B, A)
    if A.rope_type != B.rope_type:
        return [("rope-type", f"wrong rope type for this architecture: {gg.path} says general.architecture "
                              f"{gg.arch!r}, which llama.cpp rotates as {gg.rope_type.upper()} ({gg.layout}); "
                              f"{hf.path}'s family converts to {hf.arch!r} ({hf.rope_type.upper()})")]
    return [("architecture", f"architectures differ ({A.arch!r} vs {B.arch!r}) with the same rope type")]


def _row_findings(A, B, *, wrong_arch) -> tuple[list, list]:
    """`(findings, unexplained)`: per run of layers, whether the q/k rows are permuted as the two rotations need."""
    relations = {}
    for i in range(A.layers):
        qa, ka = A.qk_rows(i)
        qb, kb = B.qk_rows(i)
        rq = _row_relation(qa, qb, A.heads, A.rotary_dim)
        rk = _row_relation(ka, kb, A.kv_heads, A.rotary_dim)
        relations.setdefault(rq if rq == rk else f"q {rq}, k {rk}", []).append(i)
    needed = "same" if A.layout == B.layout else ("permuted" if A.layout == "half" else "permuted-back")
    findings, unexplained = [], []
    for relation, layers in relations.items():
        where = _ranges(layers)
        text = "q/k rows not permuted" if relation == "same" else "q/k rows permuted"
        if relation == needed:
            findings.append(("ok", f"{where}: {text}, as {A.layout} (A) vs {B.layout} (B) rotation needs"))
        elif relation in ("same", "permuted", "permuted-back"):
            if wrong_arch:
                findings.append(("rope-rows", f"{where}: {text}; they match the other architecture's rope type, "
                                              "so the architecture is what is wrong"))
            else:
                findings.append(("rope-rows", f"{where}: {text}, but A rotates {A.layout} and B {B.layout}: "
                                              "llama.cpp / transformers would pair the wrong channels "
                                              "(convert_hf_to_gguf.py LlamaModel.permute is needed exactly when "
                                              "the rope type is NORM)"))
        else:
            unexplained.append(f"{where}: q/k weights differ beyond any row permutation ({relation})")
    return findings, unexplained


def _settings_findings(A, B) -> list:
    """The base (compared at float32, as GGUF stores it) and the rotary dim."""
    findings = []
    if A.base != B.base and not np.isclose(np.float32(A.base), np.float32(B.base), rtol=0, atol=0):
        findings.append(("base", f"base differs: A {A.base:g}, B {B.base:g}"))
    if A.rotary_dim != B.rotary_dim:
        findings.append(("rotary-dim", f"rotary dim differs: A {A.rotary_dim}, B {B.rotary_dim}"))
    return findings


def _llama3_findings(A, B) -> list:
    """An HF side's llama3 scaling against the GGUF side's `rope_freqs` tensor."""
    hf = next((s for s in (A, B) if s.convention == "hf"), None)
    gg = next((s for s in (A, B) if s.convention == "gguf"), None)
    if hf is None or gg is None:
        return []
    scaling = hf.scaling or {}
    has = "rope_freqs.weight" in gg.reader
    if scaling.get("rope_type") != "llama3":
        return [("llama3", "the GGUF has rope_freqs factors but the HF config has no llama3 scaling")] if has else []
    if not has:
        return [("llama3", "llama3 factors missing: the HF config scales RoPE with rope_type llama3 but the GGUF "
                           "has no rope_freqs tensor (llama.cpp would run unscaled frequencies; long contexts break)")]
    expected = llama3_rope_freqs(hf.rotary_dim, hf.base, scaling)
    got = np.asarray(gg.reader.get("rope_freqs.weight"), np.float32)
    if got.shape != expected.shape or not np.array_equal(got, expected):
        return [("llama3", "llama3 factors differ: the GGUF's rope_freqs is not the HF config's llama3 scaling")]
    return []
