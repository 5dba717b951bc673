"""Reading the files users give: delimited text, JSON / JSON lines, Parquet, with errors that name file, line and field.

Each yields one record at a time with its 1-based line (or row) number, so memory does not grow
with the file and errors can point at the exact place.

The second half reads the same files a block at a time with pyarrow (:func:`iter_text_chunks`,
:class:`TextChunk`, :func:`iter_parquet_batches`) for the adapters' vectorised paths. Each block keeps
what the per-record readers need to read it again record by record (its bytes and the number of its
first line), so an adapter that cannot convert a block with pyarrow — a malformed line, a value pyarrow
parses differently from Python — reads that block the per-record way and raises the same located error.
"""

from __future__ import annotations

import codecs
import csv
import glob
import io
import itertools
import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from hf_unified_embed.errors import SourceFormatError, shown
from hf_unified_embed.utils.locations import looks_local

Quoting = Literal[0, 1, 2, 3]  # csv.QUOTE_MINIMAL, QUOTE_ALL, QUOTE_NONNUMERIC, QUOTE_NONE

# Some STS and QA files hold very long fields; the csv module's default limit is 128 KiB.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))

JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
CSV_SUFFIXES = {".csv": ",", ".tsv": "\t"}
PARQUET_SUFFIXES = (".parquet",)


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
        yield from _delimited(csv.reader(handle, delimiter=delimiter, quoting=quoting), header=header)


def _delimited(reader: Any, *, header: bool, offset: int = 0) -> Iterator[tuple[int, list[str]]]:
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


def column_positions(header: Sequence[str], columns: Sequence[str], *, file: Path, expected: str) -> dict[str, int]:
    """Index of each of ``columns`` in ``header``; a missing one is an error naming the file and field."""
    positions = {}
    for column in columns:
        if column not in header:
            raise SourceFormatError(
                f"column {shown(column)} not in header {list(header)}",
                file=file,
                line=1,
                field=column,
                expected=expected,
            )
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
        yield from _json_lines(path, handle)


def is_json_array(path: Path) -> bool:
    """Whether a JSON file is one top-level array (its first non-blank character is ``[``), not JSON lines."""
    with open_text(path) as handle:
        while chunk := handle.read(1):
            if chunk.strip():
                return chunk == "["
    return False


def _json_lines(path: Path, lines: Iterable[str], first_line: int = 1) -> Iterator[tuple[int, Any]]:
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


def iter_table_records(
    path: Path, *, delimiter: str | None = None, batch_size: int = 4_096
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Dict records of a JSON-lines/JSON, CSV/TSV (header row) or Parquet file, chosen by suffix."""
    suffix = path.suffix.lower()
    if suffix in JSON_SUFFIXES:
        yield from json_objects(path, iter_json_records(path))
    elif suffix in CSV_SUFFIXES or delimiter is not None:
        with open_text(path, newline="") as handle:
            reader = csv.DictReader(handle, delimiter=delimiter or CSV_SUFFIXES[suffix])
            for record in reader:
                yield reader.line_num, record
    elif suffix in PARQUET_SUFFIXES:
        yield from iter_parquet_records(path, batch_size=batch_size)
    else:
        raise SourceFormatError(
            f"unsupported file type {shown(suffix)}", file=path, expected=".jsonl/.json, .csv/.tsv or .parquet"
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


def iter_parquet_records(path: Path, *, batch_size: int = 4_096) -> Iterator[tuple[int, dict[str, Any]]]:
    """Dict records of a Parquet file with 1-based row numbers; a truncated or corrupt file names itself."""
    number = 0
    try:
        batches = open_parquet(path).iter_batches(batch_size=batch_size)
        for batch in batches:
            records = batch.to_pylist()
            for record in records:
                number += 1
                yield number, record
    except (pa.ArrowException, OSError) as error:
        raise SourceFormatError(
            f"cannot be read as Parquet after {number} rows ({error})",
            file=path,
            expected="a complete Parquet file",
        ) from error


def record_field(record: dict[str, Any], column: str, *, file: str | Path, line: int) -> Any:
    """``record[column]``; a missing column is an error naming the record's columns."""
    if column not in record:
        raise SourceFormatError(
            f"column missing; the record has {sorted(record)}",
            file=file,
            line=line,
            field=column,
            expected="the configured column name",
        )
    return record[column]


def record_texts(record: dict[str, Any], column: str, *, file: str | Path, line: int) -> list[str]:
    """The non-empty texts of ``record[column]``, a cell holding one text or a list of texts."""
    value = record_field(record, column, file=file, line=line)
    values = value if isinstance(value, list) else [value]
    return [require_text(text, file=file, line=line, field=column) for text in values]


def record_text(record: dict[str, Any], column: str, *, file: str | Path, line: int) -> str:
    """The non-empty text of ``record[column]``, stripped."""
    return require_text(record_field(record, column, file=file, line=line), file=file, line=line, field=column)


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
            f"got {shown(score_range)}", field="score_range", expected="[low, high] with high > low"
        )
    return low, high


