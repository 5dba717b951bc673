"""Reading the YAML files users write: build recipes, training recipes, evaluation suites, merge configs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml


def read_yaml_mapping(path: str | Path, error: type[Exception]) -> dict[str, Any]:
    """The top-level mapping of a YAML file (``{}`` for an empty file).

    A missing file, bytes that are not UTF-8 (a binary file, a UTF-16 export), invalid YAML or a top
    level that is not a mapping raise ``error`` with one line naming the file and where in it, so that
    each command reports it as an input error rather than a traceback.
    """
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: file does not exist")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as problem:
        line = raw.count(b"\n", 0, problem.start) + 1
        raise error(
            f"{path}:{line}: byte 0x{raw[problem.start]:02x} at byte offset {problem.start} is not UTF-8 "
            "(a YAML file must be UTF-8 text; is it a binary file?)"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as problem:
        raise error(_located(path, text, problem)) from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise error(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return dict(data)


def _located(path: Path, text: str, problem: yaml.YAMLError) -> str:
    """PyYAML's error as one line ``file:line:column: not valid YAML: ...`` (its own text spans several)."""
    if isinstance(problem, yaml.reader.ReaderError):
        line = text.count("\n", 0, problem.position) + 1
        character = problem.character if isinstance(problem.character, int) else ord(problem.character)
        return f"{path}:{line}: not valid YAML: character U+{character:04X} is not allowed ({problem.reason})"
    mark = getattr(problem, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    what = getattr(problem, "problem", None) or str(problem).splitlines()[0]
    context, context_mark = getattr(problem, "context", None), getattr(problem, "context_mark", None)
    if context:
        what += f" ({context}" + (f" from line {context_mark.line + 1})" if context_mark is not None else ")")
    return f"{where}: not valid YAML: {what}"
