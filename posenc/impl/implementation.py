"""`Implementation`: an implementation of the contract that is not one of posenc's backends.

`posenc check --impl SPEC` runs the suite's cases through one: a library's adapter (`posenc.impl.builtin`)
or the user's own module. It names the framework its functions take and return (the NumPy inputs of a
case reach them through `posenc.adapters.adapter(framework)`), the contract functions it provides, and
what it declares it can do: layouts, dtypes, the precision class of its angles and, for a kernel that
reads a cos/sin table, the table length. Everything outside the declaration is a skip with its reason;
everything inside it is judged.
"""

from __future__ import annotations

import inspect
from types import MappingProxyType
from typing import Callable, Mapping

from ..adapters import NotSupported

__all__ = ["Implementation", "ImplementationUnavailable", "ANGLE_CLASSES", "ROPE_LAYOUTS", "TABLE_ROWS", "NotSupported",
           "accepts_keyword", "contract_default", "passed_keywords"]

#: The precision classes of RoPE angles (docs/tolerances.md, "Other implementations"):
#: "float64" posenc's own goal (1e-6 rad at any position), "float32" angles formed as a float32 product
#: `p * inv_freq`, "table" posenc builds the cos/sin tables in float64 and only their application is judged.
ANGLE_CLASSES = ("float64", "float32", "table")
ROPE_LAYOUTS = ("half", "interleaved")
#: The table length of built-ins whose cos/sin cache length is theirs to choose, and the length the edge
#: set's "past the table" positions go past (`posenc.check.cases_edge`).
TABLE_ROWS = 4096


class ImplementationUnavailable(ImportError):
    """A built-in implementation whose library is not installed, or fails to import (the message says which)."""


def _contract_names() -> frozenset:
    import posenc_np

    return frozenset(posenc_np.__all__)


def _known_frameworks() -> tuple:
    from ..adapters import ADAPTERS

    return tuple(ADAPTERS)


def _check_subset(what, values, allowed):
    if values is None:
        return None
    if isinstance(values, str):
        values = (values,)
    values = tuple(values)
    unknown = [v for v in values if v not in allowed]
    if unknown or not values:
        raise ValueError(f"{what}={list(values)!r}: {'unknown ' + ', '.join(map(repr, unknown)) if unknown else 'empty'}"
                         f"; choose from {', '.join(allowed)} (or None: all)")
    return values


