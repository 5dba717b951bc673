"""Benchmark: time and peak memory of ``hf-unified-embed build`` on a mixed recipe, single-process and
parallel, beside ``datasets.load_dataset`` of the same raw files.

Inputs (generated once per size into a scratch folder; N output rows in all, in the shapes of the shared
sets): an STS Benchmark tab file (20 % of the rows; every tenth line with the two trailing source
fields), a SICK file (10 %), two SemEval STS files (10 %, plus a fifth as many unlabeled lines, which are
skipped), an MSRP file with a byte-order mark (10 %), a WikiQA file (10 % answered questions of four
candidates, plus half as many unanswered ones, skipped), a quoted TrecQA csv (5 %), an MS MARCO-like
BEIR folder (15 %: two graded judgements and four mined negatives per query), a pairs JSON-lines file
with scores (10 %) and a triplets Parquet file (10 %).

Each measurement runs in a fresh process, back to back:

* ``build 1``: ``hf-unified-embed build recipe.yaml -o OUT --num-proc 1`` (read, validate, write the
  Parquet shards and the card);
* ``build N``: the same with ``--num-proc N`` (default: the CPUs this process may use);
* ``load_dataset``: ``datasets.load_dataset`` of every raw file (csv / json / parquet builders, a fresh
  cache), one process; no parsing into the schema, no validation, no Parquet output;
* ``validate`` (on request): ``hf-unified-embed validate`` of the folder the last build mode wrote, with
  ``HF_DATASETS_CACHE`` pointing at an empty folder, which must stay empty;
* ``cpu-loop`` (on request): a pure-Python loop, once in one process and once shared by N processes at once
  (:func:`cpu_loop`): the speed-up this machine gives work that shares nothing, in the same round as the
  builds — on a virtual machine whose CPUs may share physical cores, the ceiling of ``build N``'s.

With ``--repeat``, the modes run in rounds, one after another, and each ratio is the median of the rounds'
ratios (each round's shown): the two modes of a round run back to back, on the machine as it is then.

Reported per size: seconds, CPU seconds of the process and its workers (user + system: what the work
costs whatever else the machine runs), rows/s (output rows, wall clock), the peak memory of the process
tree (the process and its workers, sampled every 0.2 s from ``/proc/PID/smaps_rollup``; proportional set
sizes, so pages shared after a fork count once): all its pages (``Pss``, memory-mapped Arrow files
included) and its anonymous pages (``Pss_Anon``: the heap); and whether ``build 1`` and ``build N`` wrote
the same bytes. The load average before and after each size is printed: on a shared machine the wall
times are noisy.

Inputs: ``--inputs realistic`` (the default) writes the sources of ``bench/sources.py`` — one BEIR source
of 0.4 N queries over 0.4 N MS MARCO-like passages with graded qrels and mined negatives, an STS-B TSV of
0.3 N pairs and a triplets JSONL of 0.3 N rows with four negatives, texts of ``../shared/data`` at their
real lengths: the shape a user brings, where one source holds most rows. ``--inputs mixed`` writes the
nine short synthetic sources described above. ``read-shards`` (a mode) reads every Parquet shard of the
last build with ``pyarrow.parquet.read_table``: the baseline ``validate`` is measured against.

    .venv/bin/python bench/build.py                          # sizes 10k, 100k, 1M
    .venv/bin/python bench/build.py --sizes 10000            # quick run
    .venv/bin/python bench/build.py --sizes 10000000 --modes build-N   # 10M, the parallel build only
    .venv/bin/python bench/build.py --sizes 1000000 --repeat 3 --no-memory   # timings: three interleaved rounds, unsampled
    .venv/bin/python bench/build.py --sizes 1000000 --repeat 5 --no-memory --modes cpu-loop build-1 build-N
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sources  # bench/sources.py: the realistic inputs

_VOCABULARY = (
    "a man woman child dog cat plane car train city river mountain house street market school player team "
    "game music flute guitar piano book story paper news report court police government minister election "
    "is are was were has had takes playing running eating reading writing riding sitting standing walking "
    "large small old young red blue green quick slow happy sad new early late first last other same on in "
    "at with from into over under near after before during about against between through"
)
WORDS = tuple(_VOCABULARY.split())
GENRES = ("main-captions", "main-news", "main-forums")


def sentence(rng: random.Random, words: int = 12) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(max(1, words - 4), words + 4)))
    return text[0].upper() + text[1:] + "."


def shares(n: int) -> dict[str, int]:
    fractions = {
        "stsb": 0.2,
        "sick": 0.1,
        "semeval": 0.1,
        "msrp": 0.1,
        "wikiqa": 0.1,
        "trecqa": 0.05,
        "beir": 0.15,
        "pairs": 0.1,
    }
    counts = {name: int(n * fraction) for name, fraction in fractions.items()}
    counts["triplets"] = n - sum(counts.values())
    return counts


def write_inputs(folder: Path, n: int, seed: int = 0) -> dict[str, Any]:
    """The raw files and the recipe; returns the recipe path and the expected rows per task."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    counts = shares(n)
    with open(folder / "stsb.tsv", "w") as out:
        for i in range(counts["stsb"]):
            extra = "\tsource-a\tsource-b" if i % 10 == 0 else ""
            score = rng.randint(0, 50) / 10
            out.write(
                f"{GENRES[i % 3]}\tMSRvid\t2012test\t{i:04d}\t{score:.3f}\t{sentence(rng)}\t{sentence(rng)}{extra}\n"
            )
    with open(folder / "sick.txt", "w") as out:
        out.write("pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n")
        for i in range(counts["sick"]):
            out.write(f"{i + 1}\t{sentence(rng)}\t{sentence(rng)}\t{rng.randint(10, 50) / 10}\tNEUTRAL\n")
    for part, name in enumerate(("answers-forums", "headlines")):
        with open(folder / f"semeval-{name}.tsv", "w") as out:
            for i in range(counts["semeval"] // 2 + part * (counts["semeval"] % 2)):
                if i % 5 == 0:
                    out.write(f"\t{sentence(rng)}\t{sentence(rng)}\n")  # unlabeled: skipped
                out.write(f"{rng.randint(0, 50) / 10:.2f}\t{sentence(rng)}\t{sentence(rng)}\n")
    with open(folder / "msrp.tsv", "w", encoding="utf-8-sig") as out:
        out.write("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
        for i in range(counts["msrp"]):
            out.write(f"{i % 2}\t{2 * i}\t{2 * i + 1}\t{sentence(rng)}\t{sentence(rng)}\n")
    with open(folder / "wikiqa.tsv", "w") as out:
        out.write("QuestionID\tQuestion\tSentenceID\tSentence\tLabel\n")
        sentence_id = 0
        for q in range(counts["wikiqa"] + counts["wikiqa"] // 2):
            question = f"how is item {q} described? " + sentence(rng, 6)
            correct = rng.randrange(4) if q % 3 != 2 else -1  # every third question unanswered
            for c in range(4):
                sentence_id += 1
                out.write(f"Q{q}\t{question}\tS{sentence_id}\t{sentence(rng)}\t{int(c == correct)}\n")
    with open(folder / "trecqa.csv", "w") as out:
        out.write("qtext,label,atext\n")
        for q in range(counts["trecqa"]):
            question = f'"Who wrote ""{sentence(rng, 4)}"" , number {q} ?"'
            for c in range(5):
                out.write(f'{question},{int(c == 0)},"{sentence(rng, 20).replace(" on ", " , on ")}"\n')
    beir = folder / "beir"
    (beir / "qrels").mkdir(parents=True)
    queries = counts["beir"]
    documents = 2 * queries
    with open(beir / "corpus.jsonl", "w") as corpus:
        for d in range(documents):
            corpus.write(json.dumps({"_id": f"d{d}", "title": "", "text": sentence(rng, 40)}) + "\n")
    with open(beir / "queries.jsonl", "w") as out:
        for q in range(queries):
            out.write(json.dumps({"_id": f"q{q}", "text": sentence(rng, 6)}) + "\n")
    with open(beir / "qrels" / "train.tsv", "w") as qrels, open(beir / "negatives.jsonl", "w") as negatives:
        qrels.write("query-id\tcorpus-id\tscore\n")
        for q in range(queries):
            qrels.write(f"q{q}\td{2 * q}\t3\nq{q}\td{2 * q + 1}\t{1 + q % 2}\n")
            mined = [f"d{(2 * q + 7919 * k) % documents}" for k in range(1, 5)]
            negatives.write(json.dumps({"query-id": f"q{q}", "corpus-ids": mined}) + "\n")
    with open(folder / "pairs.jsonl", "w") as out:
        for _ in range(counts["pairs"]):
            out.write(
                json.dumps({"anchor": sentence(rng, 8), "positive": sentence(rng), "score": rng.random()}) + "\n"
            )
    triplets = counts["triplets"]
    for start in range(0, triplets, 500_000):
        stop = min(triplets, start + 500_000)
        part = pa.table(
            {
                "anchor": [sentence(rng, 8) for _ in range(start, stop)],
                "positive": [sentence(rng) for _ in range(start, stop)],
                "negative": [sentence(rng) for _ in range(start, stop)],
            }
        )
        if start == 0:
            writer = pq.ParquetWriter(folder / "triplets.parquet", part.schema)
        writer.write_table(part)
    writer.close()
    sources = [
        {"name": "stsb", "format": "stsb", "data_files": "stsb.tsv", "task_type": "sts", "query_instruction": "Q: "},
        {"name": "sick", "format": "sick", "data_files": "sick.txt", "task_type": "sts"},
        {"name": "semeval", "format": "semeval-sts", "data_files": "semeval-*.tsv", "task_type": "sts"},
        {"name": "msrp", "format": "msrp", "data_files": "msrp.tsv", "task_type": "pair_classification"},
        {"name": "wikiqa", "format": "wikiqa", "data_files": "wikiqa.tsv", "task_type": "retrieval"},
        {"name": "trecqa", "format": "trecqa", "data_files": "trecqa.csv", "task_type": "retrieval"},
        {
            "name": "msmarco",
            "format": "beir",
            "data_files": "beir",
            "task_type": "retrieval",
            "options": {"negatives_file": "negatives.jsonl"},
        },
        {
            "name": "pairs",
            "format": "pairs",
            "data_files": "pairs.jsonl",
            "task_type": "retrieval",
            "options": {"score_column": "score"},
        },
        {"name": "triplets", "format": "triplets", "data_files": "triplets.parquet", "task_type": "retrieval"},
    ]
    recipe = folder / "recipe.yaml"
    recipe.write_text(json.dumps({"sources": sources}, indent=1))  # JSON is YAML
    return {"recipe": recipe, "rows": n}


def load_raw_files(folder: Path, cache: Path) -> int:
    """``datasets.load_dataset`` of every raw file of the recipe; returns the records read."""
    import datasets

    datasets.disable_progress_bars()
    if (folder / "shape.json").is_file():  # bench/sources.py's realistic inputs
        return sum(
            len(datasets.load_dataset(kind, split="train", cache_dir=str(cache), **kwargs))  # type: ignore[arg-type]
            for kind, kwargs in sources.raw_loads(folder)
        )
    tab = {"delimiter": "\t", "quoting": 3}
    loads: list[tuple[str, dict[str, Any]]] = [
        ("csv", {"data_files": str(folder / "stsb.tsv"), **tab, "column_names": [f"c{i}" for i in range(9)]}),
        ("csv", {"data_files": str(folder / "sick.txt"), **tab}),
        ("csv", {"data_files": str(folder / "semeval-*.tsv"), **tab, "column_names": ["score", "s1", "s2"]}),
        ("csv", {"data_files": str(folder / "msrp.tsv"), **tab}),
        ("csv", {"data_files": str(folder / "wikiqa.tsv"), **tab}),
        ("csv", {"data_files": str(folder / "trecqa.csv")}),
        ("json", {"data_files": str(folder / "beir" / "corpus.jsonl")}),
        ("json", {"data_files": str(folder / "beir" / "queries.jsonl")}),
        ("csv", {"data_files": str(folder / "beir" / "qrels" / "train.tsv"), **tab}),
        ("json", {"data_files": str(folder / "beir" / "negatives.jsonl")}),
        ("json", {"data_files": str(folder / "pairs.jsonl")}),
        ("parquet", {"data_files": str(folder / "triplets.parquet")}),
    ]
    return sum(
        len(datasets.load_dataset(kind, split="train", cache_dir=str(cache), **kwargs)) for kind, kwargs in loads
    )


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


def measure(
    command: list[str], env: dict[str, str] | None = None, memory: bool = True, warm: Sequence[Path] = ()
) -> dict[str, float]:
    """Run ``command``; its seconds and the sampled peaks of the process tree's memory (MB): ``pss_mb``, all
    its pages (file-backed ones included, such as memory-mapped Arrow files), and ``anon_mb``, its heap.
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
    peaks = {"pss": 0, "anon": 0}
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


def round_ratios(results: Sequence[dict[str, Any]], rows: int, top: str, bottom: str) -> list[float]:
    """``top``'s seconds over ``bottom``'s, round by round (the two measured back to back)."""
    seconds = {(row["mode"], row["round"]): row["seconds"] for row in results if row["rows"] == rows}
    rounds = sorted({round_ for mode, round_ in seconds if mode == top})
    return [seconds[top, r] / seconds[bottom, r] for r in rounds if (bottom, r) in seconds]


def print_ratio(name: str, results: Sequence[dict[str, Any]], rows: int, top: str, bottom: str) -> None:
    """The median of the rounds' ratios, and each round's: this machine's speed drifts by a third within
    minutes, and a ratio of medians would pair one mode's fast round with the other's slow one."""
    ratios = round_ratios(results, rows, top, bottom)
    if ratios:
        each = ", ".join(f"{ratio:.2f}" for ratio in ratios)
        rounds = f" (rounds: {each})" if len(ratios) > 1 else ""
        print(f"# {name}: {statistics.median(ratios):.2f}x{rounds}", flush=True)


def read_shards(folder: Path) -> int:
    """Every Parquet shard of a unified folder read whole with pyarrow (all columns); returns the rows."""
    import pyarrow.parquet as pq

    return sum(pq.read_table(path).num_rows for path in sorted((folder / "data").rglob("*.parquet")))


def digest(folder: Path) -> str:
    sha = hashlib.sha256()
    for path in sorted((folder / "data").rglob("*.parquet")):
        sha.update(path.relative_to(folder).as_posix().encode())
        sha.update(path.read_bytes())
    return sha.hexdigest()


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
        choices=["build-1", "build-N", "load_dataset", "validate", "read-shards", "cpu-loop"],
        help="validate: `hf-unified-embed validate` of the last build's folder, HF_DATASETS_CACHE an empty folder; "
        "cpu-loop: a pure-Python loop in 1 and in N processes (the machine's own speed-up, see cpu_loop)",
    )
    parser.add_argument("--scratch", type=Path, default=None, help="where to generate inputs (default: a temp folder)")
    parser.add_argument("--inputs", choices=["realistic", "mixed"], default="realistic", help="see the docstring")
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
        f"{'rows':>10} {'mode':<13} {'seconds':>8} {'CPU s':>7} {'rows/s':>9} {'tree PSS MB':>12} {'tree anon MB':>13}"
    )
    results = []
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix="bench-build-", dir=args.scratch) as scratch:
            folder = Path(scratch)
            started = time.perf_counter()
            inputs = (
                {"recipe": sources.write_sources(folder, n), "rows": n}
                if args.inputs == "realistic"
                else write_inputs(folder, n)
            )
            input_files = [path for path in folder.rglob("*") if path.is_file()]
            size = sum(path.stat().st_size for path in input_files)
            print(
                f"# {n:,} rows: inputs {size / 1e6:,.0f} MB written in {time.perf_counter() - started:.0f} s; "
                f"load average {load_average()}",
                flush=True,
            )
            digests = {}
            built: Path | None = None
            for round_ in range(args.repeat):
                if args.repeat > 1:
                    print(f"# round {round_ + 1} of {args.repeat}", flush=True)
                for mode in args.modes:
                    run_env = env
                    if mode == "cpu-loop":
                        for processes in (1, num_proc):
                            seconds = cpu_loop(processes)
                            label = f"cpu loop {processes}"
                            print(f"{n:>10,} {label:<13} {seconds:>8.2f}", flush=True)
                            results.append({"rows": n, "mode": label, "round": round_, "seconds": seconds})
                        continue
                    if mode == "load_dataset":
                        command = [
                            sys.executable,
                            __file__,
                            "--load-worker",
                            str(folder),
                            str(folder / f"cache-load-{round_}"),
                        ]
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
                    else:
                        processes = 1 if mode == "build-1" else num_proc
                        out = folder / f"out-{processes}-{round_}"
                        command = [
                            sys.executable,
                            "-m",
                            "hf_unified_embed",
                            "build",
                            str(inputs["recipe"]),
                            "-o",
                            str(out),
                        ]
                        command += ["--num-proc", str(processes)]
                        built = out
                    result = measure(command, run_env, memory=args.memory, warm=input_files)
                    if mode.startswith("build"):
                        digests[f"{mode} {round_}"] = digest(out)
                    if mode == "validate":
                        left = [path for path in cache.rglob("*")]
                        print(f"# validate left {len(left)} entries in HF_DATASETS_CACHE", flush=True)
                    label = f"build {num_proc}" if mode == "build-N" else mode.replace("-", " ")
                    print(
                        f"{n:>10,} {label:<13} {result['seconds']:>8.1f} {result['cpu_seconds']:>7.1f} "
                        f"{n / result['seconds']:>9,.0f} "
                        f"{result['pss_mb']:>12,.0f} {result['anon_mb']:>13,.0f}",
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
            ]
            for name, top, bottom in ratios:
                print_ratio(name, results, n, top, bottom)
            if len(digests) > 1:
                print(
                    f"# every build ({len(digests)}) wrote the same Parquet bytes: {len(set(digests.values())) == 1}"
                )
            print(f"# load average {load_average()}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
