"""What was checked in a unified folder: each shard's name, size, change time, footer digest and rows.

Checking every row costs a pass over the folder (a minute at 5M rows). The commands that check or write every
row (``build``, ``validate``, ``mine-negatives``, ``curriculum``: :func:`~hf_unified_embed.data.hub_layout.write_unified`
and :func:`~hf_unified_embed.data.row_check.validate_unified_folder`) leave :data:`CHECK_RECORD` in the folder:
the facts of every shard they checked (:class:`ShardFacts`) and the version of the row check. A reader
(``load_unified``, ``stream_unified``, ``train``) reads every shard's footer anyway (its schema and rows); a task
whose shards all have the facts recorded is not read again, any other task is checked in full before its rows
are used, with the same located error.

A shard is the one recorded only if its size, modification time (nanoseconds) and footer (the Parquet
metadata: schema, row groups, column statistics, as a digest of its bytes) are all unchanged: any write to the
file changes its modification time, a rewrite its footer. A record that is damaged, edited (it carries a digest
of itself), of another check version or absent counts for nothing: the rows are checked.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hf_unified_embed.errors import SourceFormatError, one_line
from hf_unified_embed.utils.outputs import JSON_MARKER, record_written

#: The record's file name in the folder's root (hidden: ``push`` does not upload it, readers ignore it).
CHECK_RECORD = ".hf_unified_embed_checked.json"
#: The version of the row rules a record vouches for: raised whenever a rule of the row check changes, so
#: that folders checked under older rules are checked again.
CHECK_VERSION = 1
#: The 4 bytes that end (and begin) every Parquet file.
_MAGIC = b"PAR1"


@dataclass(frozen=True)
class ShardFacts:
    """What identifies a shard's content without reading its rows.

    Attributes:
        name: the shard's path relative to the folder (``data/<task>/<split>-NNNNN-of-NNNNN.parquet``).
        size: bytes.
        mtime_ns: modification time in nanoseconds.
        footer: BLAKE2b digest (hex) of the Parquet footer's bytes.
        rows: rows the footer declares.
    """

    name: str
    size: int
    mtime_ns: int
    footer: str
    rows: int


def _unreadable(path: Path, why: str) -> SourceFormatError:
    return SourceFormatError(
        f"not a readable Parquet file ({one_line(why)})", file=path, expected="a complete Parquet file"
    )


def footer_digest(path: Path) -> str:
    """The BLAKE2b digest of ``path``'s Parquet footer (its last ``8 + footer length`` bytes).

    Raises:
        SourceFormatError: the file is too short or does not end as a Parquet file does.
    """
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size < 12:
                raise _unreadable(path, f"{size} bytes")
            handle.seek(size - 8)
            tail = handle.read(8)
            length = int.from_bytes(tail[:4], "little")
            if tail[4:] != _MAGIC or length > size - 12:
                raise _unreadable(path, "no Parquet footer at its end")
            handle.seek(size - 8 - length)
            footer = handle.read(length)
    except OSError as error:
        raise _unreadable(path, str(error)) from error
    return hashlib.blake2b(footer + tail, digest_size=16).hexdigest()


def read_footer(folder: Path, path: Path) -> tuple[ShardFacts, pq.FileMetaData]:
    """The :class:`ShardFacts` of shard ``path`` in ``folder`` and its Parquet metadata, from its footer only.

    Raises:
        SourceFormatError: the file is not a readable Parquet file (naming it).
    """
    try:
        info = path.stat()
        digest = footer_digest(path)
        metadata = pq.read_metadata(path)
    except (pa.ArrowException, OSError) as error:
        raise _unreadable(path, str(error)) from error
    name = path.relative_to(folder).as_posix()
    return ShardFacts(name, info.st_size, info.st_mtime_ns, digest, metadata.num_rows), metadata


def _digest(version: int, files: Mapping[str, object]) -> str:
    text = json.dumps({"version": version, "files": files}, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def read_record(folder: str | Path) -> dict[str, ShardFacts]:
    """The shards recorded as checked in ``folder``, by name; empty when the record is absent, damaged, edited
    or of another check version (then every row is checked: a record is never an error)."""
    try:
        data = json.loads((Path(folder) / CHECK_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CHECK_VERSION:
        return {}
    files = data.get("files")
    if not isinstance(files, dict) or data.get("digest") != _digest(CHECK_VERSION, files):
        return {}
    try:
        return {name: ShardFacts(name=name, **facts) for name, facts in files.items()}
    except TypeError:  # keys of another shape: not a record this version wrote
        return {}


def write_record(folder: str | Path, facts: Iterable[ShardFacts]) -> Path:
    """Record in ``folder`` that the shards ``facts`` describe were checked; return the record's path.

    The record replaces any earlier one at once (written beside it, then renamed), and joins the folder's
    manifest when the tool wrote the folder (:func:`~hf_unified_embed.utils.outputs.record_written`), so that
    ``--overwrite`` still recognises the folder as the tool's.

    Raises:
        OSError: the folder cannot be written (a reader's copy): the caller decides whether that matters.
    """
    folder = Path(folder)
    files = {fact.name: {key: value for key, value in asdict(fact).items() if key != "name"} for fact in facts}
    key, value = JSON_MARKER
    record = {key: value, "version": CHECK_VERSION, "files": files, "digest": _digest(CHECK_VERSION, files)}
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    target = folder / CHECK_RECORD
    if target.is_file() and target.read_text(encoding="utf-8", errors="replace") == text:
        return target
    handle, temporary = tempfile.mkstemp(prefix=f"{CHECK_RECORD}.", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    record_written(target)
    return target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def unchanged(facts: Iterable[ShardFacts], record: Mapping[str, ShardFacts]) -> bool:
    """Whether every shard of ``facts`` is in ``record`` exactly as it is now."""
    return all(record.get(fact.name) == fact for fact in facts)


def record_folder(folder: str | Path) -> Path:
    """Record every shard now under ``folder``'s ``data/`` as checked (a writer whose rows were all checked)."""
    folder = Path(folder)
    shards = sorted((folder / "data").glob("*/*.parquet"))
    return write_record(folder, (read_footer(folder, path)[0] for path in shards))