class Implementation:
    """An implementation of (part of) the contract, checked by `posenc check --impl`.

    Args:
        name: what the reports call it (records carry it as `backend`).
        framework: the framework its functions take and return arrays of: "numpy", "torch", "tf",
            "jax" (any name of `posenc.adapters.ADAPTERS`).
        functions: contract name -> callable with that name's contract signature, e.g.
            `{"apply_rope": my_rope, "alibi_bias": my_alibi}`. Keywords a case passes that equal the
            contract function's default are not passed; any other keyword the callable does not accept
            makes the case a skip.
        version: the version the records carry as `impl` (a string), None when unknown.
        layouts: the RoPE layouts it implements ("half", "interleaved"); None: all.
        dtypes: the dtypes it takes ("float32", "bfloat16", "float16", "float64"); None: all.
        angles: the precision class of its RoPE angles, one of `ANGLE_CLASSES`.
        max_positions: the length of the position table it reads (a cos/sin cache of that many rows):
            cases with positions at or past it are skips, and the edge cases check that such positions
            raise. None: no table (any position is valid).
        description: one line for `posenc check --impl list` and the reports.
        inplace: the functions write their result into their input (a fused kernel's `inplace=True`): the
            aliasing cases then do not require the inputs unchanged after the forward.
        table_grads: the functions differentiate the tables they are given (cos/sin, frequencies,
            slopes, a bias table); False makes the table-gradient cases skips.
        differentiable: the functions can be differentiated at all; False (inference-only) makes every
            gradient and aliasing case a skip.
        refusals: the library's own exception types for refusing an input (ONNX Runtime's
            `InvalidArgument`, an assert naming the table length): with a declared table, raising one of
            them where a case accepts a refusal (`Case.refusals`) is a correct refusal too.

    Raises:
        ValueError: an empty name, an unknown framework, contract name, layout, dtype or angle class, a
            non-positive `max_positions`.
        TypeError: a function that is not callable, a non-string version.
    """

    def __init__(self, name: str, framework: str, functions: Mapping[str, Callable], *, version=None,
                 layouts=None, dtypes=None, angles: str = "float64", max_positions: int | None = None,
                 description: str = "", inplace: bool = False, table_grads: bool = True,
                 differentiable: bool = True, refusals: tuple = ()):
        from posenc_np.backend import BACKEND_DTYPES

        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"name={name!r} must be a non-empty string")
        if framework not in _known_frameworks():
            raise ValueError(f"framework={framework!r} is not one of {list(_known_frameworks())}")
        if not isinstance(functions, Mapping) or not functions:
            raise ValueError(f"functions={functions!r} must be a non-empty mapping of contract name -> callable")
        contract = _contract_names()
        for key, fn in functions.items():
            if key not in contract:
                raise ValueError(f"functions key {key!r} is not a contract function name (posenc_np.__all__)")
            if not callable(fn):
                raise TypeError(f"functions[{key!r}]={fn!r} is not callable")
        if version is not None and not isinstance(version, str):
            raise TypeError(f"version={version!r} must be a string or None")
        if angles not in ANGLE_CLASSES:
            raise ValueError(f"angles={angles!r} is not one of {list(ANGLE_CLASSES)}")
        if max_positions is not None and (isinstance(max_positions, bool) or not isinstance(max_positions, int)
                                          or max_positions < 1):
            raise ValueError(f"max_positions={max_positions!r} must be a positive int or None")
        self.name = name
        self.framework = framework
        self.functions = MappingProxyType(dict(functions))
        self.version = version
        self.layouts = _check_subset("layouts", layouts, ROPE_LAYOUTS)
        self.dtypes = _check_subset("dtypes", dtypes, ("float64", *BACKEND_DTYPES))
        self.angles = angles
        self.max_positions = max_positions
        self.description = description
        for flag, value in (("inplace", inplace), ("table_grads", table_grads), ("differentiable", differentiable)):
            if not isinstance(value, bool):
                raise TypeError(f"{flag}={value!r} must be True or False")
        self.inplace, self.table_grads, self.differentiable = inplace, table_grads, differentiable
        refusals = tuple(refusals)
        if not all(isinstance(r, type) and issubclass(r, BaseException) for r in refusals):
            raise TypeError(f"refusals={refusals!r} must be exception types")
        self.refusals = refusals
        #: the kernels the training probes call with tensors that require grad: `(fn, layout)` with transformers'
        #: signature (`from_rotary_kernel`), and angle-fed `fn(t [s, b, h, r], freqs [s, 1, 1, r])` (TE, Megatron)
        self.kernel = self.angle_kernel = None

    def __repr__(self):
        return (f"Implementation({self.name!r}, {self.framework!r}, [{', '.join(self.functions)}], "
                f"version={self.version!r}, angles={self.angles!r})")

    # declared capabilities ---------------------------------------------------------------------------
    @property
    def may_refuse(self) -> bool:
        """Whether raising on an input can be a correct refusal: only an implementation that declares a
        table (`max_positions`) may refuse positions outside it."""
        return self.max_positions is not None

    def refused(self, error: BaseException, accepted: tuple) -> bool:
        """Whether raising `error` is a correct refusal of a case that accepts the exception types `accepted`
        (none: the case accepts no refusal): a declared table, and an accepted or declared exception type."""
        return self.may_refuse and bool(accepted) and isinstance(error, accepted + self.refusals)

    def refusal(self, function: str | None, kwargs: Mapping, dtype: str, args=()) -> str | None:
        """The one capability rule: why this implementation does not run a case, None when it does.

        `function` is the case's contract function, or None for a case that calls several (its keywords
        are then checked call by call, `keyword_refusal`). The reasons: `why_not` (function, dtype, layout,
        keyword), then integer inputs outside the declared table (`max_positions`).
        """
        if function is None:
            reason = (f"{self.name} declares dtypes {', '.join(self.dtypes)}, not {dtype}"
                      if self.dtypes is not None and dtype not in self.dtypes else None)
        else:
            reason = self.why_not(function, kwargs, dtype)
        return reason or self.table_refusal(args)

    def table_refusal(self, args) -> str | None:
        """Why integer inputs `args` (positions) are outside the declared table, None when inside or no table."""
        if self.max_positions is None:
            return None
        for a in args:
            if hasattr(a, "dtype") and getattr(a.dtype, "kind", "") in "iu" and a.size:
                low, high = int(a.min()), int(a.max())
                if high >= self.max_positions or low < 0:
                    return (f"positions {low}..{high} are outside {self.name}'s declared table of "
                            f"{self.max_positions} rows (the edge set checks what it does there)")
        return None

    def keyword_refusal(self, function: str, fn: Callable, kwargs: Mapping) -> str | None:
        """Why `fn` (this implementation's `function`) cannot take the keywords a case passes, None when it can."""
        refused = [k for k in passed_keywords(function, kwargs) if not accepts_keyword(fn, k)]
        if refused:
            return f"{function} of {self.name} does not accept keyword {', '.join(map(repr, refused))}"
        return None

    def why_not(self, function: str, kwargs: Mapping, dtype: str) -> str | None:
        """The reason this implementation cannot run `function(**kwargs)` in `dtype`, None when it can.

        The reasons, in order: the function is absent, the dtype or the RoPE layout (the contract's
        default when `kwargs` has none) is outside the declared ones, the callable does not accept a
        keyword that `passed_keywords` keeps.
        """
        fn = self.functions.get(function)
        if fn is None:
            return f"{self.name} provides no {function}"
        if self.dtypes is not None and dtype not in self.dtypes:
            return f"{self.name} declares dtypes {', '.join(self.dtypes)}, not {dtype}"
        layout = kwargs.get("layout", contract_default(function, "layout"))
        if (self.layouts is not None and function in _ROPE_FUNCTIONS and isinstance(layout, str)
                and layout not in self.layouts):
            return f"{self.name} declares layouts {', '.join(self.layouts)}, not {layout}"
        return self.keyword_refusal(function, fn, kwargs)

    # a kernel with transformers' signature -------------------------------------------------------------
    @classmethod
    def from_rotary_kernel(cls, fn: Callable, name: str, *, framework: str = "torch", layout: str = "half",
                           version=None, dtypes=None, max_positions: int | None = None,
                           kv_heads: int | None = None, **declarations) -> Implementation:
        """An `Implementation` of `apply_rope` from a kernel `fn(q, k, cos, sin, unsqueeze_dim=1) -> (q, k)`.

        The signature of transformers' `apply_rotary_pos_emb` (models/llama/modeling_llama.py), the one
        hub kernels replace. For each case posenc builds `cos`/`sin` `[batch, seq, rotary_dim]` from the
        float64 spec (`posenc_np.rope_cos_sin`: scalings included, the attention factor folded into both
        as transformers does), casts them to the inputs' dtype and calls `fn(q, k, cos, sin,
        unsqueeze_dim=...)` with `q = x` and `k = x` with its heads reversed; both outputs must equal the
        spec (`k`'s heads put back). What it can express (the rest are skips with the reason):

        * 4-D `x` `[batch, heads, seq, dim]` (`unsqueeze_dim=1`) or `[batch, seq, heads, dim]`
          (`unsqueeze_dim=2`), positions equal over heads;
        * partial rotary: the kernel is given the first `rotary_dim` channels and the rest pass through,
          as transformers' models slice before calling it (`apply_rotary_pos_emb` rotates the whole last
          dim of what it is given);
        * multi-axis RoPE: the tables carry each pair's own axis, as transformers' Qwen2-VL / Qwen3-VL
          build them;
        * `layout`: "half" (`rotate_half`) or "interleaved" (tables repeated per pair, GPT-J / GLM).

        Args:
            fn: the kernel.
            name: the implementation's name in the reports.
            framework: the framework of `q`, `k`, `cos`, `sin`.
            layout: the one layout the kernel implements.
            version, dtypes, max_positions: as `Implementation` (`max_positions`: the kernel only ever
                sees tables of the case's own positions, so this is for a kernel that wraps its own cache).
            kv_heads: grouped-query attention: `k` holds only the last `kv_heads` heads of `x` (the cases
                have 2 heads, so 1 checks a single key head, where Liger once left k unrotated).
            declarations: `inplace`, `table_grads`, `differentiable`, `refusals`, as `Implementation`. The
                kernel itself is kept (`kernel`): the training probes call it with tensors that require grad.
        """
        from .rotary_kernel import rotary_kernel_apply_rope

        if layout not in ROPE_LAYOUTS:
            raise ValueError(f"layout={layout!r} is not one of {list(ROPE_LAYOUTS)}")
        if not callable(fn):
            raise TypeError(f"fn={fn!r} is not callable")
        if kv_heads is not None and (isinstance(kv_heads, bool) or not isinstance(kv_heads, int) or kv_heads < 1):
            raise ValueError(f"kv_heads={kv_heads!r} must be a positive int or None")
        apply = rotary_kernel_apply_rope(fn, framework=framework, layout=layout, kv_heads=kv_heads)
        impl = cls(name, framework, {"apply_rope": apply}, version=version, layouts=(layout,), dtypes=dtypes,
                   angles="table", max_positions=max_positions,
                   description=f"rotary kernel {getattr(fn, '__qualname__', fn)!s} (transformers' signature)",
                   **declarations)
        impl.kernel = (fn, layout)
        return impl

    # a FlexAttention score_mod ------------------------------------------------------------------------
    @classmethod
    def from_score_mod(cls, score_mod_or_factory: Callable, name: str, *, family: str = "alibi",
                       factory: bool = False, form: str = "causal", version=None,
                       **declarations) -> Implementation:
        """An `Implementation` of a bias family's bias and of `attention` from a FlexAttention score_mod
        `score_mod(score, b, h, q_idx, kv_idx)`: judged as the bias it adds (on score 0 over the case's heads and
        positions) and through `flex_attention` against `attention(bias=...)` (`posenc.impl.score_mod`).
        `family`: "alibi" (`alibi_bias`) or "t5" (`t5_bias`); `factory=True`: it builds the score_mod, `f(num_heads)`
        (attn-gym's `generate_alibi_bias`) or `f(table, bidirectional=, num_buckets=, max_distance=)`; `form`:
        the ALiBi form it computes (attn-gym's `(kv_idx - q_idx) * m` is "causal"); the rest as `Implementation`."""
        from .score_mod import score_mod_functions

        functions = score_mod_functions(score_mod_or_factory, family, factory=factory, form=form)
        label = getattr(score_mod_or_factory, "__qualname__", score_mod_or_factory)
        declarations.setdefault("description", f"FlexAttention score_mod {label!s} ({family})")
        return cls(name, "torch", functions, version=version, **declarations)


