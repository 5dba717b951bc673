"""The guides are for users: test talk lives on the contributing page, and the sample names only its own paths.

The defects: 68 lines across 12 user pages cited ``tests/test_*.py``; the dependencies page held a dated
drift report and "Tests that hold on a busy machine"; the recipe reference opened by pointing at a source
file; and the files ``hf-unified-embed sample`` writes named repository paths in their comments
(``examples/data``, ``docs/quality.md``, ``shared.yaml``) that do not exist in the folder a user has.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
#: Pages about the project rather than for its users: how it is tested, and what changed.
NOT_USER_PAGES = {"contributing.md", "changelog.md"}
USER_PAGES = sorted(path for path in DOCS.glob("*.md") if path.name not in NOT_USER_PAGES)
#: The published site, the one place outside the sample folder a sample's comment may point to.
SITE = "https://hf-unified-embed.github.io/hf-unified-embed/"

#: Test talk: a test file's path, a pytest command, a drift report, a timing protocol for busy machines.
TEST_TALK = [
    (re.compile(r"\btests/(?:test_|_)\w*\.py|\btests/\w"), "cites the test suite"),
    (re.compile(r"\bpytest\b"), "gives a pytest command"),
    (re.compile(r"drift (?:check|report)", re.IGNORECASE), "holds a drift check or report"),
    (re.compile(r"busy machine", re.IGNORECASE), "holds a timing protocol for busy machines"),
]


def test_the_user_pages_are_found() -> None:
    assert len(USER_PAGES) >= 20 and (DOCS / "dependencies.md") in USER_PAGES


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda page: page.name)
def test_a_user_page_carries_no_test_talk(page: Path) -> None:
    found = [
        f"{page.name}:{number}: {why}: {line.strip()[:120]}"
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1)
        for pattern, why in TEST_TALK
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_contributing_page_holds_what_moved_and_is_in_the_nav() -> None:
    text = (DOCS / "contributing.md").read_text(encoding="utf-8")
    for moved in (
        "## Tests that hold on a busy machine",
        "Drift check 2026-11-25",
        "make test-latest",
        "`real_model`",
    ):
        assert moved in text, moved
    links = re.findall(r"\]\((https://github\.com/hf-unified-embed/hf-unified-embed/blob/main/tests/[\w.]+)\)", text)
    assert len(links) >= 30
    for link in links:  # every test file it names exists
        assert (REPO / "tests" / link.rsplit("/", 1)[1]).is_file(), link
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    assert re.search(r"^\s+- Contributing: contributing\.md$", nav, flags=re.MULTILINE)


def test_the_recipe_reference_opens_with_its_own_sections_not_a_source_file() -> None:
    text = (DOCS / "recipes.md").read_text(encoding="utf-8")
    opening = text.split("\n## ", 1)[0]
    assert "github.com" not in opening and not re.search(r"\]\([^)]*\.(?:py|ya?ml)\)", opening), opening
    sections = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    anchors = {re.sub(r"[^\w\- ]", "", title).strip().lower().replace(" ", "-") for title in sections}
    assert anchors <= set(re.findall(r"\]\(#([\w-]+)\)", opening)), anchors


#: A path-like word in a comment: a URL, anything with a slash, or a file name with a data or text suffix.
PATH_LIKE = re.compile(r"https?://\S+|[\w.~\-]*/[\w./~\-]*|\b[\w\-]+\.(?:ya?ml|md|tsv|csv|txt|jsonl?|py|parquet)\b")


def _comments(text: str) -> list[tuple[int, str]]:
    """``(line, comment)`` of each YAML comment: a ``#`` at the start of a line or after a space."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = re.search(r"(?:^|\s)#(.*)$", line)
        if match:
            found.append((number, match.group(1)))
    return found


def _dangling_paths(folder: Path, file: Path) -> list[str]:
    """Each path-like word in ``file``'s comments that is neither in ``folder`` (or beside ``file``), an
    output a command writes (``outputs/``), nor a page of the published site."""
    dangling = []
    for number, comment in _comments(file.read_text(encoding="utf-8")):
        for match in PATH_LIKE.finditer(comment):
            word = match.group(0).rstrip(".,;:)`'\"")
            if re.search(r"repo_id:\s*$", comment[: match.start()]):
                continue  # a Hub id, not a path
            if word.startswith(("http://", "https://")):
                if not word.startswith(SITE):
                    dangling.append(f"{file.name}:{number}: {word} (a link outside the docs site)")
                continue
            relative = word.removeprefix("../")
            if relative.startswith("outputs/") or relative == "outputs":
                continue
            if not any((base / word).exists() for base in (folder, file.parent)):
                dangling.append(f"{file.name}:{number}: {word}")
    return dangling


def test_the_files_sample_writes_name_only_paths_of_the_written_folder(tmp_path: Path) -> None:
    from hf_unified_embed.cli.sample import write_sample

    folder = write_sample(tmp_path / "my sample")
    written = sorted(folder.rglob("*.yaml"))
    assert {path.relative_to(folder).as_posix() for path in written} >= {
        "recipes/sample.yaml",
        "recipes/train_sample.yaml",
        "suites/demo.yaml",
        "suites/sample.yaml",
    }
    dangling = [problem for path in written for problem in _dangling_paths(folder, path)]
    assert not dangling, "\n".join(dangling)


def test_the_path_check_finds_a_repository_path(tmp_path: Path) -> None:
    """The check above would have failed on the old comments (a repository path, a docs source file)."""
    folder = tmp_path / "sample"
    (folder / "data").mkdir(parents=True)
    recipe = folder / "recipe.yaml"
    recipe.write_text(
        "# rows in examples/data (see LICENSES.md), measured in docs/quality.md\n"
        "data_root: ../data   # relative to this file: data/\n"
        "hub: null   # or {repo_id: me/model}; see https://example.com/x\n",
        encoding="utf-8",
    )
    assert _dangling_paths(folder, recipe) == [
        "recipe.yaml:1: examples/data",
        "recipe.yaml:1: LICENSES.md",
        "recipe.yaml:1: docs/quality.md",
        "recipe.yaml:3: https://example.com/x (a link outside the docs site)",
    ]
