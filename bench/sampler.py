"""Benchmark: planning one epoch of task-pure batches from 10k to 10M rows (MEDI: 1.4M rows in 330 tasks).

Compares, in the same process and at the same size, seconds and peak traced heap (tracemalloc, which
numpy reports to) of

* ``CurriculumBatchSampler``: the numpy plan plus yielding every batch as a list of ints,
* ``build_batch_plan`` alone (the same plan, no batches yielded),
* sentence-transformers' ``ProportionalBatchSampler`` over per-task ``DefaultBatchSampler``s
  (the stock multi-dataset sampler; it mixes tasks across devices, so only a speed reference),
* a straightforward per-row Python planner of an easy→hard round-robin plan (lists,
  ``random.shuffle``, ``sorted``) against ``build_batch_plan`` making the same plan,

and prints ratios against the baselines. Every batch is handed to a consumer that drops it, as a
``DataLoader`` does (``--keep-batches``: keep them all in a list, as this script did before).
Task sizes are Zipf-like; the task count is MEDI's 330 at 1.4M rows, scaled with the rows and kept
between 10 and 330 (``--tasks`` overrides it).

Run:

* ``.venv/bin/python bench/sampler.py`` — the default ``--sizes 10k,100k,1M,10M`` in one run, then
  markdown tables. A baseline (stock sampler, per-row planner) whose time or traced heap at the
  next size, extrapolated linearly from the size before, exceeds ``--limit`` seconds (default 180)
  or half the available memory is printed as ``skipped (reason)`` from there on.
* ``.venv/bin/python bench/sampler.py --rows 1400000 [--tasks 330]`` — one size, no skipping.

Other options: ``--batch-size`` (default 64), ``--limit``, ``--keep-batches``.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import time
import tracemalloc
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from sentence_transformers.base.sampler import DefaultBatchSampler, ProportionalBatchSampler
from torch.utils.data import BatchSampler, ConcatDataset, Dataset, RandomSampler

from hf_unified_embed.sampling import CurriculumBatchSampler, build_batch_plan

DEFAULT_SIZES = "10k,100k,1M,10M"
MEDI_ROWS, MEDI_TASKS = 1_400_000, 330
SUFFIXES = {"k": 10**3, "M": 10**6, "G": 10**9}


@dataclass(frozen=True)
class Measurement:
    seconds: float  # untraced wall time of one run
    peak_mib: float  # peak traced heap of a second run
    wall: float  # both runs (untraced and traced), for extrapolating the next size


@dataclass(frozen=True)
class Skipped:
    reason: str


Result = Measurement | Skipped


def parse_size(text: str) -> int:
    """``"10k"`` → 10_000, ``"1.4M"`` → 1_400_000, ``"5000"`` → 5000."""
    text = text.strip()
    if text and text[-1] in SUFFIXES:
        return round(float(text[:-1]) * SUFFIXES[text[-1]])
    return int(text)


def size_label(rows: int) -> str:
    for suffix, unit in reversed(SUFFIXES.items()):
        if rows >= unit and rows % (unit // 10) == 0:
            return f"{rows / unit:g}{suffix}"
    return f"{rows:,}"


def default_tasks(rows: int) -> int:
    """MEDI's mean task size (1.4M rows / 330 tasks), with 10 to 330 tasks."""
    return min(MEDI_TASKS, max(10, round(rows * MEDI_TASKS / MEDI_ROWS)))


def task_sizes(rows: int, tasks: int, seed: int = 0) -> np.ndarray:
    """Zipf-like task sizes (MEDI's range: a few hundred to ~200k rows per task) summing to ``rows``."""
    weights = 1.0 / np.arange(1, tasks + 1) ** 0.9
    sizes = np.floor(rows * weights / weights.sum()).astype(np.int64)
    sizes[0] += rows - sizes.sum()
    return np.random.default_rng(seed).permutation(sizes)


