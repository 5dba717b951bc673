"""Hard-negative mining: exact blocked search, equality with sentence-transformers' miner, the folder CLI."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset, DatasetDict
from huggingface_hub import DatasetCard
from sentence_transformers import CrossEncoder, SentenceTransformer
from sentence_transformers.util import mine_hard_negatives as st_mine_hard_negatives

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import load_unified, save_unified
from hf_unified_embed.data.row_check import validate_unified_folder
from hf_unified_embed.errors import UsageError
from hf_unified_embed.negatives import (
    Corpus,
    EmbeddingFile,
    HardNegativeConfig,
    mine_hard_negatives,
    read_corpus,
    search,
)
from hf_unified_embed.schema import UNIFIED_FEATURES

TOPICS = ["river", "castle", "engine", "violin", "glacier", "market", "orbit", "harvest", "library", "volcano"]


def sentence(i: int) -> str:
    a, b, c = TOPICS[i % 10], TOPICS[(i * 7 + 3) % 10], TOPICS[(i * 3 + 1) % 10]
    return f"the {a} near the {b} and a {c} story number {i}"


def unified_row(query: str, positives: list[str], task: str = "qa", task_type: str = "retrieval", **extra) -> dict:
    row = {
        "task": task,
        "task_type": task_type,
        "query_instruction": "",
        "document_instruction": "",
        "query": query,
        "positives": positives,
        "negatives": [],
        "positive_scores": [],
        "negative_scores": [],
    }
    return {**row, **extra}


@pytest.fixture(scope="module")
def teacher(tiny_model_path: str) -> SentenceTransformer:
    return SentenceTransformer(tiny_model_path, device="cpu")


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return [sentence(i) for i in range(1_000, 1_300)]


@pytest.fixture(scope="module")
def pairs() -> tuple[list[str], list[str]]:
    # 40 queries; query 0 and 1 appear twice with a second positive (several positives per query).
    queries = [f"which {TOPICS[i % 10]} is {i}" for i in range(40)] + ["which river is 0", "which castle is 1"]
    positives = [sentence(i) for i in range(40)] + [sentence(500), sentence(501)]
    return queries, positives


def st_negatives(teacher, corpus, queries, positives, cross_encoder=None, **filters) -> dict[str, list[str]]:
    mined = st_mine_hard_negatives(
        Dataset.from_dict({"anchor": queries, "positive": positives}),
        teacher,
        corpus=corpus,
        cross_encoder=cross_encoder,
        output_format="labeled-list",
        verbose=False,
        batch_size=16,
        **filters,
    )
    # labeled-list rows: [positive, negative_1, ...]; a query with several positives has one row per positive.
    return {row["anchor"]: row["positive"][1:] for row in mined}


def our_negatives(teacher, corpus, queries, positives, cross_encoder=None, **filters) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for query, positive in zip(queries, positives):
        grouped.setdefault(query, []).append(positive)
    rows = Dataset.from_list([unified_row(q, p) for q, p in grouped.items()], features=UNIFIED_FEATURES)
    config = HardNegativeConfig(
        **{"relative_margin": None, "drop_query_text": False, **filters, "corpus_block": 37, "query_block": 9}
    )
    result = mine_hard_negatives(
        {"qa": rows}, teacher, config, corpus=corpus, cross_encoder=cross_encoder, show_progress_bar=False
    )
    return {row["query"]: row["negatives"] for row in result.tasks["qa"] if row["negatives"]}


@pytest.mark.parametrize(
    "filters",
    [
        {"num_negatives": 3},
        {"num_negatives": 3, "relative_margin": 0.01},
        {"num_negatives": 4, "absolute_margin": 0.0005, "range_min": 2},
        {"num_negatives": 2, "max_score": 0.97, "min_score": 0.5, "range_max": 30},
    ],
)
def test_same_negatives_as_sentence_transformers(teacher, corpus, pairs, filters):
    queries, positives = pairs
    expected = st_negatives(teacher, corpus, queries, positives, **filters)
    assert expected, "the comparison needs queries with negatives"
    assert our_negatives(teacher, corpus, queries, positives, **filters) == expected


def test_same_negatives_as_sentence_transformers_with_a_cross_encoder(teacher, corpus, pairs, tiny_cross_encoder):
    queries, positives = pairs
    filters = {"num_negatives": 3, "min_score": 0.0}  # sentence-transformers rescores only when a filter is set
    expected = st_negatives(teacher, corpus, queries, positives, cross_encoder=tiny_cross_encoder, **filters)
    ours = our_negatives(teacher, corpus, queries, positives, cross_encoder=tiny_cross_encoder, **filters)
    assert ours == expected and expected


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory, minilm_path: str) -> CrossEncoder:
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(1)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
    )
    path = tmp_path_factory.mktemp("cross-encoder")
    BertForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return CrossEncoder(str(path), device="cpu")


@pytest.mark.parametrize(("corpus_block", "k"), [(1, 5), (7, 5), (64, 5), (7, 80)])
def test_blocked_search_equals_a_full_matmul(tmp_path: Path, corpus_block: int, k: int):
    generator = torch.Generator().manual_seed(0)
    documents = torch.nn.functional.normalize(torch.randn(50, 8, generator=generator), dim=1)
    queries = torch.nn.functional.normalize(torch.randn(6, 8, generator=generator), dim=1)
    halves = []
    for index, part in enumerate((documents[:23], documents[23:])):  # two segments, as shared corpus + own documents
        path = tmp_path / f"part{index}"
        path.write_bytes(part.numpy().astype(np.float16 if index else np.float32).tobytes())
        halves.append(EmbeddingFile(path, len(part), 8, "float16" if index else "float32"))
    documents[23:] = documents[23:].half().float()
    pair_query, pair_doc = torch.tensor([0, 5, 5]), torch.tensor([49, 0, 30])
    found = search(queries, Corpus(halves), k, pair_query=pair_query, pair_doc=pair_doc, corpus_block=corpus_block)
    full = queries @ documents.T
    expected_scores, expected_ids = torch.topk(full, min(k, 50), dim=1)
    torch.testing.assert_close(found.scores[:, : min(k, 50)], expected_scores)
    assert torch.equal(found.ids[:, : min(k, 50)], expected_ids)
    assert (found.ids[:, 50:] == -1).all() and torch.isinf(found.scores[:, 50:]).all()
    torch.testing.assert_close(found.pair_scores, full[pair_query, pair_doc])


def test_scores_positives_and_text_identity(teacher):
    documents = [sentence(i) for i in range(60)]
    rows = [
        unified_row("the river near the castle", [documents[0]], negatives=["old negative"], negative_scores=[0.3])
    ]
    rows.append(unified_row(documents[5], [documents[6], documents[7]]))  # its query text is also a document
    data = {"qa": Dataset.from_list(rows, features=UNIFIED_FEATURES)}
    config = HardNegativeConfig(num_negatives=5, relative_margin=None)
    mined = mine_hard_negatives(data, teacher, config, corpus=documents, show_progress_bar=False)
    first, second = mined.tasks["qa"]
    assert documents[5] not in second["negatives"] and not set(second["positives"]) & set(second["negatives"])
    assert "old negative" not in first["negatives"]  # mined negatives replace the source's own
    kept = mine_hard_negatives(
        data,
        teacher,
        HardNegativeConfig(num_negatives=5, relative_margin=None, drop_query_text=False),
        corpus=documents,
        show_progress_bar=False,
    )
    assert documents[5] in kept.tasks["qa"][1]["negatives"]
    assert mined.reports["qa"].dropped["identical_text"] == kept.reports["qa"].dropped["identical_text"] + 1
    query, *docs = teacher.encode(
        [second["query"], *second["positives"], *second["negatives"]], normalize_embeddings=True
    )
    cosines = docs @ query
    np.testing.assert_allclose(second["positive_scores"] + second["negative_scores"], (cosines + 1) / 2, atol=1e-5)
    assert second["negative_scores"] == sorted(second["negative_scores"], reverse=True)


def test_task_selection_and_config_errors(teacher):
    data = {
        "qa": Dataset.from_list([unified_row("q", ["d"])], features=UNIFIED_FEATURES),
        "sts": Dataset.from_list(
            [unified_row("a", ["b"], task="sts", task_type="sts", positive_scores=[0.5])], features=UNIFIED_FEATURES
        ),
    }
    result = mine_hard_negatives(data, teacher, corpus=["x", "y"], show_progress_bar=False)
    assert list(result.reports) == ["qa"] and result.tasks["sts"] is data["sts"]
    assert result.skipped == {"sts": "sts task"}
    with pytest.raises(UsageError, match="'sts' is a sts task"):
        mine_hard_negatives(data, teacher, task_names=["sts"])
    with pytest.raises(UsageError, match="'nope' is not in the data"):
        mine_hard_negatives(data, teacher, task_names=["nope"])
    with pytest.raises(UsageError, match="range_max=3 leaves 3 candidates"):
        HardNegativeConfig(num_negatives=4, range_max=3)


def test_read_corpus_joins_titles_like_the_beir_adapter(tmp_path: Path):
    (tmp_path / "corpus.jsonl").write_text(
        '{"_id": "1", "title": "Paris", "text": "The capital. "}\n{"_id": 2, "title": "", "text": "No title."}\n'
        '{"_id": "3", "text": "   "}\n{"_id": "4", "title": "Paris", "text": "The capital."}\n'
    )
    assert read_corpus(tmp_path).texts.to_pylist() == ["Paris The capital.", "No title."]
    assert read_corpus(tmp_path, include_title=False).texts.to_pylist() == ["The capital.", "No title."]


@pytest.fixture
def unified_dir(tmp_path: Path) -> Path:
    qa = [unified_row(f"which {TOPICS[i % 10]} is {i}", [sentence(i)]) for i in range(30)]
    sts = [unified_row("a cat", ["a dog"], task="sts", task_type="sts", positive_scores=[0.4])]
    data = DatasetDict(
        {
            "qa": Dataset.from_list(qa, features=UNIFIED_FEATURES),
            "sts": Dataset.from_list(sts, features=UNIFIED_FEATURES),
        }
    )
    return save_unified(data, tmp_path / "data", notes={"qa": {"dataset": "org/qa", "revision": "abc"}})


def test_cli_writes_a_valid_folder_with_card_section_and_carried_notes(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path, capsys
):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentence(i) for i in range(100, 160)))
    out = tmp_path / "mined"
    args = ["mine-negatives", str(unified_dir), "-o", str(out), "--model", tiny_model_path, "--corpus", str(corpus)]
    # The tiny random teacher scores positives barely above the rest: a small margin keeps some negatives.
    options = ["--num-negatives", "3", "--relative-margin", "0.001", "--query-block", "4", "--corpus-block", "16"]
    assert main([*args, *options, "--dtype", "float16"]) == 0
    printed = capsys.readouterr().out
    assert "qa: 30 queries over 90 documents" in printed
    validate_unified_folder(out)
    mined = load_unified(out)
    assert all(len(row["negatives"]) == len(row["negative_scores"]) <= 3 for row in mined["qa"])
    assert sum(len(row["negatives"]) for row in mined["qa"]) > 0
    assert mined["sts"].to_list() == load_unified(unified_dir)["sts"].to_list()
    card = DatasetCard.load(out / "README.md")
    notes = card.data.to_dict()["source_notes"]["qa"]
    assert notes["dataset"] == "org/qa" and notes["revision"] == "abc"
    teacher = Path(tiny_model_path).name  # a local model is named by its folder, never by its path
    assert notes["hard_negatives"]["teacher"] == teacher and notes["hard_negatives"]["num_negatives"] == 3
    assert notes["hard_negatives"]["settings"]["relative_margin"] == 0.001
    assert notes["hard_negatives"]["settings"]["corpus"] == "corpus.txt"
    assert "## Hard negatives" in card.text and f"| `qa` | {teacher} |" in card.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "data", "mined"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tasks", "sts"], "'sts' is a sts task"),
        (["--num-negatives", "0"], "num_negatives must be at least 1"),
        (["--corpus", "missing.jsonl"], "corpus missing.jsonl does not exist"),
    ],
)
def test_cli_errors_exit_2(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path, capsys, monkeypatch, extra, message
):
    monkeypatch.chdir(tmp_path)
    assert main(["mine-negatives", str(unified_dir), "-o", "out", "--model", tiny_model_path, *extra]) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_cli_missing_model_is_an_input_error(unified_dir: Path, tmp_path: Path, capsys):
    assert (
        main(["mine-negatives", str(unified_dir), "-o", str(tmp_path / "o"), "--model", str(tmp_path / "no-model")])
        == 2
    )
    assert (
        capsys.readouterr().err
        == f"error: --model {tmp_path / 'no-model'}: no such folder (a local path that does not exist)\n"
    )


@pytest.mark.parametrize(
    ("flag", "name"),
    [
        ("--model", "data/model-typo"),  # its first part exists here: a local path, never a Hub id
        ("--model", "./model-typo"),
        ("--cross-encoder", "../no/such/reranker"),
    ],
)
def test_cli_mistyped_local_model_is_a_missing_folder_not_a_hub_lookup(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path, capsys, monkeypatch, flag, name
):
    monkeypatch.chdir(tmp_path)
    models = ["--model", tiny_model_path, flag, name] if flag == "--cross-encoder" else [flag, name]
    assert main(["mine-negatives", str(unified_dir), "-o", "out", *models]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {flag} {name}: no such folder (a local path that does not exist)\n"
    assert "huggingface.co" not in err and not (tmp_path / "out").exists()


def test_cli_names_the_tasks_it_does_not_mine(unified_dir: Path, tiny_model_path: str, tmp_path: Path, capsys):
    """Tasks that are not retrieval tasks are copied unmined, a task without the split is not written: one line
    says which and why."""
    rows = [unified_row(f"which {TOPICS[i % 10]} is {i}", [sentence(i)], task="dev-qa") for i in range(5)]
    data = load_unified(unified_dir)
    source = save_unified(
        {"train": data, "test": DatasetDict({"dev-qa": Dataset.from_list(rows, features=UNIFIED_FEATURES)})},
        tmp_path / "two-splits",
    )
    out = tmp_path / "mined"
    assert main(["mine-negatives", str(source), "-o", str(out), "--model", tiny_model_path]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith(("qa:", "wrote"))]
    assert lines == [
        "not mined (only retrieval tasks are), copied unchanged: sts (sts task); "
        "not in the output: dev-qa (no train split; it has test)"
    ]
    assert sorted(load_unified(out)) == ["qa", "sts"]
    result = mine_hard_negatives(
        dict(data),
        SentenceTransformer(tiny_model_path, device="cpu"),
        task_names=["qa"],
        corpus=["x"],
        show_progress_bar=False,
    )
    assert result.skipped == {"sts": "not chosen"} and result.left_out == {}


def test_task_documents_number_like_one_dictionary_over_corpus_then_task_texts():
    """The shared corpus is not copied, yet ids equal dictionary-encoding corpus + positives + negatives."""
    import pyarrow as pa

    from hf_unified_embed.negatives.candidates import TaskDocuments

    shared = pa.array(["c0", "c1", "p1", "c3"])
    task = pa.array(["p0", "p1", "n0", "p0", "c3", "n1", "n0"])
    documents = TaskDocuments.of_task(shared, task)
    reference = pa.concat_arrays([shared, task]).dictionary_encode()
    assert documents.task_codes.tolist() == reference.indices.to_pylist()[len(shared) :]
    assert len(documents) == len(reference.dictionary)
    ids = list(range(len(documents)))
    assert documents.texts(ids) == reference.dictionary.to_pylist()
    assert documents.ids_of(pa.array(["n1", "c1", "zz", "p1"])).tolist() == [6, 1, -1, 2]
    empty = TaskDocuments.of_task(pa.array([], type=pa.string()), task)
    assert empty.texts(list(range(len(empty)))) == ["p0", "p1", "n0", "c3", "n1"]


def test_cli_refuses_an_output_inside_a_model_folder(unified_dir: Path, tiny_model_path: str, tmp_path: Path, capsys):
    teacher = Path(shutil.copytree(tiny_model_path, tmp_path / "teacher"))
    before = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*"))
    for flag in ("--model", "--cross-encoder"):
        models = (
            ["--model", tiny_model_path, flag, str(teacher)] if flag == "--cross-encoder" else [flag, str(teacher)]
        )
        assert main(["mine-negatives", str(unified_dir), "-o", str(teacher / "mined"), *models]) == 2
        err = capsys.readouterr().err
        assert f"error: output {teacher / 'mined'} overlaps the input {teacher}; inputs are never overwritten" in err
    assert sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*")) == before, "the model is unchanged"


def test_cli_keeps_datasets_arrow_cache_inside_its_staging_folder(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path, monkeypatch
):
    """Every task's Arrow copy lives in the staging folder: the user's datasets cache stays empty."""
    import datasets

    cache = tmp_path / "hf-datasets-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    assert main(["mine-negatives", str(unified_dir), "-o", str(tmp_path / "mined"), "--model", tiny_model_path]) == 0
    assert list(cache.rglob("*")) == []
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data", "hf-datasets-cache", "mined"]


def test_the_miner_loads_without_the_curriculum_planner():
    """numba and matplotlib (the curriculum's solver and plots) cost 83 MB of peak RSS and 1.4 s before any work:
    on a task of a few thousand documents that made the miner's peak 1.07–1.16× sentence-transformers'."""
    from _processes import Expected, failure, run

    code = "import sys, hf_unified_embed.negatives; print(sorted({'numba', 'matplotlib'} & set(sys.modules)))"
    completed = run([sys.executable, "-c", code], expected=Expected(10))
    assert completed.returncode == 0, failure(completed)
    assert completed.stdout.strip() == "[]"
