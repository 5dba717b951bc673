"""A piece of a build as Arrow tables: an adapter's blocks completed with the recipe's task columns and
checked column by column (:func:`vectorised_tables`), or its rows completed and validated one by one
(:func:`row_tables`), with what the piece reports to the parent (:class:`PieceReport`)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hf_unified_embed.data.build_plan import Piece
from hf_unified_embed.data.build_recipe import SourceSpec
from hf_unified_embed.data.source_formats import AdapterContext, SourceRow, get_source_format
from hf_unified_embed.data.source_rows import LIST_COLUMNS, complete_row, guarded
from hf_unified_embed.data.task_totals import TaskSummary
from hf_unified_embed.schema import (
    DIFFICULTY_COLUMN,
    TASK_TYPES,
    InstructionTracker,
    unified_features,
    validate_row,
)
from hf_unified_embed.utils.table_blocks import TableBatch, has_blank_text

_TASK_COLUMNS = ("task", "task_type", "query_instruction", "document_instruction")


#: Rows completed one by one are written to Arrow this many at a time.
ROW_BATCH = 10_000


#: Task types whose rows need a positive (as :func:`~hf_unified_embed.schema.validate_row` has it).
_NEEDS_POSITIVE = ("retrieval", "sts", "pair_classification")


@dataclass
class PieceReport:
    """What a finished piece tells the parent process: rows, skips, notes, per task its first
    ``(task_type, query_instruction, document_instruction)`` (tasks in order of first appearance) and the
    summary of its rows (what ``build`` prints, gathered here so that no process reads the rows again)."""

    rows: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    notes: dict[str, Any] = field(default_factory=dict)
    tasks: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    summaries: dict[str, TaskSummary] = field(default_factory=dict)

    def add(self, table: pa.Table) -> None:
        """Count a table of the piece's rows into its row count and its tasks' summaries."""
        self.rows += table.num_rows
        names = table.column("task").unique()
        for name in names.to_pylist():
            rows = table if len(names) == 1 else table.filter(pc.equal(table.column("task"), name))
            self.summaries.setdefault(name, TaskSummary()).add(rows)


def piece_tables(
    spec: SourceSpec, piece: Piece, scratch: Path | None, with_difficulty: bool, report: PieceReport
) -> Iterator[pa.Table]:
    """The rows of one piece of ``spec`` as Arrow tables in the unified schema, completed and checked;
    ``report`` collects its rows' count, skips, notes and tasks."""
    tracker = InstructionTracker()
    source_format = get_source_format(spec.format)
    context = AdapterContext(spec.name, report.skipped, scratch=scratch, split=spec.split, notes=report.notes)
    schema = unified_features(with_difficulty=with_difficulty).arrow_schema
    files = list(piece.files)
    batches = getattr(source_format.read, "read_batches", None)
    if batches is not None and spec.max_rows is None and spec.task_type is not None:
        options = {**source_format.defaults, **spec.options}
        if piece.part is not None:
            options["part"] = piece.part
        yield from _vectorised_tables(batches(files, context, **options), spec, context, schema, report, tracker)
    else:
        rows = guarded(source_format.rows(files, context, spec.options), spec, files)
        yield from row_tables(itertools.islice(rows, spec.max_rows), spec, schema, report, tracker)


def row_tables(
    rows: Iterable[SourceRow], spec: SourceSpec, schema: pa.Schema, report: PieceReport, tracker: InstructionTracker
) -> Iterator[pa.Table]:
    """Rows completed and validated one by one, in tables of :data:`ROW_BATCH`."""
    with_difficulty = DIFFICULTY_COLUMN in schema.names
    batch: list[dict[str, Any]] = []
    index = report.rows  # the row number within the piece, as far as the piece knows it
    for location, raw in rows:
        row = complete_row(raw, spec, location, with_difficulty)
        validate_row(row, index, source=location)
        tracker.check(row, index, source=location)
        report.tasks.setdefault(row["task"], (row["task_type"], row["query_instruction"], row["document_instruction"]))
        batch.append(row)
        index += 1
        if len(batch) == ROW_BATCH:
            yield pa.Table.from_pylist(batch, schema=schema)
            batch = []
    if batch:
        yield pa.Table.from_pylist(batch, schema=schema)


