"""The timing harness the benchmarks share: best time per path over round-robin rounds, and the generated
part of a docs page rewritten between its markers.

Imported as `_timing` by the scripts of this folder (`python benchmarks/bench_rope.py` puts the folder first
on sys.path); posenc itself comes from the installed package (`pip install -e .`).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

__all__ = ["timed_group", "write_between_markers"]


def timed_group(paths: dict, reps: int, warmup: int = 2, *, skip_failing: bool = False) -> dict:
    """`{label: best seconds}` of each path (a callable) over `reps` round-robin rounds, after `warmup` calls
    of each (which compile). Round robin spreads a busy machine's noise over every path alike.

    `skip_failing`: a path whose warm-up raises is reported on stdout and left out (a path a backend lacks)
    instead of ending the run.
    """
    paths = dict(paths)
    for label, fn in list(paths.items()):
        try:
            for _ in range(warmup):
                fn()
        except Exception as error:
            if not skip_failing:
                raise
            print(f"  {label}: not run ({type(error).__name__}: {str(error).splitlines()[0][:160]})", flush=True)
            del paths[label]
    best = {label: float("inf") for label in paths}
    for _ in range(reps):
        for label, fn in paths.items():
            start = time.perf_counter()
            fn()
            best[label] = min(best[label], time.perf_counter() - start)
    return best


def write_between_markers(doc: Path, name: str, text: str) -> None:
    """Replace what lies between `<!-- NAME:begin -->` and `<!-- NAME:end -->` in `doc` with `text`."""
    content = doc.read_text()
    begin, end = f"<!-- {name}:begin -->\n", f"<!-- {name}:end -->\n"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if not pattern.search(content):
        raise SystemExit(f"{doc} lacks the {begin.strip()} / {end.strip()} markers")
    doc.write_text(pattern.sub(lambda _: begin + text + end, content))
    print(f"wrote {doc}")
