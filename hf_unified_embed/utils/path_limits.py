"""Paths the file system cannot take: a name past ``NAME_MAX`` or a whole path past ``PATH_MAX``.

Linux refuses a name longer than 255 bytes and a path of 4,096 bytes or more with ``ENAMETOOLONG``
(``OSError [Errno 36] File name too long``), whichever call meets it first: a reader's ``open``, a
``Path.exists()`` (which raises it rather than answering), a ``mkdir`` deep inside an output. Two things
keep that from ending a command in a traceback:

* :func:`check_name_lengths` refuses an output before anything runs when one of its names, or its whole
  path with the room the tool needs below it (:data:`INSIDE_BYTES`, plus the staging folder the caller
  counts), passes the limits;
* :func:`path_too_long` finds ``ENAMETOOLONG`` behind whatever a library raised, so that the command line
  says in one line which path is too long, by how much, and what the limit is.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from hf_unified_embed.errors import OutputError

#: ``NAME_MAX`` and ``PATH_MAX`` where the system cannot be asked (Linux's values). ``PATH_MAX`` counts
#: the terminating NUL: the longest path a call takes is one byte shorter.
DEFAULT_NAME_MAX, DEFAULT_PATH_MAX = 255, 4096
#: Room kept below an output for the files the tool writes inside it (``data/<task>/<split>-00000-of-00001
#: .parquet``, a datasets cache in the staging folder's scratch): one name of the longest length.
INSIDE_BYTES = DEFAULT_NAME_MAX
#: Characters of a long path an error quotes at each end (the start says where, the end what).
_SHOWN_ENDS = 48


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def _existing(path: Path) -> Path:
    """The nearest folder of ``path`` that exists (``/`` at worst): the file system whose limits apply."""
    for folder in (path, *path.parents):
        try:
            if folder.is_dir():
                return folder
        except OSError:  # too long to ask about: a shorter parent is
            continue
    return Path(path.anchor or "/")


def _limit(path: Path, name: str, default: int) -> int:
    try:
        return int(os.pathconf(_existing(path), name))
    except (OSError, ValueError, AttributeError):
        return default


def name_limit(path: Path) -> int:
    """The longest name, in bytes, that the file system holding ``path`` allows (``PC_NAME_MAX``)."""
    return _limit(path, "PC_NAME_MAX", DEFAULT_NAME_MAX)


def path_limit(path: Path) -> int:
    """The longest path, in bytes, that a call on ``path``'s file system takes (``PC_PATH_MAX`` less the NUL)."""
    return _limit(path, "PC_PATH_MAX", DEFAULT_PATH_MAX) - 1


def abbreviated(path: str | Path) -> str:
    """``path`` as a message quotes it: whole when short, else its start and end around the length."""
    text = str(path)
    if len(text) <= 2 * _SHOWN_ENDS + 24:
        return text
    return f"{text[:_SHOWN_ENDS]}…({len(text):,} characters)…{text[-_SHOWN_ENDS:]}"


def check_name_lengths(absolute: Path, *, staging_bytes: int = 0, what: str = "output") -> None:
    """Refuse ``absolute`` (an output, or a folder to create for one) before anything runs when the file system
    cannot hold it: a name past ``NAME_MAX``, or the whole path, with ``staging_bytes`` (the staging folder the
    output is written in first) and :data:`INSIDE_BYTES` for the files inside, past ``PATH_MAX``.

    Either failed as ``ENAMETOOLONG`` when the first file was written, after the command's work.

    Raises:
        OutputError: naming the name or the path, its length, the limit and how long a path may be here.
    """
    limit = name_limit(absolute.parent)
    for part in absolute.parts[1:]:
        size = _size(part)
        if size > limit:
            named = part if len(part) <= 64 else f"{part[:32]}…{part[-24:]}"  # both ends: the suffix tells
            raise OutputError(
                f"{what} in {abbreviated(absolute.parent)}: the name {named!r} is {size} bytes long, and this "
                f"file system allows at most {limit} bytes in a name; choose a shorter name"
            )
    longest = path_limit(absolute.parent)
    size = _size(str(absolute))
    room = staging_bytes + INSIDE_BYTES
    if size + room > longest:
        raise OutputError(
            f"{what} {abbreviated(absolute)} is {size:,} bytes long; with the {room:,} bytes the tool needs below "
            f"it (its staging folder and the files inside) its paths would reach this system's limit of "
            f"{longest + 1:,} bytes for a path (PATH_MAX): choose a path of at most {max(0, longest - room):,} bytes"
        )


@dataclass(frozen=True)
class PathTooLong:
    """A path the system refused as too long (``ENAMETOOLONG``): the path, when the error named it."""

    path: str | None

    def describe(self) -> str:
        """What is too long, by how much, and the limit, in one line."""
        if self.path is None:
            return "a path is too long for this system (File name too long)"
        path = Path(self.path)
        limit = name_limit(path.parent)
        for part in path.parts:
            if _size(part) > limit:
                named = part if len(part) <= 64 else f"{part[:32]}…{part[-24:]}"
                return (
                    f"{abbreviated(self.path)}: the name {named!r} is {_size(part)} bytes long, and this file "
                    f"system allows at most {limit} bytes in a name; choose a shorter name"
                )
        longest = path_limit(path.parent)
        return (
            f"{abbreviated(self.path)}: the path is {_size(self.path):,} bytes long, and this system takes paths "
            f"shorter than {longest + 1:,} bytes (PATH_MAX); use a shorter path"
        )


#: How many links of a chain of causes are followed.
_DEPTH = 32


def path_too_long(error: BaseException) -> PathTooLong | None:
    """The too-long path behind ``error`` (itself or a cause or context of it), or ``None``."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < _DEPTH:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno == errno.ENAMETOOLONG:
            name = current.filename
            return PathTooLong(os.fsdecode(name) if isinstance(name, str | bytes) else None)
        current = current.__cause__ or current.__context__
    return None
