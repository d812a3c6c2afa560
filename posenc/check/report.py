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


def terminal_table(records, *, verbose=False, summary=True) -> str:
    """Failures first, each with its tolerance and message; then passes grouped by family; then (with
    `summary`) the summary line.

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
                         f"{r.message or 'error exceeds tolerance'}{where}; tol {r.tol_why}{_angle(r, '; ')}"
                         + (f"; diagnosis: {r.diagnosis}: {r.diagnosis_detail}" if r.diagnosis else ""))
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
            angles = any(r.worst_angle_err is not None for r in good)
            for (family, convention, case), rs in sorted(groups.items()):
                worst = max(rs, key=lambda r: r.err_in_tol or 0.0)
                backends = ",".join(sorted({r.backend for r in rs}))
                row = (family, convention, case, backends, f"{len(rs)} runs",
                       "" if worst.max_abs_err is None else f"{worst.max_abs_err:.1e}",
                       "" if worst.err_in_tol is None else f"{worst.err_in_tol:.3f}",
                       f"{worst.backend}/{worst.dtype}/{worst.mode}")
                if angles:
                    turned = [r for r in rs if r.worst_angle_err is not None]
                    row += (_angle(max(turned, key=lambda r: r.worst_angle_err)) if turned else "",)
                rows.append(row)
            lines += _format(rows, ("family", "convention", "case", "backends", "runs", "worst err",
                                    "err/tol", "worst at") + (("worst angle error",) if angles else ()))
        lines.append("")
    skipped = [r for r in records if r.status == "skip"]
    if skipped:
        reasons = Counter((r.backend, r.message) for r in skipped)
        for (backend, message), n in sorted(reasons.items()):
            lines.append(f"skipped {n} comparisons on {backend}: {message}")
    lines += _angle_summary(records)
    if summary:
        lines.append(summary_line(records))
    return "\n".join(lines)


def _angle(r, lead="") -> str:
    """`worst angle error 1.2e-07 rad at position 4097` of a RoPE record of `--impl` ('' without one)."""
    if r.worst_angle_err is None:
        return ""
    return f"{lead}worst angle error {r.worst_angle_err:.2e} rad at position {r.worst_angle_position}"


def _angle_summary(records) -> list:
    """For each implementation of `--impl`: its pass/fail/skip counts and diagnoses, then per dtype its worst
    angle error against the float64 spec over the RoPE records (pass or fail), where and in which record."""
    lines = []
    by_backend: dict = {}
    for r in records:
        if r.impl is not None:
            by_backend.setdefault(r.backend, []).append(r)
    for backend, rs in by_backend.items():
        counts = Counter(r.status for r in rs)
        diagnoses = Counter(r.diagnosis for r in rs if r.diagnosis)
        text = (f"{backend} {rs[0].impl}: {counts['pass']} passed, {counts['fail'] + counts['error']} failed, "
                f"{counts['skip']} skipped")
        if diagnoses:
            text += "; diagnoses " + ", ".join(f"{name} x{n}" for name, n in diagnoses.most_common())
        lines.append(text)
        for dtype in dict.fromkeys(r.dtype for r in rs):
            turned = [r for r in rs if r.dtype == dtype and r.worst_angle_err is not None]
            if turned:
                worst = max(turned, key=lambda r: r.worst_angle_err)
                lines.append(f"  {dtype}: {_angle(worst)} ({worst.family}/{worst.convention}/{worst.case}, "
                             f"{worst.status})")
    return lines


def _format(rows, header=_COLUMNS):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header), fmt.format(*("-" * w for w in widths))] + [fmt.format(*map(str, r)) for r in rows]


def markdown_table(records) -> str:
    """Every comparison, failures first; with `--impl` records, the worst angle error and the diagnosis too."""
    impl = any(r.impl is not None for r in records)
    columns = _COLUMNS + (("worst angle error", "diagnosis") if impl else ())

    def row(r):
        return _row(r) + ((_angle(r), r.diagnosis or "") if impl else ())

    lines = ["# posenc check report", "", summary_line(records), "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row(r)) + " |" for r in _sorted(records)]
    return "\n".join(lines) + "\n"


def json_report(records, *, argv, seed, seconds, versions, device="cpu") -> str:
    counts = Counter(r.status for r in records)
    return json.dumps({
        "argv": argv, "seed": seed, "device": device, "seconds": round(seconds, 2),
        "python": platform.python_version(),
        "versions": versions, "summary": dict(counts), "summary_line": summary_line(records),
        "records": [r.as_dict() for r in records],
    }, indent=1, default=str)
