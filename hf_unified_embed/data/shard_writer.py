"""Writing a unified dataset's Parquet shards: one job per shard, in this process or in a pool of processes.

A task's split is cut into shards of at most ``max_shard_bytes`` Arrow bytes, each written in row groups
of about :data:`MAX_ROW_GROUP_BYTES`. Every shard is one :class:`ShardJob`, and a job's file depends on
nothing but the job: the folder is byte for byte the same whatever the number of processes.

Memory: a ``Dataset`` built by ``datasets`` is memory-mapped Arrow, and every page a write reads through
the caller's mapping stays resident in the caller (RSS climbed to the whole dataset: 5.6 GB at 5M rows).
So each shard is read through a mapping of its own, released when its job ends: a worker unpickles its
job (a memory-mapped ``Dataset`` pickles as its cache files and slices, a few KB), and this process
unpickles it the same way (:func:`own_mapping`), and takes a fresh mapping every :data:`REMAP_BYTES` of
rows it reads. A write then holds the pages of a few row groups per process, whatever the dataset's size.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import pickle
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq
from datasets.arrow_writer import get_parquet_column_options
from datasets.io.parquet import ParquetDatasetWriter

if TYPE_CHECKING:
    from datasets import Dataset

#: Shard size (Arrow bytes) above which a task's split is cut into several files: 500 MB, as ``datasets``
#: pushes to the Hub (``max_shard_size``); ``build --max-shard-size`` sets it.
DEFAULT_MAX_SHARD_BYTES = 500 * 1024**2
#: The smallest shard size ``build --max-shard-size`` takes: a shard per few rows is a folder of thousands of
#: files no reader wants (``datasets`` pushes at 500 MB).
MIN_SHARD_BYTES = 10**6
#: Row groups of at most about this many Arrow bytes: a reader (a stream, the Hub's viewer) decodes a row group
#: at a time, and datasets' own writer makes them up to 100 MB (40,000 rows of passages).
MAX_ROW_GROUP_BYTES = 16 * 1024**2
#: Arrow bytes a shard's write reads through one mapping before it takes a fresh one: the pages a mapping has
#: read stay in this process's resident memory until it is unmapped, so one mapping for the whole shard made
#: every shard's rows resident while it was written (10M rows, two processes writing 500 MB shards: the
#: build's peak, 1.5 GB of its 2.0 GB PSS, measured with bench/build.py).
REMAP_BYTES = 64 * 1024**2
#: Rows handed to the row check at a time (as ``validate`` reads them).
CHECK_BATCH_ROWS = 65_536


@dataclass(frozen=True)
class ShardJob:
    """One Parquet file to write: the rows of one shard of one task's split."""

    #: The shard's rows, a contiguous slice of the task's dataset.
    dataset: Dataset
    path: Path
    rows_per_group: int
    #: The shard's share of its task's Arrow bytes (which jobs go first).
    nbytes: int = 0


def arrow_nbytes(dataset: Dataset) -> int:
    """``dataset.data.nbytes``, read through a mapping of its own.

    pyarrow sizes each memory-mapped array by reading its offsets at both ends, and the kernel maps a
    neighbourhood with every page read: through the caller's mapping that left 370 MB resident at 5M rows.
    """
    return int(own_mapping(dataset).data.nbytes)


def shard_slices(
    dataset: Dataset, max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, nbytes: int | None = None
) -> list[Dataset]:
    """``dataset`` (of ``nbytes`` Arrow bytes, if known) cut into contiguous shards of at most about
    ``max_shard_bytes`` Arrow bytes (at least one, and at most one per row)."""
    nbytes = arrow_nbytes(dataset) if nbytes is None else nbytes
    # Never more shards than rows: a shard holds at least one row, however large (datasets' shard() refuses
    # an index past the rows).
    num_shards = max(1, min(math.ceil(nbytes / max_shard_bytes), len(dataset)))
    return [dataset.shard(num_shards, index, contiguous=True) for index in range(num_shards)]


