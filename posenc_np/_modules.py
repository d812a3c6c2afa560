"""Validated, framework-free configs of the module classes, one per class.

Every backend module (`posenc_torch` `nn.Module`, `posenc_tf` Keras layer, `posenc_jax` NNX module)
builds its config first and then binds only state from it: buffers, `add_weight`, `nnx.Param`.
So a constructor argument is validated once, here, with the messages of `posenc_np._validate` and
the spec modules, before any framework object exists; the three backends cannot drift apart.
This is einops' layer mixins (`einops/layers/_einmix.py`, `RearrangeMixin` in
`einops/layers/__init__.py`, v0.8): one framework-free class holds and checks the parameters, each
framework's class only adds its idiom.

A config is a frozen dataclass whose fields are the module's constructor arguments under their
contract names (`docs/api.md`, Modules). `as_dict()` (the constructor arguments as given) is what a
Keras layer's `get_config()` adds; `repr_args()` is what a torch module's `extra_repr()` prints;
`bind(module)` sets each field as the module attribute of the same name and the config itself as
`module.config`. Fields hold Python values (numbers, strings, bools, None; RoPE's `scaling` dict and
`mrope_section` too), and a config is hashable: Flax NNX keeps it as static data of the module's graph.
Spec-derived constants (a sinusoid table, a RoPE plan and cos/sin rows) are float64 NumPy, computed
here once; backends convert them to their tensors.

Example:
    >>> config = SinusoidalConfig(8, max_len=4)
    >>> config.as_dict()
    {'dim': 8, 'base': 10000.0, 'layout': 'interleaved', 'denominator': 'dim', 'max_len': 4}
    >>> config.cache_table().shape
    (4, 8)
    >>> ALiBiConfig(3, form="sideways")
    Traceback (most recent call last):
    ...
    ValueError: form='sideways' is not one of ['bloom', 'causal', 'symmetric']
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from ._freeze import freeze
from ._validate import check_positive_float, check_positive_int
from .alibi import check_alibi_args
from .fire import check_fire_eps
from .kerple import check_kerple_params
from .relative import check_relative_args
from .rope import resolve_rotary_dim, rope_cos_sin, rope_plan
from .sinusoidal import check_sinusoidal_args
from .sinusoidal import sinusoidal as _sinusoidal
from .t5 import check_t5_args

__all__ = [
    "ModuleConfig",
    "SinusoidalConfig",
    "LearnedConfig",
    "RotaryConfig",
    "ALiBiConfig",
    "T5BiasConfig",
    "RelativeConfig",
    "DynamicConfig",
    "KERPLEConfig",
    "FIREConfig",
    "CoPEConfig",
]


@dataclasses.dataclass(frozen=True)
class ModuleConfig:
    """Base of the configs: the dict, repr and binding shared by all of them."""

    def _set(self, **values) -> None:
        """Store normalised values (`__post_init__` of a frozen dataclass)."""
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _fields(self) -> dict:
        """`{field: value}` in constructor order, values as validated and normalised."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    def as_dict(self) -> dict:
        """The constructor arguments under their contract names: a Keras `get_config()`'s own keys, so
        `type(config)(**config.as_dict()) == config`."""
        return self._fields()

    def repr_args(self) -> str:
        """`"name=value, ..."` (values as `repr`): a torch module's `extra_repr()`."""
        return ", ".join(f"{name}={value!r}" for name, value in self._fields().items())

    def bind(self, module) -> None:
        """Set every field on `module` as the attribute of the same name, and `module.config = self`."""
        module.config = self
        for name, value in self._fields().items():
            setattr(module, name, value)


@dataclasses.dataclass(frozen=True)
class SinusoidalConfig(ModuleConfig):
    """`SinusoidalEncoding(dim, *, base, layout, denominator, max_len)`; see `posenc_np.sinusoidal`.

    `max_len`: rows of the precomputed cache (an integer >= 1), or None to always compute.
    """

    dim: int
    base: float = 10000.0
    layout: str = "interleaved"
    denominator: str = "dim"
    max_len: int | None = None

    def __post_init__(self):
        dim = check_sinusoidal_args(self.dim, self.base, self.layout, self.denominator)
        max_len = None if self.max_len is None else check_positive_int("max_len", self.max_len)
        self._set(dim=dim, base=float(self.base), max_len=max_len)

    @property
    def cache_rows(self) -> int:
        """Rows of the cache: `max_len`, or 0 without one."""
        return 0 if self.max_len is None else self.max_len

    def cache_table(self) -> np.ndarray:
        """float64 `[cache_rows, dim]`: the spec's rows 0..max_len-1, which backends store as float32."""
        rows = self.cache_rows
        return _sinusoidal(np.arange(rows), self.dim, base=self.base, layout=self.layout,
                           denominator=self.denominator).reshape(rows, self.dim)


