"""``build_unified``: recipe sources → validated unified ``Dataset`` s, in parallel; and ``UnifiedEmbedBuilder``.

The build runs on ``datasets``' own machinery: one ``ArrowBasedBuilder`` (:class:`UnifiedTableBuilder`)
per split whose ``gen_kwargs`` list the build's *pieces* — a source, or one input file of a source
whose format reads its files independently (``per_file``, :func:`~hf_unified_embed.utils.readers.table_reader`).
With ``num_proc`` > 1, ``download_and_prepare(num_proc=...)`` shards that list over worker processes
(the pieces are grouped by size first, one group per process), each of which writes its own Arrow
shards; the rows of a source are then its pieces' row ranges, joined in file order. A piece is read
as Arrow tables, not rows: a format with a vectorised reader (``read_batches``: STS / MSRP tab files,
JSON-lines and Parquet pairs and triplets) converts a block of lines at a time with pyarrow, and the
task columns and schema rules are applied column by column; any other format's rows are completed,
validated and collected into tables row by row. So the output of a build does not depend on
``num_proc``: the same rows in the same order.

Errors are those of the row-by-row build: when a piece fails, or pieces of one source disagree on
their instructions, the sources are checked again in recipe order by the row-by-row path
(:func:`_reference_rows`, what :class:`UnifiedEmbedBuilder` runs), which raises the same located
error — file, line, row number within the source, field — as a single-process build would.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import pickle
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets import (
    ArrowBasedBuilder,
    BuilderConfig,
    DatasetDict,
    DatasetInfo,
    DownloadMode,
    GeneratorBasedBuilder,
    SplitGenerator,
)
from datasets.exceptions import DatasetGenerationError
from datasets.fingerprint import get_temporary_cache_files_directory

from hf_unified_embed.data.build_recipe import BuildRecipe, SourceSpec, load_build_recipe
from hf_unified_embed.data.provenance import task_notes, with_source_notes
from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError, SourceRow, get_source_format
from hf_unified_embed.errors import HfUnifiedEmbedError, InputError, RecipeError, shown
from hf_unified_embed.schema import (
    DIFFICULTY_COLUMN,
    TASK_TYPES,
    UNIFIED_COLUMNS,
    InstructionTracker,
    UnifiedSchemaError,
    unified_features,
    validate_row,
)
from hf_unified_embed.utils.readers import (
    TableBatch,
    decoding_error,
    first_undecodable_byte,
    resolve_inputs,
    strip_texts,
)

logger = logging.getLogger(__name__)

_LIST_COLUMNS = ("positives", "negatives", "positive_scores", "negative_scores")
_TASK_COLUMNS = ("task", "task_type", "query_instruction", "document_instruction")
#: Rows completed one by one are written to Arrow this many at a time.
ROW_BATCH = 10_000
#: Task types whose rows need a positive (as :func:`~hf_unified_embed.schema.validate_row` has it).
_NEEDS_POSITIVE = ("retrieval", "sts", "pair_classification")


def available_cpus() -> int:
    """The CPUs this process may run on: ``os.process_cpu_count()`` (Python 3.13), else its affinity mask."""
    counter = getattr(os, "process_cpu_count", None)
    if counter is not None:
        count = counter()
    else:
        try:
            count = len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            count = os.cpu_count()
    return max(1, count or 1)


# ---------------------------------------------------------------------------------------------------
# The row-by-row path: the reference for every error message, and UnifiedEmbedBuilder.


@dataclass
class UnifiedSourceConfig(BuilderConfig):
    """A builder config for one recipe source."""

    source: SourceSpec | None = None
    base_dir: str | None = None
    scratch_dir: str | None = None


def _reference_rows(
    spec: SourceSpec, base_dir: Path | None, scratch: Path | None, skipped: Counter[str], notes: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """The completed, validated rows of one source, read row by row (the single-process build's semantics)."""
    source_format = get_source_format(spec.format)
    files = resolve_inputs(spec.data_files, base_dir, dataset_ids=source_format.dataset_ids)
    context = AdapterContext(spec.name, skipped, scratch=scratch, split=spec.split, notes=notes)
    with_difficulty = DIFFICULTY_COLUMN in source_format.features(spec.options)
    tracker = InstructionTracker()
    rows = _guarded(source_format.rows(files, context, spec.options), spec, files)
    for index, (location, raw) in enumerate(itertools.islice(rows, spec.max_rows)):
        row = complete_row(raw, spec, location, with_difficulty)
        validate_row(row, index, source=location)
        tracker.check(row, index, source=location)
        yield row


class UnifiedEmbedBuilder(GeneratorBasedBuilder):
    """Builds one recipe source into the unified schema (``UNIFIED_FEATURES``), validating every row.

    Used locally (datasets 5 has no loading scripts)::

        builder = UnifiedEmbedBuilder(cache_dir=tmp, config_name="stsb", source=spec)
        builder.download_and_prepare(download_mode="force_redownload")
        dataset = builder.as_dataset(split=spec.split)

    Rows that an adapter deliberately skips are counted in ``builder.skipped``; what it reports about
    the origin of its rows (e.g. a Hub dataset id and revision) is in ``builder.notes``. This is the
    row-by-row build of one source; :func:`build_unified` builds whole recipes in parallel, with the
    same rows and errors.
    """

    BUILDER_CONFIG_CLASS = UnifiedSourceConfig
    config: UnifiedSourceConfig

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.skipped: Counter[str] = Counter()
        self.notes: dict[str, Any] = {}

    @property
    def source(self) -> SourceSpec:
        if self.config.source is None:
            raise ValueError(
                "UnifiedEmbedBuilder needs a source: UnifiedEmbedBuilder(config_name=..., source=SourceSpec(...))"
            )
        return self.config.source

    def _info(self) -> DatasetInfo:
        spec = self.source
        return DatasetInfo(
            description=spec.source or f"{spec.format} files",
            features=get_source_format(spec.format).features(spec.options),
            license=spec.license or "",
        )

    def _split_generators(self, dl_manager: Any) -> list[SplitGenerator]:
        return [SplitGenerator(name=self.source.split, gen_kwargs={})]

    def _generate_examples(self) -> Iterator[tuple[int, dict[str, Any]]]:  # type: ignore[override]
        base_dir = Path(self.config.base_dir) if self.config.base_dir else None
        scratch = Path(self.config.scratch_dir) if self.config.scratch_dir else None
        yield from enumerate(_reference_rows(self.source, base_dir, scratch, self.skipped, self.notes))


def _file_list(files: Sequence[Path | str], limit: int = 5) -> str:
    names = ", ".join(str(path) for path in files[:limit])
    return names + (f" and {len(files) - limit} more" if len(files) > limit else "")


def _guarded(rows: Iterable[SourceRow], spec: SourceSpec, files: Sequence[Path | str]) -> Iterator[SourceRow]:
    """The adapter's rows; an exception that is not a located project error is wrapped into one.

    A third-party adapter may fail with anything; the user must still learn which source and files
    were being read. A decoding error is located by scanning the source's files for the first bad byte.
    """
    iterator = iter(rows)
    while True:
        try:
            item = next(iterator)
        except StopIteration:
            return
        except HfUnifiedEmbedError:
            raise
        except UnicodeDecodeError as error:
            bad = next(
                (
                    path
                    for path in files
                    # Not isinstance(path, Path): datasets swaps this module's `Path` while it generates.
                    if not isinstance(path, str) and path.is_file() and first_undecodable_byte(path, error.encoding)
                ),
                None,
            )
            if bad is not None:
                raise decoding_error(bad, error.encoding) from error
            raise _adapter_failure(spec, files, error) from error
        except Exception as error:
            raise _adapter_failure(spec, files, error) from error
        yield item


def _adapter_failure(spec: SourceSpec, files: Sequence[Path | str], error: Exception) -> SourceFormatError:
    return SourceFormatError(
        f"source {shown(spec.name)}: the {shown(spec.format)} reader failed on {_file_list(files)}: "
        f"{type(error).__name__}: {error}",
        expected=f"input files in the {shown(spec.format)} format",
    )


def complete_row(
    raw: Mapping[str, Any], spec: SourceSpec, location: str, with_difficulty: bool = False
) -> dict[str, Any]:
    """Fill an adapter's row with the recipe's task columns; the recipe wins where it sets a value."""
    allowed = set(UNIFIED_COLUMNS) | ({DIFFICULTY_COLUMN} if with_difficulty else set())
    extra = sorted(set(raw) - allowed)
    if extra:
        raise UnifiedSchemaError(
            f"adapter {shown(spec.format)} produced unknown columns {extra}",
            task=spec.name,
            field=extra[0],
            source=location,
        )
    row = {column: raw.get(column) for column in allowed}
    for column in _LIST_COLUMNS:
        if row[column] is None:
            row[column] = []
    row["task"] = row["task"] or spec.name
    row["task_type"] = spec.task_type or row["task_type"]
    if row["task_type"] is None:
        raise UnifiedSchemaError(
            "no task_type: set task_type in the recipe source (this format does not store one per row)",
            task=row["task"],
            field="task_type",
            source=location,
        )
    query_instruction, document_instruction = spec.instructions_for(row["task_type"])
    row["query_instruction"] = query_instruction if query_instruction is not None else (row["query_instruction"] or "")
    if document_instruction is not None:
        row["document_instruction"] = document_instruction
    elif row["document_instruction"] is None:
        row["document_instruction"] = (
            row["query_instruction"]
            if row["task_type"] in ("sts", "pair_classification", "classification", "clustering")
            else ""
        )
    return row


# ---------------------------------------------------------------------------------------------------
# The parallel build: pieces, the Arrow builder, and what each piece reports.


@dataclass(frozen=True)
class _Piece:
    """A unit of work: the ``files`` of recipe source ``source`` (all of them, or one of a ``per_file`` format)."""

    number: int
    source: int
    files: tuple[Path | str, ...]
    weight: float


@dataclass
class _PieceReport:
    """What a finished piece tells the parent process: rows, skips, notes, and per task its first
    ``(task_type, query_instruction, document_instruction)`` (tasks in order of first appearance)."""

    rows: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    notes: dict[str, Any] = field(default_factory=dict)
    tasks: dict[str, tuple[str, str, str]] = field(default_factory=dict)


@dataclass
class UnifiedBuildConfig(BuilderConfig):
    """The config of :class:`UnifiedTableBuilder`: one split of a recipe, cut into pieces."""

    sources: list[SourceSpec] = field(default_factory=list)
    groups: list[list[_Piece]] = field(default_factory=list)
    split: str = "train"
    with_difficulty: bool = False
    scratch_dir: str | None = None
    report_dir: str | None = None


class UnifiedTableBuilder(ArrowBasedBuilder):
    """Builds the pieces of one split of a recipe into one Arrow split, a group of pieces per process.

    ``gen_kwargs`` hold the list of piece groups, so ``download_and_prepare(num_proc=len(groups))``
    gives each worker process one group; each finished piece writes a :class:`_PieceReport` into
    ``report_dir`` for the parent to find the piece's rows, skips and notes.
    """

    BUILDER_CONFIG_CLASS = UnifiedBuildConfig
    config: UnifiedBuildConfig

    def _info(self) -> DatasetInfo:
        return DatasetInfo(features=unified_features(with_difficulty=self.config.with_difficulty))

    def _split_generators(self, dl_manager: Any) -> list[SplitGenerator]:
        return [SplitGenerator(name=self.config.split, gen_kwargs={"groups": self.config.groups})]

    def _generate_tables(self, groups: list[list[_Piece]]) -> Iterator[tuple[str, pa.Table]]:  # type: ignore[override]
        for group in groups:
            for piece in group:
                report = _PieceReport()
                for number, table in enumerate(_piece_tables(self.config, piece, report, InstructionTracker())):
                    report.rows += table.num_rows
                    yield f"{piece.number}-{number}", table
                assert self.config.report_dir is not None
                with open(Path(self.config.report_dir) / f"{piece.number}.pkl", "wb") as handle:
                    pickle.dump(report, handle)


def _piece_tables(
    config: UnifiedBuildConfig, piece: _Piece, report: _PieceReport, tracker: InstructionTracker
) -> Iterator[pa.Table]:
    spec = config.sources[piece.source]
    source_format = get_source_format(spec.format)
    scratch = Path(config.scratch_dir) if config.scratch_dir else None
    context = AdapterContext(spec.name, report.skipped, scratch=scratch, split=spec.split, notes=report.notes)
    schema = unified_features(with_difficulty=config.with_difficulty).arrow_schema
    files = list(piece.files)
    batches = getattr(source_format.read, "read_batches", None)
    if batches is not None and spec.max_rows is None and spec.task_type is not None:
        options = {**source_format.defaults, **spec.options}
        yield from _vectorised_tables(batches(files, context, **options), spec, context, schema, report, tracker)
    else:
        rows = _guarded(source_format.rows(files, context, spec.options), spec, files)
        yield from _row_tables(itertools.islice(rows, spec.max_rows), spec, schema, report, tracker)


def _row_tables(
    rows: Iterable[SourceRow], spec: SourceSpec, schema: pa.Schema, report: _PieceReport, tracker: InstructionTracker
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
    report: _PieceReport,
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
        yield from _row_tables(batch.rows(), spec, schema, report, tracker)


def _constant(value: str, rows: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, pa.string()), rows)


def _empty_lists(data_type: pa.DataType, rows: int) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.zeros(rows + 1, dtype=np.int32)), pa.array([], data_type.value_type))


