"""The Hub layout of a unified dataset: ``data/<task>/<split>-*.parquet`` plus a ``README.md`` card.

The card's YAML front matter declares one ``configs`` entry per task and an ``all`` config, so
``datasets.load_dataset(folder_or_repo, "stsb")`` works the same for a local folder and a Hub repo.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from datasets import (
    Dataset,
    DatasetDict,
    DatasetInfo,
    IterableDataset,
    IterableDatasetDict,
    SplitDict,
    SplitInfo,
    load_dataset,
)
from datasets.info import DatasetInfosDict
from huggingface_hub import DatasetCard, DatasetCardData

from hf_unified_embed.data.build_recipe import SourceSpec
from hf_unified_embed.data.check_record import record_folder
from hf_unified_embed.data.layout_check import (
    FolderLayout,
    arrow_types_fit,
    check_layout,
    check_shard_schemas,
    read_card,
    unified_tasks,
)
from hf_unified_embed.data.parquet_stream import bounded_stream
from hf_unified_embed.data.provenance import card_license, card_notes, notes_of, task_notes, with_source_notes
from hf_unified_embed.data.row_check import check_dataset_rows, check_task_rows, check_unified_rows
from hf_unified_embed.data.shard_writer import (
    DEFAULT_MAX_SHARD_BYTES,
    arrow_nbytes,
    dataset_batches,
    plan_shards,
    write_shards,
)
from hf_unified_embed.data.shard_writer import (  # the shard limits, where they were defined before
    MAX_ROW_GROUP_BYTES as MAX_ROW_GROUP_BYTES,
)
from hf_unified_embed.data.task_totals import TaskSummary
from hf_unified_embed.errors import ArgumentError, InputError, SourceFormatError, shown
from hf_unified_embed.schema import UNIFIED_FEATURES, check_columns, validate_unified
from hf_unified_embed.utils.arguments import checked_arguments
from hf_unified_embed.utils.locations import looks_local
from hf_unified_embed.utils.naming import ALL_CONFIG, check_distinct_names, check_split_name, check_task_name
from hf_unified_embed.utils.outputs import StagedOutput
from hf_unified_embed.utils.readers import open_parquet
from hf_unified_embed.utils.templates import render_template

CARD_TEMPLATE = "dataset_card.md.j2"

# Meaning of each column, shown in the card's schema section.
COLUMN_DOCS = {
    "task": "task / sub-dataset name",
    "task_type": "retrieval, sts, pair_classification, classification or clustering",
    "query_instruction": "instruction for the query side ('' if none)",
    "document_instruction": "instruction for the document side (symmetric tasks: the query's)",
    "query": "the anchor text",
    "positives": "relevant documents (STS: the second sentence)",
    "negatives": "hard negatives (may be empty)",
    "positive_scores": "scores in [0, 1] aligned with positives, or empty",
    "negative_scores": "scores in [0, 1] aligned with negatives, or empty",
    "difficulty": "curriculum difficulty φ = cos(q, d+) − cos(q, d−) (optional)",
}


def task_summary(dataset: Dataset) -> dict[str, Any]:
    """Row count, list sizes, score range and instructions of one task (read from Arrow, no Python rows).

    Read a shard at a time through a memory map of its own (:func:`~hf_unified_embed.data.shard_writer.dataset_batches`):
    the pages read are released as it goes, so the caller's memory does not grow with the task.
    """
    summary = TaskSummary()
    for batch in dataset_batches(dataset):
        summary.add(batch)
    return summary.result()


def parquet_task_summary(paths: Sequence[str | Path], batch_size: int = 8_192) -> dict[str, Any]:
    """:func:`task_summary` of one task's split read from its Parquet shards in place, column by column.

    Nothing is copied or cached (no ``datasets``). ``validate`` gathers the same summary during its row check.
    """
    summary = TaskSummary()
    columns = ["task_type", "query_instruction", "document_instruction", "positives", "negatives"]
    columns += ["positive_scores", "negative_scores"]
    for path in paths:
        try:
            for batch in open_parquet(path).iter_batches(batch_size=batch_size, columns=columns):
                summary.add(batch)
        except (pa.ArrowException, OSError) as error:
            raise SourceFormatError(
                f"not a readable Parquet file ({error})", file=path, expected="a complete Parquet file"
            ) from error
    return summary.result()


def _as_splits(data: DatasetDict | Mapping[str, DatasetDict]) -> dict[str, dict[str, Dataset]]:
    """``{split: {task: Dataset}}`` from a task-keyed DatasetDict (each Dataset knows its split) or a split mapping."""
    _check_saved(data)
    if isinstance(data, DatasetDict) or all(isinstance(value, Dataset) for value in data.values()):
        splits: dict[str, dict[str, Dataset]] = {}
        for task, dataset in data.items():
            assert isinstance(dataset, Dataset)
            splits.setdefault(str(dataset.split or "train"), {})[task] = dataset
        return splits
    return {split: dict(tasks) for split, tasks in data.items()}


def _check_saved(data: object, **_: object) -> None:
    """Refuse what :func:`save_unified` cannot save, saying what to pass instead.

    Raises:
        ArgumentError: ``data`` is a single ``Dataset``, or not a mapping of tasks (or of splits of tasks) to
            ``Dataset`` s.
    """
    if isinstance(data, Dataset):
        raise ArgumentError(
            "data must be a DatasetDict keyed by task name (or {split: DatasetDict}), got one Dataset; "
            'pass {"task_name": dataset}, e.g. DatasetDict({"my_task": dataset})'
        )
    if not isinstance(data, Mapping):
        raise ArgumentError(
            f"data must be a DatasetDict keyed by task name (or {{split: DatasetDict}}), got {type(data).__name__}"
        )
    for key, value in data.items():
        tasks = value.values() if isinstance(value, Mapping) else [value]
        if not isinstance(key, str) or not all(isinstance(task, Dataset) for task in tasks):
            raise ArgumentError(
                f"data must be a DatasetDict keyed by task name (or {{split: DatasetDict}}); "
                f"entry {shown(key)} holds {type(value).__name__}"
            )


def source_notes(card: DatasetCard) -> dict[str, dict[str, Any]]:
    """The ``source_notes`` of a unified dataset card, per task (what to carry into a folder derived from it)."""
    notes = card.data.to_dict().get("source_notes") or {}
    return {str(task): dict(note) for task, note in notes.items() if isinstance(note, dict)}


def render_dataset_card(
    splits: Mapping[str, Mapping[str, Dataset]],
    *,
    sources: Mapping[str, SourceSpec] | None = None,
    skipped: Mapping[str, Counter[str]] | None = None,
    pretty_name: str = "Unified embedding training data",
    notes: Mapping[str, Mapping[str, Any]] | None = None,
    summaries: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
    nbytes: Mapping[tuple[str, str], int] | None = None,
) -> str:
    """The README.md of a unified dataset folder (YAML front matter + task table + schema).

    ``notes`` are per-task facts added to the card's ``source_notes`` (see :func:`task_notes`).
    ``summaries`` are :func:`task_summary` results by ``(split, task)`` already known (the build gathers
    them while it reads the rows); any other task's split is read here to summarise it. ``nbytes`` are the
    splits' Arrow bytes by ``(split, task)`` where already measured (:func:`write_unified` measures them once
    for the shards and the card); any other is measured here.
    """
    sources = sources or {}
    tasks = list(dict.fromkeys(task for tasks in splits.values() for task in tasks))
    infos = DatasetInfosDict()
    rows_table = []
    # Defaults from the recipe source, then what the rows carry, then what the caller adds.
    carried = {
        task: {
            **next((notes_of(by_task[task]) for by_task in splits.values() if task in by_task), {}),
            **(notes or {}).get(task, {}),
        }
        for task in tasks
    }
    all_notes = {task: card_notes(task_notes(sources.get(task), carried[task])) for task in tasks}
    for task in tasks:
        split_dict = SplitDict()
        features = None
        for split, datasets_by_task in splits.items():
            if task not in datasets_by_task:
                continue
            dataset = datasets_by_task[task]
            features = dataset.features
            size = (nbytes or {}).get((split, task))
            size = arrow_nbytes(dataset) if size is None else size
            split_dict.add(SplitInfo(name=split, num_examples=len(dataset), num_bytes=size))
            rows_table.append(
                {
                    "task": task,
                    "split": split,
                    # An instruction is free text: bounded too.
                    **card_notes((summaries or {}).get((split, task)) or task_summary(dataset)),
                    "source": all_notes[task]["source"],
                    "license": all_notes[task]["license"],
                    "skipped": dict((skipped or {}).get(task, {})),
                }
            )
        infos[task] = DatasetInfo(features=features or UNIFIED_FEATURES, config_name=task, splits=split_dict)
    configs: list[dict[str, Any]] = [
        {
            "config_name": task,
            "data_files": [
                {"split": split, "path": f"data/{task}/{split}-*.parquet"} for split in splits if task in splits[split]
            ],
        }
        for task in tasks
    ]
    configs.append(
        {
            "config_name": ALL_CONFIG,
            "data_files": [{"split": split, "path": f"data/*/{split}-*.parquet"} for split in splits],
            "default": True,
        }
    )
    card_data = DatasetCardData(
        pretty_name=pretty_name,
        license=card_license(all_notes.values()),
        task_categories=["sentence-similarity", "text-retrieval"],
        tags=["sentence-transformers", "embeddings", "hf-unified-embed"],
        configs=configs,
        source_notes=all_notes,
    )
    infos.to_dataset_card_data(card_data)
    schema = (
        [
            {"name": name, "dtype": _dtype(feature), "meaning": COLUMN_DOCS.get(name, "")}
            for name, feature in (infos[tasks[0]].features or UNIFIED_FEATURES).items()
        ]
        if tasks
        else []
    )
    return render_template(
        CARD_TEMPLATE,
        front_matter=card_data.to_yaml(),
        pretty_name=pretty_name,
        tasks=rows_table,
        schema=schema,
        notes=all_notes,
        mined={task: note["hard_negatives"] for task, note in all_notes.items() if note.get("hard_negatives")},
        splits=list(splits),
    )


def _dtype(feature: Any) -> str:
    inner = getattr(feature, "feature", None)
    return f"list[{inner.dtype}]" if inner is not None else str(getattr(feature, "dtype", feature))


def _check_names(splits: Mapping[str, Mapping[str, Dataset]]) -> None:
    for split, tasks in splits.items():
        check_split_name(split, "split")
        for task in tasks:
            check_task_name(task, f"split {shown(split)}: task")
    check_distinct_names(splits, "split")
    check_distinct_names(dict.fromkeys(task for tasks in splits.values() for task in tasks), "task")


def _check_not_empty(splits: Mapping[str, Mapping[str, Dataset]]) -> None:
    """Refuse a task's split without rows: readers refuse a folder holding one (a shard of no rows)."""
    for split, tasks in splits.items():
        for task, dataset in tasks.items():
            if len(dataset) == 0:
                raise InputError(f"task {shown(task)} split {shown(split)} has no rows; leave it out of the folder")


