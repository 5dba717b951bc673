"""Every row of a unified folder or dataset, checked with the schema's rules (``validate``, ``train``, the build).

:func:`check_task_rows` is the one row check: :func:`validate_unified_folder` (after the card, the layout and
every shard's schema, :mod:`~hf_unified_embed.data.layout_check`), :func:`check_unified_rows` (a training run's
tasks, before ``datasets`` reads or caches anything) and :func:`check_dataset_rows` (a loaded dataset) all run
it. It is vectorised: pyarrow finds, column by column, every row that may break a rule of
:func:`~hf_unified_embed.schema.validate_row` (and the per-task uniformity of
:class:`~hf_unified_embed.schema.InstructionTracker`); only those rows become Python rows, and ``validate_row``
itself says what is wrong. So the first problem and its message are exactly those of a row-by-row check,
at the cost of a few column scans.

``validate`` records what it checked in the folder (:mod:`~hf_unified_embed.data.check_record`); a reader's
:func:`check_unified_rows` then skips every task whose shards are recorded as they are.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hf_unified_embed.data.check_record import read_record, unchanged, write_record
from hf_unified_embed.data.layout_check import FolderLayout, check_arrow_schema, check_layout, check_shard_schemas
from hf_unified_embed.data.row_group_reader import row_group_batches as _shard_batches  # decoded ahead, in order
from hf_unified_embed.data.task_totals import TaskSummary
from hf_unified_embed.errors import SourceFormatError, one_line
from hf_unified_embed.schema import (
    DIFFICULTY_COLUMN,
    INSTRUCTION_COLUMNS,
    TASK_TYPES,
    InstructionTracker,
    validate_row,
)
from hf_unified_embed.utils.arguments import checked_arguments
from hf_unified_embed.utils.naming import task_name_problem

logger = logging.getLogger(__name__)

#: Rows read and checked at a time: enough for the column scans to dominate, little memory.
ROW_BATCH = 65_536
#: Task types whose rows need a positive (:func:`~hf_unified_embed.schema.validate_row`).
_NEEDS_POSITIVE = ("retrieval", "sts", "pair_classification")


#: The characters ``str.isspace`` calls whitespace, which ``str.strip()`` removes (a test compares them).
PYTHON_WHITESPACE = (
    0x0009,
    0x000A,
    0x000B,
    0x000C,
    0x000D,
    0x001C,
    0x001D,
    0x001E,
    0x001F,
    0x0020,
    0x0085,
    0x00A0,
    0x1680,
    0x2000,
    0x2001,
    0x2002,
    0x2003,
    0x2004,
    0x2005,
    0x2006,
    0x2007,
    0x2008,
    0x2009,
    0x200A,
    0x2028,
    0x2029,
    0x202F,
    0x205F,
    0x3000,
)


@functools.cache
def _blank_pattern() -> str:
    """A regular expression for a text of Python whitespace only: what ``not text.strip()`` finds blank."""
    spaces = "".join(f"\\x{{{code:04X}}}" for code in PYTHON_WHITESPACE)
    return f"^[{spaces}]*$"


def _flags(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean Arrow result as numpy; null (unknown) counts as a problem."""
    return np.asarray(array.fill_null(True).to_numpy(zero_copy_only=False), dtype=bool)


#: The first UTF-8 byte of every text that may be blank: empty, or starting with a Python whitespace
#: character (ASCII, or the lead byte of U+0085/U+00A0, U+1680, U+2000-U+205F, U+3000).
_BLANK_LEADS = pa.array(
    [b"", *(bytes([code]) for code in (*range(0x09, 0x0E), *range(0x1C, 0x21), 0xC2, 0xE1, 0xE2, 0xE3))],
    pa.binary(),
)


def _missing_or_blank(texts: pa.Array) -> np.ndarray:
    """Texts that are missing or whitespace only.

    The regular expression is the exact rule but costs a scan of every character, so it runs only on
    the texts whose first byte could start a blank text: a first-byte lookup clears nearly all of them.
    """
    binary = pa.large_binary() if pa.types.is_large_string(texts.type) else pa.binary()
    leads = pc.binary_slice(pc.cast(texts, binary), 0, 1)
    candidates = _flags(pc.or_kleene(pc.is_in(leads, value_set=_BLANK_LEADS), pc.is_null(texts)))
    positions = np.flatnonzero(candidates)
    if len(positions):
        candidates[positions] = _flags(pc.match_substring_regex(texts.take(pa.array(positions)), _blank_pattern()))
    return candidates


