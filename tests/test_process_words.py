"""What a user reads says what the product does, never how it was developed.

Scanned: README.md, CHANGELOG.md, docs/**/*.md, the card templates, the package's string literals and
docstrings (CLI help and error messages are string literals), and examples/ (scripts, recipes, suites
and notes; not the sample data's rows, which are public text). Flagged: work sessions and their
ordinals, numbers of this project's tracker (an issue or pull-request number is fine after the name of
the project it belongs to: "datasets issue 7467", "sentence-transformers #3355"), machines lent or
borrowed for a run, the people and agents working on it, the development machine's paths, lock files,
scratch folders and job farm, and a measurement's "this machine".
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent

#: Projects whose trackers an issue or pull-request number may name.
UPSTREAM = frozenset(
    name.lower()
    for name in (
        "accelerate", "arrow", "apache/arrow", "cpython", "datasets", "deepspeed", "evaluate", "filelock",
        "huggingface_hub", "huggingface-hub", "hypothesis", "matplotlib", "mergekit", "mteb", "numba", "numpy",
        "peft", "pip", "pyarrow", "pydantic", "pytest", "python", "pytorch", "safetensors", "scipy",
        "sentence-transformers", "tokenizers", "torch", "transformers", "uv",
    )
)  # fmt: skip

#: Words about the development process, wherever they appear (each alternative says what it catches).
PROCESS_WORDS = re.compile(
    r"""
      \bsessions?\b                                   # a work session ("the nineteenth session")
    | \b(?:eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth)\b
    | \blent\b                                        # a machine lent for a run
    | \bborrowed\s+(?:GPU|H100|H200|A100|machine|device)s?\b
    | \b(?:another|other|a\ second|the\ site|each|every)\ helpers?\b   # the agents that wrote it
    | \bagents?'?\s+(?:tests|jobs|work)\b
    | \bcoordinator\b
    | \bfarm-[a-z]                                    # the job farm's commands
    | /work/                                          # the development machine's paths
    | \.devcarry\b
    | \bhfue-bench\b|\bflock\s+/tmp                   # lock files of shared benchmark runs
    | \bmain\ at\ [0-9a-f]{7,}\b                      # "main at d44c70f"
    """,
    re.IGNORECASE | re.VERBOSE,
)

#: Only in the Markdown a user reads: the development machine and its other jobs. In the package's
#: messages "this machine" is the user's own ("DeepSpeed needs GPUs and this machine has none").
DOC_ONLY_WORDS = re.compile(
    r"\bthis\ machine\b|\bdevelopment\ machine\b|\bother\ engineers\b|\bagents?\b",
    re.IGNORECASE | re.VERBOSE,
)
#: The project's own copies of the public data sets, beside the checkout: examples may read them (an
#: optional data-root argument), the docs and the package do not name them.
SHARED_DATA = re.compile(r"\.\./shared\b|\bshared/data\b")

#: An issue or pull-request number: "issue 38", "PR #12", "#38" (not MSRP's column "#1 String").
TRACKER_NUMBER = re.compile(
    r"\b(?:issues?|PRs?|pull\s+requests?)\s+\#?\d+\b|(?<![\w&/\[])\#\d+\b(?!\s+(?:ID|String)\b)",
    re.IGNORECASE,
)
#: What may stand between a project's name and its second, third, ... number ("#3355, #3264 / #3674").
_REFERENCE_TAIL = re.compile(
    r"(?:\s*(?:[/,;]|\band\b)?\s*(?:\b(?:issues?|PRs?|pull\s+requests?)\s+)?\#?\d+)*\s*(?:[/,;]|\band\b)?\s*$",
    re.IGNORECASE,
)


def tracker_numbers(text: str) -> list[str]:
    """The issue / pull-request numbers of ``text`` that no upstream project's name comes before."""
    found = []
    for match in TRACKER_NUMBER.finditer(text):
        before = _REFERENCE_TAIL.sub("", text[: match.start()])
        words = before.split()
        owner = words[-1].strip("(\"'`[’:").removesuffix("'s").lower() if words else ""
        if owner not in UPSTREAM:
            found.append(match.group(0))
    return found


