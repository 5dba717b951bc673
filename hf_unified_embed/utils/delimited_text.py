"""Delimited text (CSV, TSV, a ``;`` spreadsheet export): header rows, delimiters, quotes and decimal marks.

Every error names the file, the line and what to change: a column the recipe reads that the header row
lacks or names twice, a record whose field count differs from the header row's, a quote that opens and is
never closed (at the line where it opens, not where the reader gave up), a number written with another
decimal mark than the source's ``decimal`` option.
"""

from __future__ import annotations

import csv
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import PlainValidator
from pydantic_core import PydanticCustomError

from hf_unified_embed.errors import SourceFormatError, shown
from hf_unified_embed.utils.text_files import open_text

Quoting = Literal[0, 1, 2, 3]  # csv.QUOTE_MINIMAL, QUOTE_ALL, QUOTE_NONNUMERIC, QUOTE_NONE

# Some STS and QA files hold very long fields; the csv module's default limit is 128 KiB.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))

#: The delimiter a delimited text file's extension implies when no ``delimiter`` option is given.
CSV_SUFFIXES = {".csv": ",", ".tsv": "\t", ".tab": "\t", ".txt": "\t"}
#: Suffixes read by their own rules, never as delimited text (see :func:`file_delimiter`).
_SELF_DESCRIBED = (".jsonl", ".json", ".ndjson", ".parquet")
#: What a ``delimiter`` option must be, in the words of its errors.
_DELIMITER_RULE = 'one character other than a quote or a line end, e.g. "\\t" or ","'


def _delimiter_value(value: object) -> str:
    if not isinstance(value, str) or len(value) != 1 or value in '\r\n"':
        raise PydanticCustomError("delimiter", f"input should be {_DELIMITER_RULE}")
    return value


def _optional_delimiter(value: object) -> str | None:
    return None if value is None else _delimiter_value(value)


# Checked by the recipe when it is loaded (pydantic runs the validator), so the error names recipe and source.
#: A source format's ``delimiter`` option, as its adapter declares it: one character (``"\t"`` in YAML for a tab)
#: that can separate fields.
Delimiter = Annotated[str, PlainValidator(_delimiter_value)]
#: A ``delimiter`` option that may be left out (``None``: the file's suffix decides).
OptionalDelimiter = Annotated[str | None, PlainValidator(_optional_delimiter)]
#: A source format's ``decimal`` option: the decimal mark of the numbers its files write as text.
DecimalMark = Literal[".", ","]
#: What a delimited text file must look like, for the errors that find it otherwise.
_DELIMITED_HELP = "delimited text starts with a header row naming its columns"
#: A number with a decimal comma (``7,8``, ``-0,25``), as many spreadsheet locales export it.
_DECIMAL_COMMA = re.compile(r"\s*[+-]?\d*,\d+\s*")
_DECIMAL_POINT = re.compile(r"\s*[+-]?\d*\.\d+\s*")


def check_delimiter(delimiter: Any) -> str:
    """A ``delimiter`` option's value if it is one character that can separate fields; an error naming the option."""
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in '\r\n"':
        raise SourceFormatError(
            f"got {shown(delimiter)}", field="delimiter", expected=f"options.delimiter to be {_DELIMITER_RULE}"
        )
    return delimiter


def file_delimiter(path: Path, delimiter: str | None = None) -> str | None:
    """The delimiter ``path`` is read with: ``None`` for a JSON or Parquet file (chosen by suffix), else the
    ``delimiter`` option, else the one its suffix implies (:data:`CSV_SUFFIXES`).

    Raises:
        SourceFormatError: a ``delimiter`` for a JSON or Parquet file, a bad ``delimiter``, or another
            suffix without one (the message names the option).
    """
    suffix = path.suffix.lower()
    if suffix in _SELF_DESCRIBED:
        if delimiter is not None:
            raise SourceFormatError(
                f"options.delimiter {shown(delimiter)} is for delimited text, but a {suffix} file is read by its suffix",
                file=path,
                field="delimiter",
                expected="no delimiter option for .jsonl/.json/.ndjson and .parquet files",
            )
        return None
    if delimiter is not None:
        return check_delimiter(delimiter)
    if suffix in CSV_SUFFIXES:
        return CSV_SUFFIXES[suffix]
    raise SourceFormatError(
        f"unsupported file type {shown(suffix)}",
        file=path,
        field="delimiter",
        expected=".jsonl/.json/.ndjson, .parquet, .csv (comma), .tsv/.tab/.txt (tab), "
        'or delimited text of any name with options.delimiter (e.g. "\\t")',
    )


