"""Read a streamed task's Parquet shards in small record batches that a process can stop reading at any time.

``datasets.load_dataset(..., streaming=True)`` reads Parquet through ``pyarrow.dataset``'s
``Fragment.to_batches`` with one batch per *row group*. Two things follow, both measured here on
folders the builder wrote (DESIGN.md):

* a process that stops reading mid-file (a training run that ends at ``max_steps``, a script that
  takes the first rows) **hangs at interpreter exit** or aborts: datasets issue 7467 / Arrow issue 45214;
  datasets' workaround (a ``gc.collect()``, datasets PR 8176) runs only for pyarrow ≤ 24;
* the reader holds at least one decoded row group per open shard, so its memory grows with the row
  groups a folder was written with (1.2 GB after 4,800 rows of three 40,000-row-group tasks).

:func:`bounded_stream` keeps everything ``load_dataset`` resolved (the files of a local folder or of a
Hub repository, the features, the card's split sizes) and replaces only the reader with
``pyarrow.parquet.ParquetFile.iter_batches``: record batches of at most :data:`STREAM_BATCH_ROWS` rows
through a read buffer of :data:`READ_BUFFER_BYTES`, closed deterministically. It is datasets' own
``ArrowExamplesIterable``, so sharding (one shard per file), ``state_dict`` / ``load_state_dict``,
formatting and ``split_dataset_by_node`` behave exactly as for ``load_dataset``'s stream.

:func:`data_identity` says which data a stream reads (its local files' names, sizes, rows and footers), so
that a resumed stream can tell whether it reads what the saved state was reading.
"""

from __future__ import annotations

import copy
import functools
import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from datasets import DownloadConfig, Features, IterableDataset, SplitDict, SplitInfo
from datasets.iterable_dataset import ArrowExamplesIterable
from datasets.table import table_cast
from datasets.utils.file_utils import xopen

from hf_unified_embed.data.check_record import footer_digest
from hf_unified_embed.errors import SourceFormatError, one_line

#: Rows per record batch read from a shard: the stream holds one such batch per open shard (plus the
#: shuffle window), whatever row groups the folder was written with.
STREAM_BATCH_ROWS = 1024
#: Bytes read from a file at a time (pyarrow's buffered stream) instead of whole column chunks.
READ_BUFFER_BYTES = 1 << 20


def bounded_stream(
    stream: IterableDataset, *, token: str | bool | None = None, rows: int | None = None
) -> IterableDataset:
    """``stream`` (a Parquet stream from ``datasets.load_dataset(..., streaming=True)``) read in bounded batches.

    Args:
        stream: the stream ``load_dataset`` returned for one task and split of a Parquet dataset.
        token: the Hub token the files of a private repository are read with.
        rows: the rows the files hold (counted in their footers), declared in the stream's info instead of
            the card's count (which a hand-edited card may get wrong, and which weighs the task in training).

    Returns:
        An ``IterableDataset`` over the same files, in the same order, with the same features, info and
        split, read with ``ParquetFile.iter_batches``.
    """
    source = stream._ex_iterable
    if not isinstance(source, ArrowExamplesIterable) or "files" not in source.kwargs:
        raise TypeError(f"expected a Parquet stream from datasets.load_dataset, got {type(source).__name__}")
    files = list(source.kwargs["files"])
    features = stream.features
    tables = functools.partial(
        _record_batches, features=features, download_config=DownloadConfig(token=token) if token else None
    )
    info = stream.info
    if rows is not None and stream.split is not None:
        info = copy.deepcopy(info)
        split = str(stream.split)
        known = (info.splits or {}).get(split)
        info.splits = SplitDict(
            {split: SplitInfo(name=split, num_examples=rows, num_bytes=getattr(known, "num_bytes", 0))}
        )
    return IterableDataset(ArrowExamplesIterable(tables, {"files": files}), info=info, split=stream.split)


def _record_batches(
    files: Sequence[str], *, features: Features | None, download_config: DownloadConfig | None
) -> Iterator[tuple[Any, pa.Table]]:
    """``(key, table)`` for every record batch of ``files`` in order: the reader ``ArrowExamplesIterable`` calls.

    The file and the reader are closed when the generator is closed or collected, also mid-file: that
    is what lets a process that stopped reading exit.
    """
    for file_index, file in enumerate(files):
        with xopen(file, "rb", download_config=download_config) as handle:
            try:
                parquet = pq.ParquetFile(handle, buffer_size=READ_BUFFER_BYTES, pre_buffer=False)
            except (pa.ArrowException, OSError) as error:
                raise _unreadable(file, error) from error
            try:
                batches = enumerate(parquet.iter_batches(batch_size=STREAM_BATCH_ROWS))
                while True:
                    try:  # a file damaged after it was checked (a flipped byte) fails here: name it
                        batch_index, batch = next(batches)
                    except StopIteration:
                        break
                    except (pa.ArrowException, OSError) as error:
                        raise _unreadable(file, error) from error
                    table = pa.Table.from_batches([batch])
                    yield (
                        f"{file_index}_{batch_index}",
                        table_cast(table, features.arrow_schema) if features else table,
                    )
            finally:
                parquet.close()


def _unreadable(file: str, error: BaseException) -> SourceFormatError:
    return SourceFormatError(
        f"not a readable Parquet file ({one_line(error)})", file=file, expected="a complete Parquet file"
    )


def stream_files(dataset: IterableDataset) -> list[str] | None:
    """The files a Parquet stream (:func:`bounded_stream` or ``load_dataset(..., streaming=True)``) reads, in
    order; ``None`` for a stream of anything else (a generator, a mapped stream)."""
    source = getattr(dataset, "_ex_iterable", None)
    files = source.kwargs.get("files") if isinstance(source, ArrowExamplesIterable) else None
    return [str(file) for file in files] if isinstance(files, (list, tuple)) else None


def data_identity(dataset: IterableDataset) -> dict[str, Any] | None:
    """Which data a stream of local Parquet files reads: ``{"shards", "rows", "bytes", "digest"}``.

    The digest covers each file's name, size, rows and footer digest
    (:func:`~hf_unified_embed.data.check_record.footer_digest`) in order; only footers are read. ``None`` when
    the stream is not one of local Parquet files (a Hub repository's files are fixed by its revision).

    Raises:
        SourceFormatError: a file is not a readable Parquet file.
    """
    files = stream_files(dataset)
    if not files or not all(Path(file).is_file() for file in files):
        return None
    digest = hashlib.blake2b(digest_size=16)
    rows = size = 0
    for file in files:
        path = Path(file)
        try:
            count = pq.read_metadata(path).num_rows
        except (pa.ArrowException, OSError) as error:
            raise _unreadable(file, error) from error
        length = path.stat().st_size
        digest.update(f"{path.name}\0{length}\0{count}\0{footer_digest(path)}\n".encode())
        rows, size = rows + count, size + length
    return {"shards": len(files), "rows": rows, "bytes": size, "digest": digest.hexdigest()}


def identity_change(saved: Any, current: dict[str, Any]) -> str | None:
    """What differs between the data identity a stream state recorded and the stream's data now; ``None`` when
    it is the same data."""
    if saved == current:
        return None
    if not isinstance(saved, dict):
        return f"the saved data identity is not a mapping ({type(saved).__name__})"
    changes = [
        f"{what} {saved.get(key)!r} -> {current[key]!r}"
        for key, what in (("shards", "shards"), ("rows", "rows"), ("bytes", "bytes"))
        if saved.get(key) != current[key]
    ]
    return ", ".join(changes) if changes else "the same shard count, rows and bytes, but other file contents (footers)"
