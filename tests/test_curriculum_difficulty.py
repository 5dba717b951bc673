"""Instance difficulty φ (Data-CUBE Eq. 8) with a tiny teacher: direct computation, dedupe, shards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _curriculum_helpers import tiny_tasks
from sentence_transformers import SentenceTransformer

from hf_unified_embed.curriculum import DistinctTexts, add_difficulty, difficulty_from_embeddings, score_difficulty
from hf_unified_embed.curriculum.texts import load_shards, save_shard


@pytest.fixture(scope="module")
def teacher(tiny_model_path: str) -> SentenceTransformer:
    return SentenceTransformer(tiny_model_path, device="cpu")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


_ENCODED: dict[tuple[int, str, str], np.ndarray] = {}


def encode_one(model: SentenceTransformer, text: str, prompt: str) -> np.ndarray:
    """The reference: one text at a time, straight through ``model.encode`` (memoised to keep the test fast)."""
    key = (id(model), prompt, text)
    if key not in _ENCODED:
        _ENCODED[key] = model.encode([text], prompt=prompt or None, convert_to_numpy=True)[0]
    return _ENCODED[key]


def test_phi_matches_direct_computation_row_by_row(teacher: SentenceTransformer) -> None:
    tasks = tiny_tasks()
    scores = score_difficulty(teacher, tasks, negative_pool=0, show_progress_bar=False)
    for task, dataset in tasks.items():
        assert scores[task].dtype == np.float32 and scores[task].shape == (len(dataset),)
        for index, row in enumerate(dataset):
            query = encode_one(teacher, row["query"], row["query_instruction"])
            document = row["document_instruction"]
            positive = cosine(query, encode_one(teacher, row["positives"][0], document))
            negatives = [cosine(query, encode_one(teacher, text, document)) for text in row["negatives"]]
            expected = positive - (max(negatives) if negatives else 0.0)
            assert scores[task][index] == pytest.approx(expected, abs=2e-5), (task, index)


def test_rows_without_negatives_use_the_hardest_other_positive_of_the_task(teacher: SentenceTransformer) -> None:
    tasks = tiny_tasks()
    scores = score_difficulty(teacher, tasks, negative_pool=1_000, show_progress_bar=False)
    dataset = tasks["beta"]
    first_positives = sorted({row["positives"][0] for row in dataset})
    for index, row in enumerate(dataset):
        if row["negatives"]:
            continue
        query = encode_one(teacher, row["query"], "")
        pool = [text for text in first_positives if text not in row["positives"] and text != row["query"]]
        expected = cosine(query, encode_one(teacher, row["positives"][0], "")) - max(
            cosine(query, encode_one(teacher, text, "")) for text in pool
        )
        assert scores["beta"][index] == pytest.approx(expected, abs=2e-5)


def test_each_distinct_input_is_encoded_once(teacher: SentenceTransformer, monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = tiny_tasks()
    distinct = DistinctTexts.from_tasks(tasks)
    expected = set()
    for dataset in tasks.values():
        for row in dataset:
            expected.add((row["query_instruction"], row["query"]))
            expected |= {(row["document_instruction"], text) for text in row["positives"] + row["negatives"]}
    assert len(distinct) == len(expected) < distinct.total_references
    seen: list[tuple[str, str]] = []
    original = teacher.encode

    def counting_encode(texts, prompt=None, **kwargs):
        seen.extend((prompt or "", text) for text in texts)
        return original(texts, prompt=prompt, **kwargs)

    monkeypatch.setattr(teacher, "encode", counting_encode)
    score_difficulty(teacher, tasks, show_progress_bar=False)
    assert len(seen) == len(set(seen)) == len(expected)
    assert set(seen) == expected


def test_sharded_encoding_merges_to_the_unsharded_result(teacher: SentenceTransformer, tmp_path: Path) -> None:
    tasks = tiny_tasks()
    distinct = DistinctTexts.from_tasks(tasks)
    fingerprint = distinct.fingerprint("tiny")
    for shard in range(3):
        part = distinct.encode(teacher, distinct.shard_ids(shard, 3), show_progress_bar=False)
        save_shard(tmp_path, shard, 3, part, fingerprint)
    merged = difficulty_from_embeddings(distinct, load_shards(tmp_path, distinct, fingerprint))
    whole = score_difficulty(teacher, tasks, show_progress_bar=False)
    for task in tasks:
        np.testing.assert_allclose(merged[task], whole[task], atol=1e-5)
    with pytest.raises(ValueError, match="fingerprint differs"):
        load_shards(tmp_path, distinct, distinct.fingerprint("another teacher"))
    (tmp_path / "embeddings-00001-of-00003.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"lacks shards \[1\] of 3"):
        load_shards(tmp_path, distinct, fingerprint)


def test_add_difficulty_adds_or_replaces_a_float32_column() -> None:
    tasks = tiny_tasks()
    scores = {task: np.linspace(-1, 1, len(dataset)) for task, dataset in tasks.items()}
    scored = add_difficulty(tasks, scores)
    assert scored["alpha"].features["difficulty"].dtype == "float32"
    rescored = add_difficulty(scored, {task: -values for task, values in scores.items()})
    np.testing.assert_allclose(rescored["beta"]["difficulty"], -scores["beta"], atol=1e-6)
    with pytest.raises(ValueError, match="'gamma': 2 difficulty scores for 6 rows"):
        add_difficulty(tasks, {**scores, "gamma": np.zeros(2)})


def test_mixed_instructions_within_a_task_are_refused() -> None:
    from datasets import Dataset

    from hf_unified_embed.schema import UNIFIED_FEATURES, UnifiedSchemaError

    rows = tiny_tasks()["alpha"].to_list()
    rows[3]["query_instruction"] = "Something else: "
    with pytest.raises(UnifiedSchemaError, match=r"task 'alpha'.*query_instruction"):
        DistinctTexts.from_tasks({"alpha": Dataset.from_list(rows, features=UNIFIED_FEATURES)})


def test_rows_without_positives_or_pool_from_precomputed_embeddings() -> None:
    from datasets import Dataset

    from hf_unified_embed.schema import UNIFIED_FEATURES

    def row(query: str, positives: list[str], negatives: list[str]) -> dict:
        return {
            "task": "topics",
            "task_type": "clustering",
            "query_instruction": "",
            "document_instruction": "",
            "query": query,
            "positives": positives,
            "negatives": negatives,
            "positive_scores": [],
            "negative_scores": [],
        }

    rows = [row("q0", [], ["n0", "n1"]), row("q1", ["p1", "p2"], []), row("q2", ["p2"], []), row("q3", [], [])]
    tasks = {"topics": Dataset.from_list(rows, features=UNIFIED_FEATURES)}
    distinct = DistinctTexts.from_tasks(tasks)
    embeddings = np.random.default_rng(0).normal(size=(len(distinct), 6)).astype(np.float32)
    vector = {text: embeddings[i] for i, text in enumerate(distinct.texts)}
    phi = difficulty_from_embeddings(distinct, embeddings, negative_pool=10)["topics"]
    # No positive: only the negative term. Pool = first positives {p1, p2}; a row's own positives are skipped.
    assert phi[0] == pytest.approx(
        -max(cosine(vector["q0"], vector["n0"]), cosine(vector["q0"], vector["n1"])), abs=1e-6
    )
    assert phi[1] == pytest.approx(cosine(vector["q1"], vector["p1"]), abs=1e-6)  # p1 and p2 are its own
    assert phi[2] == pytest.approx(cosine(vector["q2"], vector["p2"]) - cosine(vector["q2"], vector["p1"]), abs=1e-6)
    assert phi[3] == pytest.approx(
        -max(cosine(vector["q3"], vector["p1"]), cosine(vector["q3"], vector["p2"])), abs=1e-6
    )
    assert np.isfinite(difficulty_from_embeddings(distinct, embeddings, negative_pool=0)["topics"]).all()
