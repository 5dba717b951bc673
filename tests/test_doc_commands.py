"""Every ``hf-unified-embed`` command line a user can copy from the docs parses with the real CLI.

So does every ``python examples/SCRIPT.py ...`` line: its options must be the shared example options
(``examples/example_cli.py``) or the script's own.

The command lines of fenced shell blocks (```` ```bash ````, ``sh``, ``shell``, ``console``) in README.md
and docs/**/*.md — ``hf-unified-embed ...`` and ``python -m hf_unified_embed ...``, with a ``$ `` prompt,
a virtualenv's ``bin/`` prefix, environment assignments, line continuations and trailing comments — are
parsed (never run) by the parser of ``hf_unified_embed.cli.main``, with abbreviated options refused, so
an unknown or misspelt option, a missing argument or an unknown command fails here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import build_parser

REPO = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(?:bash|sh|shell|console)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
#: The programs whose arguments this parser reads, as a command line names them.
PROGRAMS = re.compile(r"^(?:\S*/)?hf-unified-embed$")
#: Where one command of a shell line ends and another begins.
SEPARATORS = frozenset({"&&", "||", "|", ";", "&"})
REDIRECTIONS = re.compile(r"^\d*(?:>>?|<)")


@dataclass(frozen=True)
class DocCommand:
    """One command line of a doc: where it is and the arguments after the program name."""

    where: str
    line: str
    argv: tuple[str, ...]


def shell_lines(block: str) -> list[str]:
    """The logical lines of a shell block: continuations joined, prompts and output lines dropped."""
    lines, current = [], ""
    for raw in block.splitlines():
        current += raw.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        line = current.strip()
        current = ""
        lines.append(line.removeprefix("$ "))
    return lines


EXAMPLE = re.compile(r"^(?:\S*/)?examples/([a-z_]+\.py)$")


def example_runs(line: str) -> list[tuple[str, tuple[str, ...]]]:
    """The example scripts a shell line runs (``python examples/x.py ...``), with their arguments."""
    try:
        words = shlex.split(line.removeprefix("$ "), comments=True)
    except ValueError:
        return []
    found = []
    for index, word in enumerate(words[:-1]):
        match = EXAMPLE.match(words[index + 1])
        if re.search(r"(?:^|/)python3?$", word) and match:
            arguments = []
            for argument in words[index + 2 :]:
                if argument in SEPARATORS or REDIRECTIONS.match(argument):
                    break
                arguments.append(argument)
            found.append((match.group(1), tuple(arguments)))
    return found


def commands_of_line(line: str) -> list[tuple[str, ...]]:
    """The argument vectors of the package's commands in one shell line (``[]`` if it runs none)."""
    try:
        words = shlex.split(line.removeprefix("$ "), comments=True)
    except ValueError:  # not shell (an output line with an unmatched quote)
        return []
    found: list[tuple[str, ...]] = []
    start = 0
    for end in [*[i for i, word in enumerate(words) if word in SEPARATORS], len(words)]:
        command = [word for word in words[start:end] if not REDIRECTIONS.match(word)]
        start = end + 1
        while command and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", command[0]):  # VAR=value before the program
            command = command[1:]
        if command and PROGRAMS.match(command[0]):
            found.append(tuple(command[1:]))
        elif (
            len(command) >= 3
            and re.search(r"(?:^|/)python3?$", command[0])
            and command[1:3] == ["-m", "hf_unified_embed"]
        ):
            found.append(tuple(command[3:]))
    return found


def doc_commands() -> list[DocCommand]:
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    found = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for block in FENCE.finditer(text):
            first_line = text.count("\n", 0, block.start(1)) + 1
            for offset, line in enumerate(shell_lines(block.group(1))):
                for argv in commands_of_line(line):
                    found.append(DocCommand(f"{page.relative_to(REPO)}:{first_line + offset}", line, argv))
    return found


def strict_parser() -> argparse.ArgumentParser:
    """The CLI's parser with abbreviated long options refused (a doc writes every option in full)."""
    parser = build_parser()
    pending = [parser]
    while pending:
        current = pending.pop()
        current.allow_abbrev = False
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(action.choices.values())
    return parser


