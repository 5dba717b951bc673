"""``build_unified``: recipe sources → validated unified ``Dataset`` s, in parallel; and ``UnifiedEmbedBuilder``.

The build runs on ``datasets``' own machinery: one ``ArrowBasedBuilder`` (:class:`UnifiedTableBuilder`)
per split whose ``gen_kwargs`` list the build's *pieces* — a source, or one input file of a source
whose format reads its files independently (``per_file``, :func:`~hf_unified_embed.utils.table_blocks.table_reader`).
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
(:mod:`~hf_unified_embed.data.source_rows`, what :class:`UnifiedEmbedBuilder` runs), which raises the same located
error — file, line, row number within the source, field — as a single-process build would.
"""

from __future__ import annotations

import logging
import pickle
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
from datasets import ArrowBasedBuilder, BuilderConfig, DatasetDict, DatasetInfo, DownloadMode, SplitGenerator
from datasets.fingerprint import get_temporary_cache_files_directory

from hf_unified_embed.data.build_plan import Piece, Planned, balanced_groups, in_main_process, plan_sources
from hf_unified_embed.data.build_recipe import BuildRecipe, SourceSpec, load_build_recipe
from hf_unified_embed.data.build_tables import PieceReport, piece_tables
from hf_unified_embed.data.provenance import task_notes, with_source_notes
from hf_unified_embed.data.source_formats import get_source_format
from hf_unified_embed.data.source_rows import no_rows_error, project_error, reference_rows
from hf_unified_embed.data.task_totals import TaskSummary
from hf_unified_embed.errors import RecipeError, shown
from hf_unified_embed.schema import DIFFICULTY_COLUMN, unified_features
from hf_unified_embed.utils.arguments import checked_arguments

logger = logging.getLogger(__name__)

# ``datasets`` swaps ``open``, ``os.path``, ``pathlib.Path`` and more in the module of every builder it starts
# for fsspec's streaming versions (importing scipy.io and others to do so: 0.12 s of every build, in the
# process that runs alone). This module opens only its own local scratch files, and the adapters read the
# sources; marked as done, datasets leaves it as written (tests/test_build_imports.py).
_patched_for_streaming = True


@dataclass
class UnifiedBuildConfig(BuilderConfig):
    """The config of :class:`UnifiedTableBuilder`: one split of a recipe, cut into pieces."""

    sources: list[SourceSpec] = field(default_factory=list)
    groups: list[list[Piece]] = field(default_factory=list)
    split: str = "train"
    with_difficulty: bool = False
    scratch_dir: str | None = None
    report_dir: str | None = None


class UnifiedTableBuilder(ArrowBasedBuilder):
    """Builds the pieces of one split of a recipe into one Arrow split, a group of pieces per process.

    ``gen_kwargs`` hold the list of piece groups, so ``download_and_prepare(num_proc=len(groups))``
    gives each worker process one group; each finished piece writes a :class:`PieceReport` into
    ``report_dir`` for the parent to find the piece's rows, skips and notes.
    """

    BUILDER_CONFIG_CLASS = UnifiedBuildConfig
    #: Rows per Arrow record batch of the built split (``datasets``: 1,000). Opening a memory-mapped Arrow
    #: stream reads every batch's header, and each read keeps its page neighbourhood resident: at 1,000 rows a
    #: batch, every process that mapped a 10M-row build held ~0.7 GB for the headers alone (bench/build.py).
    DEFAULT_WRITER_BATCH_SIZE = 10_000
    config: UnifiedBuildConfig

    def _info(self) -> DatasetInfo:
        return DatasetInfo(features=unified_features(with_difficulty=self.config.with_difficulty))

    def _split_generators(self, dl_manager: Any) -> list[SplitGenerator]:
        return [SplitGenerator(name=self.config.split, gen_kwargs={"groups": self.config.groups})]

    def _generate_tables(self, groups: list[list[Piece]]) -> Iterator[tuple[str, pa.Table]]:  # type: ignore[override]
        assert self.info.features is not None
        empty = self.info.features.arrow_schema.empty_table()
        for group in groups:
            for piece in group:
                report = PieceReport()
                for number, table in enumerate(
                    piece_tables(
                        self.config.sources[piece.source],
                        piece,
                        Path(self.config.scratch_dir) if self.config.scratch_dir else None,
                        self.config.with_difficulty,
                        report,
                    )
                ):
                    report.add(table)
                    yield f"{piece.number}-{number}", table
                    del table
                # datasets holds the table it wrote last until the next one comes, and the next piece's set-up
                # (a BEIR part reads every id of its folder) would run beside it: a table of a BEIR part is
                # ~100 MB, and a process's second part of a 10M folder started that much higher. An empty
                # table lets it go (it adds no row).
                yield f"{piece.number}-end", empty
                assert self.config.report_dir is not None
                with open(Path(self.config.report_dir) / f"{piece.number}.pkl", "wb") as handle:
                    pickle.dump(report, handle)


