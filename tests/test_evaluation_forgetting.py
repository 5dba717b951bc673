"""``kind: forgetting``: neighbour overlap and pair-similarity Spearman against a reference model, no labels."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hf_unified_embed.evaluation import SuiteError, load_suite, run_suite, set_reference_model
from hf_unified_embed.evaluation.kinds import forgetting
from hf_unified_embed.evaluation.kinds.forgetting import (
    ForgettingEvaluator,
    neighbour_overlap,
    sample_pairs,
    similarity_spearman,
)
from tests.conftest import make_tiny_model

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "data"


def slow_overlap(reference: np.ndarray, trained: np.ndarray, k: int) -> float:
    """Per text: the k most cosine-similar other texts under each model (a loop), the shared share."""

    def top(embeddings: np.ndarray, i: int) -> set[int]:
        scores = [(float(embeddings[i] @ embeddings[j]), j) for j in range(len(embeddings)) if j != i]
        return {j for _, j in sorted(scores, key=lambda item: -item[0])[:k]}

    shares = [len(top(reference, i) & top(trained, i)) / k for i in range(len(reference))]
    return sum(shares) / len(shares)


def slow_spearman(x: list[float], y: list[float]) -> float:
    """Pearson of the ranks (average ranks for ties), written out."""

    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=lambda i: values[i])
        result = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for position in range(i, j + 1):
                result[order[position]] = (i + j) / 2 + 1
            i = j + 1
        return result

    a, b = ranks(x), ranks(y)
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    covariance = sum((p - mean_a) * (q - mean_b) for p, q in zip(a, b))
    return covariance / (sum((p - mean_a) ** 2 for p in a) * sum((q - mean_b) ** 2 for q in b)) ** 0.5


def normalised(rows: int, dim: int, seed: int) -> torch.Tensor:
    return F.normalize(torch.randn(rows, dim, generator=torch.Generator().manual_seed(seed)), dim=-1)


@pytest.mark.parametrize("k", [1, 3, 7])
def test_neighbour_overlap_equals_slow_transcription(k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forgetting, "_BLOCK", 5)  # several blocks of the blockwise search
    reference = normalised(23, 8, 0)
    trained = F.normalize(reference + 0.4 * normalised(23, 8, 1), dim=-1)
    expected = slow_overlap(reference.numpy(), trained.numpy(), k)
    assert neighbour_overlap(reference, trained, k) == pytest.approx(expected, abs=1e-12)
    assert neighbour_overlap(reference, reference, k) == 1.0


@pytest.mark.parametrize("max_pairs", [1_000, 40])
def test_similarity_spearman_equals_slow_transcription(max_pairs: int) -> None:
    reference = normalised(17, 6, 2)
    trained = F.normalize(reference + 0.5 * normalised(17, 6, 3), dim=-1)
    first, second = sample_pairs(17, max_pairs, seed=0)
    assert len(first) == min(max_pairs, 17 * 16 // 2)
    assert len(set(zip(first.tolist(), second.tolist()))) == len(first)  # distinct pairs
    assert all(a < b for a, b in zip(first.tolist(), second.tolist()))
    before = [float(reference[a] @ reference[b]) for a, b in zip(first.tolist(), second.tolist())]
    after = [float(trained[a] @ trained[b]) for a, b in zip(first.tolist(), second.tolist())]
    expected = slow_spearman(before, after)
    assert similarity_spearman(reference, trained, max_pairs, seed=0) == pytest.approx(expected, abs=1e-9)
    assert similarity_spearman(reference, reference, max_pairs, seed=0) == pytest.approx(1.0)


def test_all_pairs_below_the_cap() -> None:
    first, second = sample_pairs(6, 100, seed=0)
    assert sorted(zip(first.tolist(), second.tolist())) == list(itertools.combinations(range(6), 2))


def suite(reference: str | None = None, **evaluator: Any) -> dict[str, Any]:
    options = dict(evaluator, **({"reference": reference} if reference else {}))
    return {
        "data_root": str(SAMPLE),
        "diagnostics": False,
        "evaluations": [
            {
                "name": "forgetting-sample",
                "kind": "forgetting",
                "source": "beir",
                "data_files": "msmarco-dl-sample",
                "evaluator": {"k": 5, "max_texts": 150, **options},
            }
        ],
    }


@pytest.fixture(scope="module")
def other_tiny_model(tmp_path_factory: pytest.TempPathFactory, minilm_path: str) -> str:
    """A second random tiny BERT (another seed): unrelated to the session's tiny model."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-bert-other"), minilm_path, seed=1)


