"""Reading a unified dataset folder safely: its card, its layout, its Parquet files and rows.

``datasets`` trusts a folder: it follows whatever the card's ``configs`` say, fails deep inside on a
truncated Parquet file and mixes stray files into the ``all`` config. These checks run first, with
pyarrow only, and name the file, task, row and field of the first problem:

* the card (``README.md``): every config name and split follows the naming rule and its
  ``data_files`` are exactly ``data/<task>/<split>-*.parquet`` (so no card can send a reader
  outside the folder);
* the layout: under ``data/`` only declared task folders holding complete shard sets
  ``<split>-NNNNN-of-NNNNN.parquet`` of declared splits; in the root only the card, ``data/`` and
  plain documentation, plot and plan files (:data:`ROOT_FILE_SUFFIXES`);
* each Parquet file: readable, with exactly the declared unified columns and types;
* each row (:func:`validate_unified_folder`): the schema's rules, and the task of its folder.

The rows are checked by :func:`check_task_rows`, the one row check of ``validate`` and ``train``
(:func:`check_unified_rows`, before ``datasets`` reads or caches anything). It is vectorised: pyarrow
finds, column by column, every row that may break a rule of :func:`~hf_unified_embed.schema.validate_row`
(and the per-task uniformity of :class:`~hf_unified_embed.schema.InstructionTracker`); only those rows
become Python rows, and ``validate_row`` itself says what is wrong. So the first problem and its
message are exactly those of a row-by-row check, at the cost of a few column scans.

A name that looks like a local path (starts with ``.``, ``/`` or ``~``, has more than one ``/``, or
its first part exists here) is never looked up on the Hub: a missing folder is an
:class:`~hf_unified_embed.errors.InputNotFoundError`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from huggingface_hub import DatasetCard
from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError, OfflineModeIsEnabled

from hf_unified_embed.data.row_group_reader import row_group_batches as _shard_batches  # decoded ahead, in order
from hf_unified_embed.data.task_totals import TaskSummary
from hf_unified_embed.errors import InputError, InputNotFoundError, SourceFormatError, UnifiedSchemaError, shown
from hf_unified_embed.schema import (
    DIFFICULTY_COLUMN,
    INSTRUCTION_COLUMNS,
    TASK_TYPES,
    InstructionTracker,
    check_columns,
    unified_arrow_schema,
    validate_row,
)
from hf_unified_embed.utils.locations import looks_local
from hf_unified_embed.utils.naming import ALL_CONFIG, split_name_problem, task_name_problem
from hf_unified_embed.utils.outputs import MARKER

CARD_FILE = "README.md"
DATA_FOLDER = "data"
#: Root entries besides ``data/`` and the card: git and Hub-download metadata, and the marker of a folder
#: the tool wrote (:data:`~hf_unified_embed.utils.outputs.MARKER`).
ROOT_EXTRA_NAMES = frozenset({".gitattributes", ".git", ".cache", MARKER})
#: Root files that are documentation, plots or plans (``curriculum`` writes a JSON plan and PNGs).
ROOT_FILE_SUFFIXES = frozenset({".md", ".txt", ".json", ".png", ".jpg", ".jpeg", ".svg", ".pdf"})
SHARD_FILE = re.compile(r"(?P<split>[^-]+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.parquet")


def read_card(repo_id_or_dir: str | Path, *, token: str | None = None) -> DatasetCard:
    """The dataset card of a unified folder or Hub dataset repository.

    Raises :class:`InputNotFoundError` for a local path or card that does not exist (never a Hub
    lookup) or a repository that cannot be reached.
    """
    if looks_local(repo_id_or_dir):
        local = Path(repo_id_or_dir).expanduser()
        if not local.exists():
            raise InputNotFoundError(f"dataset folder {repo_id_or_dir} does not exist")
        if not local.is_dir():
            raise InputError(f"{local} is not a folder; expected a unified dataset folder (README.md + data/)")
        readme = local / CARD_FILE
        if not readme.is_file():
            raise InputNotFoundError(f"{local} has no {CARD_FILE}; is it a folder written by save_unified / build?")
        return DatasetCard.load(readme)
    try:
        return DatasetCard.load(str(repo_id_or_dir), repo_type="dataset", token=token)
    except HFValidationError as error:
        raise InputError(
            f"{shown(repo_id_or_dir)} is neither a folder nor a valid Hub dataset id ({error})"
        ) from error
    except (LocalEntryNotFoundError, OfflineModeIsEnabled, HfHubHTTPError) as error:
        raise InputNotFoundError(
            f"cannot read the card of Hub dataset {shown(repo_id_or_dir)} ({type(error).__name__}: {error})"
        ) from error


def _data_files(config: dict[str, Any]) -> list[tuple[Any, Any]]:
    entries = config.get("data_files")
    if isinstance(entries, str):
        return [("train", entries)]
    if not isinstance(entries, list):
        return [(None, entries)]
    return [(e.get("split"), e.get("path")) if isinstance(e, dict) else (None, e) for e in entries]


def unified_tasks(card: DatasetCard, source: str | Path = CARD_FILE) -> dict[str, list[str]]:
    """``{task: [splits]}`` declared by a unified dataset card (the ``all`` config excluded).

    Every config name and split must follow the naming rule and point at ``data/<task>/<split>-*.parquet``;
    otherwise :class:`InputError` names the card (``source``), the config and the field.
    """
    configs = card.data.to_dict().get("configs") or []
    if not isinstance(configs, list):
        raise InputError(f"{source}: 'configs' must be a list of configs")
    declared: dict[str, list[str]] = {}
    for number, config in enumerate(configs):
        name = config.get("config_name") if isinstance(config, dict) else None
        where = f"{source}: configs[{number}] ({shown(name)})"
        if not isinstance(config, dict):
            raise InputError(f"{where}: expected a mapping with config_name and data_files")
        problem = None if name == ALL_CONFIG else task_name_problem(name)
        if problem:
            raise InputError(f"{where}, field 'config_name': {problem}")
        splits = []
        for split, path in _data_files(config):
            problem = split_name_problem(split)
            if problem:
                raise InputError(f"{where}, field 'data_files.split': {problem}")
            expected = f"{DATA_FOLDER}/{'*' if name == ALL_CONFIG else name}/{split}-*.parquet"
            if path != expected and path != [expected]:
                raise InputError(f"{where}, field 'data_files.path': got {shown(path)}, expected {shown(expected)}")
            splits.append(split)
        if isinstance(name, str) and name != ALL_CONFIG:
            declared[name] = splits
    return declared


@dataclass
class FolderLayout:
    """What a unified folder holds: the declared tasks and, per ``(task, split)``, its shard files in order."""

    folder: Path
    declared: dict[str, list[str]]
    shards: dict[tuple[str, str], list[Path]] = field(default_factory=dict)
    #: Per ``(task, split)``, :meth:`TaskSummary.result` of its rows, filled by :func:`validate_unified_folder`.
    summaries: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)


def _stray(path: Path, why: str) -> InputError:
    return InputError(f"{path}: {why}")


def _check_root(folder: Path) -> None:
    for entry in sorted(folder.iterdir()):
        if entry.name in (CARD_FILE, DATA_FOLDER) or entry.name in ROOT_EXTRA_NAMES:
            continue
        if entry.is_file() and entry.suffix.lower() in ROOT_FILE_SUFFIXES:
            continue
        kind = "folder" if entry.is_dir() else "file"
        raise _stray(
            entry,
            f"stray {kind} in the dataset root; a unified folder holds {CARD_FILE}, {DATA_FOLDER}/ and only "
            f"documentation, plot or plan files ({', '.join(sorted(ROOT_FILE_SUFFIXES))})",
        )


def check_layout(repo_dir: str | Path, *, strict_root: bool = True) -> FolderLayout:
    """Check a local unified folder's card and files (not their contents); return what it holds.

    ``strict_root=False`` allows any extra file in the root (loading ignores them); stray entries
    under ``data/`` are always errors, as the ``all`` config would read them.
    """
    folder = Path(repo_dir).expanduser()
    card = read_card(repo_dir)
    declared = unified_tasks(card, source=folder / CARD_FILE)
    if not declared:
        raise InputError(f"{folder / CARD_FILE} declares no task configs; write the folder with save_unified / build")
    if strict_root:
        _check_root(folder)
    data = folder / DATA_FOLDER
    if not data.is_dir():
        raise InputError(f"{folder}: no {DATA_FOLDER}/ folder, but the card declares tasks {sorted(declared)}")
    found: dict[tuple[str, str], dict[int, Path]] = {}
    counts: dict[tuple[str, str], int] = {}
    for task_dir in sorted(data.iterdir()):
        if not task_dir.is_dir() or task_dir.name not in declared:
            raise _stray(task_dir, f"not a task declared in {CARD_FILE} ({sorted(declared)})")
        for path in sorted(task_dir.iterdir()):
            match = SHARD_FILE.fullmatch(path.name)
            if not path.is_file() or match is None or match["split"] not in declared[task_dir.name]:
                raise _stray(
                    path,
                    f"not a shard of a declared split; expected <split>-NNNNN-of-NNNNN.parquet with split in "
                    f"{declared[task_dir.name]}",
                )
            key = (task_dir.name, match["split"])
            count = int(match["count"])
            if counts.setdefault(key, count) != count:
                raise _stray(path, f"shard count {count} differs from the other shards' ({counts[key]})")
            found.setdefault(key, {})[int(match["index"])] = path
    layout = FolderLayout(folder, declared)
    for task, splits in declared.items():
        for split in splits:
            key = (task, split)
            if key not in found:
                raise InputError(
                    f"{folder}: {CARD_FILE} declares task {shown(task)} split {shown(split)}, but "
                    f"{data / task}/{split}-*.parquet does not exist"
                )
            missing = sorted(set(range(counts[key])) - set(found[key]))
            if missing:
                names = ", ".join(f"{split}-{i:05d}-of-{counts[key]:05d}.parquet" for i in missing[:3])
                raise InputError(f"{data / task}: missing shard(s) {names}")
            layout.shards[key] = [found[key][i] for i in range(counts[key])]
    return layout


def _canonical(data_type: pa.DataType) -> str:
    # Writers differ in list item names and large/small offsets; the values are what matters.
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return f"list<{_canonical(data_type.value_type)}>"
    if pa.types.is_large_string(data_type):
        return "string"
    return str(data_type)


def _compatible(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Whether ``datasets`` loads ``actual`` as ``expected`` without loss of meaning (numbers widen or narrow)."""
    is_list = pa.types.is_list(actual) or pa.types.is_large_list(actual)
    if pa.types.is_list(expected):
        return is_list and _compatible(actual.value_type, expected.value_type)
    if pa.types.is_floating(expected):
        return pa.types.is_floating(actual) or pa.types.is_integer(actual)
    return _canonical(actual) == _canonical(expected)


