"""Reading the files users give: delimited text, JSON / JSON lines, Parquet, with errors that name file, line and field.

Each yields one record at a time with its 1-based line (or row) number, so memory does not grow
with the file and errors can point at the exact place.

:mod:`~hf_unified_embed.utils.table_blocks` reads the same files a block at a time with pyarrow for the
adapters' vectorised paths, and falls back on these readers for a block it cannot convert exactly.
"""

from __future__ import annotations

import codecs
import csv
import glob
import json
import math
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, TextIO

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import StringConstraints

from hf_unified_embed.errors import SourceFormatError, shown
from hf_unified_embed.utils.locations import looks_local

Quoting = Literal[0, 1, 2, 3]  # csv.QUOTE_MINIMAL, QUOTE_ALL, QUOTE_NONNUMERIC, QUOTE_NONE

# Some STS and QA files hold very long fields; the csv module's default limit is 128 KiB.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))

JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
#: The delimiter a delimited text file's extension implies when no ``delimiter`` option is given.
CSV_SUFFIXES = {".csv": ",", ".tsv": "\t", ".tab": "\t", ".txt": "\t"}
PARQUET_SUFFIXES = (".parquet",)

#: A source format's ``delimiter`` option, as its adapter declares it: one character (``"\t"`` in YAML for a tab).
Delimiter = Annotated[str, StringConstraints(min_length=1, max_length=1)]
#: What a delimited text file must look like, for the errors that find it otherwise.
_DELIMITED_HELP = "delimited text starts with a header row naming its columns"


def resolve_files(data_files: str | Path | Sequence[str | Path], base_dir: Path | None = None) -> list[Path]:
    """Expand globs and relative paths (against ``base_dir``); every pattern must match something."""
    patterns = [data_files] if isinstance(data_files, (str, Path)) else list(data_files)
    if not patterns:
        raise SourceFormatError("no input files given", field="data_files", expected="a path, glob or list of them")
    files: list[Path] = []
    for pattern in patterns:
        path = Path(pattern).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        matches = sorted(glob.glob(str(path))) if glob.has_magic(str(path)) else ([str(path)] if path.exists() else [])
        if not matches:
            raise SourceFormatError(
                "file not found", file=path, field="data_files", expected="an existing path or glob"
            )
        files.extend(Path(match) for match in matches)
    return files


def resolve_inputs(
    data_files: str | Path | Sequence[str | Path], base_dir: Path | None = None, *, dataset_ids: bool = False
) -> list[Path | str]:
    """Like :func:`resolve_files`; with ``dataset_ids`` a name that does not look local stays a Hub id (a string)."""
    patterns = [data_files] if isinstance(data_files, (str, Path)) else list(data_files)
    if not dataset_ids:
        return list(resolve_files(patterns, base_dir))
    inputs: list[Path | str] = []
    for pattern in patterns:
        if looks_local(pattern, base_dir):
            inputs.extend(resolve_files(pattern, base_dir))
        else:
            inputs.append(str(pattern))
    return inputs


def local_files(inputs: Sequence[Path | str]) -> list[Path]:
    """The local paths among resolved inputs (Hub ids left out)."""
    return [entry for entry in inputs if isinstance(entry, Path)]


def first_undecodable_byte(
    path: Path, encoding: str = "utf-8", *, chunk_size: int = 1 << 20
) -> tuple[int, int, int] | None:
    """``(byte_offset, line, byte)`` of the first byte of ``path`` that is not valid ``encoding``; ``None`` if all are.

    Called only after a decoding error, so reading the file a second time costs nothing on valid input.
    """
    decoder = codecs.getincrementaldecoder(encoding)()
    offset = newlines = 0
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(chunk_size)
            # The decoder keeps an incomplete multi-byte sequence from the previous chunk (never a newline).
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as error:
                data = error.object
                line = newlines + data[: error.start].count(b"\n") + 1
                return offset - pending + error.start, line, data[error.start]
            if not chunk:
                return None
            offset += len(chunk)
            newlines += chunk.count(b"\n")


def decoding_error(path: Path, encoding: str) -> SourceFormatError:
    """A :class:`SourceFormatError` naming the file, line, byte offset and codec of the first bad byte."""
    codec = codecs.lookup(encoding).name
    found = first_undecodable_byte(path, codec)
    if found is None:  # the file changed since; say what we know
        return SourceFormatError(f"cannot be decoded as {codec}", file=path, expected=f"{codec} text")
    offset, line, byte = found
    return SourceFormatError(
        f"byte 0x{byte:02x} at byte offset {offset} cannot be decoded as {codec}",
        file=path,
        line=line,
        expected=f"{codec} text; re-encode it, e.g. iconv -f latin1 -t utf-8",
    )


