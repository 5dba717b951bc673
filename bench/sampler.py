"""Benchmark: planning one epoch of task-pure batches at MEDI scale (1.4M rows in 330 tasks).

Compares, in the same process, seconds and peak traced memory (tracemalloc, which numpy reports to) of

* ``CurriculumBatchSampler`` (numpy plan + yielding every batch as a list of ints),
* sentence-transformers' ``ProportionalBatchSampler`` over per-task ``DefaultBatchSampler``s
  (the stock multi-dataset sampler; it mixes tasks across devices, so only a speed reference),
* a straightforward per-row Python planner of the same plan (lists, ``random.shuffle``, ``sorted``),

and prints ratios against the baselines. Run: ``.venv/bin/python bench/sampler.py [--rows N --tasks T]``.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
from sentence_transformers.base.sampler import DefaultBatchSampler, ProportionalBatchSampler
from torch.utils.data import ConcatDataset, RandomSampler

from hf_unified_embed.sampling import CurriculumBatchSampler, build_batch_plan


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
        rows.sort(key=lambda r, d=difficulty: -d[r])
        rows = [offset + r for r in rows]
        step = batch_size * group
        per_task.append([rows[i : i + step] for i in range(0, len(rows), step)])
        offset += size
    batches, round_index = [], 0
    while any(round_index < len(steps) for steps in per_task):
        for steps in per_task:
            if round_index < len(steps):
                rows = steps[round_index]
                width = -(-len(rows) // group)
                batches.extend(rows[i * width : (i + 1) * width] for i in range(group))
        round_index += 1
    return batches


def measure(name: str, run: Callable[[], Any]) -> tuple[float, float]:
    gc.collect()
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    del result
    gc.collect()
    tracemalloc.start()
    result = run()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    del result
    print(f"{name:<58} {seconds:8.3f} s {peak:9.1f} MiB")
    return seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_400_000)
    parser.add_argument("--tasks", type=int, default=330)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    sizes = task_sizes(args.rows, args.tasks)
    rng = np.random.default_rng(1)
    difficulties = [rng.normal(size=int(n)).astype(np.float32) for n in sizes]
    datasets = [range(int(n)) for n in sizes]
    concat = ConcatDataset(datasets)
    print(f"{args.rows:,} rows, {args.tasks} tasks (sizes {sizes.min()}–{sizes.max()}), batch size {args.batch_size}")
    print(f"{'':<58} {'time':>10} {'peak mem':>13}")

    def stock() -> list:
        samplers = [
            DefaultBatchSampler(RandomSampler(d), batch_size=args.batch_size, drop_last=False) for d in datasets
        ]
        return list(ProportionalBatchSampler(concat, batch_samplers=samplers, seed=0))

    def ours(**options: Any) -> Callable[[], list]:
        def run() -> list:
            samplers = [DefaultBatchSampler(d, batch_size=args.batch_size, drop_last=False) for d in datasets]
            sampler = CurriculumBatchSampler(concat, batch_samplers=samplers, seed=0, **options)
            return list(sampler)

        return run

    def plan_only(**options: Any) -> Callable[[], Any]:
        return lambda: build_batch_plan(sizes, [args.batch_size] * len(sizes), seed=0, **options)

    results = {
        "stock": measure("ST ProportionalBatchSampler, full epoch (baseline)", stock),
        "naive": measure(
            "naive per-row Python planner, easy→hard round robin, 8 GPUs",
            lambda: naive_plan(sizes, difficulties, args.batch_size, 8, seed=0),
        ),
        "ours": measure("CurriculumBatchSampler shuffled, full epoch", ours(interleave="shuffled", world_size=1)),
        "ours_8x2": measure(
            "CurriculumBatchSampler round robin, 8 GPUs × accum 2, sqrt",
            ours(world_size=8, gradient_accumulation_steps=2, balance="sqrt"),
        ),
        "plan_e2h": measure(
            "build_batch_plan easy→hard round robin, 8 GPUs (plan only)",
            plan_only(group_size=8, instance_order="easy_to_hard", difficulties=difficulties),
        ),
    }
    stock_s, stock_m = results["stock"]
    naive_s, naive_m = results["naive"]
    print()
    print(f"speed-up vs ST ProportionalBatchSampler (full epoch): {stock_s / results['ours'][0]:6.1f}×")
    print(f"speed-up vs naive per-row planner (easy→hard plan):  {naive_s / results['plan_e2h'][0]:6.1f}×")
    print(f"peak memory vs ST ProportionalBatchSampler:          {results['ours'][1] / stock_m:6.2f}×")
    print(f"peak memory vs naive per-row planner (plan):         {results['plan_e2h'][1] / naive_m:6.2f}×")


if __name__ == "__main__":
    main()
