"""Benchmark: time and peak memory of ``hf-unified-embed build`` on a recipe of several sources, single-process and
parallel, beside ``datasets.load_dataset`` of the same raw files.

Each measurement runs in a fresh process, back to back, and what it wrote is removed once no later run needs it
(the last build's folder stays for ``validate`` and ``read-shards``), so every run finds the machine alike:

* ``build 1``: ``hf-unified-embed build recipe.yaml -o OUT --num-proc 1`` (read, validate, write the
  Parquet shards and the card);
* ``build N``: the same with ``--num-proc N`` (default: the CPUs this process may use);
* ``load_dataset``: ``datasets.load_dataset`` of every raw file (csv / json / parquet builders, a fresh
  cache), one process; no parsing into the schema, no validation, no Parquet output;
* ``validate`` (on request): ``hf-unified-embed validate`` of the folder the last build mode wrote, with
  ``HF_DATASETS_CACHE`` pointing at an empty folder, which must stay empty;
* ``cpu-loop`` (on request): a pure-Python loop, once in one process and once shared by N processes at once
  (:func:`cpu_loop`): the speed-up this machine gives work that shares nothing, in the same round as the
  builds — on a virtual machine whose CPUs may share physical cores, the ceiling of ``build N``'s;
* ``startup`` (on request): ``build 1`` and ``build N`` of the same recipe at :data:`STARTUP_ROWS` rows, what a
  build costs whatever its size (starting Python, importing ``datasets``, planning, the processes, the card,
  exiting), which no number of processes divides; printed with the speed-up of the rest, each round's build
  less its own round's start-up (:func:`net_ratios`). With ``cpu-loop`` too, also the most ``build N`` could
  gain in each round (:func:`ceiling_ratios`): the start-ups as measured, the rest at the loop's speed-up.

With ``--repeat``, the modes run in rounds, one after another, and each ratio is the median of the rounds'
ratios (each round's shown): the two modes of a round run back to back, on the machine as it is then, and
the build modes run in reverse order every other round (:func:`round_modes`), so none always runs first.

Reported per size: seconds, CPU seconds of the process and its workers (user + system: what the work
costs whatever else the machine runs), rows/s (output rows, wall clock), the peak memory of the process
tree (the process and its workers, sampled every 0.2 s from ``/proc/PID/smaps_rollup``; proportional set
sizes, so pages shared after a fork count once): all its pages (``Pss``, memory-mapped Arrow files
included) and its anonymous pages (``Pss_Anon``: the heap); the largest peak resident set of any one of its
processes (``VmHWM``: what a per-process memory limit holds against it); and whether ``build 1`` and
``build N`` wrote the same bytes. ``build-N-small`` is ``build N`` with ``--max-shard-size`` of
``--small-shards`` (50MB): what more, smaller files cost. The load average before and after each size is printed: on a shared machine the wall
times are noisy.

Inputs (generated once per size into a scratch folder, N output rows in all): ``--inputs realistic`` (the
default) writes the sources of ``bench/sources.py`` — one BEIR source of 0.4 N queries over 0.4 N MS
MARCO-like passages with graded qrels and mined negatives, an STS-B TSV of 0.3 N pairs and a triplets JSONL
of 0.3 N rows with four negatives, texts of ``../shared/data`` at their real lengths: the shape a user
brings, where one source holds most rows. ``--inputs mixed`` writes the nine short synthetic sources of
``bench/mixed_sources.py``, one per source format. ``read-shards`` (a mode) reads every Parquet shard of the
last build with ``pyarrow.parquet.read_table``: the baseline ``validate`` is measured against.

    .venv/bin/python bench/build.py                          # sizes 10k, 100k, 1M
    .venv/bin/python bench/build.py --sizes 10000            # quick run
    .venv/bin/python bench/build.py --sizes 10000000 --modes build-N   # 10M, the parallel build only
    .venv/bin/python bench/build.py --sizes 1000000 --repeat 5 --no-memory --modes build-N build-N-small
    .venv/bin/python bench/build.py --sizes 1000000 --repeat 3 --no-memory   # timings: three interleaved rounds, unsampled
    .venv/bin/python bench/build.py --sizes 1000000 --repeat 5 --no-memory --modes cpu-loop build-1 build-N
    .venv/bin/python bench/build.py --sizes 1000000 5000000 --repeat 3 --no-memory --modes startup build-1 build-N
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mixed_sources  # bench/mixed_sources.py: nine short synthetic sources
import sources  # bench/sources.py: the realistic inputs
from _process_measure import cpu_loop, measure  # not _processes: tests/ has one, on sys.path in a test run

#: Rows of the ``startup`` mode's build: a build this small is its fixed cost (a 10k-row build takes ~0.1 s more).
STARTUP_ROWS = 100


def load_raw_files(folder: Path, cache: Path) -> int:
    """``datasets.load_dataset`` of every raw file of the recipe; returns the records read."""
    import datasets

    datasets.disable_progress_bars()
    inputs = sources if (folder / "shape.json").is_file() else mixed_sources  # shape.json: bench/sources.py's
    return sum(
        len(datasets.load_dataset(kind, split="train", cache_dir=str(cache), **kwargs))  # type: ignore[arg-type]
        for kind, kwargs in inputs.raw_loads(folder)
    )


def _by_round(
    results: Sequence[dict[str, Any]], rows: int, mode: str
) -> tuple[dict[tuple[str, int], float], list[int]]:
    """The seconds of ``rows``' measurements by ``(mode, round)``, and the rounds that measured ``mode``."""
    seconds = {(row["mode"], row["round"]): row["seconds"] for row in results if row["rows"] == rows}
    return seconds, sorted({round_ for measured, round_ in seconds if measured == mode})


