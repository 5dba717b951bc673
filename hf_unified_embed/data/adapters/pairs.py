"""Generic pair and triplet tables (JSON lines / JSON, delimited text or Parquet) with configurable columns.

``pairs``: anchor + positive (+ optional score column, mapped from ``score_range`` onto [0, 1]).
``triplets``: anchor + positive + negative; a negative cell may hold one text or a list of texts.

A file is read by its suffix: ``.jsonl`` / ``.json`` / ``.ndjson`` as JSON, ``.parquet`` as Parquet, any
other as delimited text with a header row naming the columns. The ``delimiter`` option (one character;
``"\t"`` in YAML for a tab) says how its fields are separated; without it ``.csv`` is comma-separated,
``.tsv``, ``.tab`` and ``.txt`` tab-separated, and another suffix is refused (the error names the option).
``decimal`` is the decimal mark of scores written as text (``","`` reads a spreadsheet's ``7,8``). In JSON and
Parquet records a column option may be a dotted path into nested objects (``question.body``).

JSON-lines and Parquet files are also read a block at a time with pyarrow (``read_batches``, used by
the builder); a block pyarrow cannot convert exactly as the per-record code would (a missing or null
value, a number where a text belongs, a line that is not one object) is read record by record, which
raises the located error if there is one. CSV / TSV files and JSON arrays are read record by record.
A JSON-lines file may be read in parts by several processes (``splittable``, byte ranges of lines).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hf_unified_embed.data.source_formats import AdapterContext, SourceRow, register_source_format
from hf_unified_embed.utils.readers import (
    PARQUET_SUFFIXES,
    DecimalMark,
    OptionalDelimiter,
    ScoreRange,
    file_delimiter,
    is_json_lines,
    iter_parquet_batches,
    iter_table_records,
    json_objects,
    parse_score,
    record_field,
    record_text,
    record_texts,
    score_bounds,
)
from hf_unified_embed.utils.table_blocks import (
    Part,
    TableBatch,
    TextChunk,
    batch_records,
    check_part,
    iter_text_chunks,
    json_lines_table,
    mapped_scores,
    nonblank_texts,
    parquet_columns,
    singleton_lists,
    table_reader,
    whole_part,
)

Records = Iterable[tuple[int, dict[str, Any]]]
# What a column holds: one text, a text or a list of texts, a score.
TEXT, TEXTS, SCORE = "text", "texts", "score"


def _is_text(data_type: pa.DataType) -> bool:
    return pa.types.is_string(data_type) or pa.types.is_large_string(data_type)


def _text_lists(array: pa.Array) -> pa.Array | None:
    """A cell holding a text or a list of texts → a list of stripped texts, as :func:`record_texts` reads it."""
    if _is_text(array.type):
        texts = nonblank_texts(array)
        return None if texts is None else singleton_lists(texts)
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)) or array.null_count:
        return None
    texts = nonblank_texts(pc.list_flatten(array))
    if texts is None:
        return None
    offsets = np.zeros(len(array) + 1, dtype=np.int32)
    np.cumsum(pc.list_value_length(array).to_numpy(zero_copy_only=False), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), texts)


def _repeat_per_text(scores: pa.Array, texts: pa.ListArray) -> pa.Array:
    """``[score] * len(texts)`` for each row."""
    return pa.ListArray.from_arrays(texts.offsets, pc.take(scores, pc.list_parent_indices(texts)))


def _first_object(data: bytes) -> dict[str, Any]:
    """The first non-blank line of a block parsed as JSON (``{}`` if it is not an object)."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        if data[start:end].strip():
            try:
                value = json.loads(data[start:end])
            except ValueError:  # also a byte that is not UTF-8: the block goes line by line anyway
                return {}
            return value if isinstance(value, dict) else {}
        start = end + 1
    return {}


def _arrow_type(kind: str, value: Any) -> pa.DataType:
    """The Arrow type to read a column of ``kind`` with, whose first value is ``value``."""
    if kind == TEXTS and isinstance(value, list):
        return pa.list_(pa.string())
    if kind == SCORE and not isinstance(value, str):
        return pa.float64()
    return pa.string()


