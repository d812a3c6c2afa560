"""Values the spec computes from parameters, once: the memo every backend reads its constants through
(`spec_value`), and the cached RoPE plan with the hashable key of its multi-axis keywords. Framework-free:
a backend's traced code reads these values, never the spec's NumPy code."""

from __future__ import annotations

from ._freeze import freeze, thaw
from .rope import rope_plan

__all__ = ["spec_value", "mrope_key", "cached_plan"]

_VALUES: dict = {}


def spec_value(key, make):
    """`make()` (NumPy arrays or Python values computed by the spec from parameters), once per `key`.

    `make` must close over Python values only (no framework arrays, no arrays of a trace); `key` must be
    hashable and name every parameter `make` reads (every backend shares this memo).
    """
    if key not in _VALUES:
        _VALUES[key] = make()
    return _VALUES[key]


def mrope_key(mrope_section=None, mrope_interleaved=False, mrope_frequencies="shared", mrope_axes=None):
    """The multi-axis keywords as one hashable key (None for 1-D RoPE); the spec's `rope_plan` validates them."""
    if mrope_section is None and not mrope_interleaved and mrope_frequencies == "shared" and mrope_axes is None:
        return None
    if mrope_axes is not None and hasattr(mrope_axes, "tolist"):  # a NumPy (or framework) table: plain ints
        mrope_axes = mrope_axes.tolist()
    return (freeze(mrope_section), mrope_interleaved, mrope_frequencies, freeze(mrope_axes))


def cached_plan(rotary_dim, base, scaling, layout, mrope=None):
    """The spec's `RopePlan` (it validates the parameters), computed once per parameters; `mrope` is
    `mrope_key(...)`. Called outside traces (module construction, argument checks); traced code reads the
    plan's values."""
    frozen = freeze(scaling)
    extra = {} if mrope is None else dict(mrope_section=thaw(mrope[0]), mrope_interleaved=mrope[1],
                                          mrope_frequencies=mrope[2], mrope_axes=thaw(mrope[3]))
    return spec_value(("rope_plan", rotary_dim, float(base), frozen, layout, mrope),
                      lambda: rope_plan(rotary_dim, base=base, scaling=thaw(frozen), layout=layout, **extra))
