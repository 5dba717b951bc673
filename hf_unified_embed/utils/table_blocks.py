"""Input files read a block at a time with pyarrow, for the adapters' vectorised paths and the parallel build.

:func:`iter_text_chunks` / :class:`TextChunk` (blocks of whole lines, or a byte range's share of them),
:func:`json_lines_table`, :func:`tab_fields`, the column rules that match
the per-record readers' (:func:`strip_texts`: Python's ``str.strip()``; :func:`mapped_scores`: Python's
``float()``), and what an adapter declares to the builder (:func:`table_reader`, :class:`TableBatch`,
``part``). Each block keeps what :mod:`~hf_unified_embed.utils.readers` needs to read it again record by
record (its bytes and the number of its first line), so an adapter that cannot convert a block with
pyarrow — a malformed line, a value pyarrow parses differently from Python — reads that block the
per-record way and raises the same located error.
"""

from __future__ import annotations

import codecs
import csv
import io
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from hf_unified_embed.utils.readers import (
    Quoting,
    decoding_error,
    delimited_rows,
    json_line_records,
)

#: The characters ``str.strip()`` removes (``str.isspace()``): Arrow's ``utf8_trim`` with this set strips a
#: text exactly as Python does, so both paths of an adapter agree on what is blank.
PY_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_WHITESPACE = pa.array(list(PY_WHITESPACE), pa.string())
#: Bytes read per block of a text file; a block ends at a line end (a longer line makes a longer block).
CHUNK_BYTES = 4 * 1024**2


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


#: ``part=(index, count)``: read only part ``index`` of ``count`` of one file (see :func:`table_reader`).
Part = tuple[int, int]


