"""Load time of a `posenc check --html` page in headless chromium, at the full run's size and beyond.

    python benchmarks/bench_html.py REPORT.json [--repeat 5] [--scale 1,4]

REPORT.json is a `posenc check --json` report (the default run's). `--scale k` renders the page from k
copies of its records, each copy under other implementation names (`torch~2`, ...), the size of a run with
k times the implementations. For each scale it prints the page size, the comparisons, the time to the
`load` event, and the time one filter change takes (the script re-styles every cell). Chromium is Debian's
(/usr/bin/chromium), driven by playwright.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from posenc.check.html import render_html

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


def scaled(report: dict, k: int) -> dict:
    records = [dict(r, backend=r["backend"] if i == 0 else f"{r['backend']}~{i + 1}")
               for i in range(k) for r in report["records"]]
    return {**report, "records": records, "summary_line": None}


def measure(page_path: Path, repeat: int) -> tuple[float, float]:
    loads, filters = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        for _ in range(repeat):
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            started = time.perf_counter()
            page.goto(page_path.as_uri(), wait_until="load")
            loads.append(time.perf_counter() - started)
            started = time.perf_counter()
            page.select_option("#filter-status", index=1)  # the first status the run has
            page.evaluate("() => new Promise(r => requestAnimationFrame(() => r()))")
            filters.append(time.perf_counter() - started)
            page.close()
        browser.close()
    return statistics.median(loads), statistics.median(filters)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--scale", default="1,4")
    args = parser.parse_args()
    report = json.loads(Path(args.report).read_text())
    print("| scale | comparisons | page (MB) | load (s) | filter change (s) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for k in (int(s) for s in args.scale.split(",")):
            page = render_html(scaled(report, k))
            path = Path(tmp) / f"report{k}.html"
            path.write_text(page)
            load, change = measure(path, args.repeat)
            print(f"| {k} | {len(report['records']) * k} | {len(page.encode()) / 1e6:.1f} | {load:.2f} | "
                  f"{change:.2f} |")


if __name__ == "__main__":
    main()