def check_parquet_schema(path: Path, task: str) -> bool:
    """Check a shard's columns and types against the unified features; return whether it has ``difficulty``."""
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as error:
        raise SourceFormatError(
            f"not a readable Parquet file ({error})", file=path, expected="a complete Parquet file"
        ) from error
    return check_arrow_schema(schema, task, str(path))


def check_arrow_schema(schema: pa.Schema, task: str, source: str) -> bool:
    """Check Arrow columns and types against the unified features; return whether they include ``difficulty``."""
    with_difficulty = DIFFICULTY_COLUMN in schema.names
    expected = unified_arrow_schema(with_difficulty=with_difficulty)
    check_columns(schema.names, task=task, source=source)
    for name in expected.names:
        actual, wanted = schema.field(name).type, expected.field(name).type
        if not _compatible(actual, wanted):
            raise UnifiedSchemaError(
                f"column has type {_canonical(actual)}, expected {_canonical(wanted)}",
                task=task,
                field=name,
                source=source,
            )
    return with_difficulty


def arrow_types_fit(schema: pa.Schema) -> bool:
    """Whether every unified column of ``schema`` has a type :func:`check_task_rows` can scan (those ``validate``
    accepts in a Parquet file); a table with other types is checked row by row."""
    expected = unified_arrow_schema(with_difficulty=DIFFICULTY_COLUMN in schema.names)
    return all(
        name in schema.names and _compatible(schema.field(name).type, expected.field(name).type)
        for name in expected.names
    )


