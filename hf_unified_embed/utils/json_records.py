"""JSON lines and JSON arrays read a record at a time, and fields of nested records named by a dotted path.

Numbers are line numbers for JSON lines and 1-based element numbers for an array, so that errors point at
the exact record; a multi-GB array is decoded element by element, never whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from hf_unified_embed.errors import SourceFormatError, shown
from hf_unified_embed.utils.text_files import open_text

JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")


class _Missing:
    """No value at a field path."""


#: What :func:`field_at` returns where a record has no value at the path.
MISSING = _Missing()


def field_at(record: Any, column: str) -> Any:
    """``record[column]``, or for a dotted path (``query.text``) the value found by following each key into
    nested objects; :data:`MISSING` where there is none. A key that itself holds a dot is read as it is
    (``record["query.text"]`` wins over ``record["query"]["text"]``)."""
    if not isinstance(record, dict):
        return MISSING
    if column in record:
        return record[column]
    head, dot, rest = column.partition(".")
    while dot:
        if head in record:
            found = field_at(record[head], rest)
            if found is not MISSING:
                return found
        more, dot, rest = rest.partition(".")
        head = f"{head}.{more}"
    return MISSING


def path_problem(record: Any, column: str) -> str | None:
    """Where a dotted ``column`` stops in ``record`` (``'query' holds a str, not an object``), for the error
    of a missing field; ``None`` for a plain column name."""
    if "." not in column or not isinstance(record, dict):
        return None
    value: Any = record
    walked: list[str] = []
    for key in column.split("."):
        if not isinstance(value, dict):
            return f"{shown('.'.join(walked))} holds {type(value).__name__} {shown(value, 60)}, not an object"
        if key not in value:
            where = shown(".".join(walked)) if walked else "the record"
            return f"{where} has no {shown(key)}; its keys are {sorted(map(str, value))}"
        value = value[key]
        walked.append(key)
    return None


def iter_json_records(path: Path) -> Iterator[tuple[int, Any]]:
    """Records of a JSON-lines file, or of a top-level JSON array (read incrementally).

    Numbers are line numbers for JSON lines and 1-based element numbers for an array.
    """
    with open_text(path) as handle:
        first = ""
        while not first:
            chunk = handle.read(1)
            if not chunk:
                return
            first = chunk.strip()
        handle.seek(0)
        if first == "[":
            yield from _iter_json_array(path, handle)
            return
        yield from json_line_records(path, handle)


def is_json_array(path: Path) -> bool:
    """Whether a JSON file is one top-level array (its first non-blank character is ``[``), not JSON lines."""
    with open_text(path) as handle:
        while chunk := handle.read(1):
            if chunk.strip():
                return chunk == "["
    return False


def is_json_lines(path: Path) -> bool:
    """Whether a file is read as JSON lines: a JSON suffix (:data:`JSON_SUFFIXES`) and not one top-level array."""
    return path.suffix.lower() in JSON_SUFFIXES and not is_json_array(path)


def json_line_records(path: Path, lines: Iterable[str], first_line: int = 1) -> Iterator[tuple[int, Any]]:
    """``(line, value)`` of each non-blank line of JSON lines; a line that is not JSON is a located error."""
    for number, line in enumerate(lines, start=first_line):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as error:
            raise SourceFormatError(
                f"invalid JSON: {error.msg}", file=path, line=number, expected="one JSON object per line"
            ) from None


def _iter_json_array(path: Path, handle: Any, chunk_size: int = 1 << 20) -> Iterator[tuple[int, Any]]:
    # MEDI ships as one multi-GB JSON array: decode element by element from a sliding buffer.
    decoder = json.JSONDecoder()
    buffer = handle.read(chunk_size).lstrip().removeprefix("\ufeff").lstrip()[1:]
    position, number, exhausted = 0, 0, False
    while True:
        while position < len(buffer) and buffer[position] in " \t\r\n,":
            position += 1
        if position < len(buffer) and buffer[position] == "]":
            return
        try:
            value, end = decoder.raw_decode(buffer, position)
        except json.JSONDecodeError as error:
            if exhausted:
                raise SourceFormatError(
                    f"invalid JSON: {error.msg}",
                    file=path,
                    line=number + 1,
                    expected="a JSON array of objects (element number)",
                ) from None
            more = handle.read(chunk_size)
            exhausted = not more
            buffer, position = buffer[position:] + more, 0
            continue
        if end == len(buffer) and not exhausted:
            # A number or literal may continue in the next chunk; decode again with more text.
            more = handle.read(chunk_size)
            exhausted = not more
            buffer, position = buffer[position:] + more, 0
            continue
        number += 1
        yield number, value
        position = end


def json_objects(path: Path, records: Iterable[tuple[int, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON records, each of which must be an object (a located error otherwise)."""
    for number, record in records:
        if not isinstance(record, dict):
            raise SourceFormatError(f"got {type(record).__name__}", file=path, line=number, expected="a JSON object")
        yield number, record