@contextmanager
def open_text(path: Path, *, newline: str | None = None) -> Iterator[TextIO]:
    """Open a UTF-8 text file (a byte-order mark is dropped); a byte that is not UTF-8 becomes a located error."""
    try:
        with open(path, encoding="utf-8-sig", newline=newline) as handle:
            yield handle
    except UnicodeDecodeError as error:
        raise decoding_error(path, error.encoding) from error


def iter_delimited(
    path: Path, *, delimiter: str = "\t", quoting: Quoting = csv.QUOTE_NONE, header: bool = False
) -> Iterator[tuple[int, list[str]]]:
    """``(line_number, fields)`` of a delimited text file; a UTF-8 byte-order mark is dropped.

    With ``header=True`` the first line is skipped (use :func:`read_header` to look at it).
    """
    with open_text(path, newline="") as handle:
        yield from delimited_rows(csv.reader(handle, delimiter=delimiter, quoting=quoting), header=header)


def delimited_rows(reader: Any, *, header: bool, offset: int = 0) -> Iterator[tuple[int, list[str]]]:
    # The records of a csv reader as iter_delimited yields them; `offset` lines come before the reader's text.
    for fields in reader:
        if header:
            header = False
            continue
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue
        yield offset + reader.line_num, fields


def read_header(path: Path, *, delimiter: str, quoting: Quoting = csv.QUOTE_MINIMAL) -> list[str]:
    with open_text(path, newline="") as handle:
        return next(csv.reader(handle, delimiter=delimiter, quoting=quoting), [])


def column_positions(
    header: Sequence[str], columns: Mapping[str, str | None], *, file: Path, delimiter: str = "\t"
) -> dict[str, int]:
    """Index in ``header`` of each of ``columns`` (``{column: the option that names it}``); a missing one is an
    error naming the file, the header row, the delimiter and the option (:func:`missing_column_error`)."""
    positions = {}
    for column, option in columns.items():
        if column not in header:
            raise missing_column_error(column, header, file=file, line=1, option=option, delimiter=delimiter)
        positions[column] = header.index(column)
    return positions


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


def check_delimiter(delimiter: Any) -> str:
    """A ``delimiter`` option's value if it is one character that can separate fields; an error naming the option."""
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in '\r\n"':
        raise SourceFormatError(
            f"got {shown(delimiter)}",
            field="delimiter",
            expected='options.delimiter to be one character other than a quote or a line end, e.g. "\\t" or ","',
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
    if suffix in JSON_SUFFIXES or suffix in PARQUET_SUFFIXES:
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


def iter_table_records(
    path: Path,
    *,
    delimiter: str | None = None,
    columns: Mapping[str, str | None] | None = None,
    batch_size: int = 4_096,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Dict records of a JSON-lines/JSON, delimited text (header row) or Parquet file, chosen by suffix.

    Args:
        path: the file.
        delimiter: the ``delimiter`` option (see :func:`file_delimiter`); ``None``: from the suffix.
        columns: the columns the caller reads, each with the option that names it (``{column: option}``,
            ``None`` where no option does): a delimited file's header row must name each (an error names the
            header, the delimiter and the option).
        batch_size: rows per Parquet batch.

    Raises:
        SourceFormatError: a file that cannot be read as its kind, located; a delimited record whose
            field count differs from the header row's (a wrong delimiter, an unquoted delimiter in a text).
    """
    separator = file_delimiter(path, delimiter)
    if path.suffix.lower() in JSON_SUFFIXES:
        yield from json_objects(path, iter_json_records(path))
    elif separator is None:
        yield from iter_parquet_records(path, batch_size=batch_size)
    else:
        yield from _delimited_records(path, separator, columns or {})


def _delimited_records(
    path: Path, delimiter: str, columns: Mapping[str, str | None]
) -> Iterator[tuple[int, dict[str, Any]]]:
    with open_text(path, newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        header: list[str] | None = None
        for fields in reader:
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue
            if header is None:
                header = fields
                for column, option in columns.items():
                    if column not in header:
                        raise missing_column_error(
                            column, header, file=path, line=reader.line_num, option=option, delimiter=delimiter
                        )
                continue
            extra = fields[len(header) :]
            if len(fields) < len(header) or any(value.strip() for value in extra):
                raise SourceFormatError(
                    f"{len(fields)} field(s) split at {shown(delimiter)} where the header row has {len(header)}",
                    file=path,
                    line=reader.line_num,
                    expected=f"{len(header)} fields like the header row; check options.delimiter, and quote a "
                    "text that holds the delimiter",
                )
            yield reader.line_num, dict(zip(header, fields))


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


def json_objects(path: Path, records: Iterable[tuple[int, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON records, each of which must be an object (a located error otherwise)."""
    for number, record in records:
        if not isinstance(record, dict):
            raise SourceFormatError(f"got {type(record).__name__}", file=path, line=number, expected="a JSON object")
        yield number, record


def open_parquet(path: str | Path) -> pq.ParquetFile:
    """A Parquet file read as a stream (1 MB reads), not a row group at a time: memory stays small however
    large the file's row groups are."""
    return pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)


