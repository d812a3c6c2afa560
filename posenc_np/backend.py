"""What a backend package (and the application) may take from the spec besides its public functions: the one
interface between `posenc_np` and `posenc_torch`, `posenc_tf`, `posenc_jax`, `posenc_mlx` and `posenc`.

Parameters, validation and messages live once, here in the spec; a backend imports them from this module
(and the spec's public modules' `check_*` helpers), never from a private module, so the spec's internals can
move without touching four packages. tests/test_layering.py fails on a backend that imports a private module
of `posenc_np`.
"""

from ._cache import cached_plan, mrope_key, spec_value
from ._dtypes import BACKEND_DTYPES, FLOAT_DTYPES, UNIT_ROUNDOFF, dtype_name, is_float, numpy_dtype
from ._freeze import freeze, thaw
from ._modules import (
    ALiBiConfig,
    CoPEConfig,
    DynamicConfig,
    FIREConfig,
    KERPLEConfig,
    LearnedConfig,
    RelativeConfig,
    RotaryConfig,
    SinusoidalConfig,
    T5BiasConfig,
)
from ._validate import (
    check_choice,
    check_finite,
    check_float_dtype,
    check_heads_divide,
    check_integer_dtype,
    check_integer_positions,
    check_nonnegative_positions,
    check_position_axes,
    check_position_pair,
    check_positions_in_table,
    check_positive_int,
    check_real_positions,
    check_rope_input,
    check_table,
    check_traced_integer,
)
from .learned import _keys as keys_cubic_kernel
from .learned import _renormalize_border as renormalize_border_weights

__all__ = [
    "spec_value", "mrope_key", "cached_plan",
    "BACKEND_DTYPES", "FLOAT_DTYPES", "UNIT_ROUNDOFF", "dtype_name", "is_float", "numpy_dtype", "freeze", "thaw",
    "ALiBiConfig", "CoPEConfig", "DynamicConfig", "FIREConfig", "KERPLEConfig", "LearnedConfig", "RelativeConfig",
    "RotaryConfig", "SinusoidalConfig", "T5BiasConfig",
    "check_choice", "check_finite", "check_float_dtype", "check_heads_divide", "check_integer_dtype", "check_integer_positions",
    "check_nonnegative_positions", "check_position_axes", "check_position_pair", "check_positions_in_table",
    "check_positive_int", "check_real_positions", "check_rope_input", "check_table", "check_traced_integer",
    "keys_cubic_kernel", "renormalize_border_weights",
]