def round_ratios(results: Sequence[dict[str, Any]], rows: int, top: str, bottom: str) -> list[float]:
    """``top``'s seconds over ``bottom``'s, round by round (the two measured back to back)."""
    seconds, rounds = _by_round(results, rows, top)
    return [seconds[top, r] / seconds[bottom, r] for r in rounds if (bottom, r) in seconds]


def net_ratios(
    results: Sequence[dict[str, Any]], rows: int, top: str, bottom: str, top_less: str, bottom_less: str
) -> list[float]:
    """Round by round, ``top``'s seconds less ``top_less``'s over ``bottom``'s less ``bottom_less``'s (each less
    the same round's): the speed-up of what a build does beyond its fixed cost."""
    seconds, rounds = _by_round(results, rows, top)
    return [
        (seconds[top, r] - seconds[top_less, r]) / (seconds[bottom, r] - seconds[bottom_less, r])
        for r in rounds
        if all((mode, r) in seconds for mode in (bottom, top_less, bottom_less))
        and seconds[bottom, r] > seconds[bottom_less, r]
    ]


def ceiling_ratios(results: Sequence[dict[str, Any]], rows: int, num_proc: int) -> list[float]:
    """Round by round, the most ``build num_proc`` could gain over ``build 1`` on this machine as it was then:
    ``build 1`` over ``startup num_proc`` plus the rest of ``build 1`` (less ``startup 1``) divided by the
    round's ``cpu loop`` speed-up — the start-ups as measured, everything else as parallel as work that
    shares no memory (Amdahl's bound; memory-bound work scales worse, perfect packing is assumed)."""
    seconds, rounds = _by_round(results, rows, "build 1")
    modes = ("build 1", "startup 1", f"startup {num_proc}", "cpu loop 1", f"cpu loop {num_proc}")
    ceilings = []
    for r in rounds:
        if not all((mode, r) in seconds for mode in modes):
            continue
        one, startup_one, startup_n, loop_one, loop_n = (seconds[mode, r] for mode in modes)
        best_n = startup_n + max(one - startup_one, 0.0) * loop_n / loop_one
        if best_n > 0:  # a round of nothing but a start-up timed at 0 s bounds nothing
            ceilings.append(one / best_n)
    return ceilings


def print_ratio(name: str, results: Sequence[dict[str, Any]], rows: int, top: str, bottom: str) -> None:
    """The median of the rounds' ratios, and each round's: this machine's speed drifts by a third within
    minutes, and a ratio of medians would pair one mode's fast round with the other's slow one."""
    _print_ratios(name, round_ratios(results, rows, top, bottom))


def _print_ratios(name: str, ratios: Sequence[float]) -> None:
    if ratios:
        each = ", ".join(f"{ratio:.2f}" for ratio in ratios)
        rounds = f" (rounds: {each})" if len(ratios) > 1 else ""
        print(f"# {name}: {statistics.median(ratios):.2f}x{rounds}", flush=True)


def read_shards(folder: Path) -> int:
    """Every Parquet shard of a unified folder read whole with pyarrow (all columns); returns the rows."""
    import pyarrow.parquet as pq

    return sum(pq.read_table(path).num_rows for path in sorted((folder / "data").rglob("*.parquet")))


def round_modes(modes: Sequence[str], round_: int) -> list[str]:
    """The modes of round ``round_`` (from 0): as given, with the build modes in reverse order in odd rounds.

    Each build leaves the machine in some state for the next (its output's pages cached, its memory given
    back); a fixed order would put one build always after another.
    """
    order = list(modes)
    places = [index for index, mode in enumerate(order) if mode.startswith("build-")]
    if round_ % 2:
        for place, mode in zip(places, reversed([order[index] for index in places])):
            order[place] = mode
    return order


