"""The plan of a parallel build: a recipe's sources cut into *pieces* (a source, one of its files, or a part
of one large file) weighed by their expected reading time, and shared out over processes in groups."""

from __future__ import annotations

import heapq
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hf_unified_embed.data.build_recipe import SourceSpec
from hf_unified_embed.data.source_formats import get_source_format
from hf_unified_embed.errors import HfUnifiedEmbedError
from hf_unified_embed.utils.readers import resolve_inputs
from hf_unified_embed.utils.table_blocks import can_split

#: A file is read in parts when it would take more than this share of one process's fair share: the pieces
#: are dealt out whole, so the largest piece bounds how far one process can end its reading behind another
#: (1M rows, two processes: a triplets file of 0.4 share read whole ended the reading 1.3 s after the other;
#: with a quarter share, the STS file of 0.08 share read whole still ended one process 0.25-0.28 s after the
#: other, 0.03-0.11 s once it too was read in halves). A part of a line format costs next to nothing more
#: (it reads the lines that start in its byte range); a BEIR part shares the folder's parsing but reads every
#: id of it (~0.1 s at 1M rows), and no file is cut into more parts than processes for balance alone.
_LARGEST_PIECE = 0.05
#: Input bytes of one part of a large file at most, when several processes build. A part's working memory
#: grows with its share of the file (a BEIR part holds its queries' links and ids): parts of at most this
#: size, as many per process, keep each process's peak the same as the folder grows (bench/build.py's 5M
#: and 10M BEIR folders, 1.2 and 2.3 GB: two and four parts of ~600 MB, measured with bench/build.py). Each part beyond
#: one per process re-reads what every part shares (a BEIR part: the ids, ~1 s at 10M).
_LARGEST_PART_BYTES = 640 * 2**20
#: Input per process a build starts when not told how many (bytes times the formats' ``read_cost``): each
#: process beyond the first costs a fixed time to start, join and end (its pool, its Arrow files joined,
#: its share of the shard writers), which only a large enough share of the reading repays. The generator's
#: shape (bench/sources.py) on two cores: 100k rows (116 MiB of it) as fast in two processes as in one,
#: 10k rows (11 MiB) 1.2-1.5x slower, 300k rows (350 MiB) 1.2x faster (measured with bench/build.py).
_INPUT_PER_PROCESS = 128 * 2**20


def available_cpus() -> int:
    """The CPUs this process may run on: ``os.process_cpu_count()`` (Python 3.13), else its affinity mask."""
    counter = getattr(os, "process_cpu_count", None)
    if counter is not None:
        count = counter()
    else:
        try:
            count = len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            count = os.cpu_count()
    return max(1, count or 1)


@dataclass(frozen=True)
class Piece:
    """A unit of work: the ``files`` of recipe source ``source`` (all of them, or one of a ``per_file`` format)."""

    number: int
    source: int
    files: tuple[Path | str, ...]
    weight: float
    #: ``(index, count)``: only this part of the one file (a ``splittable`` format's large input).
    part: tuple[int, int] | None = None