def iter_delimited(
    path: Path, *, delimiter: str = "\t", quoting: Quoting = csv.QUOTE_NONE, header: bool = False
) -> Iterator[tuple[int, list[str]]]:
    """``(line_number, fields)`` of a delimited text file; a UTF-8 byte-order mark is dropped.

    With ``header=True`` the first line is skipped (use :func:`read_header` to look at it). With quotes
    read (any ``quoting`` but ``QUOTE_NONE``) a record's number is the line where it starts, and a quote
    that is never closed is an error at the line where it opens.
    """
    with open_text(path, newline="") as handle:
        if quoting == csv.QUOTE_NONE:  # every record is one line: nothing to follow across lines
            yield from delimited_rows(csv.reader(handle, delimiter=delimiter, quoting=quoting), header=header)
            return
        lines = _RecordLines(iter(handle))
        reader = csv.reader(lines, delimiter=delimiter, quoting=quoting)
        end = 0
        for fields in reader:
            start, end = end + 1, reader.line_num
            taken = lines.take()
            if len(taken) > 1 or lines.exhausted:
                _check_quotes(path, delimiter, taken, fields, start)
            if header:
                header = False
                continue
            if fields and not (len(fields) == 1 and not fields[0].strip()):
                yield start, fields


def delimited_rows(reader: Any, *, header: bool, offset: int = 0) -> Iterator[tuple[int, list[str]]]:
    """The records of a csv reader as :func:`iter_delimited` yields them; ``offset`` lines come before the
    reader's text."""
    for fields in reader:
        if header:
            header = False
            continue
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue
        yield offset + reader.line_num, fields


def read_header(path: Path, *, delimiter: str, quoting: Quoting = csv.QUOTE_MINIMAL) -> list[str]:
    """The first record of a delimited text file: its header row."""
    with open_text(path, newline="") as handle:
        return next(csv.reader(handle, delimiter=delimiter, quoting=quoting), [])


def column_positions(
    header: Sequence[str], columns: Mapping[str, str | None], *, file: Path, delimiter: str = "\t", line: int = 1
) -> dict[str, int]:
    """Index in ``header`` of each of ``columns`` (``{column: the option that names it}``).

    Raises:
        SourceFormatError: a column the header row lacks (:func:`missing_column_error`: the header row, the
            delimiter and the option), or names more than once (which one to read is anyone's guess: the
            error names the column and its positions).
    """
    positions = {}
    for column, option in columns.items():
        found = [index for index, name in enumerate(header) if name == column]
        if not found:
            raise missing_column_error(column, header, file=file, line=line, option=option, delimiter=delimiter)
        if len(found) > 1:
            places = ", ".join(str(index + 1) for index in found)
            raise SourceFormatError(
                f"the header row names this column {len(found)} times, as fields {places} of {list(header)}",
                file=file,
                line=line,
                field=column,
                expected="each column the recipe reads named once in the header row; rename the others",
            )
        positions[column] = found[0]
    return positions


class _RecordLines:
    """The lines a csv reader takes from a file, kept until the record they make is read (:meth:`take`).

    A record that spans several lines, or ends at the end of the file inside a quote, is where a lost quote
    hides: the reader runs on to the next quote (or the end of the file) and reports nothing. Its lines are
    parsed again strictly to find that.
    """

    def __init__(self, lines: Iterator[str]) -> None:
        self._lines = lines
        self._taken: list[str] = []
        #: The reader asked for a line past the end: only a record still inside a quote does.
        self.exhausted = False

    def __iter__(self) -> _RecordLines:
        return self

    def __next__(self) -> str:
        try:
            line = next(self._lines)
        except StopIteration:
            self.exhausted = True
            raise
        self._taken.append(line)
        return line

    def take(self) -> list[str]:
        taken, self._taken = self._taken, []
        return taken


