"""Benchmark: the per-step cost of keeping the base (``KeepBaseLoss``) against the task loss alone.

One optimizer step's work — forward, loss, backward — of all-MiniLM-L6-v2 (the packaged copy) on a
fixed batch of real rows (WikiQA questions with an answer and a wrong candidate, or STS-B pairs),
once with the task loss alone and once wrapped in ``KeepBaseLoss`` (one more forward pass of the
frozen base, no gradient, and the in-batch score matrix). The two alternate and each keeps its
median over ``--repeat`` steps, so a shared machine's load moves both alike. Also with gradient
caching (``--mini-batch-size``): the base then embeds in mini-batches too.

    flock /work/.bench.lock .venv/bin/python bench/keep_base.py --batch-size 32 --max-seq-length 64
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent


def batch(kind: str, size: int, data_root: Path) -> tuple[list[list[str]], Any]:
    """Columns of real rows: ``retrieval`` → (question, answer, wrong candidate); ``sts`` → (s1, s2) + scores."""
    import torch

    from hf_unified_embed.data import build_unified

    path, fmt = (
        ("ir/wikiqa/train.tsv", "wikiqa") if kind == "retrieval" else ("sts/stsbenchmark/sts-train.csv", "stsb")
    )
    rows = build_unified(
        {"sources": [{"name": "t", "format": fmt, "task_type": kind, "data_files": str(data_root / path)}]}
    )["t"]
    if kind == "retrieval":
        rows = rows.filter(lambda row: bool(row["negatives"])).select(range(size))
        return [rows["query"], [p[0] for p in rows["positives"]], [n[0] for n in rows["negatives"]]], None
    rows = rows.select(range(size))
    return [rows["query"], [p[0] for p in rows["positives"]]], torch.tensor([s[0] for s in rows["positive_scores"]])


def step(loss: Any, features: list[dict[str, Any]], labels: Any) -> float:
    from hf_unified_embed.losses.parts import total_loss

    began = time.perf_counter()
    total_loss(loss(features, labels)).backward()
    loss.model.zero_grad(set_to_none=True)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--mini-batch-size", type=int, default=8, help="the gradient-cached case")
    parser.add_argument("--repeat", type=int, default=8, help="timed steps of each loss (after one warm-up)")
    parser.add_argument("--data-root", type=Path, default=REPO.parent / "shared" / "data")
    args = parser.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.losses import CoDiEmbSTSLoss, KeepBaseLoss, MultiPositiveInfoNCELoss
    from hf_unified_embed.recipe import packaged_minilm_path

    model = SentenceTransformer(packaged_minilm_path(), device="cpu")
    model.max_seq_length = args.max_seq_length
    cases = [
        ("retrieval", "MultiPositiveInfoNCELoss", lambda mini: MultiPositiveInfoNCELoss(model, mini_batch_size=mini)),
        ("sts", "CoDiEmbSTSLoss", lambda mini: CoDiEmbSTSLoss(model, mini_batch_size=mini)),
    ]
    print(
        f"MiniLM, batch {args.batch_size} × {args.max_seq_length} tokens, CPU ({torch.get_num_threads()} threads), "
        f"median of {args.repeat} steps each"
    )
    print(f"{'task loss':<28} {'mini-batch':>10} {'alone s':>8} {'+keep s':>8} {'ratio':>6}")
    for kind, name, factory in cases:
        columns, labels = batch(kind, args.batch_size, args.data_root)
        features = [dict(model.preprocess(column)) for column in columns]
        for mini in (None, args.mini_batch_size):
            alone = factory(mini)
            kept = KeepBaseLoss(factory(mini))
            times: dict[str, list[float]] = {"alone": [], "kept": []}
            step(alone, features, labels), step(kept, features, labels)  # warm-up
            for _ in range(args.repeat):
                times["alone"].append(step(alone, features, labels))
                times["kept"].append(step(kept, features, labels))
            a, k = statistics.median(times["alone"]), statistics.median(times["kept"])
            print(f"{name:<28} {mini or '—':>10} {a:>8.3f} {k:>8.3f} {k / a:>6.2f}", flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