def check_rows(splits: Mapping[str, Mapping[str, Dataset]], max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> None:
    """Check every row of every task, as :func:`~hf_unified_embed.schema.validate_unified` does.

    The same first problem and message (source: the task), found by ``validate``'s vectorised row check
    (:func:`~hf_unified_embed.data.row_check.check_task_rows`) a shard at a time through its own memory
    map, so memory does not grow with the dataset; columns of types that check cannot scan go row by row.
    """
    for tasks in splits.values():
        for task, dataset in tasks.items():
            check_columns(dataset.column_names, source=task)
            if arrow_types_fit(dataset.data.schema):
                check_task_rows(((task, batch) for batch in dataset_batches(dataset, max_shard_bytes)), task)
            else:
                validate_unified(dataset, source=task, task=task)


def write_unified(
    data: DatasetDict | Mapping[str, DatasetDict],
    folder: str | Path,
    *,
    sources: Mapping[str, SourceSpec] | None = None,
    skipped: Mapping[str, Counter[str]] | None = None,
    notes: Mapping[str, Mapping[str, Any]] | None = None,
    pretty_name: str = "Unified embedding training data",
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    validate: bool = True,
    num_proc: int | None = None,
    summaries: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
) -> Path:
    """Write the Hub layout into the existing empty ``folder`` (not atomic: see :func:`save_unified`).

    Every task and split name is checked before anything is written; with ``validate`` every row too
    (:func:`check_rows`; the builder has already validated what it built). A task's split is cut into
    shards of at most ``max_shard_bytes`` Arrow bytes (the files, compressed, are smaller), each written in
    row groups of about :data:`~hf_unified_embed.data.shard_writer.MAX_ROW_GROUP_BYTES`, by ``num_proc``
    processes (default one, this one; one more when the shards outnumber them:
    :func:`~hf_unified_embed.data.shard_writer.writer_processes`): the files are the same whatever ``num_proc``.
    ``summaries`` (by ``(split, task)``, as the build gathers them) spare the card a pass over those rows.
    """
    folder = Path(folder)
    splits = _as_splits(data)
    if not any(splits.values()):
        raise InputError("nothing to save: the dataset has no tasks")
    _check_names(splits)
    _check_not_empty(splits)
    if validate:
        check_rows(splits, max_shard_bytes)
    # Measured once, for the shards and the card: each measure maps the split's Arrow files again (0.04 s
    # a task at 1M rows, in the process that runs alone).
    nbytes = {
        (split, task): arrow_nbytes(dataset) for split, tasks in splits.items() for task, dataset in tasks.items()
    }
    write_shards(plan_shards(splits, folder, max_shard_bytes, nbytes), num_proc)
    card = render_dataset_card(
        splits,
        sources=sources,
        skipped=skipped,
        notes=notes,
        pretty_name=pretty_name,
        summaries=summaries,
        nbytes=nbytes,
    )
    (folder / "README.md").write_text(card, encoding="utf-8")
    # Every row written was checked, here or by the builder: readers of the folder need not read them again.
    record_folder(folder)
    return folder


def _check_request(repo_id_or_dir: object, tasks: object = None, split: object = "train", **_: object) -> None:
    """Refuse arguments of the wrong type before anything is read, naming the argument.

    Raises:
        ArgumentError: ``repo_id_or_dir`` is not a path or repository id, or empty; ``tasks`` is not a list of
            task names; ``split`` is not a split name.
    """
    if not isinstance(repo_id_or_dir, (str, Path)):
        raise ArgumentError(
            f"repo_id_or_dir must be a unified dataset folder (a path) or a Hub dataset id, got {shown(repo_id_or_dir)}"
        )
    if not str(repo_id_or_dir).strip():
        raise ArgumentError("repo_id_or_dir is empty; give a unified dataset folder or a Hub dataset id")
    if tasks is not None and (
        isinstance(tasks, str) or not isinstance(tasks, (list, tuple)) or not all(isinstance(t, str) for t in tasks)
    ):
        hint = f" (one task: [{tasks!r}])" if isinstance(tasks, str) else ""
        raise ArgumentError(f"tasks must be a list of task names or None, got {shown(tasks)}{hint}")
    if not isinstance(split, str):
        raise ArgumentError(f"split must be a split name such as 'train', got {shown(split)}")


@checked_arguments(first=_check_saved)
def save_unified(
    data: DatasetDict | Mapping[str, Dataset] | Mapping[str, DatasetDict],
    out_dir: str | Path,
    *,
    overwrite: bool = False,
    sources: Mapping[str, SourceSpec] | None = None,
    skipped: Mapping[str, Counter[str]] | None = None,
    notes: Mapping[str, Mapping[str, Any]] | None = None,
    pretty_name: str = "Unified embedding training data",
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    num_proc: int | None = None,
) -> Path:
    """Write the Hub layout: ``data/<task>/<split>-NNNNN-of-NNNNN.parquet`` and ``README.md``.

    ``data`` is a task-keyed ``DatasetDict`` (each dataset saved under its own ``split``, default
    ``train``) or ``{split: DatasetDict}``; ``notes`` adds per-task facts to the card's
    ``source_notes`` (:func:`task_notes`). Names and rows are checked first; the folder is assembled
    by :class:`~hf_unified_embed.utils.outputs.StagedOutput` and appears whole or not at all; a non-empty
    ``out_dir`` is refused (:class:`~hf_unified_embed.errors.OutputExistsError`) unless ``overwrite``.
    ``num_proc`` processes write the shards (:func:`write_unified`).
    """
    splits = _as_splits(data)
    if not any(splits.values()):
        raise InputError("nothing to save: the dataset has no tasks")
    _check_names(splits)
    _check_not_empty(splits)
    check_rows(splits, max_shard_bytes)  # before the output location is touched
    with StagedOutput(out_dir, overwrite=overwrite) as stage:
        write_unified(
            splits,
            stage.path,
            sources=sources,
            skipped=skipped,
            notes=notes,
            pretty_name=pretty_name,
            max_shard_bytes=max_shard_bytes,
            validate=False,
            num_proc=num_proc,
        )
    return stage.target


@checked_arguments(first=_check_request)
def load_unified(
    repo_id_or_dir: str | Path,
    tasks: list[str] | None = None,
    split: str = "train",
    *,
    revision: str | None = None,
    token: str | None = None,
    cache_dir: str | None = None,
    checked_rows: int | None = None,
) -> DatasetDict:
    """Load the tasks of a unified folder or Hub repo (all tasks that have ``split`` by default).

    Each task is read with ``datasets.load_dataset(repo_id_or_dir, task, split=split)``. Every row is
    checked first with ``validate``'s row check (one check for every command that reads unified rows,
    naming file, task, row and field): a local folder's card, layout, Parquet schemas and rows with pyarrow
    before ``datasets`` reads (or caches) anything — the rows of a task whose shards the folder's check record
    holds as they are were checked by ``build`` or ``validate`` and are not read again
    (:mod:`~hf_unified_embed.data.check_record`); a Hub dataset's rows once loaded. ``checked_rows``
    checks only the first rows of each task (those a run limited to them reads). A path that does not
    exist is an :class:`~hf_unified_embed.errors.InputNotFoundError`, never a Hub lookup. Each task
    carries the card's ``source_notes`` for it (:mod:`hf_unified_embed.data.provenance`).
    """
    card = read_card(repo_id_or_dir, token=token)
    notes = source_notes(card)
    names, layout = _tasks_to_load(repo_id_or_dir, tasks, split, card)
    local = layout is not None
    if layout is not None:
        check_unified_rows(repo_id_or_dir, names, split, limit=checked_rows, layout=layout)
    result = DatasetDict()
    for task in names:
        dataset = load_dataset(
            _dataset_path(repo_id_or_dir), task, split=split, revision=revision, token=token, cache_dir=cache_dir
        )
        assert isinstance(dataset, Dataset)
        if not local:
            check_dataset_rows(dataset, task, f"{repo_id_or_dir}/data/{task}/{split}-*.parquet", limit=checked_rows)
        # The card's notes travel with the rows into whatever is saved or trained from them.
        result[task] = with_source_notes(dataset, notes[task]) if notes.get(task) else dataset
    return result


@checked_arguments(first=_check_request)
def stream_unified(
    repo_id_or_dir: str | Path,
    tasks: list[str] | None = None,
    split: str = "train",
    *,
    revision: str | None = None,
    token: str | None = None,
) -> IterableDatasetDict:
    """The tasks of a unified folder or Hub repo as streams: nothing is downloaded or cached in full.

    The same checks as :func:`load_unified` (a local folder's rows unless its check record vouches for them:
    :mod:`~hf_unified_embed.data.check_record`); each task is
    ``datasets.load_dataset(repo_id_or_dir, task, split=split, streaming=True)``, one shard per Parquet
    file, and declares its row count (``info.splits``) from the card the builder wrote, which
    :class:`~hf_unified_embed.sampling.MultiTaskStream` weighs tasks by. The files are read in record
    batches of bounded size (:func:`~hf_unified_embed.data.parquet_stream.bounded_stream`), so memory does
    not grow with the shards' row groups and a process that stops reading early exits.
    """
    card = read_card(repo_id_or_dir, token=token)
    names, layout = _tasks_to_load(repo_id_or_dir, tasks, split, card)
    if layout is not None:  # a Hub dataset's rows are checked as they stream in (the collator)
        check_unified_rows(repo_id_or_dir, names, split, layout=layout)
    result = IterableDatasetDict()
    for task in names:
        dataset = load_dataset(
            _dataset_path(repo_id_or_dir), task, split=split, revision=revision, token=token, streaming=True
        )
        assert isinstance(dataset, IterableDataset)
        # datasets' own Parquet reader hangs a process that stops reading mid-file and holds whole row groups.
        # A local folder's rows are counted in its footers, whatever its card says.
        rows = layout.rows(task, split) if layout is not None else None
        result[task] = bounded_stream(dataset, token=token, rows=rows)
    return result


def _dataset_path(repo_id_or_dir: str | Path) -> str:
    return str(Path(repo_id_or_dir).expanduser()) if looks_local(repo_id_or_dir) else str(repo_id_or_dir)


def _tasks_to_load(
    repo_id_or_dir: str | Path, tasks: list[str] | None, split: str, card: Any
) -> tuple[list[str], FolderLayout | None]:
    """``tasks`` (default: every task with ``split``), checked against the card, and a local folder's layout.

    A local folder's layout and shard schemas are checked here, once: the row check reuses the layout.
    """
    layout = None
    if looks_local(repo_id_or_dir):
        layout = check_layout(repo_id_or_dir, strict_root=False)
        check_shard_schemas(layout)
        declared = layout.declared
    else:
        declared = unified_tasks(card, source=f"{repo_id_or_dir}/README.md")
    splits_declared = sorted({name for splits in declared.values() for name in splits})
    if tasks is None:
        tasks = [task for task, splits in declared.items() if split in splits]
        if not tasks:  # nothing to read is never an empty result: the split is misspelt or elsewhere
            raise InputError(f"{repo_id_or_dir}: no task has split {shown(split)}; the splits are {splits_declared}")
    elif not tasks:
        raise InputError(f"{repo_id_or_dir}: tasks is an empty list; the tasks are {sorted(declared)} (None: all)")
    unknown = [task for task in tasks if task not in declared]
    if unknown:
        raise InputError(f"{repo_id_or_dir}: unknown task(s) {unknown}; the card declares {sorted(declared)}")
    missing = [task for task in tasks if split not in declared[task]]
    if missing:
        raise InputError(
            f"{repo_id_or_dir}: task(s) {missing} have no split {shown(split)} "
            f"(they have {sorted({s for t in missing for s in declared[t]})})"
        )
    return list(tasks), layout