def _completed_table(table: pa.Table, task_columns: tuple[str, ...], schema: pa.Schema) -> pa.Table | None:
    """An adapter table (text and score columns) with the task columns added, in ``schema``; ``None``
    when a row breaks a rule of :func:`~hf_unified_embed.schema.validate_row`."""
    rows = table.num_rows
    given = dict(zip(_TASK_COLUMNS, task_columns))
    if not set(table.column_names) <= set(_LIST_COLUMNS) | {"query"}:
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
        elif column.name in _LIST_COLUMNS:
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
        return not texts.null_count and (not len(texts) or pc.min(pc.binary_length(strip_texts(texts))).as_py() > 0)

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


# ---------------------------------------------------------------------------------------------------
# The parent: plan the pieces, run the builders, join the rows per source, report errors in order.


@dataclass
class BuildResult:
    """What a build produced: the tasks, the source of each, the rows skipped and the adapters' notes per task."""

    dataset: DatasetDict
    sources: dict[str, SourceSpec] = field(default_factory=dict)
    skipped: dict[str, Counter[str]] = field(default_factory=dict)
    notes: dict[str, dict[str, Any]] = field(default_factory=dict)


def _project_error(error: BaseException) -> HfUnifiedEmbedError | None:
    # datasets wraps generator failures in DatasetGenerationError; users need the located cause.
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, HfUnifiedEmbedError):
            return cause
        cause = cause.__cause__ or cause.__context__
    return None