def digest(folder: Path) -> str:
    sha = hashlib.sha256()
    for path in sorted((folder / "data").rglob("*.parquet")):
        sha.update(path.relative_to(folder).as_posix().encode())
        sha.update(path.read_bytes())
    return sha.hexdigest()


def _build_command(recipe: Path, out: Path, processes: int, shard_size: str | None = None) -> list[str]:
    shards = ["--max-shard-size", shard_size] if shard_size else []
    return [
        sys.executable,
        "-m",
        "hf_unified_embed",
        "build",
        str(recipe),
        "-o",
        str(out),
        "--num-proc",
        str(processes),
        *shards,
    ]


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument(
        "--num-proc", type=int, default=None, help="processes of the parallel build (default: the CPUs)"
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        default=["build-1", "build-N", "load_dataset"],
        choices=[
            "build-1",
            "build-N",
            "build-N-small",
            "load_dataset",
            "validate",
            "read-shards",
            "cpu-loop",
            "startup",
        ],
        help="validate: `hf-unified-embed validate` of the last build's folder, HF_DATASETS_CACHE an empty folder; "
        "cpu-loop: a pure-Python loop in 1 and in N processes (the machine's own speed-up, see cpu_loop); "
        f"startup: build 1 and build N of {STARTUP_ROWS} rows (the fixed cost of a build); "
        "build-N-small: build N with --max-shard-size of --small-shards",
    )
    parser.add_argument(
        "--small-shards",
        default="50MB",
        help="--max-shard-size of the build-N-small mode (default 50MB): more, smaller files than the default",
    )
    parser.add_argument("--scratch", type=Path, default=None, help="where to generate inputs (default: a temp folder)")
    parser.add_argument("--inputs", choices=["realistic", "mixed"], default="realistic", help="see the docstring")
    parser.add_argument(
        "--data",
        type=Path,
        default=sources.DATA,
        help="the real texts the realistic inputs are drawn from (default: ../shared/data)",
    )
    parser.add_argument("--read-worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--no-memory",
        dest="memory",
        action="store_false",
        help="time without sampling memory (sampling slows the parallel build more than load_dataset: see measure)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the modes this many rounds, interleaved; ratios: median of the rounds'",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--load-worker", nargs=2, metavar=("FOLDER", "CACHE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inputs == "realistic" and not args.data.is_dir():
        # Before anything is generated or built: a traceback from deep inside the generator said less.
        parser.error(
            f"--data {args.data}: no such folder; the realistic inputs draw their texts from it (or: --inputs mixed)"
        )
    if args.load_worker:
        print(load_raw_files(Path(args.load_worker[0]), Path(args.load_worker[1])))
        return
    if args.read_worker:
        print(read_shards(args.read_worker))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from hf_unified_embed.data.build_plan import available_cpus

    num_proc = args.num_proc or available_cpus()
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    print(f"{num_proc} processes for build-N; {os.cpu_count()} CPUs; load average {load_average()}", flush=True)
    print(
        f"{'rows':>10} {'mode':<13} {'seconds':>8} {'CPU s':>7} {'rows/s':>9} {'tree PSS MB':>12} {'tree anon MB':>13} "
        f"{'largest RSS MB':>15}"
    )
    results = []
    if args.scratch is not None:
        args.scratch.mkdir(parents=True, exist_ok=True)  # a folder named for the run may not exist yet
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix="bench-build-", dir=args.scratch) as scratch:
            folder = Path(scratch)
            started = time.perf_counter()
            generator = sources if args.inputs == "realistic" else mixed_sources
            data = {"data": args.data} if args.inputs == "realistic" else {}
            inputs = {"recipe": generator.write_sources(folder, n, **data)}
            inputs["startup"] = generator.write_sources(folder / "startup", STARTUP_ROWS, **data)
            input_files = [path for path in folder.rglob("*") if path.is_file()]
            size = sum(path.stat().st_size for path in input_files)
            print(
                f"# {n:,} rows: inputs {size / 1e6:,.0f} MB written in {time.perf_counter() - started:.0f} s; "
                f"load average {load_average()}",
                flush=True,
            )
            # Writing the inputs pushed the libraries' files out of the page cache: the first process after
            # it imported them from the disk (a 100-row build took 5.0 s, then 0.8-1.3 s). Untimed.
            subprocess.run(
                _build_command(inputs["startup"], folder / "warm-up", 1), env=env, check=True, capture_output=True
            )
            digests = {}
            built: Path | None = None
            for round_ in range(args.repeat):
                if args.repeat > 1:
                    print(f"# round {round_ + 1} of {args.repeat}", flush=True)
                for mode in round_modes(args.modes, round_):
                    run_env = env
                    if mode == "cpu-loop":
                        for processes in (1, num_proc):
                            seconds = cpu_loop(processes)
                            label = f"cpu loop {processes}"
                            print(f"{n:>10,} {label:<13} {seconds:>8.2f}", flush=True)
                            results.append({"rows": n, "mode": label, "round": round_, "seconds": seconds})
                        continue
                    if mode == "load_dataset":
                        cache = folder / f"cache-load-{round_}"
                        command = [sys.executable, __file__, "--load-worker", str(folder), str(cache)]
                    elif mode == "read-shards":
                        if built is None:
                            raise SystemExit("--modes read-shards needs a build mode before it")
                        command = [sys.executable, __file__, "--read-worker", str(built)]
                    elif mode == "validate":
                        if built is None:
                            raise SystemExit("--modes validate needs a build mode before it")
                        cache = folder / f"validate-cache-{round_}"
                        cache.mkdir()
                        run_env = {**env, "HF_DATASETS_CACHE": str(cache)}
                        command = [sys.executable, "-m", "hf_unified_embed", "validate", str(built)]
                    elif mode == "startup":
                        for processes in (1, num_proc):
                            out = folder / f"startup-{processes}-{round_}"
                            command = _build_command(inputs["startup"], out, processes)
                            seconds = measure(command, run_env, memory=False, warm=input_files)["seconds"]
                            shutil.rmtree(out)
                            label = f"startup {processes}"
                            print(f"{n:>10,} {label:<13} {seconds:>8.2f}", flush=True)
                            results.append({"rows": n, "mode": label, "round": round_, "seconds": seconds})
                        continue
                    else:
                        processes = 1 if mode == "build-1" else num_proc
                        out = folder / f"out-{mode}-{round_}"
                        small = args.small_shards if mode == "build-N-small" else None
                        command = _build_command(inputs["recipe"], out, processes, small)
                    result = measure(command, run_env, memory=args.memory, warm=input_files)
                    # What a run wrote goes once it is no longer needed (the last build's folder stays for
                    # validate and read-shards): kept, every run's output filled the page cache and each later
                    # run took fresh memory the machine had not touched yet, slower to fault in on this virtual
                    # machine (a 1M-row build 1 took 9.4-9.7 s with its predecessors' outputs removed, 10.8-11.5
                    # s after them kept), so a mode's time depended on its round and place.
                    if mode.startswith("build"):
                        if mode != "build-N-small":  # other shard boundaries: other bytes, by design
                            digests[f"{mode} {round_}"] = digest(out)
                        if built is not None:
                            shutil.rmtree(built)
                        built = out
                    elif mode == "validate":
                        left = [path for path in cache.rglob("*")]
                        print(f"# validate left {len(left)} entries in HF_DATASETS_CACHE", flush=True)
                    if mode in ("load_dataset", "validate"):
                        shutil.rmtree(cache)  # the cache the run was given
                    labels = {"build-N": f"build {num_proc}", "build-N-small": f"build {num_proc} {args.small_shards}"}
                    label = labels.get(mode, mode.replace("-", " "))
                    print(
                        f"{n:>10,} {label:<13} {result['seconds']:>8.1f} {result['cpu_seconds']:>7.1f} "
                        f"{n / result['seconds']:>9,.0f} "
                        f"{result['pss_mb']:>12,.0f} {result['anon_mb']:>13,.0f} {result['process_rss_mb']:>15,.0f}",
                        flush=True,
                    )
                    results.append(
                        {
                            "rows": n,
                            "mode": label,
                            "round": round_,
                            **{k: v for k, v in result.items() if k != "stdout"},
                        }
                    )
            ratios = [
                ("build 1 / load_dataset", "build 1", "load_dataset"),
                (f"build {num_proc} / load_dataset", f"build {num_proc}", "load_dataset"),
                (f"build 1 / build {num_proc} (speed-up)", "build 1", f"build {num_proc}"),
                (f"cpu loop 1 / cpu loop {num_proc} (the machine's speed-up)", "cpu loop 1", f"cpu loop {num_proc}"),
                ("validate / read shards", "validate", "read shards"),
                (
                    f"build {num_proc} {args.small_shards} / build {num_proc} (more, smaller shards)",
                    f"build {num_proc} {args.small_shards}",
                    f"build {num_proc}",
                ),
            ]
            for name, top, bottom in ratios:
                print_ratio(name, results, n, top, bottom)
            _print_ratios(
                f"build 1 / build {num_proc}, each less its start-up (the speed-up of what divides)",
                net_ratios(results, n, "build 1", f"build {num_proc}", "startup 1", f"startup {num_proc}"),
            )
            _print_ratios(
                f"build 1 / build {num_proc} at best here (start-ups as measured, the rest at the cpu loop's speed-up)",
                ceiling_ratios(results, n, num_proc),
            )
            if len(digests) > 1:
                print(
                    f"# every build ({len(digests)}) wrote the same Parquet bytes: {len(set(digests.values())) == 1}"
                )
            print(f"# load average {load_average()}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