def parse_score(value: Any, *, file: str | Path, line: int, field: str, low: float, high: float) -> float:
    """Map a raw score in ``[low, high]`` linearly onto [0, 1]; anything else is an error."""
    try:
        score = float(value)
    except (TypeError, ValueError):
        score = math.nan
    if not math.isfinite(score) or not low <= score <= high:
        raise SourceFormatError(
            f"got {shown(value)}", file=file, line=line, field=field, expected=f"a number in [{low:g}, {high:g}]"
        )
    return (score - low) / (high - low)


# Block-wise reading with pyarrow, for the adapters' vectorised paths.

#: The characters ``str.strip()`` removes (``str.isspace()``): Arrow's ``utf8_trim`` with this set strips a
#: text exactly as Python does, so both paths of an adapter agree on what is blank.
PY_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
#: Bytes read per block of a text file; a block ends at a line end (a longer line makes a longer block).
CHUNK_BYTES = 4 * 1024**2
#: Rows per Parquet batch, the same as :func:`iter_parquet_records` reads.
PARQUET_BATCH = 4_096


@dataclass
class TableBatch:
    """Rows an adapter read with pyarrow (``table``, in the unified text and score columns), and ``rows``:
    the same rows read record by record, as ``(location, row)`` pairs.

    ``table`` is ``None`` when the block cannot be converted exactly: the builder then takes ``rows()``,
    which raises the adapter's located error if there is one.
    """

    table: pa.Table | None
    rows: Callable[[], Iterable[tuple[str, dict[str, Any]]]]
    #: ``rows()`` reads the block again, counting its skipped rows again (so the builder takes back those
    #: counted while the table was made); ``False``: it replays rows already read, nothing is counted twice.
    recount: bool = True


#: The Arrow types of the unified text and score columns as adapters give them (scores not yet float32).
_ROW_COLUMNS = {
    "query": pa.string(),
    "positives": pa.list_(pa.string()),
    "negatives": pa.list_(pa.string()),
    "positive_scores": pa.list_(pa.float64()),
    "negative_scores": pa.list_(pa.float64()),
}


def batched_rows(rows: Iterable[tuple[str, dict[str, Any]]], size: int = 10_000) -> Iterator[TableBatch]:
    """An adapter's ``(location, row)`` pairs as :class:`TableBatch` es of ``size`` rows, for a row-by-row
    format whose rows hold only the text and score columns: the builder then completes and checks them
    column by column, and replays the rows one by one only for a batch that breaks a rule."""
    iterator = iter(rows)
    while batch := list(itertools.islice(iterator, size)):
        yield TableBatch(_rows_table([row for _, row in batch]), partial(iter, batch), recount=False)


def _rows_table(rows: list[dict[str, Any]]) -> pa.Table | None:
    names = list(dict.fromkeys(name for row in rows for name in row))
    if not set(names) <= set(_ROW_COLUMNS):
        return None
    try:
        return pa.Table.from_pylist(rows, schema=pa.schema([(name, _ROW_COLUMNS[name]) for name in names]))
    except (pa.ArrowException, TypeError, ValueError):
        return None