def _no_rows_error(spec: SourceSpec, files: Sequence[Path | str], skipped: Counter[str]) -> InputError:
    where = f"source {shown(spec.name)} (format {shown(spec.format)}, split {shown(spec.split)}; files {_file_list(files)})"
    if not skipped:
        return InputError(f"{where}: the files hold no rows")
    reasons = ", ".join(f"{count} {shown(reason)}" for reason, count in skipped.most_common())
    return InputError(f"{where}: every row was skipped ({sum(skipped.values())}: {reasons}); nothing is left to build")


def build_source(
    spec: SourceSpec, *, base_dir: Path | None, cache_dir: str | Path
) -> tuple[datasets.Dataset, Counter[str], dict[str, Any]]:
    """Build one source row by row into an Arrow-backed ``Dataset`` under ``cache_dir``.

    Returns the rows, the skipped-row counts and the adapter's notes on the rows' origin. Every
    failure is a located :class:`~hf_unified_embed.errors.HfUnifiedEmbedError`; a source that
    yields no row (empty files, or every row skipped) is an :class:`InputError` listing the skip reasons.
    """
    builder = UnifiedEmbedBuilder(
        cache_dir=str(cache_dir),
        config_name=spec.name,
        source=spec,
        base_dir=str(base_dir) if base_dir else None,
        scratch_dir=str(cache_dir),
    )
    try:
        # Always regenerate: a cached copy would hide changed inputs and errors.
        builder.download_and_prepare(download_mode=DownloadMode.FORCE_REDOWNLOAD)
    except DatasetGenerationError as error:
        cause = _project_error(error)
        if cause is not None:
            raise cause from cause.__cause__  # its own chain (e.g. the adapter exception it wraps), not datasets'
        raise  # not the input's fault: a bug, keep the whole traceback
    if not builder.info.splits[spec.split].num_examples:
        files = resolve_inputs(spec.data_files, base_dir, dataset_ids=get_source_format(spec.format).dataset_ids)
        raise _no_rows_error(spec, files, builder.skipped)
    dataset = builder.as_dataset(split=spec.split)
    assert isinstance(dataset, datasets.Dataset)
    return dataset, builder.skipped, builder.notes


