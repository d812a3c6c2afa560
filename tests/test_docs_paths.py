"""Every repository path the README and the docs name exists: a moved or deleted file must take its mentions
with it. A path is a backticked word that starts with one of the repository's top-level entries
(`posenc/`, `tests/`, `docs/`, `benchmarks/`, `README.md`, ...); placeholders (`<family>`, `NAME`, `*`,
`...`) name no file and are left out, as are `::test` ids' and `:line` suffixes. A Markdown link names a
path relative to its page; links with a scheme (`https:`, `mailto:`) and in-page anchors are left out. Paths
outside the repository (`~/.cache/...`, `/tmp/...`) and the built site (`site/`) are not top-level entries,
so they are never checked."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = ("posenc/", "posenc_np/", "posenc_torch/", "posenc_tf/", "posenc_jax/", "posenc_mlx/", "tests/", "docs/",
       "benchmarks/", "scripts/", ".ci/", "README.md", "pyproject.toml", "constraints.txt",
       "requirements-nodeps.txt", "mkdocs.yml", ".pre-commit-config.yaml")
#: a word holding one of these names a family of files, not a file
PLACEHOLDER = re.compile(r"<|>|\*|\{|\.\.\.|\bNAME\b|\bDIR\b|\bVENV\b|\bN\b|\bX\b|foo|\[|\$")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def named_paths(text: str) -> list[str]:
    """The repository paths a Markdown page names in backticks."""
    found = []
    for word in re.findall(r"`([^`\s]+)`", text):
        word = word.split("::")[0]
        word = re.sub(r":\d+(-\d+)?(,\d+)*$", "", word).rstrip(".,;:)")
        if word.startswith(TOP) and not PLACEHOLDER.search(word):
            found.append(word)
    return found


def linked_paths(text: str) -> list[str]:
    """The targets of a Markdown page's links `[text](target)` that are files of the repository (relative
    to the page), without their `#anchor`."""
    targets = (t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text))
    return [t for t in targets if t and not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_page_names_exists(page):
    missing = sorted({p for p in named_paths(page.read_text()) if not (ROOT / p).exists()})
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_a_page_links_exists(page):
    missing = sorted({t for t in linked_paths(page.read_text()) if not (page.parent / t).exists()})
    assert not missing, f"{page.relative_to(ROOT)} links files that do not exist: {missing}"


def test_the_path_check_sees_a_planted_stale_path():
    text = "see `posenc/check/runner.py:136` and `tests/app/<family>.py` and `docs/impl.md`"
    assert named_paths(text) == ["posenc/check/runner.py", "docs/impl.md"]
    assert not (ROOT / "posenc/check/runner.py").exists()
    links = "[the guide](architecture.md#layers), [gone](gone.md), [site](https://example.org/a.md), [top](#top)"
    assert linked_paths(links) == ["architecture.md", "gone.md"]


@pytest.mark.parametrize("name", ["ecosystem.md", "ecosystem.json", "scoreboard.md", "performance.md"])
def test_generated_and_measured_pages_name_no_machine_directories(name):
    """An environment is described by versions, never by the directories or the name of the machine it ran on."""
    text = (ROOT / "docs" / name).read_text()
    assert not re.search(r"(?<![\w.])/(tmp|work|root|home)/", text), re.findall(r"\S*/(?:tmp|work|root|home)/\S*", text)
    host = socket.gethostname()
    if len(host) >= 6:  # shorter names ("vm", "box") are ordinary words of a page
        assert not re.search(rf"\b{re.escape(host)}\b", text), f"docs/{name} names this machine ({host})"
