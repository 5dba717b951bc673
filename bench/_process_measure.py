"""Measuring commands as processes: the wall time, CPU time and sampled memory of a process tree
(:func:`measure`), and the speed-up this machine gives processes that share nothing (:func:`cpu_loop`)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

#: How often the memory of the process tree is sampled (reading smaps_rollup is not free for the process).
SAMPLE_SECONDS = 0.2


def _proportional_kb(pid: int) -> tuple[int, int]:
    """``(Pss, Pss_Anon)`` of a process in kB: its share of the pages it maps (a page shared after a fork
    counts once across the tree), all of them and the anonymous ones (heap, not mapped files)."""
    values = {"Pss:": 0, "Pss_Anon:": 0}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                name, _, rest = line.partition(" ")
                if name in values:
                    values[name] = int(rest.split()[0])
    except OSError:
        pass
    return values["Pss:"], values["Pss_Anon:"]


def _peak_rss_kb(pid: int) -> int:
    """``VmHWM`` of a process in kB: the peak of its resident set so far (mapped files' pages included), as the
    kernel keeps it, so a sample after the peak still sees it."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(
    command: list[str], env: dict[str, str] | None = None, memory: bool = True, warm: Sequence[Path] = ()
) -> dict[str, float]:
    """Run ``command``; its seconds and the sampled peaks of the process tree's memory (MB): ``pss_mb``, all
    its pages (file-backed ones included, such as memory-mapped Arrow files), ``anon_mb``, its heap, and
    ``process_rss_mb``, the largest peak resident set of any one process of the tree (``VmHWM``: what a
    per-process memory limit, such as a container's or a scheduler's, holds against it).
    The files ``warm`` are read first, so that every run finds its inputs in the page cache.

    Sampling slows what it samples, the more the more processes and mappings it has (``smaps_rollup`` walks
    every mapping under the process's memory lock: a 1M-row ``build --num-proc 2`` took 10.4–10.9 s sampled,
    8.0–8.2 s not): with ``memory=False`` nothing is sampled and the peaks are NaN.
    """
    import resource

    import psutil

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    # Start from clean pages: the run before wrote ~1 GB (shards, Arrow cache) that the kernel would otherwise
    # write back during this one, on the cores it measures.
    os.sync()
    # And from inputs in the page cache: this machine drops cached pages of files read a minute before (a
    # timed build read 16-25 MB/s from the disk, vmstat), which would time the disk rather than the build.
    for path in warm:
        with open(path, "rb") as handle:
            while handle.read(16 * 2**20):
                pass
    cpu_before = cpu()
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peaks = {"pss": 0, "anon": 0, "process_rss": 0}
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(process.pid)
        while not done.is_set():
            try:
                tree = [root.pid, *(child.pid for child in root.children(recursive=True))]
            except psutil.Error:
                tree = []
            totals = [sum(values) for values in zip((0, 0), *(_proportional_kb(pid) for pid in tree))]
            peaks["pss"], peaks["anon"] = max(peaks["pss"], totals[0]), max(peaks["anon"], totals[1])
            peaks["process_rss"] = max([peaks["process_rss"], *(_peak_rss_kb(pid) for pid in tree)])
            done.wait(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    if memory:
        sampler.start()
    stdout, stderr = process.communicate()
    seconds = time.perf_counter() - start
    done.set()
    if memory:
        sampler.join()
    if process.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}):\n{stderr[-3000:]}")
    return {
        "seconds": seconds,
        "cpu_seconds": cpu() - cpu_before,
        "pss_mb": peaks["pss"] / 1024 if memory else math.nan,
        "anon_mb": peaks["anon"] / 1024 if memory else math.nan,
        "process_rss_mb": peaks["process_rss"] / 1024 if memory else math.nan,
        "stdout": stdout,
    }


#: Iterations of the pure-Python loop of ``--modes cpu-loop``: about a second in one process here.
CPU_LOOP_ITERATIONS = 12_000_000
_CPU_LOOP = """
import sys, time
start = time.perf_counter()
total = 0
for i in range(int(sys.argv[1])):
    total += i
print(time.perf_counter() - start)
"""


def cpu_loop(processes: int) -> float:
    """Seconds of :data:`CPU_LOOP_ITERATIONS` of pure-Python arithmetic shared by ``processes`` processes at
    once (each timing its own share, from inside: their start-up is not counted): what ``processes`` CPUs
    give work that shares no memory and no data, the ceiling of ``build --num-proc``'s speed-up.

    On a virtual machine the CPUs it is given may share physical cores with each other or with other
    machines: on this one two such processes at once took 0.7-2.0x the time of one alone just before.
    """
    share = str(CPU_LOOP_ITERATIONS // processes)
    children = [
        subprocess.Popen([sys.executable, "-c", _CPU_LOOP, share], stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    return max(float(child.communicate()[0]) for child in children)
