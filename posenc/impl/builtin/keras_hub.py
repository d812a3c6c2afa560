"""keras-hub (checked on keras-hub 0.32.0, Keras 3 on the TensorFlow backend): its position layers.

* `apply_rope`: `keras_hub.layers.RotaryEmbedding(max_wavelength=base, scaling_factor, rope_type, ...,
  sequence_axis)` called with `positions [batch, seq]`; layout "half" only (`ops.split(x, 2)`), no
  multi-axis RoPE (the function takes no `mrope_*` keyword, so those cases are skips). Scalings: none,
  linear (`scaling_factor = factor`), `keras-hub-dynamic` (`rope_type="dynamic"`), HF `yarn` without
  `attention_factor`/`mscale` keys (keras-hub 0.32 computes HF's frequencies and HF's default attention
  scale 0.1 ln(factor) + 1) and `keras-hub-yarn` (`truncate=False`; posenc's name for keras-hub <= 0.31's
  yarn). Partial rotary: the layer rotates the whole feature axis, so the first `rotary_dim` channels
  are passed and the rest concatenated back, as a model slices.
* `sinusoidal` (layout "interleaved", denominator "dim"): `SinePositionEncoding(max_wavelength=base)`
  called with the positions cast to its compute dtype, as it casts its own.
* `alibi_bias`: `AlibiBias()` adds `m_h (j - (k - 1))` for keys 0..k-1 whatever the query, which is the
  contract's form "causal" only when every query sits at the last key (a decode step); other cases are
  skips with that reason.

The layers run in the inputs' dtype (`dtype=` of the layer). Precision class "float32": RoPE angles are a
float32 einsum of float32 positions and inverse frequencies; cos/sin are cast to the compute dtype.
"""

from __future__ import annotations

import numpy as np

from ...adapters import NotSupported, adapter
from ..implementation import Implementation, ImplementationUnavailable
from ..rotary_kernel import hf_position_ids
from ._kernel_inputs import rotary_width, rotate_partial

DISTRIBUTION = "keras-hub"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ('keras-hub',)

#: Keras backend name -> posenc adapter name
_FRAMEWORKS = {"tensorflow": "tf", "jax": "jax", "torch": "torch", "numpy": "numpy"}


def _keras():
    try:
        import keras
        import keras_hub
    except ImportError as error:
        raise ImplementationUnavailable(f"--impl keras-hub: {error}") from error
    return keras, keras_hub


def framework() -> str:
    keras, _ = _keras()
    return _FRAMEWORKS[keras.backend.backend()]


def rotary_options(scaling) -> dict:
    """RotaryEmbedding keyword options for a contract scaling dict (NotSupported for the others)."""
    if scaling is None:
        return {}
    kind = scaling.get("rope_type", scaling.get("type"))
    rest = {k: v for k, v in scaling.items() if k not in ("rope_type", "type")}
    if kind == "linear" and set(rest) == {"factor"}:
        return {"rope_type": "linear", "scaling_factor": float(rest["factor"])}
    if kind == "keras-hub-dynamic" and set(rest) == {"factor"}:
        return {"rope_type": "dynamic", "scaling_factor": float(rest["factor"])}
    yarn_keys = {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "truncate"}
    if kind in ("yarn", "keras-hub-yarn") and set(rest) <= yarn_keys:
        return {"rope_type": "yarn", "scaling_factor": float(rest["factor"]),
                "original_max_position_embeddings": int(rest["original_max_position_embeddings"]),
                "beta_fast": float(rest.get("beta_fast", 32.0)), "beta_slow": float(rest.get("beta_slow", 1.0)),
                "truncate": bool(rest.get("truncate", kind == "yarn"))}
    raise NotSupported(f"keras-hub's RotaryEmbedding has no form of scaling {scaling!r}")