def _per_row(lists: pa.Array, element_flags: np.ndarray) -> np.ndarray:
    """Rows of ``lists`` with at least one flagged element."""
    rows = np.zeros(len(lists), dtype=bool)
    if element_flags.any():
        rows[pc.list_parent_indices(lists).to_numpy()[element_flags]] = True
    return rows


def _lengths(lists: pa.Array) -> np.ndarray:
    """List lengths, ``-1`` for a missing list."""
    return np.asarray(pc.list_value_length(lists).fill_null(-1).to_numpy(zero_copy_only=False))


def _bad_scores(scores: pa.Array, text_lengths: np.ndarray) -> np.ndarray:
    """Rows whose scores are missing, of the wrong count, or hold a missing, non-finite or out-of-[0, 1] value."""
    lengths = _lengths(scores)
    bad = (lengths < 0) | ((lengths != 0) & (lengths != text_lengths))
    values = pc.cast(pc.list_flatten(scores), pa.float64(), safe=False)
    fine = pc.and_kleene(
        pc.is_finite(values), pc.and_kleene(pc.greater_equal(values, 0.0), pc.less_equal(values, 1.0))
    )
    return bad | _per_row(scores, _flags(pc.invert(fine)))


def _differs(column: pa.Array, value: Any) -> np.ndarray:
    return _flags(pc.not_equal(column, pa.scalar(value, type=column.type)))


def _suspect_rows(batch: pa.RecordBatch, task: str, first: tuple[str, str, str] | None) -> np.ndarray:
    """Every row of ``batch`` that may break a rule of ``validate_row`` (or differ from the task's ``first``
    task type and instructions); a superset of the rows that do, found column by column."""
    column = batch.column
    tasks = column("task")
    fine_tasks = [name for name in pc.unique(tasks).to_pylist() if name == task and task_name_problem(name) is None]
    suspect = ~_flags(pc.is_in(tasks, value_set=pa.array(fine_tasks, type=tasks.type)))
    task_types = column("task_type")
    suspect |= ~_flags(pc.is_in(task_types, value_set=pa.array(TASK_TYPES, type=task_types.type)))
    for name in INSTRUCTION_COLUMNS:
        suspect |= _flags(pc.is_null(column(name)))
    suspect |= _missing_or_blank(column("query"))
    lengths = {}
    for name in ("positives", "negatives"):
        texts = column(name)
        lengths[name] = _lengths(texts)
        suspect |= (lengths[name] < 0) | _per_row(texts, _missing_or_blank(pc.list_flatten(texts)))
    type_values = task_types.to_numpy(zero_copy_only=False)
    suspect |= (lengths["positives"] == 0) & np.isin(type_values, _NEEDS_POSITIVE)
    suspect |= _bad_scores(column("positive_scores"), lengths["positives"])
    suspect |= _bad_scores(column("negative_scores"), lengths["negatives"])
    is_sts = type_values == "sts"
    if is_sts.any():
        suspect |= is_sts & (_lengths(column("positive_scores")) != lengths["positives"])
    if DIFFICULTY_COLUMN in batch.schema.names:
        difficulty = pc.cast(column(DIFFICULTY_COLUMN), pa.float64(), safe=False)
        suspect |= ~np.asarray(
            pc.or_kleene(pc.is_null(difficulty), pc.is_finite(difficulty)).to_numpy(zero_copy_only=False), dtype=bool
        )
    if first is not None:
        for name, value in zip(("task_type", *INSTRUCTION_COLUMNS), first):
            suspect |= _differs(column(name), value)
    return suspect