def table_reader(
    batches: Callable[..., Iterator[TableBatch]] | None = None, *, per_file: bool = False, cost: float | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark an adapter (below ``register_source_format``) with what the parallel builder may do with it.

    ``batches(files, context, **options)`` reads the same rows as the adapter, a block at a time, as
    :class:`TableBatch` es (its options are the adapter's); ``per_file`` says that each input file (or
    folder) is read independently of the others, so the files of a source may be read by several
    processes and the rows joined in file order; ``cost``: the time to read a byte of input, relative to
    a vectorised reader's (default 1 with ``batches``, else 1.5), to share the work out evenly.
    """

    def mark(adapter: Callable[..., Any]) -> Callable[..., Any]:
        adapter.read_batches = batches  # type: ignore[attr-defined]
        adapter.per_file = per_file  # type: ignore[attr-defined]
        adapter.read_cost = cost if cost is not None else (1.0 if batches is not None else 1.5)  # type: ignore[attr-defined]
        return adapter

    return mark


def strip_texts(texts: pa.Array) -> pa.Array:
    """``str.strip()`` of every text of an Arrow string array."""
    return pc.utf8_trim(texts, characters=PY_WHITESPACE)


def nonblank_texts(texts: pa.Array) -> pa.Array | None:
    """The stripped texts, or ``None`` when one is missing or blank (what :func:`require_text` refuses) or
    the array holds no texts."""
    if texts.null_count or not (pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type)):
        return None
    stripped = strip_texts(texts)
    if len(stripped) and pc.min(pc.binary_length(stripped)).as_py() == 0:
        return None
    return stripped


def mapped_scores(values: pa.Array, low: float, high: float) -> pa.Array | None:
    """``(s − low) / (high − low)`` of texts or numbers as :func:`parse_score` maps them, or ``None`` when a
    value is not a number pyarrow parses as Python does, or lies outside ``[low, high]``."""
    if values.null_count or not (
        pa.types.is_string(values.type)
        or pa.types.is_large_string(values.type)
        or pa.types.is_integer(values.type)
        or pa.types.is_floating(values.type)
    ):
        return None
    try:
        scores = pc.cast(values, pa.float64())  # Arrow refuses what Python's float() might read otherwise
    except pa.ArrowException:
        return None
    if len(scores) and not (
        pc.all(pc.is_finite(scores)).as_py() and pc.min(scores).as_py() >= low and pc.max(scores).as_py() <= high
    ):
        return None
    return pc.divide(pc.subtract(scores, pa.scalar(low)), pa.scalar(high - low))


def singleton_lists(values: pa.Array) -> pa.Array:
    """Each value as a list of one (a positive, a score)."""
    offsets = pa.array(range(len(values) + 1), pa.int32())
    return pa.ListArray.from_arrays(offsets, values)


def _line_ends(data: bytes) -> int:
    # Lines ended in `data` as Python's universal newlines count them: \n, \r\n and a lone \r.
    return data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")


@dataclass(frozen=True)
class TextChunk:
    """A block of whole lines of a text file: its bytes (a leading byte-order mark dropped) and the number
    of its first line; ``header``: its first line is the file's header."""

    path: Path
    data: bytes
    first_line: int
    header: bool = False

    def lines(self) -> pa.Array | None:
        """The block's lines (the header and line ends left out) as an Arrow string array.

        ``None`` when the block is not plain: not UTF-8, or holding a carriage return or NUL, which the
        per-record readers treat in ways of their own; such a block is read with :meth:`delimited` /
        :meth:`json_lines`.
        """
        data = self.data
        if b"\r" in data or b"\x00" in data:
            return None
        try:
            text = pa.array([data], pa.binary()).cast(pa.string())
        except pa.ArrowException:
            return None
        lines = pc.list_flatten(pc.split_pattern(text, "\n"))
        if data.endswith(b"\n") or not data:
            lines = lines.slice(0, len(lines) - 1)
        return lines.slice(1) if self.header and len(lines) else lines

    def text(self) -> str:
        """The block decoded; a byte that is not UTF-8 is the located error of :func:`open_text`."""
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise decoding_error(self.path, "utf-8") from error

    def delimited(self, *, delimiter: str, quoting: Quoting = csv.QUOTE_NONE) -> Iterator[tuple[int, list[str]]]:
        """The block's records as :func:`iter_delimited` reads them, with the same line numbers."""
        reader = csv.reader(io.StringIO(self.text(), newline=""), delimiter=delimiter, quoting=quoting)
        yield from _delimited(reader, header=self.header, offset=self.first_line - 1)

    def json_lines(self) -> Iterator[tuple[int, Any]]:
        """The block's records as :func:`iter_json_records` reads JSON lines, with the same line numbers."""
        yield from _json_lines(self.path, io.StringIO(self.text(), newline=None), self.first_line)


def iter_text_chunks(path: Path, *, header: bool = False, chunk_bytes: int | None = None) -> Iterator[TextChunk]:
    """``path`` in blocks of whole lines (about ``chunk_bytes``, default :data:`CHUNK_BYTES`), each with the
    number of its first line.

    Only delimited files without quoting (no record spans lines) and JSON lines may be read this way.
    """
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    line, first, pending = 1, True, b""
    with open(path, "rb") as handle:
        while True:
            block = handle.read(chunk_bytes)
            data = pending + block
            if block:
                cut = data.rfind(b"\n") + 1
                if not cut:
                    pending = data
                    continue
                data, pending = data[:cut], data[cut:]
            elif not data:
                return
            if first:
                data = data.removeprefix(codecs.BOM_UTF8)
            yield TextChunk(path, data, line, header and first)
            line += _line_ends(data)
            first = False
            if not block:
                return


def json_lines_table(chunk: TextChunk, schema: pa.Schema, optional: Iterable[str] = ()) -> pa.Table | None:
    """The columns of ``schema`` of a JSON-lines block (other fields ignored), read with pyarrow.

    ``None`` where that might differ from :func:`iter_json_records` and the adapter's per-record checks:
    a line that is not exactly one JSON object, a value of another type than ``schema`` says, a missing
    or null value (in a column not named in ``optional``), a block that is not plain
    (:meth:`TextChunk.lines`). The table's rows are the block's non-blank lines, in order.
    """
    lines = chunk.lines()
    if lines is None:
        return None
    stripped = strip_texts(lines)
    records = pc.filter(stripped, pc.greater(pc.binary_length(stripped), 0))
    if not len(records):
        return schema.empty_table()
    # With every non-blank line starting an object and ending one, and as many objects as such lines,
    # each line holds exactly one object, as json.loads(line) reads it.
    if not (pc.all(pc.starts_with(records, "{")).as_py() and pc.all(pc.ends_with(records, "}")).as_py()):
        return None
    try:
        table = pa_json.read_json(
            io.BytesIO(chunk.data),
            read_options=pa_json.ReadOptions(use_threads=False, block_size=max(len(chunk.data) + 1, 1 << 20)),
            parse_options=pa_json.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore", newlines_in_values=False
            ),
        )
    except pa.ArrowException:
        return None
    nullable = set(optional)
    if table.num_rows != len(records) or any(
        table.column(name).null_count for name in table.column_names if name not in nullable
    ):
        return None
    return table.combine_chunks()