def _size(entry: Path | str) -> float:
    if isinstance(entry, str) or not entry.exists():
        return 1.0
    if entry.is_dir():
        return float(sum(path.stat().st_size for path in entry.rglob("*") if path.is_file()))
    return float(entry.stat().st_size)


def _groups(pieces: Sequence[_Piece], count: int) -> list[list[_Piece]]:
    """``count`` groups of about equal weight (largest first onto the lightest group), each in piece order."""
    if count <= 1:
        return [list(pieces)]
    heap = [(0.0, group) for group in range(count)]
    members: list[list[_Piece]] = [[] for _ in range(count)]
    for piece in sorted(pieces, key=lambda piece: (-piece.weight, piece.number)):
        load, group = heapq.heappop(heap)
        members[group].append(piece)
        heapq.heappush(heap, (load + piece.weight, group))
    return [sorted(group, key=lambda piece: piece.number) for group in members if group]


@dataclass
class _Planned:
    """A recipe source as planned: its resolved inputs and pieces, or the error resolving them raised."""

    spec: SourceSpec
    files: list[Path | str] = field(default_factory=list)
    pieces: list[_Piece] = field(default_factory=list)
    error: HfUnifiedEmbedError | None = None


def _plan(specs: Sequence[SourceSpec], base_dir: Path | None) -> list[_Planned]:
    planned, number = [], 0
    for index, spec in enumerate(specs):
        source_format = get_source_format(spec.format)
        try:
            files = resolve_inputs(spec.data_files, base_dir, dataset_ids=source_format.dataset_ids)
        except HfUnifiedEmbedError as error:  # raised in its turn, after the sources before it
            planned.append(_Planned(spec, error=error))
            continue
        # Time per input byte, to share the pieces out evenly (an unmarked adapter: a row-by-row reader's).
        cost = getattr(source_format.read, "read_cost", 1.5)
        split_files = getattr(source_format.read, "per_file", False) and spec.max_rows is None and len(files) > 1
        parts = [[entry] for entry in files] if split_files else [files]
        pieces = []
        for part in parts:
            pieces.append(_Piece(number, index, tuple(part), cost * sum(_size(entry) for entry in part)))
            number += 1
        planned.append(_Planned(spec, files, pieces))
    return planned