def parse_failure(argv: tuple[str, ...]) -> str | None:
    """argparse's complaint about ``argv``, or ``None`` when it parses (``--help`` and ``--version`` do)."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            strict_parser().parse_args(list(argv))
    except SystemExit as exit_:
        return None if exit_.code in (0, None) else stderr.getvalue().strip().splitlines()[-1]
    return None


DOC_COMMANDS = doc_commands()


def doc_example_runs() -> list[tuple[str, str, tuple[str, ...]]]:
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for block in FENCE.finditer(text):
            first_line = text.count("\n", 0, block.start(1)) + 1
            for offset, line in enumerate(shell_lines(block.group(1))):
                for script, arguments in example_runs(line):
                    found.append((f"{page.relative_to(REPO)}:{first_line + offset}", script, arguments))
    return found


def example_options_failure(script: str, arguments: tuple[str, ...]) -> str | None:
    """What is wrong with ``arguments`` of ``examples/<script>``: an option neither shared nor its own."""
    import sys

    sys.path.insert(0, str(REPO / "examples"))
    try:
        from example_cli import example_parser
    finally:
        sys.path.remove(str(REPO / "examples"))
    path = REPO / "examples" / script
    if not path.is_file():
        return f"examples/{script} does not exist"
    parser = example_parser(path)
    parser.allow_abbrev = False
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            _, unknown = parser.parse_known_args(list(arguments))
    except SystemExit as exit_:
        return None if exit_.code in (0, None) else stderr.getvalue().strip().splitlines()[-1]
    own = set(re.findall(r"add_argument\(\s*\"(--[a-z0-9-]+)\"", path.read_text(encoding="utf-8")))
    foreign = [word.split("=")[0] for word in unknown if word.startswith("--") and word.split("=")[0] not in own]
    return f"unknown option(s) {foreign}" if foreign else None


@pytest.mark.parametrize(("where", "script", "arguments"), doc_example_runs(), ids=lambda value: str(value))
def test_doc_example_command_parses(where: str, script: str, arguments: tuple[str, ...]) -> None:
    failure = example_options_failure(script, arguments)
    assert failure is None, f"{where}: examples/{script} {' '.join(arguments)}: {failure}"


def test_an_example_option_that_does_not_exist_fails() -> None:
    assert example_options_failure("train_ir_sts.py", ("--data-root", "d", "--max-steps", "5")) is None
    assert example_options_failure("train_ir_sts.py", ("--data-dir", "d")) == "unknown option(s) ['--data-dir']"


def test_the_docs_hold_commands() -> None:
    pages = {command.where.split(":")[0] for command in DOC_COMMANDS}
    assert "README.md" in pages and len(DOC_COMMANDS) >= 10, pages


@pytest.mark.parametrize("command", DOC_COMMANDS, ids=lambda command: command.where)
def test_doc_command_parses(command: DocCommand) -> None:
    failure = parse_failure(command.argv)
    assert failure is None, f"{command.where}: `{command.line}` does not parse: {failure}"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("$ hf-unified-embed build r.yaml -o out  # the data", [("build", "r.yaml", "-o", "out")]),
        (".venv/bin/hf-unified-embed validate out && echo ok", [("validate", "out")]),
        ("HF_HUB_OFFLINE=1 python -m hf_unified_embed train r.yaml --check", [("train", "r.yaml", "--check")]),
        ("hf-unified-embed evaluate m s.yaml -o r.json 2>log.txt", [("evaluate", "m", "s.yaml", "-o", "r.json")]),
        ("python -m hf_unified_embed.cli.launch --nproc_per_node=2 train r.yaml", []),
        ("make demo", []),
    ],
)
def test_command_lines_are_found(line: str, expected: list[tuple[str, ...]]) -> None:
    assert commands_of_line(line) == expected


def test_continuation_lines_are_one_command() -> None:
    assert shell_lines("hf-unified-embed train \\\n  r.yaml \\\n  --check\n") == [
        "hf-unified-embed train    r.yaml    --check"
    ]


def subcommand_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser of every subcommand of ``parser``, by name."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


SUBCOMMANDS = sorted(subcommand_parsers(build_parser()))


@settings(max_examples=40, deadline=None)
@given(
    command=st.sampled_from(SUBCOMMANDS),
    option=st.from_regex(r"--[a-z]{3,12}(-[a-z]{3,8})?", fullmatch=True),
)
def test_an_option_the_command_lacks_fails(command: str, option: str) -> None:
    known = {
        flag for action in subcommand_parsers(strict_parser())[command]._actions for flag in action.option_strings
    }
    if option in known:
        return
    assert parse_failure((command, option, "x")) is not None


def test_an_abbreviated_option_fails() -> None:
    assert parse_failure(("build", "r.yaml", "--output", "out")) is None
    assert parse_failure(("build", "r.yaml", "--out", "out")) is not None
    assert parse_failure(("train", "r.yaml", "--data-dir", "x")) is not None