def check_shard_schemas(layout: FolderLayout) -> None:
    """Check every shard's schema; the shards of one task must agree on the optional ``difficulty`` column."""
    for task in layout.declared:
        seen: dict[bool, Path] = {}
        for split in layout.declared[task]:
            for path in layout.shards[task, split]:
                seen.setdefault(check_parquet_schema(path, task), path)
        if len(seen) > 1:
            raise UnifiedSchemaError(
                f"{seen[True]} has a difficulty column and {seen[False]} has none; a task's files must agree",
                task=task,
                field=DIFFICULTY_COLUMN,
            )


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
        if first is None and batch.num_rows:
            row = batch.slice(0, 1).to_pylist()[0]
            validate_row(row, index, source=source, expected_task=task)
            tracker.check(row, index, source=source)
            first = (row["task_type"], *(row[name] for name in INSTRUCTION_COLUMNS))
        for position in np.flatnonzero(_suspect_rows(batch, task, first)):
            row = batch.slice(int(position), 1).to_pylist()[0]
            validate_row(row, index + int(position), source=source, expected_task=task)
            tracker.check(row, index + int(position), source=source)
        index += batch.num_rows
    return index


def validate_unified_folder(repo_dir: str | Path) -> FolderLayout:
    """Check a local unified folder completely with pyarrow: layout, schema of every file, every row.

    Raises an :class:`~hf_unified_embed.errors.HfUnifiedEmbedError` naming the file, task, row and
    field of the first problem. Row numbers count within a task's split across its shards. The files
    are read once: the summary of each task's split (:attr:`FolderLayout.summaries`) comes from the same pass.
    """
    layout = check_layout(repo_dir)
    check_shard_schemas(layout)
    for key, paths in layout.shards.items():
        summary = TaskSummary()
        check_task_rows(summary.passing(_shard_batches(paths)), key[0])
        layout.summaries[key] = summary.result()
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

    The card, the layout and every shard's schema (unless ``layout`` is given: :func:`check_layout`'s
    result after :func:`check_shard_schemas`), then the first ``limit`` rows (all by default) of each of
    ``tasks`` (default: every task with ``split``) in ``split``, with :func:`check_task_rows`.
    Only pyarrow reads the files: nothing is written, ``datasets``' cache included. A task or split the
    folder does not declare is left to :func:`~hf_unified_embed.data.hub_layout.load_unified` to report.
    """
    if layout is None:
        layout = check_layout(repo_dir, strict_root=False)
        check_shard_schemas(layout)
    names = list(tasks) if tasks is not None else [task for task, splits in layout.declared.items() if split in splits]
    for task in names:
        paths = layout.shards.get((task, split))
        if paths:
            check_task_rows(_shard_batches(paths, limit), task)
    return layout


def check_dataset_rows(dataset: Any, task: str, source: str, *, limit: int | None = None) -> int:
    """:func:`check_task_rows` on a loaded ``datasets.Dataset`` of one task (a Hub dataset, say); ``source``
    names where its rows come from. Its columns and types are checked first."""
    table: pa.Table = dataset.with_format("arrow")[: len(dataset) if limit is None else min(limit, len(dataset))]
    check_arrow_schema(table.schema, task, source)
    return check_task_rows(((source, batch) for batch in table.to_batches(max_chunksize=ROW_BATCH)), task)