@dataclass
class BuildResult:
    """What a build produced: the tasks, the source of each, the rows skipped, the adapters' notes and the
    summary :func:`~hf_unified_embed.data.hub_layout.task_summary` gives, per task."""

    dataset: DatasetDict
    sources: dict[str, SourceSpec] = field(default_factory=dict)
    skipped: dict[str, Counter[str]] = field(default_factory=dict)
    notes: dict[str, dict[str, Any]] = field(default_factory=dict)
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class _Run:
    """One ``UnifiedTableBuilder`` run: the pieces of some sources of one split, and what came of it."""

    split: str
    with_difficulty: bool
    main_process: bool
    pieces: list[Piece] = field(default_factory=list)
    dataset: datasets.Dataset | None = None
    offsets: dict[int, int] = field(default_factory=dict)
    reports: dict[int, PieceReport] = field(default_factory=dict)


def _runs(planned: Sequence[Planned]) -> list[_Run]:
    runs: dict[tuple[str, bool, bool], _Run] = {}
    for item in planned:
        if item.error is not None:
            continue
        with_difficulty = DIFFICULTY_COLUMN in get_source_format(item.spec.format).features(item.spec.options)
        key = (item.spec.split, with_difficulty, in_main_process(item.spec))
        runs.setdefault(key, _Run(*key)).pieces.extend(item.pieces)
    return list(runs.values())


def _execute(run: _Run, number: int, specs: Sequence[SourceSpec], cache_dir: Path, num_proc: int) -> None:
    """Build a run's pieces; on success fill in its dataset, piece offsets and reports."""
    processes = 1 if run.main_process else max(1, min(num_proc, len(run.pieces)))
    groups = balanced_groups(run.pieces, processes)
    report_dir = Path(tempfile.mkdtemp(prefix="pieces-", dir=cache_dir))
    # This run's scratch, seen by all its processes (the parts of one BEIR folder share its parsed corpus
    # there) and by no other build, whatever the cache folder.
    scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=cache_dir))
    builder = UnifiedTableBuilder(
        cache_dir=str(cache_dir),
        config_name=f"build-{number}",
        sources=list(specs),
        groups=groups,
        split=run.split,
        with_difficulty=run.with_difficulty,
        scratch_dir=str(scratch),
        report_dir=str(report_dir),
    )
    try:
        builder.download_and_prepare(
            download_mode=DownloadMode.FORCE_REDOWNLOAD, num_proc=len(groups) if len(groups) > 1 else None
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
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
    for row in reference_rows(spec, base_dir, scratch, skipped, {}):
        rows += 1
        tasks.setdefault(row["task"], None)
    return rows, list(tasks), skipped


def _source_dataset(run: _Run, pieces: Sequence[Piece], split: str) -> datasets.Dataset:
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
    planned = plan_sources(specs, plan.base_dir, num_proc or 1)
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
                raise no_rows_error(spec, item.files, checked_skips)
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
            raise no_rows_error(spec, item.files, skipped)
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
            result.summaries[task] = _summary(task, reports)
            result.sources[task] = spec
            result.skipped[task] = skipped
            if notes:
                result.notes[task] = notes
    if failure is not None:
        # No source raised row by row: not the input's fault, keep the whole traceback.
        cause = project_error(failure)
        if cause is not None:
            raise cause from cause.__cause__
        raise failure
    return result


def _piece_tasks(item: Planned, reports: Sequence[PieceReport]) -> list[str]:
    tasks: dict[str, None] = {}
    for report in reports:
        tasks.update(dict.fromkeys(report.tasks))
    return list(tasks) or [item.spec.name]


def _summary(task: str, reports: Sequence[PieceReport]) -> dict[str, Any]:
    summary = TaskSummary()
    for report in reports:  # in the source's row order
        if task in report.summaries:
            summary.merge(report.summaries[task])
    return summary.result()


def _uniform(reports: Sequence[PieceReport]) -> bool:
    first: dict[str, tuple[str, str, str]] = {}
    return all(first.setdefault(task, values) == values for report in reports for task, values in report.tasks.items())


def _claim(plan: BuildRecipe, claimed: set[str], tasks: Iterable[str]) -> None:
    for task in tasks:
        if task in claimed:
            raise RecipeError(
                f"{plan.origin}: task {shown(task)} is produced by two sources; build one split at a time (split=...) or rename a source"
            )
        claimed.add(task)


@checked_arguments
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
