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

**Memory on folders shaped like a user's** (``--folders F1 F2 ...``: unified folders that ``build`` wrote
from ``bench/sources.py``, e.g. 1M and 5M rows with one big BEIR source): for each folder, in a fresh
process each, the growth of the anonymous resident set (``RssAnon``: the heap, not the mapped files) while
``MultiTaskStream(stream_unified(folder), weights="sqrt", batch_size=16)`` yields 4,800 rows and then
``--read`` rows, with this package's reader (``ParquetFile.iter_batches`` in bounded record batches) and,
as the baseline in the same run, datasets' own Parquet stream (``Fragment.to_batches``, one row group at a
time; its process is ended from outside, as it can hang at exit)::

    .venv/bin/python bench/sources.py /tmp/scale/raw-1m --rows 1000000
    .venv/bin/hf-unified-embed build /tmp/scale/raw-1m/recipe.yaml -o /tmp/scale/built-1m
    .venv/bin/python bench/streaming.py --folders /tmp/scale/built-1m /tmp/scale/built-5m

``--train-steps N`` with ``--folders`` measures training too: for each folder, in a fresh process each, the
shipped recipe (``examples/recipes/train.yaml``: all-MiniLM-L6-v2, its losses and batch size, the folder's
tasks weighed by ``sqrt``, on the CPU) trains N optimizer steps from the stream (``data.streaming: true``)
and from the loaded folder (its Arrow copy in a scratch datasets cache); the peak ``RssAnon`` of each
process (model and optimizer included, the same in both) and its seconds.

**Time to the first batch** (``--first-batch F1 F2 ...``: built folders, e.g. 1M and 5M rows): for each folder,
in a fresh process each, the seconds from ``stream_unified(folder)`` to the first step of
``MultiTaskStream`` (64 rows) and the process's peak resident set, on the folder as ``validate`` left it (its
check record says which shards were checked: the rows are not read again) and, as the baseline in the same
run, on a copy of it that has no record (hard links to the same files: every row is checked first, as for a
folder written before the record existed). A folder without a valid record is validated first (timed)::

    .venv/bin/python bench/streaming.py --first-batch built-1m built-5m   # folders from bench/sources.py + build
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
import pyarrow as pa
import pyarrow.parquet as pq
from datasets import Dataset, DatasetDict, interleave_datasets

from hf_unified_embed.data import load_unified, save_unified, stream_unified
from hf_unified_embed.sampling import MultiTaskStream
from hf_unified_embed.schema import unified_features

REPO = Path(__file__).resolve().parent.parent
RECIPE = REPO / "examples" / "recipes" / "train.yaml"
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


def rss_anon_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssAnon")) / 1024


def heap_growth(folder: str, reads: tuple[int, ...], reader: str) -> dict[str, float]:
    """In a fresh process: RssAnon growth (MB) after each of ``reads`` rows of the documented stream, and rows/s."""
    from hf_unified_embed.data import hub_layout

    if reader == "datasets":  # the baseline: datasets' own Parquet stream, as load_dataset returns it
        hub_layout.bounded_stream = lambda stream, token=None: stream  # type: ignore[assignment]
    tasks = hub_layout.stream_unified(folder)  # checks every row first: memory the allocator then holds
    gc.collect()
    pa.default_memory_pool().release_unused()  # so that the growth measured is the reader's, not the check's
    before = rss_anon_mb()
    stream = MultiTaskStream(tasks, weights="sqrt", batch_size=16, gradient_accumulation_steps=1, seed=0)
    grown: dict[str, float] = {}
    start, count = time.perf_counter(), 0
    for count, _row in enumerate(stream, start=1):
        if count in reads:
            grown[f"+{count}"] = rss_anon_mb() - before
            if count == max(reads):
                break
    grown["rows/s"] = count / (time.perf_counter() - start)
    return grown


