"""Reading a unified dataset folder safely: its card, its layout and its Parquet files' schemas.

``datasets`` trusts a folder: it follows whatever the card's ``configs`` say, fails deep inside on a
truncated Parquet file and mixes stray files into the ``all`` config. These checks run first, with
pyarrow only, and name the file, task and field of the first problem:

* the card (``README.md``): readable (a binary or broken card is one line, not a YAML traceback); every
  config name and split follows the naming rule and its ``data_files`` are exactly
  ``data/<task>/<split>-*.parquet`` (so no card can send a reader outside the folder); its ``dataset_info``
  declares, for a task, only the task's splits, the rows its shards hold and the unified columns (readers
  weigh tasks by these counts and ``datasets`` casts every row to these columns);
* the layout: under ``data/`` only declared task folders holding complete shard sets
  ``<split>-NNNNN-of-NNNNN.parquet`` of declared splits; in the root only the card, ``data/`` and
  plain documentation, plot and plan files (:data:`ROOT_FILE_SUFFIXES`);
* each Parquet file's footer: readable, with exactly the declared unified columns and types, at least one
  row, and the rows the card declares (``dataset_info``) for its task and split; what the footers say
  (:class:`~hf_unified_embed.data.check_record.ShardFacts`) is kept in the layout.

Every row is checked after these, by :mod:`~hf_unified_embed.data.row_check`, unless the folder's check
record (:mod:`~hf_unified_embed.data.check_record`) holds the task's shards as they are.

A name that looks like a local path (starts with ``.``, ``/`` or ``~``, has more than one ``/``, or
its first part exists here) is never looked up on the Hub: a missing folder is an
:class:`~hf_unified_embed.errors.InputNotFoundError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from huggingface_hub import DatasetCard
from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError, OfflineModeIsEnabled

from hf_unified_embed.data.check_record import CHECK_RECORD, ShardFacts, read_footer
from hf_unified_embed.errors import (
    InputError,
    InputNotFoundError,
    SourceFormatError,
    UnifiedSchemaError,
    one_line,
    shown,
)
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
#: Root entries besides ``data/`` and the card: git and Hub-download metadata, the marker of a folder the tool
#: wrote (:data:`~hf_unified_embed.utils.outputs.MARKER`) and the record of its check
#: (:data:`~hf_unified_embed.data.check_record.CHECK_RECORD`).
ROOT_EXTRA_NAMES = frozenset({".gitattributes", ".git", ".cache", MARKER, CHECK_RECORD})
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
        try:
            return DatasetCard.load(readme)
        except (ValueError, TypeError, AttributeError, yaml.YAMLError) as error:
            # A binary file (UnicodeDecodeError is a ValueError), broken YAML, front matter that is not a mapping.
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise InputError(
                f"{readme}: not a readable dataset card ({type(error).__name__}: {shown(first, 120)}); "
                "expected the README.md that save_unified / build wrote"
            ) from None
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
    configs = _card_data(card).get("configs") or []
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


def _card_data(card: DatasetCard) -> dict[str, Any]:
    data = card.data.to_dict()
    return data if isinstance(data, dict) else {}


@dataclass
class FolderLayout:
    """What a unified folder holds: the declared tasks and, per ``(task, split)``, its shard files in order."""

    folder: Path
    declared: dict[str, list[str]]
    shards: dict[tuple[str, str], list[Path]] = field(default_factory=dict)
    #: Per ``(task, split)``, :meth:`TaskSummary.result` of its rows, filled by :func:`validate_unified_folder`.
    summaries: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    #: The folder's card, as :func:`check_layout` read it.
    card: DatasetCard | None = None
    #: Per shard, what its footer says (filled by :func:`check_shard_schemas`).
    facts: dict[Path, ShardFacts] = field(default_factory=dict)

    def rows(self, task: str, split: str) -> int:
        """Rows of ``task``'s ``split``, from its shards' footers (after :func:`check_shard_schemas`)."""
        return sum(self.facts[path].rows for path in self.shards[task, split])


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
    layout = FolderLayout(folder, declared, card=card)
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
            f"not a readable Parquet file ({one_line(error)})", file=path, expected="a complete Parquet file"
        ) from error
    return check_arrow_schema(schema, task, str(path))


def _arrow_schema(metadata: pq.FileMetaData, path: Path) -> pa.Schema:
    try:
        return metadata.schema.to_arrow_schema()
    except (pa.ArrowException, OSError) as error:
        raise SourceFormatError(
            f"not a readable Parquet file ({one_line(error)})", file=path, expected="a complete Parquet file"
        ) from error


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
    """Check every shard's footer: its schema, at least one row, and the rows the card declares.

    The shards of one task must agree on the optional ``difficulty`` column; each task's split must hold the
    rows the card's ``dataset_info`` declares for it (:func:`check_card_rows`). What each footer says is kept
    in :attr:`FolderLayout.facts`.

    Raises:
        SourceFormatError: a shard is not a readable Parquet file.
        UnifiedSchemaError: a shard's columns or types are not the unified ones.
        InputError: a shard holds no rows, or the card's row counts are not the shards'.
    """
    difficulty: dict[str, bool] = {}
    for task in layout.declared:
        seen: dict[bool, Path] = {}
        for split in layout.declared[task]:
            for path in layout.shards[task, split]:
                facts, metadata = read_footer(layout.folder, path)
                seen.setdefault(check_arrow_schema(_arrow_schema(metadata, path), task, str(path)), path)
                if facts.rows == 0:
                    raise InputError(
                        f"{path}: holds no rows; every shard of task {shown(task)} split {shown(split)} must hold "
                        "at least one (build or save_unified never writes an empty one: rebuild the folder)"
                    )
                layout.facts[path] = facts
        if len(seen) > 1:
            raise UnifiedSchemaError(
                f"{seen[True]} has a difficulty column and {seen[False]} has none; a task's files must agree",
                task=task,
                field=DIFFICULTY_COLUMN,
            )
        difficulty[task] = True in seen
    check_card_rows(layout, difficulty)


def _declared_counts(card: DatasetCard, source: Path) -> dict[tuple[str, str], Any]:
    """``{(config, split): num_examples}`` as the card's ``dataset_info`` declares them (any value, unchecked)."""
    infos = _card_data(card).get("dataset_info")
    if infos is None:
        return {}
    entries = [infos] if isinstance(infos, Mapping) else infos
    if not isinstance(entries, list):
        raise InputError(f"{source}: 'dataset_info' must be a list of configs, got {shown(infos)}")
    counts: dict[tuple[str, str], Any] = {}
    for number, entry in enumerate(entries):
        where = f"{source}: dataset_info[{number}]"
        if not isinstance(entry, Mapping):
            raise InputError(f"{where}: expected a mapping with config_name and splits, got {shown(entry)}")
        name = entry.get("config_name", "default")
        if not isinstance(name, str):
            raise InputError(f"{where}, field 'config_name': expected a config name, got {shown(name)}")
        splits = entry.get("splits") or []
        if not isinstance(splits, list):
            raise InputError(f"{where} ({shown(name)}), field 'splits': expected a list, got {shown(splits)}")
        for split in splits:
            if not isinstance(split, Mapping) or not isinstance(split.get("name"), str):
                raise InputError(
                    f"{where} ({shown(name)}), field 'splits': expected a split name and num_examples, got {shown(split)}"
                )
            size = split.get("num_bytes", 0)
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise InputError(
                    f"{where} ({shown(name)}), split {shown(split['name'])}, field 'num_bytes': expected a whole "
                    f"number >= 0, got {shown(size)}"
                )
            counts[name, split["name"]] = split.get("num_examples")
    return counts