@dataclasses.dataclass(frozen=True)
class LearnedConfig(ModuleConfig):
    """`LearnedEncoding(max_len, dim)`: a trainable `[max_len, dim]` table; see `posenc_np.learned`."""

    max_len: int
    dim: int

    def __post_init__(self):
        self._set(max_len=check_positive_int("max_len", self.max_len), dim=check_positive_int("dim", self.dim))

    @property
    def table_shape(self) -> tuple[int, int]:
        return (self.max_len, self.dim)


@dataclasses.dataclass(frozen=True)
class RotaryConfig(ModuleConfig):
    """`RotaryEmbedding(rotary_dim, *, base, layout, scaling, max_len, rotary_pct, head_dim, mrope_section,
    mrope_interleaved, mrope_frequencies, mrope_axes)`; see `posenc_np.apply_rope`.

    The field `rotary_dim` is the resolved width (`int(head_dim * rotary_pct)` with `rotary_pct`);
    `as_dict()` gives it back as given (None with `rotary_pct`), so the two never conflict on reload.
    `plan` is the spec's `RopePlan` (it validates every RoPE parameter). `max_len` rows of cos/sin are
    cached only where a table applies: a static scaling type (not `dynamic`/`longrope`, which depend on
    the sequence length) and 1-D positions (multi-axis RoPE always computes).
    """

    rotary_dim: int | None = None
    base: float = 10000.0
    layout: str = "half"
    scaling: dict | None = None
    max_len: int | None = None
    rotary_pct: float | None = None
    head_dim: int | None = None
    mrope_section: tuple | int | None = None
    mrope_interleaved: bool = False
    mrope_frequencies: str = "shared"
    mrope_axes: tuple | None = None

    def __post_init__(self):
        head_dim = None if self.head_dim is None else check_positive_int("head_dim", self.head_dim)
        rotary_dim = resolve_rotary_dim(head_dim, self.rotary_dim, self.rotary_pct)
        plan = rope_plan(rotary_dim, base=self.base, scaling=self.scaling, layout=self.layout,
                         mrope_section=self.mrope_section, mrope_interleaved=self.mrope_interleaved,
                         mrope_frequencies=self.mrope_frequencies, mrope_axes=self.mrope_axes)
        section = self.mrope_section  # as given (pair counts or a number of axes), made immutable
        if section is not None and not isinstance(section, numbers.Integral):
            section = tuple(int(s) for s in section)
        max_len = None if self.max_len is None else check_positive_int("max_len", self.max_len)
        self._set(rotary_dim=rotary_dim, base=float(self.base), max_len=max_len, head_dim=head_dim,
                  mrope_section=section, mrope_interleaved=bool(self.mrope_interleaved), plan=plan,
                  mrope_axes=None if self.mrope_axes is None else tuple(plan.axis_of_pair.tolist()))

    def __hash__(self):  # `scaling` is a dict: hash its frozen form
        return hash(tuple(freeze(value) for value in self._fields().values()))

    def as_dict(self) -> dict:
        out = self._fields()
        if self.rotary_pct is not None:
            out["rotary_dim"] = None
        if isinstance(self.mrope_section, tuple):
            out["mrope_section"] = list(self.mrope_section)  # as JSON gives it back
        if self.mrope_axes is not None:
            out["mrope_axes"] = list(self.mrope_axes)
        return out

    @property
    def cache_rows(self) -> int:
        """Rows of the module's own cos/sin cache: `max_len` where a table applies, else 0."""
        static = self.plan.kind == "static" and self.plan.axis_of_pair is None
        return self.max_len if static and self.max_len is not None else 0

    def cache_cos_sin(self) -> tuple[np.ndarray, np.ndarray]:
        """float64 `(cos, sin)`, each `[cache_rows, rotary_dim/2]` (one half: both halves are equal)."""
        rows, half = self.cache_rows, self.rotary_dim // 2
        cos, sin = rope_cos_sin(np.arange(rows), self.rotary_dim, base=self.base, scaling=self.scaling)
        return cos.reshape(rows, self.rotary_dim)[:, :half], sin.reshape(rows, self.rotary_dim)[:, :half]


@dataclasses.dataclass(frozen=True)
class ALiBiConfig(ModuleConfig):
    """`ALiBi(num_heads, *, form, max_bias)`; see `posenc_np.alibi_bias`. No weights."""

    num_heads: int
    form: str = "symmetric"
    max_bias: float = 8.0

    def __post_init__(self):
        self._set(num_heads=check_alibi_args(self.num_heads, self.form, self.max_bias), max_bias=float(self.max_bias))