def _vectorised_tables(
    batches: Iterable[TableBatch],
    spec: SourceSpec,
    context: AdapterContext,
    schema: pa.Schema,
    report: PieceReport,
    tracker: InstructionTracker,
) -> Iterator[pa.Table]:
    """The adapter's blocks completed with the task columns and checked column by column; a block whose
    table is missing or breaks a rule is taken row by row instead (its skip counts taken back first)."""
    constants = complete_row({"query": "-", "positives": ["-"], "positive_scores": [1.0]}, spec, "")
    validate_row(constants, 0)  # the task columns of every row; a problem here: the row path says where
    tracker.check(constants, 0)  # rows a block falls back to must carry the same task columns
    task_columns = tuple(constants[column] for column in _TASK_COLUMNS)
    iterator = iter(batches)
    while True:
        before = Counter(context.skipped)
        try:
            batch = next(iterator)
        except StopIteration:
            return
        table = None if batch.table is None else _completed_table(batch.table, task_columns, schema)
        if table is not None:
            if table.num_rows:
                report.tasks.setdefault(constants["task"], task_columns[1:])
                yield table
            continue
        if batch.recount:
            context.skipped.clear()
            context.skipped.update(before)
        yield from row_tables(batch.rows(), spec, schema, report, tracker)


def _constant(value: str, rows: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, pa.string()), rows)


def _empty_lists(data_type: pa.DataType, rows: int) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.zeros(rows + 1, dtype=np.int32)), pa.array([], data_type.value_type))


def _completed_table(table: pa.Table, task_columns: tuple[str, ...], schema: pa.Schema) -> pa.Table | None:
    """An adapter table (text and score columns) with the task columns added, in ``schema``; ``None``
    when a row breaks a rule of :func:`~hf_unified_embed.schema.validate_row`."""
    rows = table.num_rows
    given = dict(zip(_TASK_COLUMNS, task_columns))
    if not set(table.column_names) <= set(LIST_COLUMNS) | {"query"}:
        return None  # task columns or unknown ones: the row path completes (or refuses) them
    columns = []
    for column in schema:
        if column.name in table.column_names:
            try:
                columns.append(table.column(column.name).cast(column.type))
            except pa.ArrowException:
                return None
        elif column.name in given:
            columns.append(_constant(given[column.name], rows))
        elif column.name in LIST_COLUMNS:
            columns.append(_empty_lists(column.type, rows))
        else:  # the optional difficulty: no vectorised format carries it
            return None
    completed = pa.Table.from_arrays(columns, schema=schema)
    if rows and not _rows_valid(completed, table, given["task_type"]):
        return None
    return completed


def _lengths(lists: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.list_value_length(lists).to_numpy(zero_copy_only=False))


def _rows_valid(table: pa.Table, given: pa.Table, task_type: str) -> bool:
    """Whether every row of a completed table (task columns already valid) passes ``validate_row``; the
    scores are checked as the adapter gave them (``given``), before their cast to float32."""
    if task_type not in TASK_TYPES:
        return False

    def texts_fine(texts: pa.ChunkedArray) -> bool:
        return not texts.null_count and not has_blank_text(texts)

    if not texts_fine(table.column("query")):
        return False
    lengths = {}
    for name in ("positives", "negatives"):
        column = table.column(name)
        if column.null_count or not texts_fine(pc.list_flatten(column)):
            return False
        lengths[name] = _lengths(column)
    if task_type in _NEEDS_POSITIVE and (lengths["positives"] == 0).any():
        return False
    for name, texts in (("positive_scores", "positives"), ("negative_scores", "negatives")):
        column = given.column(name) if name in given.column_names else table.column(name)
        if column.null_count:
            return False
        counts = _lengths(column)
        if ((counts != 0) & (counts != lengths[texts])).any():
            return False
        if task_type == "sts" and name == "positive_scores" and (counts != lengths[texts]).any():
            return False
        values = pc.cast(pc.list_flatten(column), pa.float64())
        if len(values) and not (
            not values.null_count
            and pc.all(pc.is_finite(values)).as_py()
            and pc.min(values).as_py() >= 0.0
            and pc.max(values).as_py() <= 1.0
        ):
            return False
    return True
