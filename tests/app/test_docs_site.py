"""The documentation site: `mkdocs build --strict` (Material theme, the API reference generated from the
docstrings by mkdocstrings) builds with no broken link or reference, and its getting-started page carries
the README's two commands."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _commands(text: str) -> str:
    return re.search(r"```bash\n(.*?)```", text, re.S).group(1)


def test_getting_started_has_the_readme_commands():
    assert _commands((ROOT / "docs" / "index.md").read_text()) == _commands((ROOT / "README.md").read_text())


def test_ci_runs_the_readme_test_command():
    test_command = _commands((ROOT / "README.md").read_text()).splitlines()[1]
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == test_command


def test_every_docs_page_is_in_the_site_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert pages and [p for p in pages if p not in nav] == []


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocstrings_handlers.python")
    pytest.importorskip("material")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_site_builds_strict_with_the_api_reference_from_docstrings(site):
    import posenc_np

    page = (site / "reference" / "posenc_np" / "index.html").read_text()

    # every public spec function has its entry, and the entry is its docstring (its first line)
    ids = set(re.findall(r'id="posenc_np\.(?:[a-z0-9_]+\.)?([A-Za-z0-9_]+)"', page))
    assert [n for n in posenc_np.__all__ if n not in ids] == []
    for name in ("apply_rope", "sinusoidal", "alibi_bias", "t5_bias", "rope_schedule_from_hf_config"):
        first_line = getattr(posenc_np, name).__doc__.strip().splitlines()[0]
        words = re.sub(r"`", "", first_line).split()[:4]
        assert all(w.split("(")[0] in re.sub(r"<[^>]+>", "", page) for w in words), (name, words)
    assert (site / "api" / "index.html").exists() and (site / "ecosystem" / "index.html").exists()


def test_site_pages_fetch_nothing_from_other_hosts_for_the_report(site):
    """The site may use the theme's assets (served with it); the pages reference no other host's script."""
    for html in site.rglob("*.html"):
        text = html.read_text()
        assert not re.search(r"<script[^>]+src=\"https?://", text), html
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, html


def test_ecosystem_pages_are_both_generated_from_the_one_json():
    """`python -m posenc.ecosystem` writes docs/ecosystem.md and the site's docs/scoreboard.md from
    docs/ecosystem.json: re-rendering the committed JSON gives the committed pages."""
    import json

    from posenc.ecosystem import findings, render_markdown, render_scoreboard

    report = {**json.loads((ROOT / "docs" / "ecosystem.json").read_text()), "findings": findings()}
    assert (ROOT / "docs" / "ecosystem.md").read_text() == render_markdown(report)
    scoreboard = (ROOT / "docs" / "scoreboard.md").read_text()
    assert scoreboard == render_scoreboard(report)
    for entry in report["implementations"]:
        if entry.get("installed") and not entry.get("run_error"):
            ran = entry.get("generated", report["generated"])[:10]
            assert f"<th>{entry['name']}</th><td>{entry['version']}</td><td>{ran}</td>" in scoreboard
