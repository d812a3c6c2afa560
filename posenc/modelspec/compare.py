"""Compare two position specs: the differences by name, and the detection horizon.

The detection horizon is the first query position m at which the two settings give attention logits that
differ beyond bfloat16 tolerance for random unit-norm q and k. For one layer, the logit of a query at m and
a key at n is `q^T M(m, n) k`, where `M` is the block rotation by the angles `t_j (m - n)` scaled by the
attention scale squared, on the q/k rows in HF order (so a GGUF's Meta-ordered interleaved rows and HF's
rotate-half rows compare equal). For q, k independent and uniform on the unit sphere of R^d,
`E[(q^T (M_a - M_b) k)^2] = ||M_a - M_b||_F^2 / d^2`: the root-mean-square logit difference is
`rms(m, n) = ||M_a - M_b||_F / d`, in closed form per channel and pair (no sampling). The tolerance is the
policy's bfloat16 one for unit-scale values (`posenc_np.testing.tolerance("bfloat16").atol`, 2^-8 + 8
float32 ulps).

Search: for static frequencies `rms` depends on the distance `m - n` only, so the horizon is the first
distance whose rms exceeds the tolerance. It is evaluated on every distance below 4096, then on a
geometric grid (ratio 1 + 2^-7) up to the limit (2^20 by default), plus the distance at which each
frequency band's phase difference reaches a quarter and a half turn (per-band points: where a band's
contribution peaks); the first grid point above tolerance is then bisected down to the integer (each
band's contribution grows monotonically until its half turn, which the per-band points bracket). For
sequence-length dependent frequencies (dynamic NTK, LongRoPE) a prompt ending at m uses the frequencies of
`seq_len = m + 1` at every distance up to m: the search takes the maximum over a distance grid per m.
The shortest prompt a logits comparison needs is `horizon + 1` tokens (positions 0..horizon).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from posenc_np.scaling import resolve_scaling
from posenc_np.testing import tolerance

from .canonical import LayerSpec, ModelSpec

__all__ = ["Comparison", "compare_specs", "softmax_multiplier", "layer_horizon", "logit_rms_difference", "probe_positions",
           "band_probe_positions", "BF16_LOGIT_TOL", "HORIZON_LIMIT", "PROBE_COUNT"]

#: bfloat16 tolerance of a unit-scale logit (posenc_np.testing policy).
BF16_LOGIT_TOL = float(tolerance("bfloat16").atol)
#: The largest position the horizon search looks at.
HORIZON_LIMIT = 2 ** 20
#: The most probe positions `band_probe_positions` returns.
PROBE_COUNT = 48


@dataclass
class _Rotation:
    """One layer's rotation in HF row order: pairs (first[j], second[j]) turn by 2 pi turns_j per position."""

    d: int
    first: np.ndarray
    second: np.ndarray
    plan: object
    scale2: float

    def turns(self, seq_len):
        if self.plan is None:
            return np.zeros(0)
        return self.plan.turns_at(seq_len)


