"""The Markdown a user reads: no unfilled placeholder, no link to a file that does not exist."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: A figure left to fill in (``DEMO_WALL``) or a note to self; code spans and blocks are exempt
#: (environment variables such as ``HF_HUB_OFFLINE`` are written as code).
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|\b(?:TODO|TBD|FIXME|XXX)\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")


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