def _in_main_process(spec: SourceSpec) -> bool:
    # An adapter that starts processes of its own (raw-text with num_proc) cannot run in a daemonic worker.
    processes = spec.options.get("num_proc")
    return isinstance(processes, int) and processes > 1


@dataclass
class _Run:
    """One ``UnifiedTableBuilder`` run: the pieces of some sources of one split, and what came of it."""

    split: str
    with_difficulty: bool
    main_process: bool
    pieces: list[_Piece] = field(default_factory=list)
    dataset: datasets.Dataset | None = None
    offsets: dict[int, int] = field(default_factory=dict)
    reports: dict[int, _PieceReport] = field(default_factory=dict)


def _runs(planned: Sequence[_Planned]) -> list[_Run]:
    runs: dict[tuple[str, bool, bool], _Run] = {}
    for item in planned:
        if item.error is not None:
            continue
        with_difficulty = DIFFICULTY_COLUMN in get_source_format(item.spec.format).features(item.spec.options)
        key = (item.spec.split, with_difficulty, _in_main_process(item.spec))
        runs.setdefault(key, _Run(*key)).pieces.extend(item.pieces)
    return list(runs.values())


def _execute(run: _Run, number: int, specs: Sequence[SourceSpec], cache_dir: Path, num_proc: int) -> None:
    """Build a run's pieces; on success fill in its dataset, piece offsets and reports."""
    processes = 1 if run.main_process else max(1, min(num_proc, len(run.pieces)))
    groups = _groups(run.pieces, processes)
    report_dir = Path(tempfile.mkdtemp(prefix="pieces-", dir=cache_dir))
    builder = UnifiedTableBuilder(
        cache_dir=str(cache_dir),
        config_name=f"build-{number}",
        sources=list(specs),
        groups=groups,
        split=run.split,
        with_difficulty=run.with_difficulty,
        scratch_dir=str(cache_dir),
        report_dir=str(report_dir),
    )
    try:
        builder.download_and_prepare(
            download_mode=DownloadMode.FORCE_REDOWNLOAD, num_proc=len(groups) if len(groups) > 1 else None
        )
    finally:
        for piece in run.pieces:
            path = report_dir / f"{piece.number}.pkl"
            if path.is_file():
                with open(path, "rb") as handle:
                    run.reports[piece.number] = pickle.load(handle)
    dataset = builder.as_dataset(split=run.split)
    assert isinstance(dataset, datasets.Dataset)
    run.dataset = dataset
    offset = 0
    for group in groups:
        for piece in group:
            run.offsets[piece.number] = offset
            offset += run.reports[piece.number].rows
    assert offset == len(dataset), (offset, len(dataset))