#: Contract functions whose `layout` keyword is a RoPE layout (the declared `layouts` apply to them).
_ROPE_FUNCTIONS = frozenset({"apply_rope", "rope_cos_sin", "apply_mla_rope", "rerotate", "apply_xpos", "RotaryEmbedding"})


def contract_default(function: str, keyword: str):
    """The default of `keyword` in the contract function `posenc_np.<function>` (`inspect.Parameter.empty`
    when it has none or is not a function)."""
    import posenc_np

    try:
        param = inspect.signature(getattr(posenc_np, function)).parameters.get(keyword)
    except (AttributeError, TypeError, ValueError):
        return inspect.Parameter.empty
    return inspect.Parameter.empty if param is None else param.default


def _is_default(function, keyword, value) -> bool:
    default = contract_default(function, keyword)
    if default is inspect.Parameter.empty or hasattr(value, "shape"):
        return False
    try:
        return value is default or (type(value) is type(default) and bool(value == default))
    except (TypeError, ValueError):  # a value whose == is not a truth value (an array-like): passed on
        return False


def passed_keywords(function: str, kwargs: Mapping) -> dict:
    """The keywords a case passes to an implementation: those not equal to the contract function's default
    (a kernel without a `scaling` keyword still runs the unscaled cases)."""
    return {k: v for k, v in kwargs.items() if not _is_default(function, k, v)}


def accepts_keyword(fn: Callable, keyword: str) -> bool:
    """Whether `fn` takes `keyword` (by name, or through `**kwargs`); True when its signature is unreadable."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins without a signature: let the call decide
        return True
    if keyword in params and params[keyword].kind in (inspect.Parameter.KEYWORD_ONLY,
                                                      inspect.Parameter.POSITIONAL_OR_KEYWORD):
        return True
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