def _check_quotes(path: Path, delimiter: str, lines: list[str], fields: list[str], start: int) -> None:
    """Refuse a record whose quotes a strict reader does not close where its fields end."""
    try:
        for _ in csv.reader(lines, delimiter=delimiter, strict=True):
            pass
    except csv.Error:
        # The quote opens on the line where the first field holding a line end begins.
        before = next(index for index, value in enumerate([*fields, "\n"]) if "\n" in value)
        opens = start + sum(value.count("\n") for value in fields[:before])
        raise SourceFormatError(
            f"a quoted field opens here and is not closed where it ends; the reader runs on to line "
            f"{start + len(lines) - 1}",
            file=path,
            line=opens,
            expected='a closing " before the next delimiter or line end, and "" for a quote inside a quoted text',
        ) from None


def delimited_records(
    path: Path, delimiter: str, columns: Mapping[str, str | None]
) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line, {column: value})`` of a delimited text file with a header row; ``line`` is where the record
    starts.

    Args:
        path: the file.
        delimiter: the character between its fields.
        columns: the columns the caller reads, each with the option that names it: the header row must name
            each exactly once (:func:`column_positions`).

    Raises:
        SourceFormatError: a header without a column or with one twice; a record whose field count differs
            from the header row's; a quote that is never closed (at the line where it opens).
    """
    with open_text(path, newline="") as handle:
        lines = _RecordLines(iter(handle))
        reader = csv.reader(lines, delimiter=delimiter)
        header: list[str] | None = None
        end = 0  # the line the previous record ended on
        for fields in reader:
            start, end = end + 1, reader.line_num
            taken = lines.take()
            if len(taken) > 1 or lines.exhausted:
                _check_quotes(path, delimiter, taken, fields, start)
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue
            if header is None:
                header = fields
                column_positions(header, columns, file=path, delimiter=delimiter, line=start)
                continue
            extra = fields[len(header) :]
            if len(fields) < len(header) or any(value.strip() for value in extra):
                raise SourceFormatError(
                    f"{len(fields)} field(s) split at {shown(delimiter)} where the header row has {len(header)}",
                    file=path,
                    line=start,
                    expected=f"{len(header)} fields like the header row; check options.delimiter, and quote a "
                    "text that holds the delimiter",
                )
            yield start, dict(zip(header, fields))


def missing_column_error(
    column: str,
    columns: Sequence[str],
    *,
    file: str | Path,
    line: int,
    option: str | None = None,
    delimiter: str | None = None,
) -> SourceFormatError:
    """The error for a record or header row without ``column``: it names the columns found, the option that
    configures the column (``options.<option>``) and, for delimited text, the header row and delimiter rule."""
    fix = f"options.{option} set to one of the columns" if option else "a column of that name"
    if delimiter is None:
        return SourceFormatError(
            f"column missing; the record has {sorted(map(str, columns))}",
            file=file,
            line=line,
            field=column,
            expected=fix,
        )
    # One field holding another common delimiter: the file is not split at this one.
    other = next((c for c in ",\t;|" if c != delimiter and len(columns) == 1 and c in columns[0]), None)
    hint = f"; the row holds {shown(other)}: set options.delimiter to {shown(other)}" if other else ""
    return SourceFormatError(
        f"column not in the header row {list(columns)} (fields split at {shown(delimiter)}){hint}",
        file=file,
        line=line,
        field=column,
        expected=f"{fix}; {_DELIMITED_HELP}",
    )


def text_number(value: str, decimal: DecimalMark | None) -> float | None:
    """A number written as text with the decimal mark ``decimal`` (``None``: the format fixes ``.``), or
    ``None`` if it is not one. No thousands separators: ``1.234,5`` with ``decimal: ","`` is not a number."""
    if decimal == ",":
        if "." in value:
            return None
        value = value.replace(",", ".", 1)
    try:
        return float(value)
    except ValueError:
        return None


def decimal_hint(value: Any, decimal: DecimalMark | None) -> str:
    """What to change when a score ``value`` is not a number: the ``decimal`` option, if its mark is the cause."""
    if not isinstance(value, str):
        return ""
    if decimal == "." and _DECIMAL_COMMA.fullmatch(value):
        return '; it has a decimal comma: set options.decimal to ","'
    if decimal == "," and "." in value:
        if _DECIMAL_POINT.fullmatch(value):
            return '; it has a decimal point, but options.decimal is ","'
        return '; a "." is not read as a thousands separator: write the number without one'
    if decimal is None and _DECIMAL_COMMA.fullmatch(value):
        return "; it has a decimal comma, which this format does not read: write \".\" (format 'pairs' takes options.decimal)"
    return ""