def check_task_rows(batches: Iterable[tuple[str, pa.RecordBatch]], task: str) -> int:
    """Check every row of one task (one split, its shards in order) with the schema's rules; return the row count.

    ``batches`` are ``(source, record batch)`` pairs in row order; ``source`` (a file) goes into the error.
    Raises the :class:`~hf_unified_embed.errors.UnifiedSchemaError` that checking the rows one by one with
    :func:`~hf_unified_embed.schema.validate_row` and an :class:`~hf_unified_embed.schema.InstructionTracker`
    raises first — file, task, row and field, rows numbered within the task's split — but reads as Python
    only the rows that the column scans of :func:`_suspect_rows` flag.
    """
    tracker = InstructionTracker()
    first: tuple[str, str, str] | None = None
    index = 0
    for source, batch in batches:
        try:
            if first is None and batch.num_rows:
                row = batch.slice(0, 1).to_pylist()[0]
                validate_row(row, index, source=source, expected_task=task)
                tracker.check(row, index, source=source)
                first = (row["task_type"], *(row[name] for name in INSTRUCTION_COLUMNS))
            for position in np.flatnonzero(_suspect_rows(batch, task, first)):
                row = batch.slice(int(position), 1).to_pylist()[0]
                validate_row(row, index + int(position), source=source, expected_task=task)
                tracker.check(row, index + int(position), source=source)
        except (pa.ArrowException, UnicodeDecodeError) as error:
            # Bytes that decode but are not what a writer wrote (a damaged file): text that is not UTF-8.
            raise SourceFormatError(
                f"rows {index}-{index + batch.num_rows - 1} cannot be read ({type(error).__name__}: {one_line(error, 200)})",
                file=source,
                expected="a complete Parquet file",
            ) from None
        index += batch.num_rows
    return index


@checked_arguments
def validate_unified_folder(repo_dir: str | Path, *, record: bool = True) -> FolderLayout:
    """Check a local unified folder completely with pyarrow: layout, card, every file's footer, every row.

    Args:
        repo_dir: the folder.
        record: leave the check record in the folder (:func:`~hf_unified_embed.data.check_record.write_record`),
            so that readers skip the rows checked here while the shards stay as they are. A folder that cannot
            be written is checked all the same (a warning says the record is missing).

    Returns:
        The folder's layout, with the summary of each task's split (:attr:`FolderLayout.summaries`), gathered
        by the same pass over the rows.

    Raises:
        HfUnifiedEmbedError: naming the file, task, row and field of the first problem. Row numbers count
            within a task's split across its shards.
    """
    layout = check_layout(repo_dir)
    check_shard_schemas(layout)
    for key, paths in layout.shards.items():
        summary = TaskSummary()
        check_task_rows(summary.passing(_shard_batches(paths)), key[0])
        layout.summaries[key] = summary.result()
    if record:
        try:
            write_record(layout.folder, layout.facts.values())
        except OSError as error:
            logger.warning(
                "%s: the check could not be recorded (%s); readers will check the rows again", repo_dir, error
            )
    return layout


def check_unified_rows(
    repo_dir: str | Path,
    tasks: Sequence[str] | None = None,
    split: str = "train",
    *,
    limit: int | None = None,
    layout: FolderLayout | None = None,
) -> FolderLayout:
    """Check the rows a training run reads from a local unified folder, as ``validate`` checks them.

    The card, the layout and every shard's footer (unless ``layout`` is given: :func:`check_layout`'s
    result after :func:`check_shard_schemas`), then the first ``limit`` rows (all by default) of each of
    ``tasks`` (default: every task with ``split``) in ``split``, with :func:`check_task_rows` — except the
    tasks whose shards the folder's check record holds as they are now (:mod:`~hf_unified_embed.data.check_record`):
    their rows were checked by ``build`` or ``validate`` and have not changed. Only pyarrow reads the files:
    nothing is written, ``datasets``' cache included. A task or split the folder does not declare is left to
    :func:`~hf_unified_embed.data.hub_layout.load_unified` to report.
    """
    if layout is None:
        layout = check_layout(repo_dir, strict_root=False)
        check_shard_schemas(layout)
    names = list(tasks) if tasks is not None else [task for task, splits in layout.declared.items() if split in splits]
    record = read_record(layout.folder)
    for task in names:
        paths = layout.shards.get((task, split))
        if paths and not (record and unchanged((layout.facts[path] for path in paths), record)):
            check_task_rows(_shard_batches(paths, limit), task)
    return layout


def check_dataset_rows(dataset: Any, task: str, source: str, *, limit: int | None = None) -> int:
    """:func:`check_task_rows` on a loaded ``datasets.Dataset`` of one task (a Hub dataset, say); ``source``
    names where its rows come from. Its columns and types are checked first."""
    table: pa.Table = dataset.with_format("arrow")[: len(dataset) if limit is None else min(limit, len(dataset))]
    check_arrow_schema(table.schema, task, source)
    return check_task_rows(((source, batch) for batch in table.to_batches(max_chunksize=ROW_BATCH)), task)