@dataclasses.dataclass(frozen=True)
class T5BiasConfig(ModuleConfig):
    """`T5RelativeBias(num_heads, *, bidirectional, num_buckets, max_distance)`; see `posenc_np.t5_bias`."""

    num_heads: int
    bidirectional: bool = True
    num_buckets: int = 32
    max_distance: int = 128

    def __post_init__(self):
        check_t5_args(self.bidirectional, self.num_buckets, self.max_distance)
        self._set(num_heads=check_positive_int("num_heads", self.num_heads), bidirectional=bool(self.bidirectional),
                  num_buckets=int(self.num_buckets), max_distance=int(self.max_distance))

    @property
    def table_shape(self) -> tuple[int, int]:
        """`[num_buckets, num_heads]` (HF's `relative_attention_bias.weight` orientation)."""
        return (self.num_buckets, self.num_heads)


@dataclasses.dataclass(frozen=True)
class RelativeConfig(ModuleConfig):
    """`RelativePositionEmbedding(max_distance, dim, *, sign)`; see `posenc_np.relative_embeddings`."""

    max_distance: int
    dim: int
    sign: str = "key-query"

    def __post_init__(self):
        self._set(max_distance=check_relative_args(None, self.max_distance, self.sign),
                  dim=check_positive_int("dim", self.dim))

    @property
    def table_shape(self) -> tuple[int, int]:
        """`[2*max_distance + 1, dim]`."""
        return (2 * self.max_distance + 1, self.dim)


@dataclasses.dataclass(frozen=True)
class DynamicConfig(ModuleConfig):
    """`DynamicPositionEncoding(dim, *, base, layout, denominator)`; see `posenc_np.dynamic_position_encoding`."""

    dim: int
    base: float = 10000.0
    layout: str = "interleaved"
    denominator: str = "dim"

    def __post_init__(self):
        dim = check_sinusoidal_args(self.dim, self.base, self.layout, self.denominator)
        self._set(dim=dim, base=float(self.base))


@dataclasses.dataclass(frozen=True)
class KERPLEConfig(ModuleConfig):
    """`KERPLEBias(num_heads, *, kernel, eps)`; see `posenc_np.kerple_bias`.

    `eps` (> 0) is the floor the trainable r1, r2 are clamped to in every call, as KERPLE's code
    does; a floor of 0 would let training reach r = 0, where the kernel stops being conditionally
    positive definite.
    """

    num_heads: int
    kernel: str = "log"
    eps: float = 0.01

    def __post_init__(self):
        num_heads = check_positive_int("num_heads", self.num_heads)
        check_kerple_params((num_heads,), (num_heads,), self.kernel)
        self._set(num_heads=num_heads, eps=check_positive_float("eps", self.eps))

    @property
    def r2_max(self) -> float | None:
        """The ceiling of the trainable r2: 2 for the power kernel (`|i - j| ** r2` is conditionally positive
        definite for 0 < r2 <= 2), none for the log kernel."""
        return 2.0 if self.kernel == "power" else None


@dataclasses.dataclass(frozen=True)
class FIREConfig(ModuleConfig):
    """`FIREBias(num_heads, *, mlp_width, init_c, init_L, eps)`; see `posenc_np.fire_bias`.

    `init_c` and `init_L` initialise the trainable `c` and the fixed `L` scale (> 0 both: FIRE's
    `psi(x) = log(1 + |c x|)` is constant for c = 0); `eps` is 0 or > 0, as `fire_bias` takes it.
    """

    num_heads: int
    mlp_width: int = 32
    init_c: float = 0.1
    init_L: float = 512.0
    eps: float = 1e-6

    def __post_init__(self):
        self._set(num_heads=check_positive_int("num_heads", self.num_heads),
                  mlp_width=check_positive_int("mlp_width", self.mlp_width),
                  init_c=check_positive_float("init_c", self.init_c),
                  init_L=check_positive_float("init_L", self.init_L), eps=check_fire_eps(self.eps))


@dataclasses.dataclass(frozen=True)
class CoPEConfig(ModuleConfig):
    """`CoPE(dim, max_pos)`: a trainable `pos_emb [max_pos, dim]`; see `posenc_np.cope`."""

    dim: int
    max_pos: int

    def __post_init__(self):
        self._set(dim=check_positive_int("dim", self.dim), max_pos=check_positive_int("max_pos", self.max_pos))

    @property
    def table_shape(self) -> tuple[int, int]:
        return (self.max_pos, self.dim)
