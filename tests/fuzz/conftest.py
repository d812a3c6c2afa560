"""Hypothesis profiles of the fuzz tests, and a tally of what they tried.

* `ci` (the default): derandomized (the examples are a function of the test's name, the same on every
  run and machine), no example database, few examples per name, `print_blob` so that a failure prints
  the `@reproduce_failure(...)` line that replays it.
* `long` (`POSENC_FUZZ_PROFILE=long`): random seeds (pytest prints `--hypothesis-seed=N` to replay a
  failure), many more examples per name; run it before a release or after touching validation.

A failing example found either way becomes a regular test in `tests/fuzz/test_regressions.py`.
The tally (draws per backend, outcome kinds) is printed at the end of the session and written to
`$POSENC_FUZZ_REPORT` (JSON) when that variable is set; docs/reliability.md quotes it.
"""

from __future__ import annotations

import collections
import json
import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))

_COMMON = dict(deadline=None, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                                      HealthCheck.function_scoped_fixture, HealthCheck.differing_executors])
settings.register_profile("ci", max_examples=int(os.environ.get("POSENC_FUZZ_EXAMPLES", 6)), derandomize=True,
                          **_COMMON)
settings.register_profile("long", max_examples=int(os.environ.get("POSENC_FUZZ_EXAMPLES", 200)), derandomize=False,
                          **_COMMON)
PROFILE = os.environ.get("POSENC_FUZZ_PROFILE", "ci")
settings.load_profile(PROFILE)

#: (backend, name) -> Counter of outcome kinds ("equal", "same-error", ...)
TALLY: dict = collections.defaultdict(collections.Counter)


def pytest_terminal_summary(terminalreporter):
    if not TALLY:
        return
    per_backend = collections.Counter()
    kinds = collections.Counter()
    for (backend, _), counter in TALLY.items():
        per_backend[backend] += sum(counter.values())
        kinds.update(counter)
    names = {name for _, name in TALLY}
    terminalreporter.write_line(f"fuzz ({PROFILE}): {len(names)} names, draws per backend {dict(per_backend)}, "
                                f"outcomes {dict(kinds)}")
    path = os.environ.get("POSENC_FUZZ_REPORT")
    if path:
        Path(path).write_text(json.dumps({"profile": PROFILE, "per_backend": per_backend, "outcomes": kinds,
                                          "per_name": {f"{b}/{n}": dict(c) for (b, n), c in TALLY.items()}},
                                         indent=1, sort_keys=True))