def test_identical_model_scores_perfect_and_random_model_low(tiny_model_path: str, other_tiny_model: str) -> None:
    from sentence_transformers import SentenceTransformer

    same = run_suite(SentenceTransformer(tiny_model_path), suite(tiny_model_path), show_progress_bar=False)
    entry = same["forgetting-sample"]
    assert entry.primary_metric == "neighbour_overlap@5"
    assert entry.metrics["neighbour_overlap@5"] == pytest.approx(1.0)
    assert entry.metrics["similarity_spearman"] == pytest.approx(1.0)
    assert entry.num_examples == 150  # of the sample's 205 distinct texts

    other = run_suite(SentenceTransformer(other_tiny_model), suite(tiny_model_path), show_progress_bar=False)
    metrics = other["forgetting-sample"].metrics
    # Two random BERTs still share lexical overlap (mean pooling of shared tokens), hence above chance.
    assert metrics["neighbour_overlap@5"] < 0.35
    assert metrics["similarity_spearman"] < 0.7


def test_reference_is_required_and_filled_in_by_the_caller(tiny_model_path: str) -> None:
    from sentence_transformers import SentenceTransformer

    with pytest.raises(SuiteError, match=r"forgetting-sample.*needs 'reference'"):
        run_suite(SentenceTransformer(tiny_model_path), suite(), show_progress_bar=False)
    loaded = set_reference_model(load_suite(suite()), tiny_model_path)
    results = run_suite(SentenceTransformer(tiny_model_path), loaded, show_progress_bar=False)
    assert results["forgetting-sample"].metrics["neighbour_overlap@5"] == pytest.approx(1.0)
    # An entry that names its own reference keeps it.
    own = set_reference_model(load_suite(suite("elsewhere")), tiny_model_path)
    assert own.entries[0].evaluator["reference"] == "elsewhere"


def test_bad_options_are_suite_errors() -> None:
    with pytest.raises(SuiteError, match="no option 'neighbours'"):
        load_suite(suite("x", neighbours=3))
    with pytest.raises(SuiteError, match="'k'"):
        load_suite(suite("x", k="ten"))


def test_reference_embeddings_are_computed_once_per_process(
    tiny_model_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sentence_transformers import SentenceTransformer

    monkeypatch.setattr(forgetting, "_REFERENCE_CACHE", type(forgetting._REFERENCE_CACHE)())
    model = SentenceTransformer(tiny_model_path)
    texts = [f"text number {i} about topic {i % 7}" for i in range(40)]
    reference = SentenceTransformer(tiny_model_path)
    calls = []
    original = reference.encode
    monkeypatch.setattr(reference, "encode", lambda *a, **kw: calls.append(1) or original(*a, **kw))
    for _ in range(3):
        metrics = ForgettingEvaluator(texts, reference, k=4, name="f")(model)
    assert len(calls) == 1
    assert metrics["f_neighbour_overlap@4"] == pytest.approx(1.0)
    # Both models embed at the evaluated model's length: a shorter model is compared at its own length.
    model.max_seq_length = 4
    short = ForgettingEvaluator(texts, reference, k=4)(model)
    assert short["neighbour_overlap@4"] == pytest.approx(1.0)
    assert reference.max_seq_length == 64  # restored
