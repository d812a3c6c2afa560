"""`posenc check --html`: the page is self-contained, carries one `data-status` element per comparison of
the JSON, and renders in a real browser (Debian's chromium, headless) with working filters."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from posenc.check.html import cell_colour, render_html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _record(family, convention, case, backend, dtype, mode, status, ratio=None, **extra):
    tol = 1e-6
    rec = dict(encoding=family, family=family, convention=convention, case=case, backend=backend, dtype=dtype,
               mode=mode, status=status, max_abs_err=None if ratio is None else ratio * tol,
               err_in_tol=ratio, worst_index=[0, 3] if status == "fail" else [], tol=tol,
               tol_why="2*eps32*|angle| + 1e-6 rad", message="", seconds=0.0, description="")
    rec.update(extra)
    return rec


def _synthetic():
    records = [
        _record("rope", "hf-llama", "short", "torch", "float32", "eager", "pass", 0.01),
        _record("rope", "hf-llama", "short", "torch", "float32", "jit", "pass", 0.2),
        _record("rope", "hf-llama", "long", "my-kernel", "float32", "eager", "fail", 31.0, diagnosis="layout",
                diagnosis_detail="your outputs equal the spec with layout='interleaved'", worst_angle_err=3.1,
                worst_angle_position=1048575,
                error_by_position=[[0, 1e-7], [4097, 1e-4], [1048575, 0.2]]),
        _record("rope", "hf-llama", "long", "torch", "float32", "eager", "pass", 0.03,
                error_by_position=[[0, 1e-8], [4097, 2e-8], [1048575, 4e-8]]),
        _record("alibi", "press-alibi", "short", "torch", "bfloat16", "eager", "skip", message="no bf16 here"),
        _record("alibi", "press-alibi", "short", "tf", "float32", "jit", "error", message="RuntimeError: boom"),
        _record("t5", "t5", "short", "jax", "float32", "eager", "pass", 0.0),
    ]
    return {"argv": ["check"], "seed": 0, "seconds": 1.0, "python": "3.11", "versions": {"numpy": "2"},
            "summary": {"pass": 4, "fail": 1, "skip": 1, "error": 1}, "records": records,
            "summary_line": "4 passed, 2 failed, 1 skipped"}


def _status_counts(page):
    return {s: len(re.findall(f'data-status="{s}"', page)) for s in ("pass", "fail", "skip", "error")}


def test_one_data_status_element_per_comparison():
    report = _synthetic()
    page = render_html(report)
    assert _status_counts(page) == {"pass": 4, "fail": 1, "skip": 1, "error": 1}
    assert '<p id="summary" class="bad">4 passed, 2 failed, 1 skipped</p>' in page
    # failures come before the matrix, each with its tolerance derivation and diagnosis in words
    assert page.index('id="failure-list"') < page.index('id="matrix"')
    assert "diagnosis: layout" in page and "layout=&#x27;interleaved&#x27;" in page
    assert "2*eps32*|angle| + 1e-6 rad" in page and "worst angle error 3.1 rad at position 1048575" in page
    assert 'title="skipped: no bf16 here"' in page
    assert "<svg" in page and "rope / long, float32" in page


def test_page_is_self_contained():
    page = render_html(_synthetic())
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page


def test_colour_scale_is_monotone_and_separates_fail():
    hues = [int(re.match(r"hsl\((\d+)", cell_colour("pass", r)).group(1)) for r in (1e-4, 1e-3, 1e-2, 0.1, 1.0)]
    assert hues[0] == hues[1] > hues[2] > hues[3] > hues[4]  # clamped at the floor, then falling to orange
    assert cell_colour("fail", 2.0) != cell_colour("fail", 20.0)
    assert cell_colour("skip", None) != cell_colour("error", None)


@pytest.fixture(scope="module")
def real_report(tmp_path_factory):
    """One small real run (ALiBi on PyTorch, eager): its terminal output, JSON and page."""
    tmp = tmp_path_factory.mktemp("check")
    out_json, out_html = tmp / "report.json", tmp / "report.html"
    proc = subprocess.run([sys.executable, "-m", "posenc", "check", "--encoding", "alibi", "--backend", "torch",
                           "--mode", "eager", "--quiet", "--json", str(out_json), "--html", str(out_html)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc, json.loads(out_json.read_text()), out_html


def test_check_writes_html_with_the_json_counts_and_terminal_summary(real_report):
    proc, report, path = real_report
    page = path.read_text()
    last_line = proc.stdout.strip().splitlines()[-1]
    assert last_line == report["summary_line"]
    assert f'<p id="summary" class="good">{last_line}</p>' in page
    counts = _status_counts(page)
    assert {k: v for k, v in counts.items() if v} == report["summary"]
    assert sum(counts.values()) == len(report["records"])


def test_html_output_is_checked_before_the_run(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "posenc", "check", "--encoding", "alibi", "--backend", "torch",
                           "--html", str(tmp_path / "missing-dir" / "r.html")], capture_output=True, text=True)
    assert proc.returncode == 2 and "--html" in proc.stderr and "Traceback" not in proc.stderr


def _browser():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI installs Debian's chromium (.ci/run); it is missing")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    return sync_api


_CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"]


def _open(sync_api, path):
    pw = sync_api.sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=_CHROMIUM_ARGS)
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    return pw, browser, page, requests


def test_page_renders_in_headless_chromium(tmp_path):
    sync_api = _browser()
    path = tmp_path / "synthetic.html"
    report = _synthetic()
    path.write_text(render_html(report))
    pw, browser, page, requests = _open(sync_api, path)
    try:
        assert page.inner_text("#summary") == report["summary_line"]
        for status in ("pass", "fail", "skip", "error"):
            assert page.locator(f'[data-status="{status}"]').count() == report["summary"][status]
        assert requests == [path.as_uri()]  # nothing fetched from elsewhere
        rows = page.locator("#matrix tr.case")
        visible = lambda: sum(rows.nth(i).is_visible() for i in range(rows.count()))  # noqa: E731
        assert visible() == 4
        page.select_option("#filter-family", "alibi")
        assert visible() == 1
        page.select_option("#filter-family", "")
        page.select_option("#filter-status", "fail")
        assert visible() == 1 and page.locator("#matrix tr.case:visible th").inner_text().startswith("rope")
        page.select_option("#filter-status", "")
        page.select_option("#filter-backend", "jax")
        assert visible() == 1
        assert page.locator('td[data-backend="torch"]').first.is_hidden()
        page.select_option("#filter-backend", "")
        assert visible() == 4
        shot = tmp_path / "page.png"
        page.screenshot(path=str(shot), full_page=True)
    finally:
        browser.close()
        pw.stop()
    _assert_not_blank(shot)


def test_real_report_renders_in_headless_chromium(real_report):
    sync_api = _browser()
    _, report, path = real_report
    pw, browser, page, requests = _open(sync_api, path)
    try:
        assert page.inner_text("#summary") == report["summary_line"]
        for status, n in report["summary"].items():
            assert page.locator(f'[data-status="{status}"]').count() == n
        assert requests == [path.as_uri()]
    finally:
        browser.close()
        pw.stop()


def _assert_not_blank(png):
    from PIL import Image

    image = Image.open(png).convert("L")
    lo, hi = image.getextrema()
    assert hi - lo > 100, (lo, hi)  # text and coloured cells on a white page
    colours = Image.open(png).convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 20
