"""The tables of a `posenc experiment` report (terminal and Markdown) and its JSON text."""

from __future__ import annotations

import json

__all__ = ["terminal_table", "markdown_table", "json_text"]


def _cell(ppl, std, n):
    """`mean` or, over several seeds, `mean ± sample std` (JSON round trips make the keys strings)."""
    value = ppl[n] if n in ppl else ppl[str(n)]
    if std is None:
        return f"{value:.3f}"
    return f"{value:.3f} ± {std[n] if n in std else std[str(n)]:.3f}"


def _columns(report):
    lengths = report["eval_lengths"]
    head = ["encoding"] + [f"ppl@{n}" for n in lengths] + ["train tok/s", "peak MiB", "+MiB", "params"]
    body = []
    for row in report["rows"]:
        ppl = row["ppl"]
        growth = row["peak_growth_mib"]
        std = row.get("ppl_std")
        body.append([row["encoding"]] + [_cell(ppl, std, n) for n in lengths]
                    + [f"{row['tokens_per_s']:,.0f}", f"{row['peak_mem_mib']:,.0f}",
                       "-" if growth is None else f"{growth:,.0f}", f"{row['params']:,}"])
    return head, body


def _notes(report):
    notes = [f"- {r['encoding']}: {r['note']}" for r in report["rows"] if r["note"]]
    seeds = report.get("seeds", [report["config"]["seed"]])
    if len(seeds) > 1:
        notes.append(f"- ppl: mean ± sample standard deviation over seeds {seeds} (initialisation and data "
                     f"order)")
    return notes + [f"- peak memory: {report['memory_method']}; +MiB: the peak minus the resident size when "
                    f"training started; rope-pi/ntk/yarn share the rope model's training "
                    f"(same speed, memory, parameters)"]


def terminal_table(report) -> str:
    head, body = _columns(report)
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
    out = [line(head), "  ".join("-" * w for w in widths)] + [line(r) for r in body]
    return "\n".join(out + [""] + [n[2:] for n in _notes(report)])


def markdown_table(report) -> str:
    head, body = _columns(report)
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(out + [""] + _notes(report)) + "\n"


def json_text(report, argv) -> str:
    return json.dumps({"argv": list(argv), **report}, indent=1, default=float) + "\n"