def table_reader(
    batches: Callable[..., Iterator[TableBatch]] | None = None,
    *,
    per_file: bool = False,
    cost: float | None = None,
    splittable: bool | Callable[[Path], bool] = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark an adapter (below ``register_source_format``) with what the parallel builder may do with it.

    ``batches(files, context, **options)`` reads the same rows as the adapter, a block at a time, as
    :class:`TableBatch` es (its options are the adapter's); ``per_file`` says that each input file (or
    folder) is read independently of the others, so the files of a source may be read by several
    processes and the rows joined in file order; ``cost``: the time to read a byte of input, relative to
    a vectorised reader's (default 1 with ``batches``, else 1.5), to share the work out evenly.

    ``splittable``: one file may also be read in parts by several processes.
    ``batches([file], context, part=(index, count), **options)`` then reads only part ``index`` of
    ``count`` (``0 <= index < count``) of that one file; the parts' batches joined in index order hold
    exactly the file's rows in order, with the same skips in total and the same notes and located errors
    as reading it whole. ``True`` for every file of the format, or a function saying it for one file
    (e.g. JSON lines but not a JSON array); a file it refuses still reads correctly with ``part``: part 0
    holds all its rows, the others none. Stored as ``adapter.splittable`` (a bool) and
    ``adapter.split_check`` (the function or ``None``); ask :func:`can_split`.
    """

    def mark(adapter: Callable[..., Any]) -> Callable[..., Any]:
        adapter.read_batches = batches  # type: ignore[attr-defined]
        adapter.per_file = per_file  # type: ignore[attr-defined]
        adapter.read_cost = cost if cost is not None else (1.0 if batches is not None else 1.5)  # type: ignore[attr-defined]
        adapter.splittable = bool(splittable) and batches is not None  # type: ignore[attr-defined]
        adapter.split_check = splittable if callable(splittable) else None  # type: ignore[attr-defined]
        return adapter

    return mark


def can_split(adapter: Callable[..., Any], path: Path) -> bool:
    """Whether ``adapter`` (a format's ``read``) reads ``path`` in parts (``part=(index, count)``, ``count > 1``)
    that each do a share of the work; where not, only part 0 would hold rows."""
    check = getattr(adapter, "split_check", None)
    return bool(getattr(adapter, "splittable", False)) and (check is None or bool(check(path)))


def check_part(files: Sequence[Path], part: Part | None) -> None:
    """Refuse a ``part`` that is not ``(index, count)`` with ``0 <= index < count`` of exactly one file."""
    if part is None:
        return
    index, count = part
    if len(files) != 1 or not 0 <= index < count:
        raise ValueError(f"part={part!r} needs exactly one file and 0 <= index < count (got {len(files)} files)")


def whole_part(part: Part | None) -> bool:
    """Whether a reader that cannot split its file reads it for ``part``: all of it for part 0 (or no part),
    nothing for the others, so that the parts still join into the whole file."""
    return part is None or part[0] == 0


def strip_texts(texts: pa.Array) -> pa.Array:
    """``str.strip()`` of every text of an Arrow string array."""
    return pc.utf8_trim(texts, characters=PY_WHITESPACE)


def has_blank_text(texts: pa.Array | pa.ChunkedArray) -> bool:
    """Whether a text (none null) is empty or whitespace only, as ``not text.strip()`` finds: only the texts
    that begin with whitespace are stripped (stripping them all copied every text: 0.55 s for 280 MB of
    passages, against 0.05 s for their first characters)."""
    first = pc.utf8_slice_codeunits(texts, 0, 1)
    suspects = pc.filter(texts, pc.or_(pc.equal(pc.binary_length(first), 0), pc.is_in(first, value_set=_WHITESPACE)))
    return bool(len(suspects)) and pc.min(pc.binary_length(strip_texts(suspects))).as_py() == 0


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


class LineCounter:
    """The number of lines ended before a byte offset of a file, as Python's universal newlines count them
    (``\\n``, ``\\r\\n`` and a lone ``\\r``), for offsets just after a line feed (or 0).

    Counted only when asked for (a located error, a block read line by line): the vectorised path never
    needs a line number, and a part far into a large file would otherwise read all before it first. Each
    count goes on from the previous one when the offsets come in file order, as the blocks do, so the file
    is read at most once however many blocks ask.
    """

    def __init__(self, path: Path, block_bytes: int = 1 << 22) -> None:
        self.path, self.block_bytes = path, block_bytes
        self.offset = self.lines = 0

    def __call__(self, offset: int) -> int:
        if offset < self.offset:
            self.offset = self.lines = 0
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            remaining, after_cr = offset - self.offset, False
            while remaining > 0 and (block := handle.read(min(self.block_bytes, remaining))):
                remaining -= len(block)
                self.lines += block.count(b"\n")
                if b"\r" in block:  # rare: skip two more passes over the block without one
                    self.lines += block.count(b"\r") - block.count(b"\r\n")
                if after_cr and block.startswith(b"\n"):  # a \r\n split between two blocks ends one line
                    self.lines -= 1
                after_cr = block.endswith(b"\r")
        self.offset = offset
        return self.lines


@dataclass(frozen=True)
class TextChunk:
    """A block of whole lines of a text file: its bytes (a leading byte-order mark dropped), where they begin
    in the file (``offset``) and, on demand, the number of its first line (``first_line``); ``header``: its
    first line is the file's header."""

    path: Path
    data: bytes
    offset: int = 0
    header: bool = False
    #: Counts the lines before ``offset``; blocks of one read share one, so their counts go on from each other.
    line_counter: LineCounter | None = None

    @property
    def first_line(self) -> int:
        """The number of the block's first line in the file (counting the lines before it when first asked)."""
        if not self.offset:
            return 1
        counter = self.line_counter or LineCounter(self.path)
        return 1 + counter(self.offset)

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
        yield from delimited_rows(reader, header=self.header, offset=self.first_line - 1)

    def json_lines(self) -> Iterator[tuple[int, Any]]:
        """The block's records as :func:`iter_json_records` reads JSON lines, with the same line numbers."""
        yield from json_line_records(self.path, io.StringIO(self.text(), newline=None), self.first_line)


def iter_text_chunks(
    path: Path, *, header: bool = False, chunk_bytes: int | None = None, part: Part | None = None
) -> Iterator[TextChunk]:
    """``path`` in blocks of whole lines (about ``chunk_bytes``, default :data:`CHUNK_BYTES`), each with the
    number of its first line.

    Only delimited files without quoting (no record spans lines) and JSON lines may be read this way.
    Line numbers are counted only when a block's ``first_line`` is asked for (:class:`LineCounter`).
    With ``part=(index, count)`` only the lines that start in bytes ``[index * size // count, (index + 1)
    * size // count)`` of the file are read (see :func:`part_span`): the parts' blocks joined hold the
    file's lines, numbered as when read whole; the byte-order mark and the header belong to the part that
    begins at byte 0.
    """
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    counter = LineCounter(path)
    with open(path, "rb") as handle:
        start, end = (0, None) if part is None else part_span(handle, *part)
        handle.seek(start)
        remaining = None if end is None else end - start
        offset, pending = start, b""
        while True:
            block = handle.read(chunk_bytes if remaining is None else min(chunk_bytes, remaining))
            if remaining is not None:
                remaining -= len(block)
            data = pending + block
            if block:
                cut = data.rfind(b"\n") + 1
                if not cut:
                    pending = data
                    continue
                data, pending = data[:cut], data[cut:]
            elif not data:
                return
            size = len(data)
            if offset == 0:  # the byte-order mark and the header are the file's, not a later part's
                data = data.removeprefix(codecs.BOM_UTF8)
            yield TextChunk(path, data, offset, header and offset == 0, counter)
            offset += size
            if not block:
                return


def part_span(handle: BinaryIO, index: int, count: int) -> tuple[int, int]:
    """``(start, end)``: the bytes of part ``index`` of ``count`` of an open binary file, the lines that start
    in ``[index * size // count, (index + 1) * size // count)``.

    A line starts at byte 0 or after a line feed; so a part begins after the first line feed at or after
    the byte before its nominal start (at byte 0 for a start of 0) and ends where the next part begins.
    Whatever the sizes, the parts are consecutive and cover the file.
    """
    size = handle.seek(0, io.SEEK_END)
    return _line_start(handle, index * size // count, size), _line_start(handle, (index + 1) * size // count, size)


def _line_start(handle: BinaryIO, offset: int, size: int) -> int:
    # The first line start at or after `offset`.
    if offset <= 0 or offset >= size:
        return min(max(offset, 0), size)
    position = offset - 1
    handle.seek(position)
    while block := handle.read(1 << 16):
        found = block.find(b"\n")
        if found >= 0:
            return position + found + 1
        position += len(block)
    return size


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