def _rotation(layer: LayerSpec, row_order: str, head_dim: int) -> _Rotation:
    if not layer.rope:
        return _Rotation(head_dim, np.zeros(0, int), np.zeros(0, int), None, 1.0)
    plan = layer.plan()
    r = layer.rotary_dim
    j = np.arange(r // 2)
    if layer.hf_layout(row_order) == "half":
        first, second = j, j + r // 2
    else:
        first, second = 2 * j, 2 * j + 1
    return _Rotation(head_dim, first, second, plan, plan.attention_scale ** 2)


def _entries(rot: _Rotation, distances: np.ndarray, seq_len):
    """`(diag [n, d], off {(i, k): [n]})` of M at these distances (n x d diagonal, one sine per pair)."""
    n = distances.shape[0]
    diag = np.ones((n, rot.d))
    off = {}
    if rot.plan is None:
        return diag, off
    turns = rot.turns(seq_len)
    phase = np.mod(distances[:, None] * turns[None, :], 1.0) * (2 * math.pi)  # exact fractional turns
    cos, sin = rot.scale2 * np.cos(phase), rot.scale2 * np.sin(phase)
    diag[:, rot.first] = cos
    diag[:, rot.second] = cos
    for idx, (i, k) in enumerate(zip(rot.first.tolist(), rot.second.tolist(), strict=True)):
        off[(i, k)] = sin[:, idx]
    return diag, off


def logit_rms_difference(a: _Rotation, b: _Rotation, distances, seq_len=None) -> np.ndarray:
    """`||M_a - M_b||_F / d` at each distance: the RMS logit difference for random unit-norm q, k."""
    distances = np.asarray(distances, dtype=np.float64).reshape(-1)
    da, oa = _entries(a, distances, seq_len)
    db, ob = _entries(b, distances, seq_len)
    total = np.sum((da - db) ** 2, axis=1)
    zero = np.zeros_like(distances)
    for key in set(oa) | set(ob):  # each off-diagonal sine sits in two entries (i, k) and (k, i)
        total += 2 * (oa.get(key, zero) - ob.get(key, zero)) ** 2
    return np.sqrt(total) / a.d


def _grid(limit: int, extra=()) -> np.ndarray:
    dense = np.arange(0, min(limit, 4096) + 1)
    geometric = np.unique(np.round(np.geomspace(4096, max(limit, 4097), 1 + int(math.log(max(limit, 4097) / 4096)
                                                                                  / math.log1p(2 ** -7)))))
    points = [dense, geometric[geometric <= limit]]
    if len(extra):
        extra = np.asarray(extra, dtype=np.float64)
        extra = extra[np.isfinite(extra) & (extra >= 0) & (extra <= limit)]
        points.append(np.round(extra))
    return np.unique(np.concatenate(points)).astype(np.int64)


def _band_points(a: _Rotation, b: _Rotation, limit):
    """Distances where a band's phase difference reaches a quarter / half turn, or its own angle does."""
    points = []
    for rot in (a, b):
        if rot.plan is not None:
            w = rot.turns(None)
            w = w[w > 0]
            points += [0.25 / w, 0.5 / w]
    if a.plan is not None and b.plan is not None and a.first.shape == b.first.shape:
        delta = np.abs(a.turns(None) - b.turns(None))
        delta = delta[delta > 0]
        points += [0.25 / delta, 0.5 / delta]
    return np.concatenate(points) if points else np.zeros(0)


def layer_horizon(a: _Rotation, b: _Rotation, *, limit: int = HORIZON_LIMIT, tol: float = BF16_LOGIT_TOL):
    """First position whose logits differ beyond `tol` (RMS over random unit q, k), or None up to `limit`."""
    seq_dependent = any(r.plan is not None and r.plan.seq_dependent for r in (a, b))
    if not seq_dependent:
        grid = _grid(limit, _band_points(a, b, limit))
        values = np.concatenate([logit_rms_difference(a, b, chunk) for chunk in np.array_split(grid, max(
            1, grid.size // 2048))])
        above = np.nonzero(values > tol)[0]
        if above.size == 0:
            return None
        hi = int(grid[above[0]])
        if above[0] == 0:
            return hi
        lo = int(grid[above[0] - 1])
        while hi - lo > 1:  # smallest integer distance above tolerance in (lo, hi]
            mid = (lo + hi) // 2
            if logit_rms_difference(a, b, [mid])[0] > tol:
                hi = mid
            else:
                lo = mid
        return hi
    coarse = np.unique(np.concatenate([np.arange(0, 257), np.round(np.geomspace(256, limit, 200))])).astype(np.int64)

    def worst(m):
        distances = np.unique(np.append(coarse[coarse <= m], m))
        return float(logit_rms_difference(a, b, distances, seq_len=int(m) + 1).max())

    previous = 0
    for m in coarse:
        if worst(m) > tol:
            lo, hi = previous, int(m)
            if hi == 0:
                return 0
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if worst(mid) > tol:
                    hi = mid
                else:
                    lo = mid
            return hi
        previous = int(m)
    return None


@dataclass
class Comparison:
    """The outcome of `compare_specs`.

    Attributes:
        same: no difference a bfloat16 logits comparison could see up to `limit`, and the same structure.
        differences: named differences (layer ranges, field, both values).
        notes: equivalences and differences below the detection threshold.
        horizon: the first position at which logits differ beyond bfloat16 tolerance (None: none up to limit).
        prompt_length: the shortest prompt a logits comparison needs to see it (`horizon + 1`).
        limit: the largest position searched.
    """

    same: bool
    differences: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    horizon: int | None = None
    prompt_length: int | None = None
    limit: int = HORIZON_LIMIT

    def as_dict(self):
        return {"same": self.same, "differences": self.differences, "notes": self.notes, "horizon": self.horizon,
                "prompt_length": self.prompt_length, "limit": self.limit, "tolerance": BF16_LOGIT_TOL}


def _span(layers):
    runs = []
    for i in sorted(layers):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _params(layer: LayerSpec) -> dict:
    _, params = resolve_scaling(layer.scaling, rotary_dim=layer.rotary_dim, base=layer.base)
    return params


def _fmt(value):
    if isinstance(value, (list, tuple, np.ndarray)):
        return f"[{len(value)} values]"
    return repr(value)


def _layer_fields(a: LayerSpec, b: LayerSpec, row_a: str, row_b: str) -> list:
    """`[(field, value_a, value_b)]` for every named field that differs."""
    if a.rope != b.rope:
        return [("rope", "RoPE" if a.rope else "NoPE", "RoPE" if b.rope else "NoPE")]
    if not a.rope:
        return []
    out = []
    la, lb = a.hf_layout(row_a), b.hf_layout(row_b)
    if la != lb:
        out.append(("layout (in HF row order)", la, lb))
    for name in ("rotary_dim", "head_dim", "base", "mrope_section", "mrope_interleaved", "mrope_axes"):
        va, vb = getattr(a, name), getattr(b, name)
        if va != vb:
            out.append((name, va, vb))
    pa, pb = _params(a), _params(b)
    if pa["rope_type"] != pb["rope_type"]:
        out.append(("scaling", pa["rope_type"], pb["rope_type"]))
    else:
        for key in sorted(set(pa) | set(pb)):
            va, vb = pa.get(key), pb.get(key)
            if isinstance(va, (list, tuple)) or isinstance(vb, (list, tuple)):
                equal = va is not None and vb is not None and np.array_equal(np.asarray(va, float), np.asarray(vb, float))
            else:
                equal = va == vb
            if not equal:
                out.append((f"scaling[{key!r}]", va, vb))
    sa, sb = a.plan().attention_scale, b.plan().attention_scale
    if sa != sb:
        out.append(("attention_scale", sa, sb))
    return out


def compare_specs(a: ModelSpec, b: ModelSpec, *, limit: int = HORIZON_LIMIT, tol: float = BF16_LOGIT_TOL) -> Comparison:
    """Compare two specs layer by layer (see the module docstring for the horizon).

    Structural differences (layer count, NoPE vs RoPE, layout in HF row order, head dim, rotary dim,
    multi-axis section) are differences whatever their horizon; parameter differences (base, scaling type
    and keys, attention scale) are differences when they give a horizon within `limit`, else notes.
    """
    out = Comparison(same=True, limit=limit)
    if len(a.layers) != len(b.layers):
        out.same = False
        out.differences.append(f"num_layers: {len(a.layers)} vs {len(b.layers)}")
        out.horizon, out.prompt_length = 0, 1
        return out
    grouped: dict = {}
    horizons = []
    structural = ("rope", "layout (in HF row order)", "rotary_dim", "head_dim", "mrope_section", "mrope_interleaved",
                  "mrope_axes")
    cache = {}
    for i, (la, lb) in enumerate(zip(a.layers, b.layers, strict=True)):
        key = (repr(la), repr(lb))
        if key not in cache:
            fields = _layer_fields(la, lb, a.row_order, b.row_order)
            horizon = None
            if fields:
                d = (la.head_dim if la.rope else lb.head_dim) or 0
                if la.rope and lb.rope and la.head_dim != lb.head_dim:
                    horizon = 0
                else:
                    horizon = layer_horizon(_rotation(la, a.row_order, d), _rotation(lb, b.row_order, d),
                                            limit=limit, tol=tol)
            cache[key] = (fields, horizon)
        fields, horizon = cache[key]
        if not fields:
            continue
        hard = any(f[0] in structural for f in fields) or horizon is not None
        for name, va, vb in fields:
            grouped.setdefault((hard, name, _fmt(va), _fmt(vb)), []).append(i)
        if hard and horizon is not None:
            horizons.append(horizon)
        elif hard:
            out.notes.append(f"layer {i}: structure differs but no logit difference beyond bfloat16 up to {limit}")
    for (hard, name, va, vb), layers in grouped.items():
        text = f"layers {_span(layers)}: {name}: {va} vs {vb}"
        if hard:
            out.differences.append(text)
        else:
            out.notes.append(text + f" (no logit difference beyond bfloat16 tolerance up to position {limit})")
    for k in sorted(set(a.attention_terms) & set(b.attention_terms)):
        if a.attention_terms[k] != b.attention_terms[k]:
            out.differences.append(f"attention term {k}: {a.attention_terms[k]!r} vs {b.attention_terms[k]!r}")
            horizons.append(0)
    for k in sorted(set(a.attention_terms) ^ set(b.attention_terms)):
        out.notes.append(f"attention term {k} is read from one source only")
    ma, mb = softmax_multiplier(a), softmax_multiplier(b)
    if not math.isclose(ma, mb, rel_tol=1e-12):
        out.differences.append(f"softmax scale multiplier (MLA mscale^2): {ma:.12g} vs {mb:.12g}")
        horizons.append(0)
    if a.row_order != b.row_order:
        out.notes.append(f"q/k row order {a.row_order} vs {b.row_order}: layouts compared in HF row order "
                         "(permute_qk_rows converts the weights)")
    out.same = not out.differences
    if horizons:
        out.horizon = min(horizons)
        out.prompt_length = out.horizon + 1
    return out


def softmax_multiplier(spec: ModelSpec) -> float:
    """What multiplies the softmax scale 1/sqrt(d) besides RoPE: DeepSeek's YaRN `mscale^2`.

    `softmax_mscale_all_dim` (read_hf_config for MLA yarn configs; transformers DeepseekV3Attention:
    `scaling *= m^2`, m = 0.1 mscale_all_dim ln(factor) + 1 with the first rotary layer's yarn factor) and
    `softmax_scale_multiplier` (read_megatron for MLA: megatron-core 0.16.1 multi_latent_attention.py
    l.125-126 applies m(rotary_scaling_factor, mscale_all_dim)^2 whatever rope_type says). 1.0 otherwise.
    """
    terms = spec.attention_terms
    out = float(terms.get("softmax_scale_multiplier", 1.0))
    all_dim = terms.get("softmax_mscale_all_dim")
    if all_dim:
        factor = next((float(layer.scaling["factor"]) for layer in spec.layers if layer.rope and layer.scaling
                       and layer.scaling.get("rope_type") == "yarn"), 1.0)
        m = 1.0 if factor <= 1 else 0.1 * float(all_dim) * math.log(factor) + 1.0
        out *= m * m
    return out


def band_probe_positions(turns, limit: int, *, boundaries=(), count: int = PROBE_COUNT) -> np.ndarray:
    """The one rule for where to probe rotary settings: `posenc spec`'s probes, and every logits check of
    `posenc port` (the rope-logits, MLA, GGUF and keras-hub checks) choose their positions here.

    For every frequency band j of every setting (`turns[k][j]` turns per position, `inv_freq / 2 pi`), the
    positions where that band has turned a quarter and a half turn (`0.25 / turns`, `0.5 / turns`): a wrong
    base, scaling or layout of that band moves its logits most there. Plus 0..7 (short prompts), the given
    `boundaries` (where the settings switch: the original context length and one before it) and the last
    position `limit - 1`. At most `count` positions: 0..7 kept, the rest spread log-uniformly.

    Args:
        turns: iterable of float arrays, one per rotary setting (layers that differ).
        limit: one past the last position to probe (the context length).
        boundaries: positions to include when below `limit`.
        count: the most positions returned.

    Returns:
        int64 sorted unique positions in `[0, limit)`.

    Examples:
        >>> band_probe_positions([[0.5, 0.01]], 64).tolist()
        [0, 1, 2, 3, 4, 5, 6, 7, 25, 50, 63]
    """
    limit = int(limit)
    points = [np.arange(min(8, limit)), [limit - 1], list(boundaries)]
    for band in turns:
        band = np.asarray(band, dtype=np.float64)
        band = band[band > 0]
        points += [0.25 / band, 0.5 / band]
    values = np.concatenate([np.asarray(p, dtype=np.float64) for p in points])
    values = np.unique(np.round(values[(values >= 0) & (values < limit)])).astype(np.int64)
    short, rest = values[values < 8], values[values >= 8]
    if rest.size > count - short.size:
        keep = np.unique(np.round(np.geomspace(1, rest.size, count - short.size)).astype(int) - 1)
        rest = rest[keep]
    return np.concatenate([short, rest])


def probe_positions(spec: ModelSpec, *, limit: int | None = None, count: int = PROBE_COUNT) -> np.ndarray:
    """Positions to probe a port at, chosen per frequency band up to the horizon the settings imply:
    `band_probe_positions` of every distinct rotary layer, with the original context length as a boundary
    (where dynamic NTK and LongRoPE switch). `limit` defaults to the spec's `max_position_embeddings`
    (capped at 2^20).

    Returns:
        int64 sorted unique positions.

    Examples:
        >>> from posenc.modelspec.canonical import LayerSpec, ModelSpec
        >>> spec = ModelSpec("x", "hf", "", [LayerSpec(True, "half", 8, 8, 10000.0)], max_position_embeddings=4096)
        >>> probe_positions(spec).tolist()[:8]
        [0, 1, 2, 3, 4, 5, 6, 7]
    """
    limit = int(min(limit or spec.max_position_embeddings or HORIZON_LIMIT, HORIZON_LIMIT))
    original = spec.original_max_position_embeddings
    layers = {repr(layer): layer for layer in spec.layers if layer.rope}.values()
    return band_probe_positions([layer.plan().turns for layer in layers], limit,
                                boundaries=[original - 1, original] if original else (), count=count)