def first_batch(folder: str) -> dict[str, float]:
    """In a fresh process: seconds from ``stream_unified(folder)`` to the first step of a ``MultiTaskStream``,
    the seconds of the imports before it, and the process's peak resident set (MB)."""
    start = time.perf_counter()
    from hf_unified_embed.data import stream_unified as stream_folder
    from hf_unified_embed.sampling import MultiTaskStream as Stream

    imported = time.perf_counter()
    stream = Stream(stream_folder(folder), weights="sqrt", batch_size=STEP_ROWS, gradient_accumulation_steps=1, seed=0)
    rows = iter(stream)
    for _ in range(STEP_ROWS):
        next(rows)
    seconds = time.perf_counter() - imported
    with open("/proc/self/status", encoding="ascii") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024
    return {"seconds": seconds, "imports": imported - start, "peak_mb": peak}


def _unrecorded_copy(folder: Path, root: Path) -> Path:
    """``folder``'s card and shards (hard links, or symbolic links across file systems) without its record."""
    copy = root / folder.name
    for source in [folder / "README.md", *sorted(folder.glob("data/*/*.parquet"))]:
        target = copy / source.relative_to(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError:
            target.symlink_to(source.resolve())
    return copy


def folders_first_batch(folders: list[Path]) -> None:
    from hf_unified_embed.data.check_record import read_record
    from hf_unified_embed.data.row_check import validate_unified_folder

    for folder in folders:
        if not read_record(folder):
            start = time.perf_counter()
            validate_unified_folder(folder)
            print(f"{folder}: validated (and the check recorded) in {time.perf_counter() - start:.1f} s")
    print("| folder | rows | unvalidated: first batch | peak RSS | validated: first batch | peak RSS | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    validated = []
    scratch = Path(tempfile.mkdtemp(prefix=".bench-first-batch-", dir=folders[0].parent))
    try:
        for folder in folders:
            rows = sum(pq.ParquetFile(path).metadata.num_rows for path in folder.glob("data/*/*.parquet"))
            unrecorded = _unrecorded_copy(folder, scratch)
            results = []
            for candidate in (unrecorded, folder):
                with multiprocessing.get_context("spawn").Pool(1) as pool:
                    results.append(pool.apply(first_batch, (str(candidate),)))
            before, after = results
            validated.append((folder.name, rows, after["seconds"]))
            print(
                f"| {folder.name} | {rows:,} | {before['seconds']:.2f} s | {before['peak_mb']:,.0f} MB | "
                f"{after['seconds']:.2f} s | {after['peak_mb']:,.0f} MB | {before['seconds'] / after['seconds']:.1f}x |"
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    base_name, base_rows, base_seconds = validated[0]
    for name, rows, seconds in validated[1:]:
        print(
            f"validated {name} ({rows / base_rows:.0f}x the rows of {base_name}): first batch "
            f"{seconds / base_seconds:.2f}x {base_name}'s"
        )


def folders_memory(folders: list[Path], read: int) -> None:
    reads = (4_800, read)
    print(f"| folder | rows | reader | heap after {reads[0]:,} rows | heap after {reads[1]:,} rows | rows/s |")
    print("|---|---:|---|---:|---:|---:|")
    results: dict[tuple[str, str], dict[str, float]] = {}
    for folder in folders:
        rows = sum(pq.ParquetFile(path).metadata.num_rows for path in folder.glob("data/*/*.parquet"))
        for reader in ("hf-unified-embed", "datasets"):
            pool = multiprocessing.get_context("spawn").Pool(1)
            try:
                result = pool.apply(heap_growth, (str(folder), reads, reader))
            finally:
                pool.terminate()  # datasets' reader can hang its process at exit (Arrow issue 45214)
            results[str(folder), reader] = result
            print(
                f"| {folder.name} | {rows:,} | {reader} | {result[f'+{reads[0]}']:,.0f} MB | "
                f"{result[f'+{reads[1]}']:,.0f} MB | {result['rows/s']:,.0f} |"
            )
    for folder in folders:
        ours, theirs = results[str(folder), "hf-unified-embed"], results[str(folder), "datasets"]
        print(
            f"{folder.name}: heap after {reads[0]:,} rows {ours[f'+{reads[0]}'] / theirs[f'+{reads[0]}']:.2f}x "
            f"datasets' reader, rows/s {ours['rows/s'] / theirs['rows/s']:.2f}x"
        )


def training_heap(folder: str, streaming: bool, steps: int, output: str) -> dict[str, float]:
    """In a fresh process: the peak RssAnon (MB) while the shipped recipe trains ``steps`` optimizer steps on
    ``folder`` from the stream or from the loaded folder, and the seconds ``train_from_recipe`` took."""
    import threading

    import yaml

    from hf_unified_embed.recipe import recipe_from_dict, train_from_recipe

    recipe = yaml.safe_load(RECIPE.read_text(encoding="utf-8"))
    recipe.update(
        {
            "data": {"path": folder, "streaming": streaming},  # every task of the folder
            "sampler": {"balance": "sqrt"},  # what a stream supports, the same for both runs
            "evaluation": None,
            "output_dir": output,
        }
    )
    recipe["training_args"] = {
        "per_device_train_batch_size": recipe["training_args"]["per_device_train_batch_size"],
        "learning_rate": recipe["training_args"]["learning_rate"],
        "max_steps": steps,
        "save_strategy": "no",
        "logging_steps": 10**6,
        "report_to": "none",
        "use_cpu": True,
        "seed": 42,
    }
    peak = [rss_anon_mb()]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], rss_anon_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    train_from_recipe(recipe_from_dict(recipe, origin="bench/streaming.py"), overwrite=True)
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    return {"peak_mb": max(peak[0], rss_anon_mb()), "seconds": seconds}


def folders_training(folders: list[Path], steps: int) -> None:
    print(f"| folder | training data | peak heap of the process over {steps} steps | seconds |")
    print("|---|---|---:|---:|")
    ratios = []
    for folder in folders:
        peaks = {}
        for streaming in (True, False):
            with tempfile.TemporaryDirectory(prefix="bench-streaming-train-") as scratch:
                # The loaded run's Arrow copy goes to a scratch cache, which the child reads from its environment.
                previous = os.environ.get("HF_DATASETS_CACHE")
                os.environ["HF_DATASETS_CACHE"] = str(Path(scratch) / "cache")
                try:
                    with multiprocessing.get_context("spawn").Pool(1) as pool:
                        result = pool.apply(training_heap, (str(folder), streaming, steps, str(Path(scratch) / "run")))
                finally:
                    if previous is None:
                        os.environ.pop("HF_DATASETS_CACHE")
                    else:
                        os.environ["HF_DATASETS_CACHE"] = previous
            peaks[streaming] = result["peak_mb"]
            print(
                f"| {folder.name} | {'stream' if streaming else 'loaded folder'} | {result['peak_mb']:,.0f} MB | "
                f"{result['seconds']:.1f} |"
            )
        ratios.append(f"{folder.name}: stream / loaded peak heap {peaks[True] / peaks[False]:.2f}x")
    print("\n".join(ratios))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--read", type=int, default=200_000, help="rows read in each measurement")
    parser.add_argument("--resume-step", type=int, default=2000)
    parser.add_argument("--folders", type=Path, nargs="+", help="measure the heap on these built folders only")
    parser.add_argument("--train-steps", type=int, help="with --folders: also the heap of training N steps")
    parser.add_argument(
        "--first-batch", type=Path, nargs="+", help="time to the first batch of these built folders, validated or not"
    )
    options = parser.parse_args()
    if options.first_batch:
        folders_first_batch(options.first_batch)
        return
    if options.folders:
        folders_memory(options.folders, options.read)
        if options.train_steps:
            folders_training(options.folders, options.train_steps)
        return

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