def check_card_rows(layout: FolderLayout, difficulty: Mapping[str, bool] | None = None) -> None:
    """Refuse a card whose ``dataset_info`` ``datasets`` cannot read, or that gives a declared task a split it
    does not have, rows its shards do not hold (readers weigh tasks by these counts; ``datasets`` verifies the
    splits it loads) or other columns than its shards' (``datasets`` casts every row to them).

    Args:
        layout: the folder's layout, its footers read (:attr:`FolderLayout.facts`).
        difficulty: per task, whether its shards have the ``difficulty`` column (then so must the card).

    Raises:
        InputError: naming the card, the config, the split and the field.
    """
    if layout.card is None:
        return
    source = layout.folder / CARD_FILE
    counts = _declared_counts(layout.card, source)
    for task, features in _declared_features(layout.card).items():
        where = f"{source}: dataset_info ({shown(task)}), field 'features'"
        problem = _features_problem(features, (difficulty or {}).get(task))
        if problem is not None:
            raise InputError(f"{where}: {problem}; rebuild the folder")
    for (task, split), count in counts.items():
        where = f"{source}: dataset_info ({shown(task)}), split {shown(split)}"
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InputError(f"{where}, field 'num_examples': expected a whole number >= 0, got {shown(count)}")
        if task not in layout.declared:
            continue  # not a config of the folder: no reader looks its rows up
        if split not in layout.declared[task]:
            raise InputError(
                f"{where}: the configs declare no such split for the task (they declare {layout.declared[task]})"
            )
        rows = layout.rows(task, split)
        if count != rows:
            raise InputError(
                f"{where}, field 'num_examples': says {count:,} rows, but its shards "
                f"({DATA_FOLDER}/{task}/{split}-*.parquet) hold {rows:,}; the card was edited or the shards "
                "changed: rebuild the folder"
            )