def processes_worth(sources: Iterable[tuple[SourceSpec, Sequence[Path | str]]], cpus: int | None = None) -> int:
    """How many processes build ``sources`` (each recipe source with its resolved inputs) when the user gave no
    number: one per :data:`_INPUT_PER_PROCESS` of weighed input, at least one and at most ``cpus`` (default
    :func:`available_cpus`). A source of the Hub, whose size is not known here, may take every CPU."""
    limit = available_cpus() if cpus is None else cpus
    weight = 0.0
    for spec, files in sources:
        if any(isinstance(entry, str) for entry in files):
            return limit
        weight += _read_cost(spec) * sum(input_size(entry) for entry in files)
    return max(1, min(limit, int(weight // _INPUT_PER_PROCESS)))


def _read_cost(spec: SourceSpec) -> float:
    """Time per input byte of a source's format, to weigh its inputs (an unmarked adapter: a row-by-row
    reader's)."""
    return float(getattr(get_source_format(spec.format).read, "read_cost", 1.5))


def input_size(entry: Path | str) -> float:
    if isinstance(entry, str) or not entry.exists():
        return 1.0
    if entry.is_dir():
        return float(sum(path.stat().st_size for path in entry.rglob("*") if path.is_file()))
    return float(entry.stat().st_size)


def balanced_groups(pieces: Sequence[Piece], count: int) -> list[list[Piece]]:
    """``count`` groups of about equal weight (largest first onto the lightest group), each in piece order
    with the parts of large files first.

    The parts of one file start together that way: a BEIR part parses its own range of the folder's files,
    then waits for the ranges its siblings claimed (:mod:`~hf_unified_embed.data.adapters.shared_ranges`).
    A part that started after a whole piece found its range claimed by a sibling that had started alone,
    and waited while that sibling parsed it (0.4 s of a 1M build, measured with bench/build.py)."""
    if count <= 1:
        return [list(pieces)]
    heap = [(0.0, group) for group in range(count)]
    members: list[list[Piece]] = [[] for _ in range(count)]
    for piece in sorted(pieces, key=lambda piece: (-piece.weight, piece.number)):
        load, group = heapq.heappop(heap)
        members[group].append(piece)
        heapq.heappush(heap, (load + piece.weight, group))
    return [sorted(group, key=lambda piece: (piece.part is None, piece.number)) for group in members if group]


@dataclass
class Planned:
    """A recipe source as planned: its resolved inputs and pieces, or the error resolving them raised."""

    spec: SourceSpec
    index: int
    files: list[Path | str] = field(default_factory=list)
    pieces: list[Piece] = field(default_factory=list)
    error: HfUnifiedEmbedError | None = None


def plan_sources(specs: Sequence[SourceSpec], base_dir: Path | None, num_proc: int) -> list[Planned]:
    """The sources' inputs resolved (or the error resolving them raised) and cut into pieces for ``num_proc``
    processes; piece numbers follow the recipe's order."""
    planned = []
    for index, spec in enumerate(specs):
        source_format = get_source_format(spec.format)
        try:
            files = resolve_inputs(spec.data_files, base_dir, dataset_ids=source_format.dataset_ids)
        except HfUnifiedEmbedError as error:  # raised in its turn, after the sources before it
            planned.append(Planned(spec, index, error=error))
            continue
        planned.append(Planned(spec, index, files))
    _cut_into_pieces(planned, num_proc)
    return planned


@dataclass
class _Share:
    """Some files of a planned source read together, and the time that is expected to take."""

    item: Planned
    files: tuple[Path | str, ...]
    weight: float


def _cut_into_pieces(planned: Sequence[Planned], num_proc: int) -> None:
    """Each source's pieces: its files together, or one piece per file (``per_file``), and a file
    much larger than one process's share of the whole build in parts (``splittable``) — so that one
    big source does not leave the other processes idle. Parts join back into the same rows in order."""
    shares: list[_Share] = []
    for item in planned:
        if item.error is not None:
            continue
        read = get_source_format(item.spec.format).read
        cost = _read_cost(item.spec)  # to share the pieces out evenly
        one_by_one = getattr(read, "per_file", False) and item.spec.max_rows is None and len(item.files) > 1
        groups = [[entry] for entry in item.files] if one_by_one else [item.files]
        shares += [_Share(item, tuple(files), cost * sum(input_size(entry) for entry in files)) for files in groups]
    fair = sum(share.weight for share in shares) / max(num_proc, 1)
    number = 0
    for share in shares:
        count = _parts(share, num_proc, fair)
        for part in range(count):
            where = (part, count) if count > 1 else None
            share.item.pieces.append(Piece(number, share.item.index, share.files, share.weight / count, where))
            number += 1


def _parts(share: _Share, num_proc: int, fair: float) -> int:
    """Into how many parts to cut a share: one, unless several processes build and it is a single file of
    a ``splittable`` format (read by its vectorised reader) larger than :data:`_LARGEST_PIECE` of one
    process's ``fair`` share or than :data:`_LARGEST_PART_BYTES`. Then into parts of at most that share,
    at most one per process (a part of some formats, BEIR's, re-reads what every part shares), or
    more, as many per process, where a part would exceed :data:`_LARGEST_PART_BYTES`."""
    spec, entry = share.item.spec, share.files[0]
    if (
        num_proc < 2
        or len(share.files) != 1
        or spec.max_rows is not None
        or spec.task_type is None  # the row-by-row reader, which reads no parts (build_tables.piece_tables)
        # Not isinstance(entry, Path): datasets swaps the Path of the modules it runs builders from.
        or not isinstance(entry, os.PathLike)
    ):
        return 1
    size = input_size(Path(entry))
    if share.weight <= _LARGEST_PIECE * fair and size <= _LARGEST_PART_BYTES:
        return 1
    if not can_split(get_source_format(spec.format).read, Path(entry)):
        return 1
    balanced = min(num_proc, math.ceil(share.weight / (_LARGEST_PIECE * fair)))
    bounded = num_proc * math.ceil(size / (_LARGEST_PART_BYTES * num_proc))
    return max(balanced, bounded if size > _LARGEST_PART_BYTES else 1)


def in_main_process(spec: SourceSpec) -> bool:
    # An adapter that starts processes of its own (raw-text with num_proc) cannot run in a daemonic worker.
    processes = spec.options.get("num_proc")
    return isinstance(processes, int) and processes > 1
