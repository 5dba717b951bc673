"""Evaluation suites on a tiny random model: every evaluator kind, results, model-index, errors."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import spearmanr

from hf_unified_embed.evaluation import (
    EvaluationDataError,
    GradedInformationRetrievalEvaluator,
    SuiteError,
    SuiteResults,
    build_evaluators,
    build_sequential_evaluator,
    load_suite,
    run_suite,
)
from hf_unified_embed.evaluation.inputs import sts_pairs
from tests._evaluation_helpers import STS_ROWS, all_kinds_suite, write_evaluation_files


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_evaluation_files(tmp_path_factory.mktemp("evaluation-data"))


@pytest.fixture(scope="module")
def tiny_model(tiny_model_path: str) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(tiny_model_path, device="cpu")


@pytest.fixture(scope="module")
def results(tiny_model: Any, data_root: Path) -> SuiteResults:
    return run_suite(tiny_model, all_kinds_suite(data_root), show_progress_bar=False)


def test_every_kind_reports_its_metrics(results: SuiteResults) -> None:
    expected = {
        "sts": ("spearman_cosine", ["spearman_cosine", "pearson_cosine"], 6),
        "retrieval": (
            "cosine_ndcg@10",
            ["cosine_ndcg@10", "cosine_mrr@10", "cosine_recall@10", "cosine_recall@100"],
            2,
        ),
        "rerank": ("map", ["map", "mrr@10", "ndcg@10"], 2),  # the question without a negative is left out
        "paraphrase": ("cosine_ap", ["cosine_ap", "cosine_f1", "cosine_accuracy"], 4),
    }
    for name, (primary, reported, examples) in expected.items():
        entry = results[name]
        assert entry.primary_metric == primary
        assert list(entry.reported_metrics) == reported
        assert entry.num_examples == examples
        assert all(np.isfinite(v) for v in entry.metrics.values())
    assert [row["evaluation"] for row in results.table if row["primary"]] == list(expected)


def test_sts_equals_spearman_of_cosine_computed_directly(results: SuiteResults, tiny_model: Any) -> None:
    labelled = [row for row in STS_ROWS if row[0]]
    first = tiny_model.encode([a for _, a, _ in labelled], normalize_embeddings=True)
    second = tiny_model.encode([b for _, _, b in labelled], normalize_embeddings=True)
    expected = spearmanr([float(s) for s, _, _ in labelled], (first * second).sum(axis=1)).statistic
    assert results["sts"].metrics["spearman_cosine"] == pytest.approx(expected, abs=1e-6)


def test_each_distinct_text_is_encoded_once(tiny_model: Any, data_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evaluator = build_evaluators(all_kinds_suite(data_root))["sts"]
    encoded: list[str] = []
    original = tiny_model.encode

    def counting_encode(inputs: Any, *args: Any, **kwargs: Any) -> Any:
        encoded.extend(inputs)
        return original(inputs, *args, **kwargs)

    monkeypatch.setattr(tiny_model, "encode", counting_encode)
    evaluator(tiny_model)
    distinct = set(evaluator.sentences1) | set(evaluator.sentences2)
    assert len(evaluator.sentences1) + len(evaluator.sentences2) > len(distinct)  # the fixture repeats sentences
    assert sorted(encoded) == sorted(distinct)


def test_model_index_parses_back_with_huggingface_hub(results: SuiteResults) -> None:
    from huggingface_hub import ModelCard, ModelCardData
    from huggingface_hub.repocard_data import model_index_to_eval_results

    index = results.model_index("tiny-model")
    name, parsed = model_index_to_eval_results(index)
    assert name == "tiny-model"
    assert len(parsed) == len(results.table)
    sts = [r for r in parsed if r.dataset_name == "sts"]
    assert {r.task_type for r in sts} == {"semantic-similarity"}
    assert {r.dataset_type for r in sts} == {"org/sts"}
    # Cards show 4 digits; the JSON results keep full precision.
    assert {r.metric_type: r.metric_value for r in sts}["spearman_cosine"] == round(results["sts"].primary_value, 4)
    assert {r.task_type for r in parsed} == {
        "semantic-similarity",
        "information-retrieval",
        "reranking",
        "binary-classification",
    }
    card_data = ModelCardData(model_name="tiny-model", eval_results=results.eval_results())
    card = ModelCard(f"---\n{card_data.to_yaml()}\n---\n\n# tiny-model\n")
    assert len(card.data.eval_results) == len(results.table)
    assert card.data.to_dict()["model-index"] == index


def test_diagnostics_per_set_and_in_table(results: SuiteResults) -> None:
    assert set(results.diagnostics) == {"sts", "retrieval", "rerank", "paraphrase"}
    sts = results["sts"].diagnostics
    assert sts is not None and sts.num_texts == 8  # capped by max_texts
    assert -1 <= sts.token_similarity <= 1 and sts.rank >= 1 and sts.condition_number >= 1
    table = results.format_table()
    assert "spearman_cosine*" in table and "Embedding-space diagnostics" in table


def test_results_json_is_written_atomically_and_not_overwritten(results: SuiteResults, tmp_path: Path) -> None:
    target = results.save_json(tmp_path / "out" / "results.json")
    data = json.loads(target.read_text())
    assert data["results"]["retrieval"]["primary_metric"] == "cosine_ndcg@10"
    assert data["results"]["sts"]["diagnostics"]["num_texts"] == 8
    assert data["model-index"][0]["results"]
    with pytest.raises(FileExistsError, match="overwrite"):
        results.save_json(target)
    results.save_json(target, overwrite=True)
    assert [p.name for p in target.parent.iterdir()] == ["results.json"]


def test_graded_ndcg_uses_grades_and_binary_metrics_use_threshold() -> None:
    corpus = {f"d{i}": f"doc {i}" for i in range(4)}
    evaluator = GradedInformationRetrievalEvaluator(
        {"q": "query"}, corpus, {"q": {"d0": 1.0, "d1": 3.0}}, relevance_threshold=2.0, ndcg_at_k=[10], mrr_at_k=[10]
    )
    ranking = [
        {"corpus_id": cid, "score": score} for cid, score in (("d0", 0.9), ("d2", 0.8), ("d1", 0.7), ("d3", 0.1))
    ]
    metrics = evaluator.compute_metrics([ranking])
    dcg = 1.0 / np.log2(2) + 3.0 / np.log2(4)
    ideal = 3.0 / np.log2(2) + 1.0 / np.log2(3)
    assert metrics["ndcg@k"][10] == pytest.approx(dcg / ideal)
    assert metrics["mrr@k"][10] == pytest.approx(1 / 3)  # only d1 (grade 3 ≥ 2) is relevant


def test_sequential_evaluator_scores_the_mean_of_primary_metrics(
    tiny_model: Any, data_root: Path, results: SuiteResults
) -> None:
    suite = all_kinds_suite(data_root)
    evaluator = build_sequential_evaluator(suite)
    scores = evaluator(tiny_model)
    primaries = [entry.primary_value for entry in results.entries]
    assert scores["sequential_score"] == pytest.approx(statistics.fmean(primaries), abs=1e-6)


def test_unified_folder_entry_matches_source_entry(
    tiny_model: Any, data_root: Path, results: SuiteResults, tmp_path: Path
) -> None:
    from hf_unified_embed.data import build_unified, save_unified

    recipe = {
        "sources": [
            {
                "name": "sts",
                "format": "semeval-sts",
                "data_files": str(data_root / "sts" / "*.tsv"),
                "task_type": "sts",
                "split": "test",
            }
        ]
    }
    save_unified(build_unified(recipe), tmp_path / "unified")
    suite = {
        "evaluations": [{"name": "sts-unified", "kind": "sts", "unified": str(tmp_path / "unified"), "task": "sts"}]
    }
    unified = run_suite(tiny_model, suite, diagnostics=False, show_progress_bar=False)
    assert unified["sts-unified"].metrics == pytest.approx(results["sts"].metrics, abs=1e-5)
    assert unified["sts-unified"].diagnostics is None


def test_yaml_suite_resolves_data_root_relative_to_the_file(data_root: Path, tmp_path: Path) -> None:
    import yaml

    suite = all_kinds_suite(data_root)
    suite["data_root"] = str(Path("..") / data_root.name)
    folder = data_root.parent / "suites"
    folder.mkdir(exist_ok=True)
    (folder / "suite.yaml").write_text(yaml.safe_dump(suite), encoding="utf-8")
    loaded = load_suite(folder / "suite.yaml")
    assert loaded.data_root is not None and loaded.data_root.resolve() == data_root.resolve()
    assert [e.name for e in loaded.entries] == ["sts", "retrieval", "rerank", "paraphrase"]
    assert load_suite(folder / "suite.yaml", data_root=tmp_path).data_root == tmp_path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "classification"}, r"evaluations\[0\].*'kind'.*expected one of"),
        ({"unified": "somewhere"}, r"evaluations\[0\].*either 'source'"),
        ({"data_files": None}, r"evaluations\[0\].*'data_files'"),
        ({"colour": "blue"}, r"evaluations\[0\] \(sts\): unknown field\(s\) \['colour'\]"),
        ({"corpus_files": "c.jsonl"}, r"'corpus_files': kind 'sts' has no corpus"),
    ],
)
def test_malformed_entries_name_the_entry_and_field(data_root: Path, change: dict[str, Any], message: str) -> None:
    suite = all_kinds_suite(data_root)
    suite["evaluations"][0] = {**suite["evaluations"][0], **change}
    with pytest.raises(SuiteError, match=message):
        load_suite(suite)


def test_suite_level_errors(data_root: Path) -> None:
    suite = all_kinds_suite(data_root)
    with pytest.raises(SuiteError, match="must be unique"):
        load_suite({**suite, "evaluations": suite["evaluations"][:1] * 2})
    with pytest.raises(SuiteError, match="unknown top-level"):
        load_suite({**suite, "evals": []})
    with pytest.raises(SuiteError, match="no evaluations"):
        load_suite({"evaluations": []})
    with pytest.raises(SuiteError, match="diagnostics: unknown"):
        load_suite({**suite, "diagnostics": {"max_text": 3}})
    with pytest.raises(SuiteError, match="diagnostics: max_texts must be a positive integer"):
        load_suite({**suite, "diagnostics": {"max_texts": "many"}})


@pytest.mark.parametrize(
    ("index", "options", "message"),
    [
        (
            0,
            {"not_an_argument": 1},
            r"STSEvaluator has no option 'not_an_argument'; options of kind 'sts': batch_size",
        ),
        (0, {"batch_siz": 4}, r"STSEvaluator has no option 'batch_siz'; did you mean 'batch_size'\?"),
        (0, {"batch_size": "x"}, r"option 'batch_size': input should be a valid integer, got 'x'"),
        (0, {"main_similarity": "dot"}, r"option 'main_similarity' is set by kind 'sts' itself"),
        (1, {"ndcg_at_k": 5}, r"option 'ndcg_at_k': input should be a valid list, got 5"),
        (1, {"mrr_at_k": [10, "a"]}, r"option 'mrr_at_k': \[1\] input should be a valid integer, got \[10, 'a'\]"),
        (3, {"label_threshold": "half"}, r"option 'label_threshold': input should be a valid number, got 'half'"),
    ],
)
def test_evaluator_options_are_checked_when_the_suite_loads(
    data_root: Path, index: int, options: dict[str, Any], message: str
) -> None:
    suite = all_kinds_suite(data_root)
    suite["evaluations"][index]["evaluator"] = options
    with pytest.raises(SuiteError, match=rf"evaluations\[{index}\]: entry '\w+', field 'evaluator': {message}"):
        load_suite(suite)


def test_sts_rows_without_scores_are_rejected_with_their_row() -> None:
    rows = [
        {"query": "a", "positives": ["b"], "negatives": [], "positive_scores": [0.5], "negative_scores": []},
        {"query": "c", "positives": ["d"], "negatives": [], "positive_scores": [], "negative_scores": []},
    ]
    with pytest.raises(EvaluationDataError, match=r"evaluation 'x', row 1, field 'positive_scores'"):
        sts_pairs(rows, "x")