def _check_row_by_row(spec: SourceSpec, base_dir: Path | None, scratch: Path) -> tuple[int, list[str], Counter[str]]:
    """Run one source through the row-by-row path without writing anything: raises its first error."""
    skipped: Counter[str] = Counter()
    rows, tasks = 0, dict[str, None]()
    for row in _reference_rows(spec, base_dir, scratch, skipped, {}):
        rows += 1
        tasks.setdefault(row["task"], None)
    return rows, list(tasks), skipped


def _source_dataset(run: _Run, pieces: Sequence[_Piece], split: str) -> datasets.Dataset:
    assert run.dataset is not None
    parts = [
        run.dataset.select(
            range(run.offsets[piece.number], run.offsets[piece.number] + run.reports[piece.number].rows)
        )
        for piece in pieces
    ]
    if len(parts) == 1:
        return parts[0]
    return datasets.concatenate_datasets(parts, split=datasets.NamedSplit(split))


def build_unified_with_report(
    recipe: BuildRecipe | Mapping[str, Any] | str | Path,
    *,
    split: str | None = None,
    cache_dir: str | Path | None = None,
    num_proc: int | None = None,
) -> BuildResult:
    """Like :func:`build_unified`, also returning each task's source and skipped-row counts."""
    plan = load_build_recipe(recipe)
    specs = [spec for spec in plan.sources if split is None or spec.split == split]
    if not specs:
        raise RecipeError(f"{plan.origin}: no source has split {shown(split)}; splits are {plan.splits}")
    if num_proc is not None and num_proc < 1:
        raise RecipeError(f"num_proc must be at least 1, got {num_proc}")
    if cache_dir is None:
        # A fresh folder per build, removed when the process exits: nothing stale is ever reused.
        cache_dir = tempfile.mkdtemp(prefix="unified-build-", dir=get_temporary_cache_files_directory())
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    planned = _plan(specs, plan.base_dir)
    runs = _runs(planned)
    failure: BaseException | None = None
    for number, run in enumerate(runs):
        try:
            _execute(run, number, specs, cache_dir, num_proc or 1)
        except Exception as error:  # located below, in recipe order, by the row-by-row path
            failure = error
            break
    run_of = {piece.number: run for run in runs for piece in run.pieces}
    result = BuildResult(DatasetDict())
    claimed: set[str] = set()
    # The checks of a single-process build, source by source in recipe order, so the first error is its error.
    for item in planned:
        spec = item.spec
        if item.error is not None:
            raise item.error
        if not all(piece.number in run_of[piece.number].reports for piece in item.pieces):
            if failure is None:
                raise RuntimeError(f"source {shown(spec.name)}: a piece of the build reported nothing")
            # The source failed (or was never read): the row-by-row path raises its located error.
            rows, checked_tasks, checked_skips = _check_row_by_row(spec, plan.base_dir, cache_dir)
            if not rows:
                raise _no_rows_error(spec, item.files, checked_skips)
            _claim(plan, claimed, checked_tasks)
            continue
        reports = [run_of[piece.number].reports[piece.number] for piece in item.pieces]
        if not _uniform(reports):
            _check_row_by_row(spec, plan.base_dir, cache_dir)  # raises the tracker's located error
        skipped: Counter[str] = Counter()
        notes: dict[str, Any] = {}
        for report in reports:
            skipped.update(report.skipped)
            notes.update(report.notes)
        if not sum(report.rows for report in reports):
            raise _no_rows_error(spec, item.files, skipped)
        tasks = _piece_tasks(item, reports)
        _claim(plan, claimed, tasks)
        if failure is not None:
            continue
        if skipped:
            logger.info("%s: skipped %s", spec.name, dict(skipped))
        dataset = _source_dataset(run_of[item.pieces[0].number], item.pieces, spec.split)
        # The rows carry where they come from, so save_unified and model cards show it whichever API is used.
        dataset = with_source_notes(dataset, task_notes(spec, notes, files=item.files))
        dataset.info.description = spec.source or f"{spec.format} files"
        for task in tasks:
            part = (
                dataset
                if len(tasks) == 1
                else dataset.filter(lambda names, t=task: [n == t for n in names], input_columns="task", batched=True)
            )
            result.dataset[task] = part
            result.sources[task] = spec
            result.skipped[task] = skipped
            if notes:
                result.notes[task] = notes
    if failure is not None:
        # No source raised row by row: not the input's fault, keep the whole traceback.
        cause = _project_error(failure)
        if cause is not None:
            raise cause from cause.__cause__
        raise failure
    return result