def plan_shards(
    splits: Mapping[str, Mapping[str, Dataset]],
    folder: Path,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    known_nbytes: Mapping[tuple[str, str], int] | None = None,
) -> list[ShardJob]:
    """The shard files of every task's split under ``folder/data``, in split, task and shard order;
    ``known_nbytes`` (by ``(split, task)``) spares measuring those splits again (:func:`arrow_nbytes`)."""
    jobs = []
    for split, tasks in splits.items():
        for task, dataset in tasks.items():
            nbytes = (known_nbytes or {}).get((split, task))
            if nbytes is None:
                nbytes = arrow_nbytes(dataset)
            shards = shard_slices(dataset, max_shard_bytes, nbytes)
            # One row-group length per task's split, from its average row: every shard cuts alike.
            rows_per_group = max(1, MAX_ROW_GROUP_BYTES * len(dataset) // max(nbytes, 1))
            jobs += [
                ShardJob(
                    dataset=shard,
                    path=folder / "data" / task / f"{split}-{index:05d}-of-{len(shards):05d}.parquet",
                    rows_per_group=rows_per_group,
                    nbytes=nbytes * len(shard) // max(len(dataset), 1),
                )
                for index, shard in enumerate(shards)
            ]
    return jobs


def own_mapping(dataset: Dataset) -> Dataset:
    """``dataset`` reading its rows through Arrow memory maps of its own, unmapped when it is dropped.

    Pickling a memory-mapped ``Dataset`` keeps only its cache files and slices, so this costs a few KB;
    a dataset held in memory (no cache files) is returned as it is.
    """
    if not dataset.cache_files:
        return dataset
    restored: Dataset = pickle.loads(pickle.dumps(dataset))
    return restored


class _RowGroupWriter(ParquetDatasetWriter):
    """``datasets``' Parquet writer (its schema and features metadata, per-column options, content-defined
    chunking, page index), each row group handed to pyarrow as one chunk.

    Parquet's pages follow the Arrow chunks a row group is written from, and those chunks follow how the
    rows were built (a source read in two parts is two Arrow files joined): written as ``datasets`` writes
    them, the same rows built with one or two processes gave files that differ in their bytes.
    """

    def _write(self, file_obj: BinaryIO, batch_size: int, **parquet_writer_kwargs: Any) -> int:
        parquet_writer_kwargs.pop("path_or_buf", None)
        features = self.dataset.features
        schema = features.arrow_schema
        rows, mapped = None, 0
        written = 0
        with pq.ParquetWriter(
            file_obj,
            schema=schema,
            use_content_defined_chunking=self.use_content_defined_chunking,
            write_page_index=self.write_page_index,
            **get_parquet_column_options(features, schema),
            **parquet_writer_kwargs,
        ) as writer:
            for start in range(0, len(self.dataset), batch_size):
                if rows is None or mapped >= REMAP_BYTES:
                    rows, mapped = own_mapping(self.dataset).with_format("arrow"), 0  # the last one unmapped
                batch: pa.Table = rows[start : start + batch_size]
                writer.write_table(batch.combine_chunks())
                written += batch.nbytes
                mapped += batch.nbytes
                del batch
            if self.use_content_defined_chunking is not False:
                writer.add_key_value_metadata(
                    {"content_defined_chunking": json.dumps(self.use_content_defined_chunking)}
                )
        return written


def write_shard(job: ShardJob) -> None:
    """Write one shard with ``datasets``' writer (:class:`_RowGroupWriter`), a row group per ``rows_per_group`` rows."""
    job.path.parent.mkdir(parents=True, exist_ok=True)
    _RowGroupWriter(job.dataset, str(job.path), batch_size=job.rows_per_group).write()


def writer_processes(jobs: int, num_proc: int | None) -> int:
    """How many processes write ``jobs`` shards for ``num_proc``: one more than ``num_proc`` when the shards
    outnumber the processes.

    Shards are files, so the largest-first order cannot even out processes whose shards differ in size (a
    task's last shard is smaller than its others): 1M rows in two processes wrote 363 and 238 MB, and one core
    idled for a third of the write. A third process shares the cores through the scheduler instead (the
    write 2.70 → 2.44 s), for the memory of one more shard's row groups (:data:`REMAP_BYTES` mapped).
    """
    processes = num_proc or 1
    if processes <= 1 or jobs <= processes:
        return max(1, min(processes, jobs))
    return processes + 1


def write_shards(jobs: Sequence[ShardJob], num_proc: int | None = None) -> None:
    """Write every job's file: in this process, or in worker processes (:func:`writer_processes`).

    Workers are forked where the platform can (as ``datasets``' own ``num_proc`` does: a script needs no
    ``if __name__ == "__main__"`` guard), else spawned. The largest shards go first so that the processes
    finish together; the first job to fail stops the others and its exception is raised here.
    """
    workers = writer_processes(len(jobs), num_proc)
    if workers <= 1:
        for job in jobs:
            write_shard(job)  # its writer reads the rows through mappings of its own
        return
    ordered = sorted(jobs, key=lambda job: job.nbytes, reverse=True)
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method)) as pool:
        futures = [pool.submit(write_shard, job) for job in ordered]
        wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((future for future in futures if future.done() and future.exception()), None)
        if failed is not None:
            for future in futures:
                future.cancel()
            failed.result()


def dataset_batches(dataset: Dataset, max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> Iterator[pa.RecordBatch]:
    """The rows of ``dataset`` in order as record batches, read a shard at a time through its own mapping.

    The row check reads every row before anything is written; through the caller's mapping that would make
    the whole dataset resident (:func:`own_mapping`).
    """
    for shard in shard_slices(dataset, max_shard_bytes):
        rows = own_mapping(shard).with_format("arrow")
        for start in range(0, len(rows), CHECK_BATCH_ROWS):
            table: pa.Table = rows[start : start + CHECK_BATCH_ROWS]
            yield from table.to_batches()
