"""A retrieval entry ranks the documents of its BEIR files under their ids, as sentence-transformers'
``InformationRetrievalEvaluator`` built from the same files does: identical texts under two ids stay two
documents (the MS MARCO subset holds one such pair, both judged relevant to one query)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.errors import SourceFormatError
from hf_unified_embed.evaluation import run_suite
from hf_unified_embed.evaluation.inputs import read_corpus_files, retrieval_inputs

#: Metrics computed from the ranking with binary relevance (nDCG is graded by design, so it is left out).
BINARY = ("accuracy@", "precision@", "recall@", "mrr@", "map@")
K = [1, 2, 3, 10]


def write_beir(
    folder: Path, corpus: list[tuple[str, str]], queries: list[str], qrels: list[tuple[int, str, int]]
) -> Path:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    folder.joinpath("corpus.jsonl").write_text(
        "".join(json.dumps({"_id": doc_id, "text": text}) + "\n" for doc_id, text in corpus), encoding="utf-8"
    )
    folder.joinpath("queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{n}", "text": text}) + "\n" for n, text in enumerate(queries)), encoding="utf-8"
    )
    folder.joinpath("qrels", "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{q}\t{doc}\t{grade}\n" for q, doc, grade in qrels),
        encoding="utf-8",
    )
    return folder


def plain_evaluator_metrics(model: Any, folder: Path) -> dict[str, float]:
    """sentence-transformers' own evaluator on the files, as its documentation builds one."""
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
    from sentence_transformers.util import cos_sim

    def records(name: str) -> dict[str, str]:
        lines = folder.joinpath(name).read_text(encoding="utf-8").splitlines()
        return {record["_id"]: record["text"] for record in map(json.loads, lines)}

    relevant: dict[str, set[str]] = {}
    for line in folder.joinpath("qrels", "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        query, document, grade = line.split("\t")
        if float(grade) > 0:
            relevant.setdefault(query, set()).add(document)
    queries = {qid: text for qid, text in records("queries.jsonl").items() if qid in relevant}
    evaluator = InformationRetrievalEvaluator(
        queries,
        records("corpus.jsonl"),
        relevant,
        mrr_at_k=K,
        ndcg_at_k=K,
        accuracy_at_k=K,
        precision_recall_at_k=K,
        map_at_k=K,
        score_functions={"cosine": cos_sim},
        name="plain",
    )
    return {key.removeprefix("plain_"): value for key, value in evaluator(model).items()}


def suite_metrics(model: Any, root: Path) -> dict[str, float]:
    options = {"mrr_at_k": K, "ndcg_at_k": K, "accuracy_at_k": K, "precision_recall_at_k": K, "map_at_k": K}
    suite = {
        "data_root": str(root),
        "batch_size": 8,
        "diagnostics": False,
        "evaluations": [
            {
                "name": "ids",
                "kind": "retrieval",
                "source": "beir",
                "data_files": "beir",
                "split": "test",
                "evaluator": options,
            }
        ],
    }
    return run_suite(model, suite)["ids"].metrics


def binary_metrics(metrics: dict[str, float]) -> dict[str, float]:
    return {
        key: value for key, value in metrics.items() if key.startswith("cosine_") and any(m in key for m in BINARY)
    }


@pytest.fixture(scope="module")
def tiny_model(tiny_model_path: str) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(tiny_model_path, device="cpu")


SENTENCES = [
    "how do vaccines train the immune system",
    "the capital of france is paris",
    "a recipe for sourdough bread",
    "photosynthesis turns light into chemical energy",
    "the stock market fell sharply on monday",
    "cats sleep for most of the day",
    "rainfall in the desert is rare",
    "the violin has four strings",
]


def test_identical_texts_under_two_ids_are_two_documents(tiny_model: Any, tmp_path: Path) -> None:
    corpus = [(f"d{n}", text) for n, text in enumerate(SENTENCES)] + [("copy", SENTENCES[0])]
    write_beir(
        tmp_path / "beir",
        corpus,
        ["what trains immunity", "where is paris"],
        [(0, "d0", 2), (0, "copy", 2), (1, "d1", 1)],
    )

    ours, theirs = suite_metrics(tiny_model, tmp_path), plain_evaluator_metrics(tiny_model, tmp_path / "beir")

    # Text-keyed, the corpus held 8 documents and query 0 one relevant one: recall@1 was 1.0 instead of 0.5.
    assert binary_metrics(ours) == pytest.approx(binary_metrics(theirs), abs=1e-9)
    inputs = retrieval_inputs(
        [{"query": "q", "positives": [SENTENCES[0]], "positive_scores": [], "negatives": []}],
        "ids",
        extra_corpus=read_corpus_files("beir/corpus.jsonl", tmp_path, evaluation="ids"),
    )
    assert len(inputs.corpus) == len(corpus)
    assert inputs.relevance == {"q": {"d0": 1.0, "copy": 1.0}}


def test_a_row_text_that_is_also_an_id_stays_its_own_document(tmp_path: Path) -> None:
    write_beir(tmp_path / "beir", [("a text", "first"), ("2", "second")], ["q"], [(0, "2", 1)])
    extra = read_corpus_files("beir/corpus.jsonl", tmp_path, evaluation="ids")
    rows = [{"query": "q", "positives": ["a text"], "positive_scores": [], "negatives": ["second"]}]

    inputs = retrieval_inputs(rows, "ids", extra_corpus=extra)

    assert sorted(inputs.corpus.values()) == ["a text", "first", "second"]
    (relevant,) = inputs.relevance["q"]
    assert inputs.corpus[relevant] == "a text"


def test_an_id_twice_in_one_corpus_file_names_the_file_and_its_lines(tmp_path: Path) -> None:
    write_beir(tmp_path / "beir", [("1", "one"), ("2", "two"), ("1", "again")], ["q"], [(0, "1", 1)])
    with pytest.raises(SourceFormatError) as error:
        read_corpus_files("beir/corpus.jsonl", tmp_path, evaluation="ids")
    assert "duplicate _id '1' on lines 1 and 3" in str(error.value)
    assert "corpus.jsonl" in str(error.value)


def test_several_corpus_files_keep_overlapping_ids_apart(tmp_path: Path) -> None:
    write_beir(tmp_path / "a", [("1", "one")], ["q"], [(0, "1", 1)])
    write_beir(tmp_path / "b", [("1", "uno")], ["q"], [(0, "1", 1)])
    documents = read_corpus_files(["a/corpus.jsonl", "b/corpus.jsonl"], tmp_path, evaluation="ids")
    assert documents == {"0:1": "one", "1:1": "uno"}


@st.composite
def beir_folders(draw: st.DrawFn) -> tuple[list[tuple[str, str]], list[str], list[tuple[int, str, int]]]:
    """A corpus drawn from a few sentences, each text under one or more ids; queries with judgements in
    which every copy of a text is judged alike (a text-only model cannot tell copies apart)."""
    texts = draw(st.lists(st.sampled_from(SENTENCES), min_size=2, max_size=6, unique=True))
    copies = draw(st.lists(st.integers(1, 3), min_size=len(texts), max_size=len(texts)))
    corpus = [(f"{t}-{c}", text) for t, (text, n) in enumerate(zip(texts, copies)) for c in range(n)]
    corpus = draw(st.permutations(corpus))
    queries = draw(st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=3, unique=True))
    qrels = []
    for q in range(len(queries)):
        judged = draw(st.lists(st.integers(0, len(texts) - 1), min_size=1, max_size=len(texts), unique=True))
        qrels += [
            (q, doc_id, draw(st.integers(1, 3))) for t in judged for doc_id, _ in corpus if doc_id.startswith(f"{t}-")
        ]
    # Every copy of a judged text with the same grade: the grade drawn last for the text wins for all.
    grades = {(q, doc_id.split("-")[0]): grade for q, doc_id, grade in qrels}
    return corpus, [f"query: {text}" for text in queries], [(q, d, grades[q, d.split("-")[0]]) for q, d, _ in qrels]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(folder=beir_folders())
def test_ranking_metrics_equal_the_plain_evaluator(
    tiny_model: Any, tmp_path_factory: pytest.TempPathFactory, folder: Any
) -> None:
    root = tmp_path_factory.mktemp("ids")
    write_beir(root / "beir", *folder)
    ours, theirs = suite_metrics(tiny_model, root), plain_evaluator_metrics(tiny_model, root / "beir")
    assert binary_metrics(ours).keys() == binary_metrics(theirs).keys()
    assert binary_metrics(ours) == pytest.approx(binary_metrics(theirs), abs=1e-9)
