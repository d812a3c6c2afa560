"""Checkpoint porting with verification (`posenc port`) and mismatch diagnosis (`posenc doctor`).

See docs/port.md. Everything here imports with NumPy only; safetensors, torch, h5py, flax and the
posenc backends are imported by the functions that need them.
"""

from .core import UNVERIFIED_SUFFIX, PortResult, port, report_text
from .doctor import Diagnosis, diagnose, diagnose_files
from .formats import FORMATS, detect_format, open_reader, write_checkpoint
from .mapping import Op, Rules, build_plan
from .presets import PRESETS, PresetOptions, get_preset

__all__ = ["port", "report_text", "PortResult", "UNVERIFIED_SUFFIX", "Rules", "Op", "build_plan", "PRESETS",
           "PresetOptions", "get_preset", "FORMATS", "detect_format", "open_reader", "write_checkpoint",
           "Diagnosis", "diagnose", "diagnose_files"]
