"""Quiet frameworks: keep TensorFlow / XLA / absl C++ log lines out of the command line's output.

`quiet_frameworks()` wraps every `posenc` command (`posenc -v` turns it off); `QUIET_ENVIRONMENT` is also
passed to the worker processes of `posenc check`.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import sys
import threading

__all__ = ["quiet_frameworks", "QUIET_ENVIRONMENT"]

#: Environment a process sets before importing a framework so that its C++ logging stays quiet: TF's
#: own logging drops INFO and WARNING. Passed on to the worker processes of `posenc check`.
QUIET_ENVIRONMENT = {"TF_CPP_MIN_LOG_LEVEL": "2"}

# A C++ log line of TensorFlow / XLA: absl's format (`I0000 00:00:1700000000.123456   12345 port.cc:153] ...`),
# which TF 2.17+ prints before absl::InitializeLog() whatever TF_CPP_MIN_LOG_LEVEL says, and TF's older
# format (`2025-09-17 14:44:05.157831: I external/...cc:32] ...`). Fatal (F) lines are never dropped.
_LOG_LINE = re.compile(rb"^(?:[IWE]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\] "
                       rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] \S+:\d+\] "
                       rb"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
                       rb"|To enable the following instructions: .* rebuild TensorFlow with the appropriate)")
# a partial line that could still become a log line (they start so) is held back until its newline
_LOG_START = re.compile(rb"^[IWET0-9]")


def _forward_filtered(read_fd: int, write_fd: int, stop: threading.Event) -> None:
    """Copy `read_fd` to `write_fd` line by line, dropping framework log lines, until end of file, or until
    `stop` is set and nothing is left to read: a process that inherited the pipe and outlives the block
    (multiprocessing's resource tracker) keeps its write end open, so its end of file comes too late."""
    pending = b""
    while True:
        if not select.select([read_fd], [], [], 0.05)[0]:
            if stop.is_set():
                break
            continue
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        kept = b"".join(line + b"\n" for line in lines if not _LOG_LINE.match(line))
        if pending and not _LOG_START.match(pending):  # e.g. a progress display: no newline, shown at once
            kept, pending = kept + pending, b""
        if kept:
            os.write(write_fd, kept)
    if pending and not _LOG_LINE.match(pending):
        os.write(write_fd, pending)
    os.close(read_fd)


@contextlib.contextmanager
def quiet_frameworks(enabled: bool = True):
    """Keep the frameworks' own log lines out of the output while the block runs (when `enabled`).

    Sets `QUIET_ENVIRONMENT` (values the user set are kept) before any framework is imported, and routes
    file descriptor 2 through a filter thread that drops C++ log lines (TensorFlow / XLA / absl), which
    no environment variable silences since TF 2.17. Python's own `sys.stderr` keeps writing to the real
    stream directly when it is the process's stderr, so messages, tracebacks and the progress display
    (a terminal stays a terminal) are untouched. Worker processes inherit both. Restores everything on exit.
    """
    if not enabled:
        yield
        return
    saved_env = {k: os.environ.get(k) for k in QUIET_ENVIRONMENT}
    for key, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    try:
        real = os.dup(2)
    except OSError:  # no stderr at all: nothing to filter
        real = None
    thread = swapped = None
    stop = threading.Event()
    try:
        if real is not None:
            read_fd, write_fd = os.pipe()
            thread = threading.Thread(target=_forward_filtered, args=(read_fd, real, stop), daemon=True,
                                      name="posenc-quiet-frameworks")
            thread.start()
            sys.stderr.flush()
            os.dup2(write_fd, 2)
            os.close(write_fd)
            if sys.stderr is sys.__stderr__ and sys.stderr is not None:
                swapped = sys.stderr
                sys.stderr = open(os.dup(real), "w", buffering=1, encoding=swapped.encoding,
                                  errors=swapped.errors)
        yield
    finally:
        if swapped is not None:
            sys.stderr.flush()
            sys.stderr.close()
            sys.stderr = swapped
        if real is not None:
            sys.stderr.flush()
            os.dup2(real, 2)  # closes this process's write end; what the workers wrote is in the pipe already
            stop.set()
            if thread is not None:
                thread.join(timeout=5)
            os.close(real)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
