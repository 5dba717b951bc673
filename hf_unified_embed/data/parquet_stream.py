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
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from datasets import DownloadConfig, Features, IterableDataset
from datasets.iterable_dataset import ArrowExamplesIterable
from datasets.table import table_cast
from datasets.utils.file_utils import xopen

#: Rows per record batch read from a shard: the stream holds one such batch per open shard (plus the
#: shuffle window), whatever row groups the folder was written with.
STREAM_BATCH_ROWS = 1024
#: Bytes read from a file at a time (pyarrow's buffered stream) instead of whole column chunks.
READ_BUFFER_BYTES = 1 << 20


def bounded_stream(stream: IterableDataset, *, token: str | bool | None = None) -> IterableDataset:
    """``stream`` (a Parquet stream from ``datasets.load_dataset(..., streaming=True)``) read in bounded batches.

    Args:
        stream: the stream ``load_dataset`` returned for one task and split of a Parquet dataset.
        token: the Hub token the files of a private repository are read with.

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
    return IterableDataset(ArrowExamplesIterable(tables, {"files": files}), info=stream.info, split=stream.split)


def _record_batches(
    files: Sequence[str], *, features: Features | None, download_config: DownloadConfig | None
) -> Iterator[tuple[Any, pa.Table]]:
    """``(key, table)`` for every record batch of ``files`` in order: the reader ``ArrowExamplesIterable`` calls.

    The file and the reader are closed when the generator is closed or collected, also mid-file: that
    is what lets a process that stopped reading exit.
    """
    for file_index, file in enumerate(files):
        with xopen(file, "rb", download_config=download_config) as handle:
            parquet = pq.ParquetFile(handle, buffer_size=READ_BUFFER_BYTES, pre_buffer=False)
            try:
                for batch_index, batch in enumerate(parquet.iter_batches(batch_size=STREAM_BATCH_ROWS)):
                    table = pa.Table.from_batches([batch])
                    yield (
                        f"{file_index}_{batch_index}",
                        table_cast(table, features.arrow_schema) if features else table,
                    )
            finally:
                parquet.close()
