"""A stream is read in bounded record batches, and a process that stops reading early exits (issue 38, items 4-5).

Before: ``MultiTaskStream(stream_unified(folder))`` read datasets' Parquet stream (``Fragment.to_batches``), one
whole row group at a time — 1.28 GB of heap after 480 rows of a 1M-row folder — and a script that took
4,800 rows and ended hung at interpreter exit (datasets issue 7467 / Arrow issue 45214). Now the shards are
read with ``ParquetFile.iter_batches`` in record batches of ``STREAM_BATCH_ROWS`` rows.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hf_unified_embed.data.parquet_stream import STREAM_BATCH_ROWS

ROWS = 30_000  # per task, in ONE row group per shard: the worst case for a row-group reader


@pytest.fixture(scope="module")
def big_row_groups(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from datasets import Dataset, DatasetDict

    from hf_unified_embed.data import save_unified
    from hf_unified_embed.schema import unified_features

    folder = tmp_path_factory.mktemp("stream") / "unified"
    passage = " ".join(f"word{index}" for index in range(150))  # about 1,100 characters, a long passage
    tasks = {}
    for task in ("a", "b"):
        rows = [
            {
                "task": task,
                "task_type": "retrieval",
                "query_instruction": "",
                "document_instruction": "",
                "query": f"query {index}",
                "positives": [f"{index} {passage}"],
                "negatives": [f"{index} {passage} x", f"{index} {passage} y"],
                "positive_scores": [],
                "negative_scores": [],
            }
            for index in range(ROWS)
        ]
        tasks[task] = Dataset.from_list(rows, features=unified_features())
    save_unified(DatasetDict(tasks), folder)
    for shard in folder.glob("data/*/*.parquet"):  # rewrite each shard as one row group
        pq.write_table(pq.read_table(shard), shard, row_group_size=ROWS)
        assert pq.ParquetFile(shard).metadata.num_row_groups == 1
    return folder


def test_the_stream_reads_bounded_record_batches(big_row_groups: Path) -> None:
    from hf_unified_embed.data import stream_unified

    stream = stream_unified(big_row_groups)["a"]
    sizes = [len(table) for _key, table in stream._ex_iterable.iter_arrow()]
    assert max(sizes) == STREAM_BATCH_ROWS and sum(sizes) == ROWS


def test_a_process_that_stops_reading_early_exits_with_bounded_heap(big_row_groups: Path) -> None:
    script = textwrap.dedent(
        f"""
        from hf_unified_embed.data import stream_unified
        from hf_unified_embed.sampling import MultiTaskStream

        def heap():
            with open("/proc/self/status") as status:
                return next(int(line.split()[1]) for line in status if line.startswith("RssAnon")) / 1024

        tasks = stream_unified({str(big_row_groups)!r})
        before = heap()
        stream = MultiTaskStream(tasks, weights="sqrt", batch_size=16, gradient_accumulation_steps=1, seed=0)
        for count, row in enumerate(stream, start=1):
            if count == 4800:
                break
        print(f"read {{count}} rows, heap +{{heap() - before:.0f}} MB")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    read, grown = result.stdout.split(" rows, heap +")
    assert read == "read 4800"
    # Two shards of 30,000 rows of ~3 KB each in one row group: a row-group reader holds ~180 MB decoded.
    assert float(grown.removesuffix(" MB\n")) < 100, result.stdout


def test_a_row_group_written_elsewhere_streams_the_same_rows(big_row_groups: Path) -> None:
    """The bounded reader yields exactly the rows (and order) datasets' own stream yields."""
    from datasets import load_dataset

    from hf_unified_embed.data import stream_unified

    ours = stream_unified(big_row_groups)["b"]
    theirs = load_dataset(str(big_row_groups), "b", split="train", streaming=True)
    for mine, reference in zip(ours.take(3000), theirs.take(3000)):
        assert mine == reference
