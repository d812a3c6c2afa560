"""Reports of a suite run: terminal table, JSON, Markdown."""

from __future__ import annotations

import json
import platform
from collections import Counter

__all__ = ["terminal_table", "markdown_table", "json_report", "summary_line"]

_ORDER = {"error": 0, "fail": 1, "pass": 2, "skip": 3}
_COLUMNS = ("family", "convention", "case", "backend", "dtype", "mode", "max err", "err/tol", "tol", "status")


def _row(r):
    err = "" if r.max_abs_err is None else f"{r.max_abs_err:.2e}"
    ratio = "" if r.err_in_tol is None else ("inf" if r.err_in_tol == float("inf") else f"{r.err_in_tol:.3f}")
    tol = "" if r.tol is None else f"{r.tol:.1e}"
    return (r.family, r.convention, r.case, r.backend, r.dtype, r.mode, err, ratio, tol, r.status.upper())


def _sorted(records):
    return sorted(records, key=lambda r: (_ORDER[r.status], r.family, r.convention, r.case, r.backend, r.dtype, r.mode))


def summary_line(records) -> str:
    counts = Counter(r.status for r in records)
    failed = counts["fail"] + counts["error"]
    return f"{counts['pass']} passed, {failed} failed, {counts['skip']} skipped"


def terminal_table(records, *, verbose=False) -> str:
    """Failures first, each with its tolerance and message; then passes grouped by family.

    Without `verbose`, passing comparisons are folded into one line per (family, convention, case)
    with the worst error-to-tolerance ratio, so the table stays readable at thousands of rows.
    """
    lines = []
    bad = [r for r in _sorted(records) if r.status in ("fail", "error")]
    if bad:
        lines.append("FAILURES")
        lines += _format([_row(r) for r in bad])
        for r in bad:
            where = f" at index {tuple(r.worst_index)}" if r.worst_index else ""
            lines.append(f"  {r.family}/{r.convention}/{r.case} {r.backend} {r.dtype} {r.mode}: "
                         f"{r.message or 'error exceeds tolerance'}{where}; tol {r.tol_why}")
        lines.append("")
    good = [r for r in records if r.status == "pass"]
    if good:
        lines.append("PASSED" + ("" if verbose else " (worst err/tol per case over backends, dtypes, modes)"))
        if verbose:
            lines += _format([_row(r) for r in _sorted(good)])
        else:
            groups: dict = {}
            for r in good:
                groups.setdefault((r.family, r.convention, r.case), []).append(r)
            rows = []
            for (family, convention, case), rs in sorted(groups.items()):
                worst = max(rs, key=lambda r: r.err_in_tol or 0.0)
                backends = ",".join(sorted({r.backend for r in rs}))
                rows.append((family, convention, case, backends, f"{len(rs)} runs",
                             f"{worst.max_abs_err:.1e}", f"{worst.err_in_tol:.3f}",
                             f"{worst.backend}/{worst.dtype}/{worst.mode}"))
            lines += _format(rows, ("family", "convention", "case", "backends", "runs", "worst err",
                                    "err/tol", "worst at"))
        lines.append("")
    skipped = [r for r in records if r.status == "skip"]
    if skipped:
        reasons = Counter((r.backend, r.message) for r in skipped)
        for (backend, message), n in sorted(reasons.items()):
            lines.append(f"skipped {n} comparisons on {backend}: {message}")
    lines.append(summary_line(records))
    return "\n".join(lines)


def _format(rows, header=_COLUMNS):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header), fmt.format(*("-" * w for w in widths))] + [fmt.format(*map(str, r)) for r in rows]


def markdown_table(records) -> str:
    lines = ["# posenc check report", "", summary_line(records), "",
             "| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    lines += ["| " + " | ".join(_row(r)) + " |" for r in _sorted(records)]
    return "\n".join(lines) + "\n"


def json_report(records, *, argv, seed, seconds, versions) -> str:
    counts = Counter(r.status for r in records)
    return json.dumps({
        "argv": argv, "seed": seed, "seconds": round(seconds, 2), "python": platform.python_version(),
        "versions": versions, "summary": dict(counts), "records": [r.as_dict() for r in records],
    }, indent=1, default=str)
