"""The row groups of a task's Parquet shards, in order, decoded by a few threads ahead of the row check.

``validate`` reads every row once. ``ParquetFile.iter_batches`` decodes one batch at a time (its columns
in parallel, but a few list columns hold most bytes), and the check of a batch waits for it: measured on
the 5M-row folder of ``bench/sources.py``, 8.7 s of decoding against 7.0 s for ``pyarrow.parquet.read_table``
of the same files, which decodes row groups in parallel. Here whole row groups are decoded by a pool of
threads (pyarrow releases the GIL), up to :data:`READ_AHEAD_BYTES` of them ahead, and handed to the check
in file and row order while the next ones decode: 6.1 s for the same files.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hf_unified_embed.errors import SourceFormatError, one_line

#: Uncompressed bytes of the row groups decoded ahead of the check (at least one row group): memory stays
#: bounded whatever the folder (the builder writes row groups of about 16 MB).
READ_AHEAD_BYTES = 256 * 1024**2


def _unreadable(path: Path, error: BaseException) -> SourceFormatError:
    return SourceFormatError(
        f"not a readable Parquet file ({one_line(error)})", file=path, expected="a complete Parquet file"
    )


def _jobs(paths: Sequence[Path], limit: int | None) -> Iterator[tuple[Path, int, Callable[[], pa.Table]]]:
    """``(path, uncompressed bytes, read)`` for each row group in order, up to the one holding row ``limit``."""
    remaining = limit
    for path in paths:
        try:
            metadata = pq.read_metadata(path)
        except (pa.ArrowException, OSError) as error:
            failure = _unreadable(path, error)

            def fail(failure: SourceFormatError = failure) -> pa.Table:
                raise failure

            yield path, 0, fail  # raised in order, after the rows before it are checked
            return
        for index in range(metadata.num_row_groups):
            if remaining is not None and remaining <= 0:
                return
            rows = metadata.row_group(index).num_rows
            remaining = None if remaining is None else remaining - rows

            def read(path: Path = path, index: int = index, metadata: pq.FileMetaData = metadata) -> pa.Table:
                # A reader per row group: one file's reader is not shared between threads.
                return pq.ParquetFile(path, metadata=metadata).read_row_group(index, use_threads=False)

            yield path, metadata.row_group(index).total_byte_size, read


def row_group_batches(
    paths: Sequence[Path], limit: int | None = None, threads: int | None = None
) -> Iterator[tuple[str, pa.RecordBatch]]:
    """``(file, record batch)`` of the shards' rows in order (the first ``limit`` rows when given).

    A file that cannot be read raises :class:`~hf_unified_embed.errors.SourceFormatError` naming it, at its
    place in the order. A consumer that stops early (an error found) stops the reading: the row groups not
    started are dropped, those being decoded are waited for, and no thread is left running.
    """
    threads = threads or max(2, min(8, os.cpu_count() or 1))
    pending: deque[tuple[Path, int, Future[pa.Table]]] = deque()
    remaining = limit
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="row-groups") as pool:
        try:
            jobs = _jobs(paths, limit)
            ahead = 0
            for path, nbytes, read in jobs:
                pending.append((path, nbytes, pool.submit(read)))
                ahead += nbytes
                while pending and (ahead > READ_AHEAD_BYTES or len(pending) > 2 * threads):
                    ahead -= pending[0][1]
                    remaining = yield from _checked(pending.popleft(), remaining)
            while pending:
                remaining = yield from _checked(pending.popleft(), remaining)
        finally:
            for _, _, future in pending:
                future.cancel()


def _checked(
    entry: tuple[Path, int, Future[pa.Table]], remaining: int | None
) -> Generator[tuple[str, pa.RecordBatch], None, int | None]:
    """The batches of one decoded row group (cut at ``remaining`` rows); returns the rows still wanted."""
    path, _, future = entry
    try:
        table = future.result()
    except SourceFormatError:
        raise
    except (pa.ArrowException, OSError) as error:
        raise _unreadable(path, error) from error
    for batch in table.to_batches():
        if remaining is not None:
            if remaining <= 0:
                return remaining
            batch = batch.slice(0, remaining)
            remaining -= batch.num_rows
        yield str(path), batch
    return remaining
