"""The row-by-row build of one source: the reference for every row and error message of a build.

:class:`UnifiedEmbedBuilder` (a ``datasets`` ``GeneratorBasedBuilder``) reads a recipe source through its
adapter, completes each row with the recipe's task columns (:func:`complete_row`) and validates it;
:func:`build_source` runs it. The parallel build (:mod:`~hf_unified_embed.data.builder`) gives the same
rows, and falls back on this path to name file, line and field when a piece fails.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
from datasets import BuilderConfig, DatasetInfo, DownloadMode, GeneratorBasedBuilder, SplitGenerator
from datasets.exceptions import DatasetGenerationError

from hf_unified_embed.data.build_recipe import SourceSpec
from hf_unified_embed.data.source_formats import AdapterContext, SourceFormatError, SourceRow, get_source_format
from hf_unified_embed.errors import HfUnifiedEmbedError, InputError, shown
from hf_unified_embed.schema import (
    DIFFICULTY_COLUMN,
    UNIFIED_COLUMNS,
    InstructionTracker,
    UnifiedSchemaError,
    validate_row,
)
from hf_unified_embed.utils.readers import decoding_error, first_undecodable_byte, resolve_inputs

LIST_COLUMNS = ("positives", "negatives", "positive_scores", "negative_scores")


@dataclass
class UnifiedSourceConfig(BuilderConfig):
    """A builder config for one recipe source."""

    source: SourceSpec | None = None
    base_dir: str | None = None
    scratch_dir: str | None = None


def reference_rows(
    spec: SourceSpec, base_dir: Path | None, scratch: Path | None, skipped: Counter[str], notes: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """The completed, validated rows of one source, read row by row (the single-process build's semantics)."""
    source_format = get_source_format(spec.format)
    files = resolve_inputs(spec.data_files, base_dir, dataset_ids=source_format.dataset_ids)
    context = AdapterContext(spec.name, skipped, scratch=scratch, split=spec.split, notes=notes)
    with_difficulty = DIFFICULTY_COLUMN in source_format.features(spec.options)
    tracker = InstructionTracker()
    rows = guarded(source_format.rows(files, context, spec.options), spec, files)
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
        yield from enumerate(reference_rows(self.source, base_dir, scratch, self.skipped, self.notes))


def file_list(files: Sequence[Path | str], limit: int = 5) -> str:
    names = ", ".join(str(path) for path in files[:limit])
    return names + (f" and {len(files) - limit} more" if len(files) > limit else "")


def guarded(rows: Iterable[SourceRow], spec: SourceSpec, files: Sequence[Path | str]) -> Iterator[SourceRow]:
    """The adapter's rows; an exception that is not a located project error is wrapped into one.

    A third-party adapter may fail with anything; the user must still learn which source and files
    were being read. A decoding error is located by scanning the source's files for the first bad byte;
    an error without a file (an option's value) is prefixed with the source's name and format.
    """
    iterator = iter(rows)
    while True:
        try:
            item = next(iterator)
        except StopIteration:
            return
        except SourceFormatError as error:
            # An option's value the adapter refuses names no file: say which source it belongs to.
            if error.file is None:
                error.within(f"source {shown(spec.name)} (format {shown(spec.format)})")
            raise
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
        f"source {shown(spec.name)}: the {shown(spec.format)} reader failed on {file_list(files)}: "
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
    for column in LIST_COLUMNS:
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


def project_error(error: BaseException) -> HfUnifiedEmbedError | None:
    # datasets wraps generator failures in DatasetGenerationError; users need the located cause.
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, HfUnifiedEmbedError):
            return cause
        cause = cause.__cause__ or cause.__context__
    return None


def no_rows_error(spec: SourceSpec, files: Sequence[Path | str], skipped: Counter[str]) -> InputError:
    where = (
        f"source {shown(spec.name)} (format {shown(spec.format)}, split {shown(spec.split)}; files {file_list(files)})"
    )
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
        cause = project_error(error)
        if cause is not None:
            raise cause from cause.__cause__  # its own chain (e.g. the adapter exception it wraps), not datasets'
        raise  # not the input's fault: a bug, keep the whole traceback
    if not builder.info.splits[spec.split].num_examples:
        files = resolve_inputs(spec.data_files, base_dir, dataset_ids=get_source_format(spec.format).dataset_ids)
        raise no_rows_error(spec, files, builder.skipped)
    dataset = builder.as_dataset(split=spec.split)
    assert isinstance(dataset, datasets.Dataset)
    return dataset, builder.skipped, builder.notes