def findings(text: str, *, doc: bool, example: bool = False) -> list[str]:
    """Every development-process word or tracker number in ``text``.

    Args:
        text: The text to scan.
        doc: Whether it is Markdown a user reads (the docs' own words apply too).
        example: Whether it belongs to ``examples/`` (which may read the project's data copies).

    Returns:
        What was found, in order of the kinds.
    """
    found = [match.group(0) for match in PROCESS_WORDS.finditer(text)]
    if doc:
        found += [match.group(0) for match in DOC_ONLY_WORDS.finditer(text)]
    if not example:
        found += [match.group(0) for match in SHARED_DATA.finditer(text)]
    return found + tracker_numbers(text)


def package_strings(path: Path) -> Iterator[tuple[int, str]]:
    """Every string literal of a module (docstrings, help texts, messages) with its line."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def scanned() -> list[Path]:
    files = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]
    files += sorted((REPO / "docs").glob("*.json"))  # the raw figures the benchmarks page links
    files += sorted((REPO / "cards").glob("*.j2"))
    files += sorted((REPO / "hf_unified_embed").rglob("*.py"))
    example_kinds = {".py", ".md", ".yaml", ".yml", ".sh", ".json", ".cfg", ".toml"}
    files += sorted(
        path
        for path in (REPO / "examples").rglob("*")
        if path.suffix in example_kinds and path.is_file() and "data" not in path.relative_to(REPO).parts[1:2]
    )
    files += [REPO / "examples" / "data" / "LICENSES.md"]
    return [path for path in files if path.is_file()]


@pytest.mark.parametrize("path", scanned(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_development_process_in_what_a_user_reads(path: Path) -> None:
    relative = path.relative_to(REPO)
    example = relative.parts[0] == "examples"
    doc = path.suffix in {".md", ".j2", ".json"} and not example
    if relative.parts[0] == "hf_unified_embed":
        pieces = list(package_strings(path))
    else:
        pieces = list(enumerate(path.read_text(encoding="utf-8").splitlines(), start=1))
    bad = [
        f"{relative}:{line}: {found!r}" for line, text in pieces for found in findings(text, doc=doc, example=example)
    ]
    assert not bad, "development process in user-facing text:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "text",
    [
        "measured in the nineteenth session",
        "Targets (issue 38): met",
        "see #38 for the plan",
        "no GPU lent since 2026-11-28",
        "carried as wheels to a borrowed H200",
        "`flock /tmp/hfue-bench.lock .venv/bin/python bench/build.py`",
        "the data in /work/shared/data",
        "`farm-bench -n 10`",
        "main at d44c70f",
        "another helper writes it",
    ],
)
def test_the_scan_catches_process_talk(text: str) -> None:
    assert findings(text, doc=True)


@pytest.mark.parametrize(
    "text",
    [
        "datasets issue 7467, Arrow issue 45214; its workaround is datasets PR 8176",
        "refused (sentence-transformers #3355, #3264, #3674)",
        "sentence-transformers #3355/#3264/#3674",
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
        "helpers shared by several losses",
        "a 2-core x86 CPU, 24 GiB; one H200 GPU",
        "DeepSpeed needs GPUs and this machine has none",
    ],
)
def test_the_scan_allows_upstream_references_and_ordinary_words(text: str) -> None:
    assert not findings(text, doc=False)


@settings(max_examples=60, deadline=None)
@given(
    project=st.sampled_from(sorted(UPSTREAM)),
    numbers=st.lists(st.integers(min_value=1, max_value=99_999), min_size=1, max_size=4),
    kind=st.sampled_from(["issue ", "PR ", "#", "pull request "]),
    separator=st.sampled_from([", #", "/#", " and #", ", "]),
)
def test_any_number_after_an_upstream_project_is_allowed(
    project: str, numbers: list[int], kind: str, separator: str
) -> None:
    text = f"see {project} {kind}{numbers[0]}" + "".join(f"{separator}{n}" for n in numbers[1:]) + " for it"
    assert not tracker_numbers(text)
    assert tracker_numbers(f"see our {kind}{numbers[0]} for it")