#: The card's (``datasets``' YAML) type names a unified column may have, by the Arrow type the shards hold.
_YAML_TYPES = {
    "string": frozenset({"string", "large_string"}),
    "float": frozenset({"float16", "float32", "float64"}),
}


def _declared_features(card: DatasetCard) -> dict[str, Any]:
    """``{config: features}`` of the card's ``dataset_info`` entries that declare features (as written)."""
    infos = _card_data(card).get("dataset_info")
    entries = [infos] if isinstance(infos, Mapping) else infos if isinstance(infos, list) else []
    return {
        entry.get("config_name", "default"): entry["features"]
        for entry in entries
        if isinstance(entry, Mapping) and entry.get("features") is not None
    }


def _yaml_type(arrow: pa.DataType) -> frozenset[str]:
    return _YAML_TYPES["float" if pa.types.is_floating(arrow) else "string"]


def _features_problem(features: Any, with_difficulty: bool | None) -> str | None:
    """What keeps a card's ``features`` (``datasets``' YAML list) from being the unified columns and types its
    shards hold, or ``None``: ``datasets`` casts every row it reads to them, and fails on a name or type it
    does not know. Checked here without ``datasets``, which ``validate`` does not import."""
    if not isinstance(features, list) or not all(isinstance(entry, Mapping) for entry in features):
        return f"expected a list of columns (name and dtype or list), got {shown(features)}"
    names = [entry.get("name") for entry in features]
    if not all(isinstance(name, str) for name in names):
        return f"every column needs a name, got {shown(names)}"
    if with_difficulty is None:
        with_difficulty = DIFFICULTY_COLUMN in names
    expected = unified_arrow_schema(with_difficulty=with_difficulty)
    if sorted(names) != sorted(expected.names):
        return f"columns {shown(names)}, but the task's shards have {expected.names}"
    for entry in features:
        wanted = expected.field(entry["name"]).type
        is_list = pa.types.is_list(wanted)
        keys = set(entry) - {"name"}
        kind = "list" if is_list else "dtype"
        value = entry.get(kind, entry.get("sequence") if is_list else None)
        if len(keys) != 1 or not isinstance(value, str):
            return f"column {shown(entry['name'])}: expected {kind}: <type>, got {shown(dict(entry))}"
        allowed = _yaml_type(wanted.value_type if is_list else wanted)
        if value not in allowed:
            return f"column {shown(entry['name'])}: type {shown(value)}, expected one of {sorted(allowed)}"
    return None