def json_line_numbers(chunk: TextChunk) -> list[int]:
    """The line numbers of a plain block's non-blank lines: those of the rows of :func:`json_lines_table`."""
    lines = chunk.lines()
    assert lines is not None, "only for a block json_lines_table has read"
    blank = pc.equal(pc.binary_length(strip_texts(lines)), 0).to_numpy(zero_copy_only=False)
    return [chunk.first_line + index for index in np.flatnonzero(~blank).tolist()]


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


def batch_records(batch: pa.RecordBatch, rows_before: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """The records of a Parquet batch with their row numbers, as :func:`iter_parquet_records` numbers them."""
    yield from enumerate(batch.to_pylist(), start=rows_before + 1)


def parquet_columns(path: Path) -> list[str] | None:
    """The column names of a Parquet file; ``None`` if its footer cannot be read (the per-record reader says why)."""
    try:
        return list(pq.read_schema(path).names)
    except (pa.ArrowException, OSError):
        return None


def tab_fields(chunk: TextChunk, min_fields: int, max_fields: int | None = None) -> pa.Array | None:
    """The block's non-blank lines split at tabs, as ``iter_delimited`` (no quoting) splits them; ``None``
    when the block is not plain or a line has fewer than ``min_fields`` (more than ``max_fields``) fields."""
    lines = chunk.lines()
    if lines is None:
        return None
    fields = pc.split_pattern(lines, "\t")
    counts = pc.list_value_length(fields)
    # csv skips an empty line and one that is a single blank field
    blank = pc.and_(pc.equal(counts, 1), pc.equal(pc.binary_length(strip_texts(lines)), 0))
    fields = pc.filter(fields, pc.invert(blank))
    if not len(fields):
        return fields
    counts = pc.list_value_length(fields)
    if pc.min(counts).as_py() < min_fields or (max_fields is not None and pc.max(counts).as_py() > max_fields):
        return None
    return fields
