"""What the tool wrote: the marker and manifest in every output folder, by which ``--overwrite`` knows its own.

Every output folder the tool commits holds a hidden marker file, :data:`MARKER`, listing every file the tool
wrote there (a manifest written when the folder is committed; a file the tool adds later, a card or a plot,
joins it). The manifest knows a file by its size and, up to :data:`HASHED_BYTES`, the SHA-256 of its bytes,
or, larger, its modification time in nanoseconds: an edit that keeps the size (a card's typo fixed) is an
edit too. A JSON file is the tool's when it carries :data:`JSON_MARKER` (evaluation results) or all the keys
of a curriculum plan. :func:`not_written_by_tool` says why a path is not wholly the tool's;
:func:`~hf_unified_embed.utils.outputs.check_output` refuses to replace it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

#: The marker file in every output folder the tool writes, with the manifest of what the tool wrote there:
#: ``--overwrite`` replaces only folders holding it and nothing else.
#: Readers ignore it: the Hub-layout check allows it in a dataset's root, ``push`` does not upload it, and
#: model loading and merges never read hidden files.
MARKER = ".hf_unified_embed_output"
#: The top-level key and value that mark a JSON file (evaluation results) as written by the tool.
JSON_MARKER = ("written_by", "hf-unified-embed")
#: JSON files of the tool without the marker key, known by all the top-level keys of one set: evaluation
#: results written before the key existed (``SuiteResults.to_dict``) and curriculum plans (``CurriculumPlan``).
_TOOL_JSON_KEYS = (
    frozenset({"model", "suite", "results", "table", "model-index"}),
    frozenset({"version", "tasks", "order", "similarity", "score"}),
)
_MARKER_NOTE = (
    "This folder was written by hf-unified-embed; `--overwrite` may replace it, and only while it holds "
    "nothing but the files listed here, as they are listed (size, and the SHA-256 of a small file or the "
    "modification time of a large one). Without this file the tool never deletes or replaces the folder."
)
#: Files up to this size are known in the manifest by the hash of their bytes (an edit is seen whatever its
#: time; a copy with ``cp -r`` is still the tool's); larger ones (weights, shards) by their modification time
#: in nanoseconds, which costs no read.
HASHED_BYTES = 1 << 20
#: A manifest entry: ``[size, "sha256:<hex>"]``, ``[size, mtime_ns]``, or a folder's ``-1``. An older
#: manifest's bare size is still read (it cannot tell an edit that keeps the size).
Entry = int | list[int | str]
#: Foreign files named in a refusal; the rest are counted.
_NAMED = 5
#: How :func:`not_written_by_tool` starts its answer for a folder holding files of someone else's.
FOREIGN = "holds files this tool did not write: "


def _entry(path: Path) -> Entry:
    """How the manifest knows ``path`` (:data:`Entry`): a folder -1, a file its size with its hash or time."""
    info = path.lstat()
    if stat.S_ISDIR(info.st_mode):
        return -1
    if stat.S_ISREG(info.st_mode) and info.st_size <= HASHED_BYTES:
        with path.open("rb") as handle:
            return [info.st_size, f"sha256:{hashlib.file_digest(handle, 'sha256').hexdigest()}"]
    return [info.st_size, info.st_mtime_ns]


def _same(recorded: Entry, path: Path) -> bool:
    """Whether ``path`` is as the manifest recorded it (an older manifest's bare size: at that size)."""
    if isinstance(recorded, int):
        return recorded == (-1 if path.is_dir() and not path.is_symlink() else path.lstat().st_size)
    return recorded == _entry(path)


def _contents(folder: Path) -> list[str]:
    """Every entry under ``folder`` but the marker, as paths relative to it (links are entries)."""
    entries: list[str] = []
    for root, folders, files in os.walk(folder):
        base = Path(root)
        for name in folders + files:
            relative = (base / name).relative_to(folder).as_posix()
            if relative != MARKER:
                entries.append(relative)
    return entries


def _valid_entry(entry: object) -> bool:
    if isinstance(entry, int):
        return not isinstance(entry, bool)
    return (
        isinstance(entry, list)
        and len(entry) == 2
        and all(isinstance(part, int | str) and not isinstance(part, bool) for part in entry)
    )


def _manifest(folder: Path) -> dict[str, Entry] | None:
    """The files the tool recorded in ``folder``'s marker, or ``None`` for a marker without a valid manifest."""
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    files = data.get("files") if isinstance(data, dict) and data.get(JSON_MARKER[0]) == JSON_MARKER[1] else None
    if not isinstance(files, dict) or not all(_valid_entry(entry) for entry in files.values()):
        return None
    return files


def _write_manifest(folder: Path, files: dict[str, Entry]) -> None:
    key, value = JSON_MARKER
    text = json.dumps({key: value, "note": _MARKER_NOTE, "files": dict(sorted(files.items()))}, indent=1)
    (folder / MARKER).write_text(text + "\n", encoding="utf-8")


def mark_output(folder: str | Path) -> None:
    """Leave the :data:`MARKER` in ``folder`` with the manifest of what it holds now (every path, as
    :data:`Entry` knows it): an output of this tool that a later ``--overwrite`` may replace while it holds
    only those files, unchanged."""
    folder = Path(folder)
    _write_manifest(folder, {relative: _entry(folder / relative) for relative in _contents(folder)})


def record_written(path: str | Path) -> None:
    """Add a file the tool has just written into one of its own folders to that folder's manifest."""
    path = Path(path)
    files = _manifest(path.parent) if (path.parent / MARKER).is_file() else None
    if files is not None:
        _write_manifest(path.parent, {**files, path.name: _entry(path)})


def _foreign(folder: Path, files: dict[str, Entry]) -> list[str]:
    """The entries of ``folder`` that its manifest does not list as they are (changed files marked so); a
    foreign folder is named only when nothing inside it is."""
    found: list[str] = []
    for relative in sorted(_contents(folder)):
        if relative not in files:
            found.append(relative)
        elif not _same(files[relative], folder / relative):
            found.append(f"{relative} (changed since the tool wrote it)")
    return [entry for entry in found if not any(other.startswith(f"{entry}/") for other in found)]


def _named(paths: list[str]) -> str:
    listed = ", ".join(paths[:_NAMED])
    return listed if len(paths) <= _NAMED else f"{listed} and {len(paths) - _NAMED} more"


def not_written_by_tool(path: str | Path) -> str | None:
    """Why ``path`` is not wholly an output of this tool, or ``None`` when ``--overwrite`` may replace it.

    A folder is the tool's when its :data:`MARKER` holds a manifest and the folder holds nothing else than
    the files listed there, unchanged; a file is the tool's when the manifest of the folder it lies in
    lists it as it is, or when it is a JSON object carrying :data:`JSON_MARKER` (or all the top-level keys
    of evaluation results or of a curriculum plan).
    """
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        if not (path / MARKER).is_file():
            return f"no {MARKER} marker in it"
        files = _manifest(path)
        if files is None:
            return (
                f"its {MARKER} marker, from an older version, does not list the files the tool wrote, so they "
                "cannot be told from yours; delete the folder yourself if nothing in it is yours"
            )
        foreign = _foreign(path, files)
        return f"{FOREIGN}{_named(foreign)}" if foreign else None
    if not path.is_file() or path.is_symlink():
        return "not a result file of this tool"
    files = _manifest(path.parent) if (path.parent / MARKER).is_file() else None
    if files is not None:
        recorded = files.get(path.name)
        if recorded is None:
            return "not a file this tool wrote in its folder"
        return None if _same(recorded, path) else "changed since the tool wrote it"
    return None if _tool_json(path) else "not a result file of this tool"


def _tool_json(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            if handle.read(1) != b"{":  # only a JSON object can carry the key; skip reading anything else
                return False
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    if not isinstance(data, dict):
        return False
    key, value = JSON_MARKER
    return data.get(key) == value or any(data.keys() >= keys for keys in _TOOL_JSON_KEYS)


def written_by_tool(path: str | Path) -> bool:
    """Whether ``--overwrite`` may replace ``path`` (:func:`not_written_by_tool` has no objection)."""
    return not_written_by_tool(path) is None
