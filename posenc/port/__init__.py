"""Checkpoint porting with verification (`posenc port`) and mismatch diagnosis (`posenc doctor`).

See docs/port.md. Modules, each importing only those above it: `mapping` (the plan), `hf_config` (an HF
config as the port reads it), `checks` (verification), `preset` (the Preset type), `presets/` (one module
per family group), `core` (`port()`), `doctor`, `command` (the CLI). Checkpoint files are read and written
by `posenc.formats`. Everything here imports with NumPy only; safetensors, torch, h5py, flax and the posenc
backends are imported by the functions that need them.
"""

from ..formats import FORMATS, detect_format, open_reader, write_checkpoint
from .core import UNVERIFIED_SUFFIX, PortResult, port, report_text
from .doctor import Diagnosis, diagnose, diagnose_files
from .mapping import Op, Rules, build_plan
from .presets import PRESETS, PresetOptions, get_preset

__all__ = ["port", "report_text", "PortResult", "UNVERIFIED_SUFFIX", "Rules", "Op", "build_plan", "PRESETS",
           "PresetOptions", "get_preset", "FORMATS", "detect_format", "open_reader", "write_checkpoint",
           "Diagnosis", "diagnose", "diagnose_files"]