def _json_columns(chunk: TextChunk, wanted: dict[str, str]) -> dict[str, pa.Array] | None:
    """The wanted columns of a JSON-lines block, each read with the JSON type of its first record's value.

    A texts column holds one text or a list of texts, a score a number or a text: one column may hold a
    text and another a list (an anchor, its positive and a list of negatives), so the Arrow type is
    chosen per column. A block whose rows do not all agree with its first is read line by line.
    """
    first = _first_object(chunk.data)
    types = {name: _arrow_type(kind, first.get(name)) for name, kind in wanted.items()}
    table = json_lines_table(chunk, pa.schema(list(types.items())))
    return None if table is None else {name: table.column(name).combine_chunks() for name in wanted}


def _record_batches(
    path: Path, wanted: dict[str, str], options: dict[str, str], delimiter: str | None, part: Part | None = None
) -> Iterator[tuple[dict[str, pa.Array] | None, Records]]:
    """``(columns, records)`` per block of ``path`` (of part ``part`` of it): the wanted columns read by
    pyarrow (``None`` where it cannot) and the block's records as :func:`iter_table_records` reads them
    (lazily: read only if asked), ``options`` naming the option of each wanted column. Only JSON lines are
    read in parts; of another file part 0 is all of it."""
    file_delimiter(path, delimiter)  # a delimiter for a JSON or Parquet file is refused before any row
    if is_json_lines(path):
        for chunk in iter_text_chunks(path, part=part):
            yield _json_columns(chunk, wanted), json_objects(path, chunk.json_lines())
        return
    if not whole_part(part):
        return
    names = parquet_columns(path) if path.suffix.lower() in PARQUET_SUFFIXES else None
    if names is None or not set(wanted) <= set(names):
        yield None, iter_table_records(path, delimiter=delimiter, columns=options)
        return
    for offset, batch in iter_parquet_batches(path, columns=list(wanted)):
        columns = {name: batch.column(name) for name in wanted}
        fine = not any(array.null_count for array in columns.values())
        yield (columns if fine else None), batch_records(batch, offset)


def _pair_columns(anchor_column: str, positive_column: str, score_column: str | None) -> dict[str, str]:
    """``{column: the option that names it}`` for pairs, the score column last."""
    columns = {anchor_column: "anchor_column", positive_column: "positive_column"}
    if score_column is not None:
        columns.setdefault(score_column, "score_column")
    return columns


def _pair_rows(
    path: Path,
    records: Records,
    anchor_column: str,
    positive_column: str,
    score_column: str | None,
    low: float,
    high: float,
    decimal: DecimalMark,
) -> Iterator[SourceRow]:
    for line, record in records:
        row: dict[str, Any] = {
            "query": record_text(record, anchor_column, file=path, line=line, option="anchor_column"),
            "positives": record_texts(record, positive_column, file=path, line=line, option="positive_column"),
        }
        if score_column is not None:
            score = parse_score(
                record_field(record, score_column, file=path, line=line, option="score_column"),
                file=path,
                line=line,
                field=score_column,
                low=low,
                high=high,
                decimal=decimal,
            )
            row["positive_scores"] = [score] * len(row["positives"])
        yield f"{path}:{line}", row


def _pair_table(
    columns: dict[str, pa.Array],
    anchor_column: str,
    positive_column: str,
    score_column: str | None,
    low: float,
    high: float,
    decimal: DecimalMark,
) -> pa.Table | None:
    query, positives = nonblank_texts(columns[anchor_column]), _text_lists(columns[positive_column])
    if query is None or positives is None:
        return None
    table = {"query": query, "positives": positives}
    if score_column is not None:
        if decimal != "." and _is_text(columns[score_column].type):
            return None  # Arrow parses only ".": scores written with another mark are read record by record
        scores = mapped_scores(columns[score_column], low, high)
        if scores is None:
            return None
        table["positive_scores"] = _repeat_per_text(scores, positives)
    return pa.table(table)


def _pair_batches(
    files: Sequence[Path],
    context: AdapterContext,
    *,
    anchor_column: str = "anchor",
    positive_column: str = "positive",
    score_column: str | None = None,
    score_range: ScoreRange = (0.0, 1.0),
    decimal: DecimalMark = ".",
    delimiter: OptionalDelimiter = None,
    part: Part | None = None,
) -> Iterator[TableBatch]:
    check_part(files, part)
    low, high = score_bounds(score_range)
    wanted = {positive_column: TEXTS, anchor_column: TEXT}
    if score_column is not None:
        wanted.setdefault(score_column, SCORE)
    options = (anchor_column, positive_column, score_column, low, high, decimal)
    named = _pair_columns(anchor_column, positive_column, score_column)
    for path in files:
        for columns, records in _record_batches(path, wanted, named, delimiter, part):
            table = None if columns is None else _pair_table(columns, *options)
            yield TableBatch(table, partial(_pair_rows, path, records, *options))


