"""Benchmark: streaming multi-task training data (``MultiTaskStream``) against what datasets offers, same run.

Writes a synthetic unified folder (``--rows`` rows in three tasks, several Parquet shards each, rows of
the demo's shape) and measures, one after the other in this process:

* **stream**: ``MultiTaskStream`` over ``stream_unified`` (task-pure steps of 64 rows, window shuffle,
  per-step resume states kept): rows/s and the growth of the resident set while reading;
* **interleave**: ``datasets.interleave_datasets`` of the same streams with the same task probabilities
  and ``IterableDataset.shuffle(buffer_size=1000)`` per task — the stock way to mix streams (rows of all
  tasks in one batch, and a shuffle buffer that ``state_dict()`` cannot restore): rows/s;
* **row by row**: each task's stream read alone with datasets' row iterator, no mixing or shuffling: rows/s
  (the stream reads each window as one batch, so it beats this);
* **in memory**: ``load_unified`` of the folder (Arrow copy in a datasets cache, here a temporary one)
  then ``CurriculumBatchSampler``-style random access: seconds to load and bytes written to the cache;
* **resume**: reaching the state before step ``k`` — ``load_state_dict`` of the saved state against
  replaying the ``k`` steps from the start (what ``ignore_data_skip=False`` does, without the collation).

Run: ``.venv/bin/python bench/streaming.py [--rows 1000000] [--read 200000]``.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from datasets import Dataset, DatasetDict, interleave_datasets

from hf_unified_embed.data import load_unified, save_unified, stream_unified
from hf_unified_embed.sampling import MultiTaskStream
from hf_unified_embed.schema import unified_features

STEP_ROWS = 64
TASKS = {"sts": ("sts", 0.3), "faq": ("retrieval", 0.4), "triplets": ("retrieval", 0.3)}


def rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def synthetic_folder(root: Path, rows: int) -> Path:
    """A unified folder of ``rows`` rows shaped like the demo's (an STS task, two retrieval tasks)."""
    rng = np.random.default_rng(0)
    words = [f"w{index}" for index in range(5000)]
    tasks = {}
    for name, (task_type, share) in TASKS.items():
        count = int(rows * share)
        text = [" ".join(rng.choice(words, 12)) for _ in range(1000)]
        columns: dict[str, Any] = {
            "task": [name] * count,
            "task_type": [task_type] * count,
            "query_instruction": [""] * count,
            "document_instruction": [""] * count,
            "query": [f"{text[i % 1000]} {i}" for i in range(count)],
            "positives": [[text[(i + 1) % 1000]] for i in range(count)],
            "negatives": [
                [text[(i + 2) % 1000], text[(i + 3) % 1000]] if task_type == "retrieval" else [] for i in range(count)
            ],
            "positive_scores": [[(i % 5) / 4] if task_type == "sts" else [] for i in range(count)],
            "negative_scores": [[] for _ in range(count)],
        }
        tasks[name] = Dataset.from_dict(columns, features=unified_features())
    # Small shards, as a large corpus has many: each process of a launch reads its own.
    return save_unified(DatasetDict(tasks), root / "data", max_shard_bytes=8 * 2**20)


def timed_read(iterator: Any, count: int) -> tuple[float, float]:
    """Seconds to take ``count`` rows, and the growth of the resident set (MB) from the first tenth of
    them (the readers' buffers filled) to its peak over the rest."""
    gc.collect()
    peak, settled, start = 0.0, 0.0, time.perf_counter()
    for index, _row in zip(range(count), iterator):
        if index % 1000 == 0:
            peak = max(peak, rss_mb())
            if index == count // 10 // 1000 * 1000:
                settled = peak = rss_mb()
    return time.perf_counter() - start, peak - settled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--read", type=int, default=200_000, help="rows read in each measurement")
    parser.add_argument("--resume-step", type=int, default=2000)
    options = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-streaming-"))
    try:
        start = time.perf_counter()
        # Built in a child process: the rows it holds would otherwise blur this process's resident set.
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            folder = pool.apply(synthetic_folder, (work, options.rows))
        shards = sum(1 for _ in folder.glob("data/*/*.parquet"))
        print(f"{options.rows:,} rows in {shards} Parquet shards written in {time.perf_counter() - start:.1f} s")

        streams = stream_unified(folder)
        stream = MultiTaskStream(streams, weights="none", batch_size=STEP_ROWS, gradient_accumulation_steps=1, seed=1)
        seconds, grown = timed_read(iter(stream), options.read)
        results = {"stream": options.read / seconds}
        print(
            f"stream:     {results['stream']:>9,.0f} rows/s, RSS +{grown:.0f} MB over {options.read:,} rows (peak - at 10%)"
        )

        probabilities = stream.probabilities.tolist()
        mixed = interleave_datasets(
            [streams[name].shuffle(seed=1, buffer_size=1000) for name in stream.task_names],
            probabilities=probabilities,
            seed=1,
            stopping_strategy="all_exhausted",
        )
        seconds, grown = timed_read(iter(mixed), options.read)
        results["interleave"] = options.read / seconds
        print(f"interleave: {results['interleave']:>9,.0f} rows/s, RSS +{grown:.0f} MB")

        per_task = options.read // len(streams)
        seconds = sum(timed_read(iter(streams[name]), per_task)[0] for name in stream.task_names)
        results["rows"] = per_task * len(streams) / seconds
        print(f"row by row: {results['rows']:>9,.0f} rows/s")

        cache = work / "cache"
        start = time.perf_counter()
        tasks = load_unified(folder, cache_dir=str(cache))
        load_s = time.perf_counter() - start
        cached = sum(path.stat().st_size for path in cache.rglob("*") if path.is_file())
        order = np.random.default_rng(0).permutation(len(tasks["faq"]))[: options.read // 10]
        start = time.perf_counter()
        for index in order.tolist():
            tasks["faq"][index]
        access = len(order) / (time.perf_counter() - start)
        print(f"in memory:  load_unified {load_s:.1f} s, {cached / 2**20:,.0f} MB written to the datasets cache "
              f"(stream: 0); random row access {access:,.0f} rows/s")  # fmt: skip

        step = options.resume_step
        fresh = MultiTaskStream(streams, weights="none", batch_size=STEP_ROWS, gradient_accumulation_steps=1, seed=1)
        iterator = iter(fresh)
        start = time.perf_counter()
        for _, _row in zip(range(step * STEP_ROWS), iterator):
            pass
        replay_s = time.perf_counter() - start
        saved = fresh.state_at(step)
        resumed = MultiTaskStream(streams, weights="none", batch_size=STEP_ROWS, gradient_accumulation_steps=1, seed=1)
        resumed.load_state_dict(saved)
        start = time.perf_counter()
        first = next(iter(resumed))
        restore_s = time.perf_counter() - start
        expected = next(iterator)
        assert first == expected, "the resumed stream must continue with the row the uninterrupted one reads next"
        print(
            f"resume at step {step:,} ({step * STEP_ROWS:,} rows): state restore {restore_s:.2f} s, "
            f"replay {replay_s:.2f} s ({replay_s / restore_s:.0f}x)"
        )
        print()
        print(
            "| rows | stream rows/s | interleave rows/s | row-by-row rows/s | stream/interleave | stream/row-by-row |"
        )
        print("|---:|---:|---:|---:|---:|---:|")
        print(
            f"| {options.rows:,} | {results['stream']:,.0f} | {results['interleave']:,.0f} | {results['rows']:,.0f} | "
            f"{results['stream'] / results['interleave']:.2f}x | {results['stream'] / results['rows']:.2f}x |"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
