"""The Markdown a user reads: no unfilled placeholder, no link to a file that does not exist.

The README is rendered on the package index, away from the repository, so its links are absolute: a
link into the repository (``REPO_URL/blob/main/PATH``) must name a file that exists, a link into the
documentation site (``SITE_URL/PAGE/``) a page of ``docs/``. Its Python quick start is
``examples/quickstart.py`` word for word, which CI runs with the other examples.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent

#: A figure left to fill in (``DEMO_WALL``) or a note to self; code spans and blocks are exempt
#: (environment variables such as ``HF_HUB_OFFLINE`` are written as code).
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|\b(?:TODO|TBD|FIXME|XXX)\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")
REPO_URL = "https://github.com/hf-unified-embed/hf-unified-embed/"
SITE_URL = "https://hf-unified-embed.github.io/hf-unified-embed/"
README = REPO / "README.md"
#: The README stays readable in five minutes.
README_MAX_LINES = 150


def markdown_files() -> list[Path]:
    tracked = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.split()
    # Outside a git checkout (an unpacked sdist) every Markdown file below the root counts.
    files = [REPO / name for name in tracked] or [p for p in REPO.rglob("*.md") if ".venv" not in p.parts]
    assert files, "no Markdown file found"
    return files


def prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_placeholder_and_no_dead_link(path: Path) -> None:
    text = prose(path.read_text(encoding="utf-8"))
    placeholders = sorted(set(PLACEHOLDER.findall(text)))
    assert not placeholders, f"{path.relative_to(REPO)} has unfilled placeholders: {placeholders}"
    dead = [
        link
        for link in LINK.findall(text)
        if not re.match(r"[a-z][a-z0-9+.-]*:|#", link) and not (path.parent / link.split("#")[0]).exists()
    ]
    assert not dead, f"{path.relative_to(REPO)} links to files that do not exist: {dead}"


def test_the_placeholder_rule_catches_an_unfilled_figure() -> None:
    assert PLACEHOLDER.findall(prose("measured: DEMO_WALL wall, `HF_HUB_OFFLINE=1` and TODO")) == ["DEMO_WALL", "TODO"]


def readme_link_target(link: str) -> Path | None:
    """The file of the checkout a README link points at (``None`` for a link outside the project)."""
    address = link.split("#")[0]
    if address.startswith(REPO_URL):
        path = address.removeprefix(REPO_URL)
        kind, _, rest = path.partition("/")
        assert kind in {"blob", "tree"} and rest.startswith("main/"), f"README link not on main: {link}"
        return REPO / rest.removeprefix("main/").rstrip("/")
    if address.startswith(SITE_URL):
        page = address.removeprefix(SITE_URL).strip("/")
        if not page:
            return REPO / "docs" / "index.md"
        return (
            REPO / "docs" / f"{page}.md"
            if (REPO / "docs" / f"{page}.md").exists()
            else REPO / "docs" / page / "index.md"
        )
    return None


def test_readme_links_are_absolute_and_reach_existing_files() -> None:
    links = LINK.findall(prose(README.read_text(encoding="utf-8")))
    assert links, "the README has no links"
    relative = [link for link in links if not re.match(r"[a-z][a-z0-9+.-]*:", link)]
    assert not relative, f"README links must be absolute (it is rendered on the package index): {relative}"
    missing = [link for link in links if (target := readme_link_target(link)) is not None and not target.exists()]
    assert not missing, f"README links to files or pages that do not exist: {missing}"


def test_readme_link_targets() -> None:
    assert readme_link_target(REPO_URL + "blob/main/examples/demo.py") == REPO / "examples" / "demo.py"
    assert readme_link_target(SITE_URL + "quality/#learning-rate") == REPO / "docs" / "quality.md"
    assert readme_link_target(SITE_URL) == REPO / "docs" / "index.md"
    assert readme_link_target("https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2") is None


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"


def test_readme_python_quick_start_is_the_example_file() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.S | re.M)
    assert len(blocks) == 1, f"the README should hold one Python block, found {len(blocks)}"
    example = (REPO / "examples" / "quickstart.py").read_text(encoding="utf-8")
    assert blocks[0] == example, "README's Python quick start differs from examples/quickstart.py"


TRACKED = sorted(
    path
    for path in subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.split()
    if (REPO / path).is_file()
)


@pytest.mark.skipif(not TRACKED, reason="not a git checkout")
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_a_repository_link_reaches_the_file_it_names(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(TRACKED or ["README.md"]))
    anchor = data.draw(st.sampled_from(["", "#section", "#L10"]))
    assert readme_link_target(f"{REPO_URL}blob/main/{path}{anchor}") == REPO / path
