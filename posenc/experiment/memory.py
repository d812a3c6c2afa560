"""Peak memory of one training run of `posenc experiment`: CUDA's allocator peak or the process's resident peak."""

from __future__ import annotations

import resource
import sys

import torch

__all__ = ["PeakMemory"]


class PeakMemory:
    """Peak memory of one training run.

    CUDA: `torch.cuda.max_memory_allocated` after a reset (tensor memory only). CPU on Linux: the
    process's resident-set high-water mark (`VmHWM`), reset by writing 5 to `/proc/self/clear_refs`
    before the run (after returning freed heap pages with glibc's `malloc_trim`), so each encoding gets
    its own peak; `growth_mib` is that peak minus the resident size at the start (the peak itself still
    includes the interpreter, torch and the corpus). Elsewhere `ru_maxrss`, the peak of the whole
    process so far. `method` says which.
    """

    def __init__(self, device: str):
        self.device, self.method, self.start_mib = device, None, None

    def __enter__(self):
        if self.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(self.device)
            self.method = "torch.cuda.max_memory_allocated"
            return self
        try:
            _release_freed_memory()
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.start_mib = self._status("VmRSS:") / 1024
            self.method = "peak RSS (VmHWM, reset per run)"
        except OSError:
            self.method = "ru_maxrss (process peak so far)"
        return self

    def __exit__(self, *exc):
        if self.method.startswith("torch.cuda"):
            self.mib = torch.cuda.max_memory_allocated(self.device) / 2**20
        elif self.method.startswith("peak RSS"):
            self.mib = self._status("VmHWM:") / 1024
        else:
            scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes, Linux KiB
            self.mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20
        return False

    @staticmethod
    def _status(key) -> int:
        """A `/proc/self/status` field in KiB."""
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
        raise OSError(f"no {key} in /proc/self/status")

    @property
    def growth_mib(self):
        """Peak minus the resident size when training started (None where unknown)."""
        if self.method.startswith("torch.cuda"):
            return self.mib
        return None if self.start_mib is None else self.mib - self.start_mib


def _release_freed_memory() -> None:
    """glibc keeps freed heap pages resident; `malloc_trim(0)` hands them back, so that the resident size
    at the start of a run is not inflated by the previous run and the growth measured is this run's."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the growth is then a lower bound
        pass
