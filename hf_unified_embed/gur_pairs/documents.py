"""Raw documents for pair mining: one per line, JSON lines with ``text`` (and ``title``), or .txt folders.

Documents are numbered across all inputs in order; ``part``/``parts`` select every ``parts``-th one
so that worker processes can share the inputs without splitting files, and every document keeps
its exact ``file:line`` for error messages.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from hf_unified_embed.errors import SourceFormatError, shown
from hf_unified_embed.utils.readers import JSON_SUFFIXES, iter_json_records

__all__ = ["Document", "iter_documents"]


@dataclass(frozen=True)
class Document:
    """One raw document: its text, an optional title and where it came from (``file:line``)."""

    text: str
    title: str | None = None
    location: str = ""


def _expand(paths: Sequence[Path]) -> Iterator[tuple[Path, bool]]:
    # (file, whole_file_is_one_document)
    for path in paths:
        if path.is_dir():
            files = sorted(p for p in path.rglob("*.txt") if p.is_file())
            if not files:
                raise SourceFormatError("folder holds no .txt files", file=path, expected="a folder of .txt documents")
            for file in files:
                yield file, True
        elif path.is_file():
            yield path, False
        else:
            raise SourceFormatError("file not found", file=path, expected="an existing file or folder")


def _optional_text(value: object, *, file: Path, line: int, field: str) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise SourceFormatError(f"got {shown(value)}", file=file, line=line, field=field, expected="a string or null")
    return value


def _documents_of(path: Path, whole_file: bool, text_field: str, title_field: str) -> Iterator[Document]:
    if whole_file:
        yield Document(path.read_text(encoding="utf-8-sig"), None, f"{path}:1")
    elif path.suffix.lower() in JSON_SUFFIXES:
        for line, record in iter_json_records(path):
            if not isinstance(record, dict):
                raise SourceFormatError(f"got {type(record).__name__}", file=path, line=line, expected="a JSON object")
            if text_field not in record:
                raise SourceFormatError(
                    f"missing (keys: {sorted(record)})",
                    file=path,
                    line=line,
                    field=text_field,
                    expected="the document text",
                )
            text = _optional_text(record[text_field], file=path, line=line, field=text_field) or ""
            title = _optional_text(record.get(title_field), file=path, line=line, field=title_field)
            yield Document(text, title, f"{path}:{line}")
    else:
        with open(path, encoding="utf-8-sig") as handle:
            for line, text in enumerate(handle, start=1):
                yield Document(text, None, f"{path}:{line}")


def iter_documents(
    paths: Sequence[str | Path],
    *,
    text_field: str = "text",
    title_field: str = "title",
    part: int = 0,
    parts: int = 1,
) -> Iterator[tuple[int, Document]]:
    """``(document_number, document)`` for the documents numbered ``part`` modulo ``parts``.

    ``paths`` are files or folders: a folder contributes each .txt file below it as one document
    (no title); a .jsonl/.json file one document per record (``text_field``, optional
    ``title_field``); any other file one document per line. Empty documents are still numbered.
    """
    if not 0 <= part < parts:
        raise ValueError(f"part must be in [0, {parts}), got {part}")
    number = -1
    for path, whole_file in _expand([Path(p) for p in paths]):
        if whole_file:
            number += 1
            if number % parts == part:
                yield number, next(_documents_of(path, True, text_field, title_field))
            continue
        for document in _documents_of(path, False, text_field, title_field):
            number += 1
            if number % parts == part:
                yield number, document
