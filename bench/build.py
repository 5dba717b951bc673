"""Benchmark: build throughput and peak memory of ``build_unified`` on large generated inputs.

Inputs (generated once per size into a scratch folder):
  * a BEIR folder with N queries, N corpus passages, one positive qrel per query and a mined
    negatives file with 4 negatives per query → N rows of (query, positive, 4 negatives);
  * a pairs JSON-lines file with N (anchor, positive) lines.

For each input and size, two fresh processes run back to back: ``build_unified`` (parse, join,
validate, write Arrow) and the baseline, a bare ``datasets.Dataset.from_generator`` that yields
the same rows, already joined, without reading files or validating. Reported: rows/s, peak RSS
(``ru_maxrss`` of each process) and the time ratio build / baseline; memory should not grow with N
(peak RSS at 100k vs 1M).

    .venv/bin/python bench/build.py                 # sizes 100000 and 1000000
    .venv/bin/python bench/build.py --sizes 20000   # quick run
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

NEGATIVES = 4


def query_text(i: int) -> str:
    return f"what is the meaning of item number {i} in the benchmark collection"


def passage_text(i: int) -> str:
    return f"Passage {i}: the benchmark item {i} is described here in a sentence of ordinary length for retrieval."


def negative_ids(i: int, n: int) -> list[int]:
    return [(i + k * 7919) % n for k in range(1, NEGATIVES + 1)]


def write_inputs(folder: Path, n: int) -> None:
    beir = folder / "beir"
    (beir / "qrels").mkdir(parents=True)
    with open(beir / "corpus.jsonl", "w") as corpus, open(beir / "queries.jsonl", "w") as queries:
        for i in range(n):
            corpus.write(json.dumps({"_id": f"d{i}", "title": "", "text": passage_text(i)}) + "\n")
            queries.write(json.dumps({"_id": f"q{i}", "text": query_text(i)}) + "\n")
    with open(beir / "qrels" / "train.tsv", "w") as qrels, open(beir / "negatives.jsonl", "w") as negatives:
        qrels.write("query-id\tcorpus-id\tscore\n")
        for i in range(n):
            qrels.write(f"q{i}\td{i}\t1\n")
            negatives.write(
                json.dumps({"query-id": f"q{i}", "corpus-ids": [f"d{j}" for j in negative_ids(i, n)]}) + "\n"
            )
    with open(folder / "pairs.jsonl", "w") as pairs:
        for i in range(n):
            pairs.write(json.dumps({"anchor": query_text(i), "positive": passage_text(i)}) + "\n")


def baseline_rows(kind: str, n: int) -> Iterator[dict[str, Any]]:
    for i in range(n):
        yield {
            "task": kind,
            "task_type": "retrieval",
            "query_instruction": "",
            "document_instruction": "",
            "query": query_text(i),
            "positives": [passage_text(i)],
            "negatives": [passage_text(j) for j in negative_ids(i, n)] if kind == "beir" else [],
            "positive_scores": [1.0] if kind == "beir" else [],
            "negative_scores": [],
        }


def worker(mode: str, kind: str, folder: Path, n: int) -> dict[str, float]:
    import datasets

    from hf_unified_embed.data import build_unified
    from hf_unified_embed.schema import UNIFIED_FEATURES

    datasets.disable_progress_bars()
    cache = tempfile.mkdtemp(dir=folder, prefix=f"cache-{mode}-")
    start = time.perf_counter()
    if mode == "build":
        source = {"name": kind, "task_type": "retrieval"}
        if kind == "beir":
            source |= {
                "format": "beir",
                "data_files": str(folder / "beir"),
                "options": {"negatives_file": "negatives.jsonl"},
            }
        else:
            source |= {"format": "pairs", "data_files": str(folder / "pairs.jsonl")}
        rows = len(build_unified({"sources": [source]}, cache_dir=cache)[kind])
    else:
        rows = len(
            datasets.Dataset.from_generator(
                baseline_rows, gen_kwargs={"kind": kind, "n": n}, features=UNIFIED_FEATURES, cache_dir=cache
            )
        )
    seconds = time.perf_counter() - start
    assert rows == n, (rows, n)
    return {
        "seconds": seconds,
        "rows_per_s": n / seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_worker(mode: str, kind: str, folder: Path, n: int) -> dict[str, float]:
    output = subprocess.run(
        [sys.executable, __file__, "--worker", mode, kind, str(folder), str(n)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--worker", nargs=4, metavar=("MODE", "KIND", "FOLDER", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        mode, kind, folder, n = args.worker
        print(json.dumps(worker(mode, kind, Path(folder), int(n))))
        return
    print(
        f"{'input':<6} {'rows':>9} {'build rows/s':>13} {'base rows/s':>12} {'time ratio':>10} {'build RSS MB':>13} {'base RSS MB':>12}"
    )
    peaks: dict[str, list[float]] = {}
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix="bench-build-") as scratch:
            folder = Path(scratch)
            write_inputs(folder, n)
            for kind in ("beir", "pairs"):
                built = run_worker("build", kind, folder, n)
                base = run_worker("baseline", kind, folder, n)
                peaks.setdefault(kind, []).append(built["peak_rss_mb"])
                print(
                    f"{kind:<6} {n:>9,} {built['rows_per_s']:>13,.0f} {base['rows_per_s']:>12,.0f} "
                    f"{built['seconds'] / base['seconds']:>10.2f} {built['peak_rss_mb']:>13.0f} {base['peak_rss_mb']:>12.0f}",
                    flush=True,
                )
    if len(args.sizes) > 1:
        for kind, values in peaks.items():
            print(
                f"{kind}: peak RSS at {args.sizes[-1]:,} rows / at {args.sizes[0]:,} rows = {values[-1] / values[0]:.2f}"
            )


if __name__ == "__main__":
    main()
