"""A BEIR folder's corpus and queries, read once for all the parts of a build that join it.

A part of a BEIR source (``part=(index, count)``) joins its share of the queries against the whole corpus,
so every part needs every id and text; read by each part, the corpus was parsed ``count`` times. Instead it
is cut into ``count`` byte ranges, each parsed once into the build's scratch folder (its ids as an Arrow
file, its texts as bytes and offsets: :mod:`.shared_ranges`), and every part maps all the ranges back.

Texts and ids are memory-mapped: page cache, which the kernel can drop, not heap (4M ids: ~47 MB).
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.lib.stride_tricks import as_strided

from hf_unified_embed.data.adapters.beir_records import (
    DOCUMENT_SCHEMA,
    document_columns,
    document_rows,
    duplicate_id_error,
)
from hf_unified_embed.data.adapters.shared_ranges import shared_ranges
from hf_unified_embed.utils.readers import is_json_array, iter_json_records
from hf_unified_embed.utils.table_blocks import iter_text_chunks, json_lines_table


def release_unused() -> None:
    """Give back to the system what pyarrow's allocator keeps of the blocks read so far: it would keep
    hundreds of megabytes of a corpus's freed blocks, which numpy (the join's arrays) does not reuse.

    Called where a file has been read, not after each block: the blocks of one file reuse each other's
    freed memory, and memory given back is zeroed by the kernel again when the next block asks for it
    (given back after every block, a 1M corpus's parse took 405 fresh huge pages; now 31, bench/build.py)."""
    pa.default_memory_pool().release_unused()


class _TextFile:
    """Texts appended block by block to a bytes file and its offsets (8 bytes a text) to an array."""

    def __init__(self, path: Path) -> None:
        self.handle = open(path, "wb")  # noqa: SIM115 - closed in close()
        self.offsets = [np.zeros(1, dtype=np.int64)]
        self.size = 0

    def add(self, texts: pa.Array) -> None:
        texts = texts.cast(pa.string())
        offsets = np.frombuffer(texts.buffers()[1], dtype=np.int32, count=len(texts) + 1, offset=4 * texts.offset)
        start, end = int(offsets[0]), int(offsets[-1])
        if end > start:
            self.handle.write(memoryview(texts.buffers()[2])[start:end])
        self.offsets.append(offsets[1:].astype(np.int64) - start + self.size)
        self.size += end - start

    def close(self) -> np.ndarray:
        self.handle.close()
        return np.concatenate(self.offsets)


def _parse_range(path: Path, include_title: bool, folder: Path, part: tuple[int, int] | None = None) -> None:
    """Parse the lines of ``part`` of ``path`` (the whole file for ``None``) into ``folder``: ``ids.arrow``,
    ``texts`` and ``offsets.npy``."""
    ids: list[pa.Array] = []
    texts = _TextFile(folder / "texts")

    def add(block_ids: pa.Array, block_texts: pa.Array) -> None:
        ids.append(block_ids)
        texts.add(block_texts)

    def add_rows(records: Any) -> None:
        pairs = list(document_rows(path, records, include_title))
        add(pa.array([pair[0] for pair in pairs], pa.string()), pa.array([pair[1] for pair in pairs], pa.string()))

    try:
        if part is None and is_json_array(path):
            add_rows(iter_json_records(path))
        else:
            for chunk in iter_text_chunks(path, part=part):
                table = json_lines_table(chunk, DOCUMENT_SCHEMA, optional=("title",))
                columns = None if table is None else document_columns(table, include_title)
                if columns is None:
                    add_rows(chunk.json_lines())
                else:
                    add(*columns)
    finally:
        offsets = texts.close()
    np.save(folder / "offsets.npy", offsets)
    table = pa.table({"_id": pa.chunked_array(ids, pa.string())})
    with pa.OSFile(str(folder / "ids.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    release_unused()


def _range_ids(folder: Path) -> pa.ChunkedArray:
    """The range's ids over the mapped file (no copy: its buffers keep the mapping open)."""
    return pa.ipc.open_file(pa.memory_map(str(folder / "ids.arrow"))).read_all().column("_id")


#: Bytes of a text that Arrow's string view holds inline: a view is the text's length and, for a text this
#: short, its bytes; for a longer one, its first 4 bytes, a data buffer's index and the offset there.
_INLINE = 12
#: A parsed range's texts are seen through windows of twice this many bytes, one starting every this many:
#: a view's offset is an int32, and a text (shorter than this) lies whole in the window where it starts.
_WINDOW = 2**30


class _Range:
    """One parsed range's texts mapped back: the mapped file's bytes and each text's offsets there."""

    def __init__(self, folder: Path) -> None:
        self.offsets = np.load(folder / "offsets.npy", mmap_mode="r")
        self.mapping: mmap.mmap | None = None
        self.data = np.zeros(0, dtype=np.uint8)
        self.windows: list[pa.Buffer] = []
        if int(self.offsets[-1]):
            with open(folder / "texts", "rb") as handle:
                self.mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            self.data = np.frombuffer(self.mapping, dtype=np.uint8)
            whole = pa.py_buffer(self.mapping)
            self.windows = [
                whole.slice(start, min(2 * _WINDOW, whole.size - start)) for start in range(0, whole.size, _WINDOW)
            ]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def heads(self, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The first :data:`_INLINE` bytes of the texts at byte ``starts`` (zero past each text's length)."""
        size = len(self.data)
        if size >= _INLINE:
            # Every run of _INLINE bytes of the file as a row (no copy): one gather reads the texts' heads.
            rows = as_strided(self.data, shape=(size - _INLINE + 1, _INLINE), strides=(1, 1), writeable=False)
            heads = rows[np.minimum(starts, size - _INLINE)]
        else:
            heads = np.zeros((len(starts), _INLINE), dtype=np.uint8)
        for each in np.flatnonzero(starts > size - _INLINE):  # the few texts within _INLINE bytes of the end
            tail = self.data[int(starts[each]) : int(starts[each]) + _INLINE]
            heads[each] = 0
            heads[each, : len(tail)] = tail
        heads[np.arange(_INLINE) >= lengths[:, None]] = 0
        return heads


class Documents:
    """The ids and texts of a corpus or queries file, as parsed ranges (one unless the file was read in parts).

    ``ids`` are the ranges' ids, mapped (a chunked array); texts are taken by position with :meth:`take`,
    their byte lengths read with :meth:`lengths`, and :meth:`drop_pages` takes the texts read so far out of
    this process's memory.
    """

    def __init__(self, folders: list[Path]) -> None:
        self.ranges = [_Range(folder) for folder in folders]
        # Mapped, not copied: a part holds every id of the file while it joins (twice 4M at 10M rows).
        self.ids = pa.chunked_array([chunk for folder in folders for chunk in _range_ids(folder).chunks], pa.string())
        counts = [len(part) for part in self.ranges]
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def forget_ids(self) -> None:
        """Let the ids go (the join keeps positions only)."""
        self.ids = pa.chunked_array([], pa.string())

    def _located(self, positions: np.ndarray) -> Iterator[tuple[_Range, np.ndarray, np.ndarray]]:
        """For each range holding some of ``positions``: it, which of ``positions`` it holds, and where."""
        if len(self.ranges) == 1:
            yield self.ranges[0], np.arange(len(positions)), positions
            return
        owner = np.searchsorted(self.starts, positions, side="right") - 1
        for number, part in enumerate(self.ranges):
            which = np.flatnonzero(owner == number)
            if len(which):
                yield part, which, positions[which] - self.starts[number]

    def lengths(self, positions: np.ndarray) -> np.ndarray:
        """The byte lengths of the texts at ``positions``."""
        lengths = np.zeros(len(positions), dtype=np.int64)
        for part, which, local in self._located(positions):
            lengths[which] = part.offsets[local + 1] - part.offsets[local]
        return lengths

    def take(self, positions: np.ndarray) -> pa.Array:
        """The texts at ``positions`` (in that order) as a ``string`` array.

        Built as string views of the mapped texts (16 bytes a text, no text copied) and cast to ``string``:
        the texts are copied once, into a buffer of their exact size. pyarrow's ``take`` grows its output by
        reallocating it, and texts from several ranges were taken, joined and put back in order: three
        copies, each into memory the kernel first zeroes, which the two processes of a build share the
        bandwidth for (measured with bench/build.py).
        """
        views = np.zeros((len(positions), 4), dtype=np.int32)  # length, then the head or prefix, buffer, offset
        buffers: list[pa.Buffer] = []
        for part, which, local in self._located(positions):
            starts = np.asarray(part.offsets[local])
            lengths = np.asarray(part.offsets[local + 1]) - starts
            views[which, 0] = lengths
            views.view(np.uint8)[which, 4:] = part.heads(starts, lengths)
            long = lengths > _INLINE
            window = starts[long] // _WINDOW
            views[which[long], 2] = len(buffers) + window
            views[which[long], 3] = starts[long] - window * _WINDOW
            buffers += part.windows
        texts = pa.Array.from_buffers(pa.string_view(), len(positions), [None, pa.py_buffer(views), *buffers])
        return texts.cast(pa.string())

    def drop_pages(self) -> None:
        """Take the pages read so far out of this process's resident memory (they stay in the page cache and
        come back on the next read). The texts a table takes are copies, so without this a part joining
        its queries' passages from all over a corpus would hold most of the corpus file resident."""
        for part in self.ranges:
            if part.mapping is not None and hasattr(part.mapping, "madvise"):  # not on Windows
                part.mapping.madvise(mmap.MADV_DONTNEED)


def read_documents(
    path: Path, include_title: bool, scratch: Path, *, shared: Path | None = None, part: tuple[int, int] | None = None
) -> Documents:
    """The ids and texts of a corpus or queries file.

    Args:
        path: ``corpus.jsonl`` or ``queries.jsonl`` (JSON lines, or one JSON array).
        include_title: texts are ``title + " " + text`` where a title is given (the corpus).
        scratch: a folder of this read alone, for the parsed file when it is not shared.
        shared: a folder every part of this build's join of ``path`` sees (the build's scratch); with
            ``part``, the file is read in ``count`` ranges there, each parsed by one part only.
        part: ``(index, count)`` of the part that reads.

    Raises:
        SourceFormatError: duplicate ids, or a line the row path would refuse (it names the place).
    """
    if shared is None or part is None or part[1] == 1 or is_json_array(path):
        folder = scratch / f"{path.name}.parsed"
        folder.mkdir()
        _parse_range(path, include_title, folder)
        documents = Documents([folder])
    else:
        documents = Documents(
            shared_ranges(path, f"texts-{include_title}", shared, part, partial(_parse_range, path, include_title))
        )
    duplicate = _duplicate(documents.ids)
    if duplicate is not None:
        raise duplicate_id_error(path, duplicate)
    release_unused()
    return documents


def _duplicate(ids: pa.ChunkedArray) -> str | None:
    """An id that two of ``ids`` (never null) share, found among neighbours after a sort; ``None`` if all differ.
    ``pc.count_distinct`` hashes them instead, at 7x the time and memory (2M ids: 3.7 s and 358 MB against
    0.5 s and 49 MB)."""
    ordered = ids.take(pc.array_sort_indices(ids))
    if len(ordered) < 2:
        return None
    equal = pc.equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1))
    if not pc.any(equal).as_py():
        return None
    first = pc.index(equal, True).as_py()
    return str(ordered[first].as_py())
