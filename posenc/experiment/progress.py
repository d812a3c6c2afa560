"""The progress display of `posenc experiment`'s training runs."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """A one-line progress bar: redrawn with `\\r` on a terminal, a line per 10% otherwise."""

    def __init__(self, total: int, label: str, stream=None, enabled: bool = True):
        self.total, self.label, self.enabled = total, label, enabled
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.started, self.shown = time.perf_counter(), -1

    def update(self, step: int, loss: float) -> None:
        if not self.enabled:
            return
        done = step / self.total
        rate = step / max(time.perf_counter() - self.started, 1e-9)
        eta = (self.total - step) / max(rate, 1e-9)
        text = f"{self.label:<11} {step:>5}/{self.total} loss {loss:6.3f}  eta {eta:5.0f} s"
        if self.tty:
            bar = "#" * int(24 * done)
            self.stream.write(f"\r{text} [{bar:<24}]")
            if step == self.total:
                self.stream.write("\n")
            self.stream.flush()
        elif int(10 * done) > self.shown:
            self.shown = int(10 * done)
            print(text, file=self.stream, flush=True)