def naive_plan(sizes: np.ndarray, difficulties: list[np.ndarray], batch_size: int, group: int, seed: int) -> list:
    """Per-row Python transcription: sort each task easy→hard, cut into steps, round-robin the steps."""
    rng = random.Random(seed)
    offset, per_task = 0, []
    for size, difficulty in zip(sizes.tolist(), difficulties):
        rows = list(range(size))
        rng.shuffle(rows)
        rows.sort(key=lambda r, d=difficulty: -d[r])  # type: ignore[misc]
        rows = [offset + r for r in rows]
        step = batch_size * group
        per_task.append([rows[i : i + step] for i in range(0, len(rows), step)])
        offset += size
    batches: list[list[int]] = []
    round_index = 0
    while any(round_index < len(steps) for steps in per_task):
        for steps in per_task:
            if round_index < len(steps):
                rows = steps[round_index]
                width = -(-len(rows) // group)
                batches.extend(rows[i * width : (i + 1) * width] for i in range(group))
        round_index += 1
    return batches


def consume(batches: Iterable[list[int]], keep: bool) -> list[list[int]] | None:
    """Take every batch; keep them all only with ``keep`` (a ``DataLoader`` drops each after use)."""
    if keep:
        return list(batches)
    for _ in batches:
        pass
    return None


def measure(name: str, run: Callable[[], Any]) -> Measurement:
    """Time one run without tracing, then trace the peak heap of a second run."""
    gc.collect()
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    del result
    gc.collect()
    tracemalloc.start()
    start = time.perf_counter()
    result = run()
    traced_seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    del result
    gc.collect()
    print(f"  {name:<60} {seconds:8.3f} s {peak:9.1f} MiB", flush=True)
    return Measurement(seconds, peak, seconds + traced_seconds)


def available_mib() -> float | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (ValueError, OSError, AttributeError):
        return None


def affordable(previous: tuple[int, Result] | None, rows: int, limit: float) -> str | None:
    """Why a baseline is skipped at ``rows`` (``None``: run it), extrapolating from the size before."""
    if previous is None:
        return None
    before, result = previous
    if isinstance(result, Skipped):
        return f"already skipped at {size_label(before)}"
    scale = rows / before
    wall, peak = result.wall * scale, result.peak_mib * scale
    if wall > limit:
        return f"over --limit {limit:.0f} s: ≈{wall:.0f} s extrapolated from {size_label(before)}"
    memory = available_mib()
    if memory is not None and peak > memory / 2:
        return f"over half the free memory: ≈{peak:,.0f} MiB traced extrapolated from {size_label(before)}"
    return None


def bench_size(
    rows: int,
    tasks: int,
    batch_size: int,
    keep: bool,
    limit: float | None,
    previous: dict[str, tuple[int, Result]],
) -> dict[str, Result]:
    sizes = task_sizes(rows, tasks)
    rng = np.random.default_rng(1)
    difficulties = [rng.normal(size=int(n)).astype(np.float32) for n in sizes]
    datasets = [range(int(n)) for n in sizes]
    concat: ConcatDataset = ConcatDataset(cast(list[Dataset], datasets))
    size_list = [int(n) for n in sizes]
    print(f"{rows:,} rows, {tasks} tasks (sizes {sizes.min():,}–{sizes.max():,}), batch size {batch_size}")
    print(f"  {'':<60} {'time':>10} {'peak heap':>13}")

    def stock() -> list[list[int]] | None:
        samplers: list[BatchSampler] = [
            DefaultBatchSampler(RandomSampler(d), batch_size=batch_size, drop_last=False) for d in datasets
        ]
        return consume(ProportionalBatchSampler(concat, batch_samplers=samplers, seed=0), keep)

    def ours(**options: Any) -> Callable[[], list[list[int]] | None]:
        def run() -> list[list[int]] | None:
            samplers: list[BatchSampler] = [
                DefaultBatchSampler(d, batch_size=batch_size, drop_last=False) for d in datasets
            ]
            return consume(CurriculumBatchSampler(concat, batch_samplers=samplers, seed=0, **options), keep)

        return run

    def plan_only(**options: Any) -> Callable[[], Any]:
        return lambda: build_batch_plan(size_list, [batch_size] * len(sizes), seed=0, **options)

    def baseline(key: str, name: str, run: Callable[[], Any]) -> Result:
        reason = None if limit is None else affordable(previous.get(key), rows, limit)
        if reason is None:
            result: Result = measure(name, run)
        else:
            result = Skipped(reason)
            print(f"  {name:<60} skipped ({reason})", flush=True)
        previous[key] = (rows, result)
        return result

    return {
        "stock": baseline("stock", "ST ProportionalBatchSampler, full epoch (baseline)", stock),
        "naive": baseline(
            "naive",
            "naive per-row Python planner, easy→hard round robin, 8 GPUs",
            lambda: naive_plan(sizes, difficulties, batch_size, 8, seed=0),
        ),
        "ours": measure("CurriculumBatchSampler shuffled, full epoch", ours(interleave="shuffled", world_size=1)),
        "plan": measure("build_batch_plan shuffled (plan only)", plan_only(interleave="shuffled")),
        "ours_8x2": measure(
            "CurriculumBatchSampler round robin, 8 GPUs × accum 2, sqrt",
            ours(world_size=8, gradient_accumulation_steps=2, balance="sqrt"),
        ),
        "plan_e2h": measure(
            "build_batch_plan easy→hard round robin, 8 GPUs (plan only)",
            plan_only(group_size=8, instance_order="easy_to_hard", difficulties=difficulties),
        ),
    }


def ratio(numerator: Result, denominator: Result, seconds: bool) -> str:
    if not isinstance(numerator, Measurement) or not isinstance(denominator, Measurement):
        return "–"
    if seconds:
        return f"{numerator.seconds / denominator.seconds:.2f}×"
    return f"{numerator.peak_mib / denominator.peak_mib:.2f}×"


def cell(result: Result, seconds: bool) -> str:
    if isinstance(result, Skipped):
        return "skipped"
    return f"{result.seconds:.3f}" if seconds else f"{result.peak_mib:.1f}"


def print_tables(runs: list[tuple[int, int, dict[str, Result]]]) -> None:
    print()
    print(
        "| size | tasks | ours plan+yield s | plan only s | stock s | ours/stock time | ours heap MiB "
        "| plan heap MiB | stock heap MiB | ours/stock heap | ours bytes/row | plan bytes/row |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rows, tasks, results in runs:
        ours, plan, stock = results["ours"], results["plan"], results["stock"]
        assert isinstance(ours, Measurement) and isinstance(plan, Measurement)
        print(
            f"| {size_label(rows)} | {tasks} | {cell(ours, True)} | {cell(plan, True)} | {cell(stock, True)} "
            f"| {ratio(ours, stock, True)} | {cell(ours, False)} | {cell(plan, False)} | {cell(stock, False)} "
            f"| {ratio(ours, stock, False)} | {ours.peak_mib * 2**20 / rows:.1f} | {plan.peak_mib * 2**20 / rows:.1f} |"
        )
    print()
    print(
        "| size | easy→hard plan s | naive planner s | plan/naive time | plan heap MiB | naive heap MiB | plan/naive heap |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for rows, _, results in runs:
        e2h, naive = results["plan_e2h"], results["naive"]
        print(
            f"| {size_label(rows)} | {cell(e2h, True)} | {cell(naive, True)} | {ratio(e2h, naive, True)} "
            f"| {cell(e2h, False)} | {cell(naive, False)} | {ratio(e2h, naive, False)} |"
        )
    skipped = {
        f"{key} at {size_label(rows)}: skipped ({result.reason})"
        for rows, _, results in runs
        for key, result in results.items()
        if isinstance(result, Skipped)
    }
    for line in sorted(skipped):
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=None, help=f"comma-separated row counts (default {DEFAULT_SIZES})")
    parser.add_argument("--rows", type=parse_size, default=None, help="one size, e.g. 1400000 or 1.4M")
    parser.add_argument("--tasks", type=int, default=None, help="task count (default: scaled from MEDI)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--limit", type=float, default=180.0, help="seconds a baseline may take at a size")
    parser.add_argument("--keep-batches", action="store_true", help="keep every yielded batch in a list")
    args = parser.parse_args()
    if args.rows is not None and args.sizes is not None:
        parser.error("give --rows or --sizes, not both")

    single = args.rows is not None
    sizes = [args.rows] if single else [parse_size(s) for s in (args.sizes or DEFAULT_SIZES).split(",")]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average {load:.2f}, {os.cpu_count()} CPUs; batches {'kept' if args.keep_batches else 'dropped'}")
    previous: dict[str, tuple[int, Result]] = {}
    runs = []
    for rows in sizes:
        tasks = args.tasks or default_tasks(rows)
        limit = None if single else args.limit
        runs.append((rows, tasks, bench_size(rows, tasks, args.batch_size, args.keep_batches, limit, previous)))
        print()

    if single:
        results = runs[0][2]
        print(f"ours/stock time (full epoch):            {ratio(results['ours'], results['stock'], True)}")
        print(f"ours/stock peak heap:                    {ratio(results['ours'], results['stock'], False)}")
        print(f"easy→hard plan/naive per-row planner time: {ratio(results['plan_e2h'], results['naive'], True)}")
        print(f"easy→hard plan/naive per-row planner heap: {ratio(results['plan_e2h'], results['naive'], False)}")
    print_tables(runs)


if __name__ == "__main__":
    main()
