"""`posenc spec`: one canonical reading of a model's position settings from every config dialect,
what each runtime computes for them, and how far apart two readings are (the detection horizon).

The package is the model-config reader behind the `posenc spec` command ("the spec" of the encodings
themselves is `posenc_np`). Modules: `canonical` (LayerSpec, ModelSpec), `readers` (HF, GGUF, Meta
params.json, keras-hub, MaxText, torchtitan, Megatron, NeMo), `runtimes` (vLLM, mlx-lm, llama.cpp, keras-hub,
Transformer Engine),
`source` (`read_source`, the dispatcher), `compare` (differences, horizon, per-band probe positions),
`command` (the CLI).
"""

from .canonical import Finding, LayerSpec, ModelSpec
from .compare import BF16_LOGIT_TOL, HORIZON_LIMIT, Comparison, compare_specs, probe_positions, softmax_multiplier
from .readers import (
    read_gguf,
    read_hf_config,
    read_keras_hub,
    read_maxtext,
    read_megatron,
    read_meta_params,
    read_nemo,
    read_torchtitan,
)
from .runtimes import RUNTIMES, runtime_spec
from .source import read_source

__all__ = ["Finding", "LayerSpec", "ModelSpec", "Comparison", "compare_specs", "probe_positions", "BF16_LOGIT_TOL",
           "HORIZON_LIMIT", "read_source", "read_hf_config", "read_gguf", "read_meta_params", "read_keras_hub",
           "read_maxtext", "read_torchtitan", "read_megatron", "read_nemo", "RUNTIMES", "runtime_spec",
           "softmax_multiplier"]