def _piece_tasks(item: _Planned, reports: Sequence[_PieceReport]) -> list[str]:
    tasks: dict[str, None] = {}
    for report in reports:
        tasks.update(dict.fromkeys(report.tasks))
    return list(tasks) or [item.spec.name]


def _uniform(reports: Sequence[_PieceReport]) -> bool:
    first: dict[str, tuple[str, str, str]] = {}
    return all(first.setdefault(task, values) == values for report in reports for task, values in report.tasks.items())


def _claim(plan: BuildRecipe, claimed: set[str], tasks: Iterable[str]) -> None:
    for task in tasks:
        if task in claimed:
            raise RecipeError(
                f"{plan.origin}: task {shown(task)} is produced by two sources; build one split at a time (split=...) or rename a source"
            )
        claimed.add(task)


def build_unified(
    recipe: BuildRecipe | Mapping[str, Any] | str | Path,
    *,
    split: str | None = None,
    cache_dir: str | Path | None = None,
    num_proc: int | None = None,
) -> DatasetDict:
    """Build a recipe into a validated ``DatasetDict`` keyed by task name.

    Each task carries its source notes (name, format, files, license, source; see
    :mod:`hf_unified_embed.data.provenance`), which :func:`save_unified` writes into the dataset card.

    Args:
        recipe: a :class:`BuildRecipe`, a dict ``{"sources": [...]}`` or a YAML file path.
        split: build only the sources of this split (default: all; task names must then be unique).
        cache_dir: where the Arrow files go; default a fresh temporary folder removed at exit.
        num_proc: worker processes (``datasets``' multiprocessing) reading sources and files in parallel;
            default 1, all in this process. The rows and their order do not depend on it.
    """
    return build_unified_with_report(recipe, split=split, cache_dir=cache_dir, num_proc=num_proc).dataset