def apply_rope(x, positions, *, base=10000.0, layout="half", rotary_dim=None, scaling=None, rotary_pct=None):
    """The contract's `apply_rope` through `keras_hub.layers.RotaryEmbedding`."""
    _, keras_hub = _keras()
    if layout != "half":
        raise NotSupported("keras-hub's RotaryEmbedding rotates halves (layout 'half') only")
    ad = adapter(framework())
    x_np = np.asarray(ad.to_numpy(x))
    r = rotary_width(x_np.shape[-1], rotary_dim, rotary_pct)
    ids, heads_axis = hf_position_ids(np.asarray(ad.to_numpy(positions)), x_np.shape)
    layer = keras_hub.layers.RotaryEmbedding(max_wavelength=float(base), sequence_axis=3 - heads_axis,
                                             dtype=str(x_np.dtype), **rotary_options(scaling))
    def rotate(part):
        return np.asarray(ad.to_numpy(layer(ad.from_numpy(part), positions=ad.from_numpy(ids))))

    return ad.from_numpy(rotate_partial(rotate, x_np, r, lambda parts: np.concatenate(parts, axis=-1)))


def sinusoidal(positions, dim, *, base=10000.0, layout="interleaved", denominator="dim", dtype=None):
    """The contract's `sinusoidal` through `keras_hub.layers.SinePositionEncoding`."""
    _, keras_hub = _keras()
    if layout != "interleaved" or denominator != "dim":
        raise NotSupported("keras-hub's SinePositionEncoding is layout 'interleaved' (sin on even channels) "
                           f"with denominator 'dim'; got layout={layout!r}, denominator={denominator!r}")
    ad = adapter(framework())
    p = np.asarray(ad.to_numpy(positions))
    if p.ndim not in (1, 2):
        raise NotSupported(f"SinePositionEncoding takes [seq] or [batch, seq] positions, got {list(p.shape)}")
    compute = dtype or "float32"
    layer = keras_hub.layers.SinePositionEncoding(max_wavelength=float(base), dtype=compute)
    rows = p if p.ndim == 2 else p[None]
    inputs = np.zeros((*rows.shape, int(dim)), dtype=np.dtype("float32"))
    with np.errstate(over="ignore"):  # float16 positions past 65504 become inf, as the layer's own cast makes them
        cast = rows.astype(adapter("numpy").dtype(compute))
    out = layer(ad.from_numpy(inputs.astype(adapter("numpy").dtype(compute))), positions=ad.from_numpy(cast))
    out = np.asarray(ad.to_numpy(out))
    return ad.from_numpy(out if p.ndim == 2 else out[0])


def alibi_bias(num_heads, q_positions, k_positions, *, form="symmetric", dtype=None):
    """The contract's `alibi_bias` through `keras_hub.layers.AlibiBias` (a decode step, form "causal")."""
    _, keras_hub = _keras()
    ad = adapter(framework())
    q = np.asarray(ad.to_numpy(q_positions))
    k = np.asarray(ad.to_numpy(k_positions))
    if (form != "causal" or q.ndim != 1 or k.ndim != 1 or not np.array_equal(k, np.arange(k.size))
            or not np.all(q == k.size - 1)):
        raise NotSupported("keras-hub's AlibiBias adds m_h (j - (k - 1)) for keys 0..k-1 whatever the query: "
                           "the contract's form 'causal' with every query at the last key only; got "
                           f"form={form!r}, queries {q.tolist()[:4]}..., keys of shape {list(k.shape)}")
    compute = dtype or "float32"
    layer = keras_hub.layers.AlibiBias(dtype=compute)
    scores = np.zeros((1, int(num_heads), q.size, k.size), dtype=adapter("numpy").dtype(compute))
    return layer(ad.from_numpy(scores))[0]


def load() -> Implementation:
    _, keras_hub = _keras()
    return Implementation("keras-hub", framework(),
                          {"apply_rope": apply_rope, "sinusoidal": sinusoidal, "alibi_bias": alibi_bias},
                          version=keras_hub.__version__, layouts=("half",), angles="float32",
                          # the layers' outputs come back through NumPy here: the forward is judged, not training
                          differentiable=False,
                          description="RotaryEmbedding, SinePositionEncoding, AlibiBias layers")


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = ('`pip install --no-deps keras-hub` (requirements-nodeps.txt: its tensorflow-text would '
           'replace tensorflow-cpu)')
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = ()

#: the verdicts at the pinned version, as data: every float32 comparison of the RoPE registry that fails
#: or errors, "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
EXPECTED = {}
