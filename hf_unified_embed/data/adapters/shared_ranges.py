"""A file every part of a build needs whole, parsed once: in byte ranges, each by the first part to claim it.

The parts of one source (``part=(index, count)``, run side by side in worker processes or one after another
in a process) may each need all of a file: a BEIR part joins its queries against the whole corpus and
orders them by every judgement. Parsed by each part, such a file cost ``count`` times its parse (1M rows,
two processes: the corpus, judgements and mined negatives parsed twice were 40 % of the build). Here the
file is cut into ``count`` ranges of whole lines (:func:`~hf_unified_embed.utils.table_blocks.part_span`),
and each range is parsed once into a folder of the build's scratch, which every process of the build sees:

* a part claims a range by creating ``<folder>.claim`` (exclusive create: one part wins) holding its pid,
  parses it into ``<folder>.partial`` and renames that to ``<folder>`` (atomic: seen whole or not at all);
* it claims the ranges it can, its own first, then waits for those others claimed. A part never waits while
  holding an unparsed claim, so no two parts wait for each other;
* a parse that raises leaves ``<folder>.failed`` and raises; a part waiting for that range raises
  :class:`~hf_unified_embed.data.source_formats.SourceFormatError` (the builder then reads the source row by
  row, which names the place); a part whose claimer died without a result raises ``RuntimeError``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from hf_unified_embed.data.source_formats import SourceFormatError

#: How often a part looks whether a range another part claimed is ready (seconds).
_POLL = 0.02

#: ``parse(folder, part)`` writes what it parsed of ``part`` of the file into ``folder``.
RangeParser = Callable[..., None]


def shared_ranges(path: Path, kind: str, shared: Path, part: tuple[int, int], parse: RangeParser) -> list[Path]:
    """The folders of the ``count`` ranges of ``path`` as ``parse`` wrote them, in file order.

    Args:
        path: the file.
        kind: what ``parse`` makes of it (two parsings of one file must differ here).
        shared: the scratch folder every part of this build sees, and no other build.
        part: ``(index, count)`` of the part asking: it parses range ``index`` first.
        parse: called as ``parse(folder, part=(number, count))`` for each range this part claims.
    """
    index, count = part
    key = hashlib.sha256(f"{path.resolve()}\0{kind}".encode()).hexdigest()[:16]
    folders = [shared / f"{path.name}-{key}-{number}-of-{count}" for number in range(count)]
    order = [(index + step) % count for step in range(count)]
    waiting = [number for number in order if not _claim_and_parse(folders[number], parse, (number, count))]
    for number in waiting:
        _wait_for(path, folders[number])
    return folders


def _claim_and_parse(folder: Path, parse: RangeParser, part: tuple[int, int]) -> bool:
    """Parse the range into ``folder`` if no part has claimed it yet: ``False`` when another part has."""
    try:
        descriptor = os.open(f"{folder}.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "w") as handle:
        handle.write(str(os.getpid()))
    staging = Path(f"{folder}.partial")
    staging.mkdir()
    try:
        parse(staging, part=part)
    except BaseException as error:
        Path(f"{folder}.failed").write_text(f"{type(error).__name__}: {error}", encoding="utf-8")
        shutil.rmtree(staging, ignore_errors=True)
        raise
    staging.rename(folder)
    return True


def _wait_for(path: Path, folder: Path) -> None:
    """Wait until the part that claimed ``folder``'s range has parsed it; raise if it failed or died."""
    claim, failed = Path(f"{folder}.claim"), Path(f"{folder}.failed")
    while not folder.is_dir():
        if failed.is_file():
            # The claiming part raised the error; the builder reads the source row by row to name its place.
            raise SourceFormatError("a range of the file could not be read", file=path)
        owner = claim.read_text(encoding="utf-8")  # empty for the instant between create and write
        if owner and not _alive(int(owner)):
            time.sleep(_POLL)  # it may have finished just before it exited
            if folder.is_dir() or failed.is_file():
                continue
            raise RuntimeError(f"{path}: the process reading a range of it (pid {owner}) ended without a result")
        time.sleep(_POLL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True
