"""Reading a unified dataset folder safely: its card, its layout and its Parquet files' schemas.

``datasets`` trusts a folder: it follows whatever the card's ``configs`` say, fails deep inside on a
truncated Parquet file and mixes stray files into the ``all`` config. These checks run first, with
pyarrow only, and name the file, task and field of the first problem:

* the card (``README.md``): every config name and split follows the naming rule and its
  ``data_files`` are exactly ``data/<task>/<split>-*.parquet`` (so no card can send a reader
  outside the folder);
* the layout: under ``data/`` only declared task folders holding complete shard sets
  ``<split>-NNNNN-of-NNNNN.parquet`` of declared splits; in the root only the card, ``data/`` and
  plain documentation, plot and plan files (:data:`ROOT_FILE_SUFFIXES`);
* each Parquet file: readable, with exactly the declared unified columns and types.

Every row is checked after these, by :mod:`~hf_unified_embed.data.row_check`.

A name that looks like a local path (starts with ``.``, ``/`` or ``~``, has more than one ``/``, or
its first part exists here) is never looked up on the Hub: a missing folder is an
:class:`~hf_unified_embed.errors.InputNotFoundError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from huggingface_hub import DatasetCard
from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError, OfflineModeIsEnabled

from hf_unified_embed.errors import InputError, InputNotFoundError, SourceFormatError, UnifiedSchemaError, shown
from hf_unified_embed.schema import (
    DIFFICULTY_COLUMN,
    check_columns,
    unified_arrow_schema,
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
