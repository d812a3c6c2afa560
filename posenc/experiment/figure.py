"""The figure of a `posenc experiment` report: perplexity against evaluation length, one line per encoding."""

from __future__ import annotations

from .config import RESEARCH

__all__ = ["plot_perplexity"]

_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354",
            "#756bb1", "#636363")


def plot_perplexity(report, figure):
    """Perplexity against evaluation length, one line per encoding, on `figure` (a matplotlib Figure).

    `report` is `run_experiment`'s dict or the `--json` file read back (its length keys are strings).
    """
    ax = figure.add_subplot(1, 1, 1)
    lengths = report["eval_lengths"]
    styles = {"rope-pi": ":", "rope-ntk": "-.", "rope-yarn": (0, (5, 1))}
    research = set(RESEARCH)
    for i, row in enumerate(report["rows"]):
        name = row["encoding"]
        ppl = [row["ppl"].get(n, row["ppl"].get(str(n))) for n in lengths]
        # baseline rows solid, research rows dashed, training tricks dotted; 20 colours so rows stay apart
        style = styles.get(name, ":" if "+" in name else "--" if name in research else "-")
        colour = _COLOURS[i % len(_COLOURS)]
        ax.plot(lengths, ppl, marker="o", markersize=3, linestyle=style, label=name, color=colour)
        std = row.get("ppl_std")
        if std is not None:  # the spread over seeds: +- one sample standard deviation
            err = [std.get(n, std.get(str(n))) for n in lengths]
            ax.errorbar(lengths, ppl, yerr=err, fmt="none", capsize=2, color=colour, linewidth=0.8)
    train_len = report["config"]["train_len"]
    ax.axvline(train_len, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    from matplotlib.ticker import ScalarFormatter

    for axis in (ax.yaxis,):
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_formatter(ScalarFormatter())
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.set_xlabel(f"evaluation length (bytes); trained at {train_len}")
    ax.set_ylabel("validation perplexity per byte (log)")
    seeds = report.get("seeds", [])
    spread = f"; mean ± std over seeds {seeds}" if len(seeds) > 1 else ""
    ax.set_title(f"Extrapolation: perplexity vs evaluation length{spread}", fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    if len(report["rows"]) > 10:  # the research run's 20 rows: the legend beside the axes
        ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    else:
        ax.legend(fontsize="small", ncol=2)
    return figure