#: Rows per Parquet batch, the same as :func:`iter_parquet_records` reads.
PARQUET_BATCH = 4_096


def iter_parquet_batches(
    path: Path, *, columns: Sequence[str] | None = None, batch_size: int = PARQUET_BATCH
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(rows before it, batch)`` for the batches of a Parquet file, read as :func:`iter_parquet_records` reads
    it; a truncated or corrupt file is the same error, naming the rows read before it."""
    number = 0
    try:
        for batch in open_parquet(path).iter_batches(batch_size=batch_size, columns=columns):
            yield number, batch
            number += batch.num_rows
    except (pa.ArrowException, OSError) as error:
        raise SourceFormatError(
            f"cannot be read as Parquet after {number} rows ({error})",
            file=path,
            expected="a complete Parquet file",
        ) from error


def iter_parquet_records(path: Path, *, batch_size: int = PARQUET_BATCH) -> Iterator[tuple[int, dict[str, Any]]]:
    """Dict records of a Parquet file with 1-based row numbers; a truncated or corrupt file names itself."""
    for rows_before, batch in iter_parquet_batches(path, batch_size=batch_size):
        yield from enumerate(batch.to_pylist(), start=rows_before + 1)


def record_field(
    record: dict[str, Any], column: str, *, file: str | Path, line: int, option: str | None = None
) -> Any:
    """``record[column]``; a missing column is an error naming the record's columns and ``options.<option>``,
    the option that names the column."""
    if column not in record:
        raise missing_column_error(column, list(record), file=file, line=line, option=option)
    return record[column]


def record_texts(
    record: dict[str, Any], column: str, *, file: str | Path, line: int, option: str | None = None
) -> list[str]:
    """The non-empty texts of ``record[column]``, a cell holding one text or a list of texts."""
    value = record_field(record, column, file=file, line=line, option=option)
    values = value if isinstance(value, list) else [value]
    return [require_text(text, file=file, line=line, field=column) for text in values]


def record_text(record: dict[str, Any], column: str, *, file: str | Path, line: int, option: str | None = None) -> str:
    """The non-empty text of ``record[column]``, stripped."""
    value = record_field(record, column, file=file, line=line, option=option)
    return require_text(value, file=file, line=line, field=column)


def require_text(value: Any, *, file: str | Path, line: int, field: str) -> str:
    """A non-empty string with surrounding whitespace removed."""
    if not isinstance(value, str) or not value.strip():
        raise SourceFormatError(
            f"got {shown(value)}", file=file, line=line, field=field, expected="a non-empty string"
        )
    return value.strip()


def score_bounds(score_range: Sequence[float]) -> tuple[float, float]:
    """``(low, high)`` of a ``score_range`` option; ``high > low`` or an error naming the option."""
    low, high = float(score_range[0]), float(score_range[1])
    if not high > low:
        raise SourceFormatError(
            f"got {shown(score_range)}",
            field="score_range",
            expected="options.score_range [low, high] with high > low",
        )
    return low, high


def parse_score(
    value: Any, *, file: str | Path, line: int, field: str, low: float, high: float, fix: str | None = "score_range"
) -> float:
    """Map a raw score in ``[low, high]`` linearly onto [0, 1]; anything else is an error.

    ``fix`` says how to change the range in the error: the name of the option that sets it (default
    ``score_range``, shown as ``options.score_range``) or, for a format whose range is fixed, a sentence.
    """
    try:
        score = float(value)
    except (TypeError, ValueError):
        score = math.nan
    if not math.isfinite(score) or not low <= score <= high:
        if fix is None:
            how = ""
        elif fix.isidentifier():
            how = f"; set options.{fix} if the file's scores use another range"
        else:
            how = f"; {fix}"
        raise SourceFormatError(
            f"got {shown(value)}",
            file=file,
            line=line,
            field=field,
            expected=f"a number in [{low:g}, {high:g}]{how}",
        )
    return (score - low) / (high - low)


# Block-wise reading with pyarrow, for the adapters' vectorised paths.