@register_source_format("pairs")
@table_reader(_pair_batches, per_file=True, splittable=is_json_lines)
def read_pairs(
    files: Sequence[Path],
    context: AdapterContext,
    *,
    anchor_column: str = "anchor",
    positive_column: str = "positive",
    score_column: str | None = None,
    score_range: ScoreRange = (0.0, 1.0),
    decimal: DecimalMark = ".",
    delimiter: OptionalDelimiter = None,
) -> Iterator[SourceRow]:
    """(anchor, positive[, score]) records; ``score`` maps ``(s − low) / (high − low)`` with ``score_range``.

    ``delimiter`` (one character) separates the fields of a delimited text file of any suffix; default:
    comma for ``.csv``, tab for ``.tsv`` / ``.tab`` / ``.txt``. ``decimal`` is the decimal mark of scores
    written as text (``","`` for ``7,8``; no thousands separators). A column may be a dotted path into
    nested JSON objects (``query.text``).
    """
    low, high = score_bounds(score_range)
    named = _pair_columns(anchor_column, positive_column, score_column)
    for path in files:
        records = iter_table_records(path, delimiter=delimiter, columns=named)
        yield from _pair_rows(path, records, anchor_column, positive_column, score_column, low, high, decimal)


def _triplet_columns(anchor_column: str, positive_column: str, negative_column: str) -> dict[str, str]:
    """``{column: the option that names it}`` for triplets."""
    columns = {anchor_column: "anchor_column", positive_column: "positive_column"}
    columns.setdefault(negative_column, "negative_column")
    return columns


def _triplet_rows(
    path: Path, records: Records, anchor_column: str, positive_column: str, negative_column: str
) -> Iterator[SourceRow]:
    for line, record in records:
        yield (
            f"{path}:{line}",
            {
                "query": record_text(record, anchor_column, file=path, line=line, option="anchor_column"),
                "positives": record_texts(record, positive_column, file=path, line=line, option="positive_column"),
                "negatives": record_texts(record, negative_column, file=path, line=line, option="negative_column"),
            },
        )


def _triplet_table(
    columns: dict[str, pa.Array], anchor_column: str, positive_column: str, negative_column: str
) -> pa.Table | None:
    query = nonblank_texts(columns[anchor_column])
    positives, negatives = _text_lists(columns[positive_column]), _text_lists(columns[negative_column])
    if query is None or positives is None or negatives is None:
        return None
    return pa.table({"query": query, "positives": positives, "negatives": negatives})


def _triplet_batches(
    files: Sequence[Path],
    context: AdapterContext,
    *,
    anchor_column: str = "anchor",
    positive_column: str = "positive",
    negative_column: str = "negative",
    delimiter: OptionalDelimiter = None,
    part: Part | None = None,
) -> Iterator[TableBatch]:
    check_part(files, part)
    wanted = {positive_column: TEXTS, negative_column: TEXTS, anchor_column: TEXT}
    options = (anchor_column, positive_column, negative_column)
    named = _triplet_columns(*options)
    for path in files:
        for columns, records in _record_batches(path, wanted, named, delimiter, part):
            table = None if columns is None else _triplet_table(columns, *options)
            yield TableBatch(table, partial(_triplet_rows, path, records, *options))


@register_source_format("triplets")
@table_reader(_triplet_batches, per_file=True, splittable=is_json_lines)
def read_triplets(
    files: Sequence[Path],
    context: AdapterContext,
    *,
    anchor_column: str = "anchor",
    positive_column: str = "positive",
    negative_column: str = "negative",
    delimiter: OptionalDelimiter = None,
) -> Iterator[SourceRow]:
    """(anchor, positive, negative) records; list-valued positive/negative cells are kept whole.

    ``delimiter`` as for ``pairs``.
    """
    options = (anchor_column, positive_column, negative_column)
    for path in files:
        records = iter_table_records(path, delimiter=delimiter, columns=_triplet_columns(*options))
        yield from _triplet_rows(path, records, *options)
