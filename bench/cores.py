"""Benchmark: how much a second process gains on this machine, for the kinds of work a build does.

Each kind of work runs once alone, then twice at once in two processes (the same work each); the ratio
printed is the time alone over the slower of the two (1.0: the second process costs the first nothing).
``build --num-proc 2`` can gain no more than its work's kinds allow (docs/benchmarks.md, "Build"):

* ``python``: a pure-Python loop (parsing a row by hand);
* ``copy``: copying a 200 MB numpy array (streaming through memory);
* ``gather``: taking 2M random strings of ~300 bytes out of 400k (``pyarrow`` ``take``: the BEIR join
  gathering passages from all over a corpus).

Run alone on a quiet machine: ``.venv/bin/python bench/cores.py``.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa


def _python(_: int) -> float:
    start, total = time.perf_counter(), 0
    for number in range(20_000_000):
        total += number
    return time.perf_counter() - start


def _copy(_: int) -> float:
    array = np.ones(25_000_000)
    start = time.perf_counter()
    for _ in range(20):
        array.copy()
    return time.perf_counter() - start


def _gather(_: int) -> float:
    texts = pa.array([f"{'x' * 300}{number}" for number in range(400_000)])
    positions = pa.array(np.random.default_rng(0).integers(0, len(texts), 2_000_000))
    start = time.perf_counter()
    for _ in range(3):
        texts.take(positions)
    return time.perf_counter() - start


WORK: dict[str, Callable[[int], float]] = {"python": _python, "copy": _copy, "gather": _gather}


def main() -> None:
    context = multiprocessing.get_context("spawn")  # nothing inherited: each process does only its work
    for name, work in WORK.items():
        alone = work(0)
        with context.Pool(2) as pool:
            together = pool.map(work, [0, 1])
        print(
            f"{name:7s} alone {alone:5.2f} s, two at once {together[0]:5.2f} / {together[1]:5.2f} s: {alone / max(together):.2f}"
        )


if __name__ == "__main__":
    main()
