"""``mine-negatives`` and ``evaluate`` under the launchers: each process encodes its slice, the result is one process's.

Every process of a ``torchrun`` / ``accelerate launch`` / ``python -m hf_unified_embed.cli.launch`` run encodes a
contiguous slice of the queries and documents; the miner searches every query over each process's documents
and merges the top-k; the suite's evaluators exchange the slices. The written output (rows, negatives, scores,
metrics) is compared with one process's, an input error exits 2 with one line, and the parts are searched
with hypothesis: the slices cover every row once, and the merged top-k of disjoint corpora is the whole one's.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _processes import Expected, failure, free_port, launch_command, run
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import build_unified, load_unified, save_unified
from hf_unified_embed.negatives import Corpus, EmbeddingFile, search
from hf_unified_embed.negatives.exact_search import SearchResult
from hf_unified_embed.utils.distributed_encode import ONE_PROCESS, EncodingProcesses, encode_shared, slice_bounds

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RECIPE = REPO / "examples" / "recipes" / "sample.yaml"
SAMPLE_SUITE = REPO / "examples" / "suites" / "sample.yaml"
#: Two processes start (interpreter, imports, gloo group) and encode a few thousand texts with a tiny model.
LAUNCH = Expected(startup_s=20, processes=2)
#: Small blocks so that the queries make several blocks (spread over the processes) and documents several reads.
MINING_OPTIONS = [
    "--tasks",
    "wikiqa,trecqa",
    "--query-block",
    "16",
    "--corpus-block",
    "100",
    "--relative-margin",
    "0.01",
]


@given(count=st.integers(0, 300), processes=st.integers(1, 8))
@settings(max_examples=60, deadline=None)
def test_the_slices_cover_every_row_once_in_order(count: int, processes: int) -> None:
    slices = [slice_bounds(count, rank, processes) for rank in range(processes)]
    assert [row for start, stop in slices for row in range(start, stop)] == list(range(count))
    sizes = [stop - start for start, stop in slices]
    assert max(sizes) - min(sizes) <= 1


@given(
    documents=st.integers(1, 60),
    queries=st.integers(1, 12),
    k=st.integers(1, 20),
    processes=st.integers(1, 4),
    block=st.integers(1, 16),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=30, deadline=None)
def test_the_merged_top_k_of_each_process_documents_is_the_whole_corpus_top_k(
    tmp_path_factory: pytest.TempPathFactory,
    documents: int,
    queries: int,
    k: int,
    processes: int,
    block: int,
    seed: int,
) -> None:
    folder = tmp_path_factory.mktemp("search")
    generator = np.random.default_rng(seed)
    embeddings = generator.normal(size=(documents + queries, 8)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    corpus, query_rows = embeddings[:documents], torch.from_numpy(embeddings[documents:])
    pair_query = torch.from_numpy(generator.integers(0, queries, size=documents))
    pair_doc = torch.arange(documents)

    def file(name: str, rows: np.ndarray) -> EmbeddingFile:
        path = folder / name
        path.write_bytes(rows.tobytes())
        return EmbeddingFile(path, len(rows), 8)

    whole = search(query_rows, Corpus([file("all", corpus)]), k, pair_query=pair_query, pair_doc=pair_doc)
    parts = []
    for rank in range(processes):
        start, stop = slice_bounds(documents, rank, processes)
        share = Corpus([file(f"part{rank}", corpus[start:stop])], [start])
        parts.append(search(query_rows, share, k, pair_query=pair_query, pair_doc=pair_doc, corpus_block=block))
    merged = SearchResult.merged(parts, k)
    assert torch.equal(merged.ids, whole.ids)
    torch.testing.assert_close(merged.scores, whole.scores)
    torch.testing.assert_close(merged.pair_scores, whole.pair_scores)


def test_one_process_encodes_everything_itself() -> None:
    calls = []

    def encode(texts: list[str], **options: object) -> np.ndarray:
        calls.append((list(texts), options))
        return np.ones((len(texts), 3), dtype=np.float32)

    assert encode_shared(encode, ["a", "b"], ONE_PROCESS, batch_size=2).shape == (2, 3)
    assert calls == [(["a", "b"], {"batch_size": 2})]
    assert EncodingProcesses(1, 2).bounds(5) == (3, 5) and EncodingProcesses(1, 2).show_progress(None) is False


@pytest.fixture(scope="module")
def unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_unified(build_unified(SAMPLE_RECIPE, split="train"), tmp_path_factory.mktemp("sample") / "data")


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # An odd number of extra documents, so that the two processes' slices differ in size.
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(f"passage {i} about the river and the castle" for i in range(101)))
    return path


def _environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def _torchrun(*arguments: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={free_port()}",
        "-m",
        "hf_unified_embed",
        *arguments,
    ]


def _accelerate(*arguments: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(REPO / "examples" / "accelerate" / "multi_cpu.yaml"),
        f"--main_process_port={free_port()}",
        "-m",
        "hf_unified_embed",
        *arguments,
    ]


def _cards(folder: Path) -> dict[str, object]:
    from huggingface_hub import DatasetCard

    notes = DatasetCard.load(folder / "README.md").data.to_dict()["source_notes"]
    return {task: note["hard_negatives"] for task, note in notes.items() if "hard_negatives" in note}


@pytest.mark.multiprocess
@pytest.mark.parametrize("launcher", [_torchrun, _accelerate], ids=["torchrun", "accelerate-launch"])
def test_mining_in_two_processes_writes_what_one_process_writes(
    launcher: Any,
    unified_dir: Path,
    corpus_file: Path,
    tiny_model_path: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    arguments = ["mine-negatives", str(unified_dir), "--model", tiny_model_path, "--corpus", str(corpus_file)]
    assert main([*arguments, "-o", str(tmp_path / "one"), *MINING_OPTIONS]) == 0
    one_printed = capsys.readouterr().out
    # accelerate launch is one process more: the launcher stays in Python beside its two workers.
    completed = run(
        launcher(*arguments, "-o", str(tmp_path / "two"), *MINING_OPTIONS),
        expected=Expected(startup_s=20, processes=3),
        env=_environment(),
    )
    assert completed.returncode == 0, failure(completed)
    # Rank 0 prints the report once; what it says is one process's report.
    assert completed.stdout.replace(str(tmp_path / "two"), "OUT") == one_printed.replace(str(tmp_path / "one"), "OUT")
    assert completed.stderr.count("Encoding queries:") <= completed.stderr.count("Searching:"), "one set of bars"
    one, two = load_unified(tmp_path / "one"), load_unified(tmp_path / "two")
    assert list(one) == list(two)
    for task in one:
        first, second = one[task].to_list(), two[task].to_list()
        assert [row["negatives"] for row in first] == [row["negatives"] for row in second], task
        for column in ("negative_scores", "positive_scores"):
            for a, b in zip(first, second):
                np.testing.assert_allclose(a[column], b[column], atol=1e-5, err_msg=f"{task} {column}")
        assert [{**a, "negative_scores": 0, "positive_scores": 0} for a in first] == [
            {**b, "negative_scores": 0, "positive_scores": 0} for b in second
        ]
    assert _cards(tmp_path / "one") == _cards(tmp_path / "two")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"], "no staging or lock left"


@pytest.mark.multiprocess
def test_an_input_error_stops_every_mining_process_with_exit_2_and_one_line(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    command = launch_command(
        "mine-negatives", str(unified_dir), "-o", str(tmp_path / "out"), "--model", tiny_model_path
    )
    completed = run(command, expected=LAUNCH, env=_environment())
    assert completed.returncode == 2, failure(completed)
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: output {tmp_path / 'out'} "), failure(completed)
    assert completed.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and (tmp_path / "out" / "notes.txt").exists()


@pytest.fixture(scope="module")
def static_model_path(tmp_path_factory: pytest.TempPathFactory, minilm_path: str) -> str:
    """A random static embedding model (MiniLM's tokenizer, 32 dimensions): a text's embedding is a mean of its
    tokens' rows, the same whatever batch the text falls in. A transformer's moves ~1e-7 with the padding of
    its batch, which reorders the near-equal scores of a random model and flips an accuracy threshold."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from transformers import AutoTokenizer

    torch.manual_seed(0)
    static = StaticEmbedding(AutoTokenizer.from_pretrained(minilm_path), embedding_dim=32)
    path = tmp_path_factory.mktemp("static") / "model"
    SentenceTransformer(modules=[static], device="cpu").save(str(path))
    return str(path)


@pytest.mark.multiprocess
def test_evaluating_under_accelerate_launch_gives_one_process_metrics(static_model_path: str, tmp_path: Path) -> None:
    # One set of each kind that encodes lists of texts: sentence pairs, a corpus with queries, answer candidates.
    only = ["--only", "stsb-sample", "msmarco-sample", "trecqa-sample", "msrp-sample"]
    arguments = ["evaluate", static_model_path, str(SAMPLE_SUITE), "--batch-size", "16", "--no-diagnostics", *only]
    assert main([*arguments, "-o", str(tmp_path / "one.json")]) == 0
    command = _accelerate(*arguments, "-o", str(tmp_path / "two.json"))
    completed = run(command, expected=Expected(startup_s=20, processes=3), env=_environment())
    assert completed.returncode == 0, failure(completed)
    assert completed.stdout.count("wrote ") == 1, "rank 0 prints the table once"
    one, two = (json.loads((tmp_path / name).read_text()) for name in ("one.json", "two.json"))
    assert list(one["results"]) == list(two["results"])
    for name, entry in one["results"].items():
        other = two["results"][name]
        assert entry["metrics"].keys() == other["metrics"].keys()
        for metric, value in entry["metrics"].items():
            assert other["metrics"][metric] == pytest.approx(value, rel=1e-6), (name, metric)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.json", "two.json"]


@given(local_rank=st.integers(0, 7), devices=st.integers(1, 8), asked=st.sampled_from([None, "cuda", "cpu", "cuda:0"]))
@settings(max_examples=40, deadline=None)
def test_each_process_of_a_node_encodes_on_its_own_gpu(local_rank: int, devices: int, asked: str | None) -> None:
    from unittest import mock

    from hf_unified_embed.training.devices import process_device

    environment = {"LOCAL_WORLD_SIZE": "8", "LOCAL_RANK": str(local_rank)}
    with (
        mock.patch.dict(os.environ, environment),
        mock.patch("torch.cuda.is_available", return_value=True),
        mock.patch("torch.cuda.device_count", return_value=devices),
    ):
        chosen = process_device(asked)
    # An explicit device is kept; the default and plain "cuda" become this process's GPU.
    assert chosen == (f"cuda:{local_rank % devices}" if asked in (None, "cuda") else asked)
    with mock.patch.dict(os.environ, {"LOCAL_WORLD_SIZE": "1"}):
        assert process_device(asked) == asked


@pytest.mark.multiprocess
def test_a_multi_process_pool_encodes_for_the_miner_and_the_suite(unified_dir: Path, static_model_path: str) -> None:
    """sentence-transformers' pool (two CPU processes here; GPUs in use) is passed through to every ``encode``."""
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.evaluation import run_suite
    from hf_unified_embed.negatives import HardNegativeConfig, mine_hard_negatives

    model = SentenceTransformer(static_model_path, device="cpu")
    tasks = load_unified(unified_dir, ["trecqa"])
    config = HardNegativeConfig(relative_margin=0.01, query_block=8)
    suite = {"data_root": str(REPO / "examples" / "data"), "evaluations": []}
    suite["evaluations"] = [
        {"name": "stsb", "kind": "sts", "source": "stsb", "data_files": "stsb-train.tsv", "split": "train"},
        {"name": "msmarco", "kind": "retrieval", "source": "beir", "data_files": "msmarco-dl-sample", "split": "test"},
    ]
    alone = mine_hard_negatives(tasks, model, config, show_progress_bar=False).tasks["trecqa"]
    metrics = run_suite(model, suite, diagnostics=False, show_progress_bar=False).to_dict()["results"]
    pool = model.start_multi_process_pool(["cpu", "cpu"])
    try:
        pooled = mine_hard_negatives(tasks, model, config, show_progress_bar=False, pool=pool).tasks["trecqa"]
        pooled_metrics = run_suite(model, suite, diagnostics=False, show_progress_bar=False, pool=pool)
    finally:
        model.stop_multi_process_pool(pool)
    assert pooled["negatives"] == alone["negatives"]
    for a, b in zip(pooled["negative_scores"], alone["negative_scores"]):
        np.testing.assert_allclose(a, b, atol=1e-6)
    for name, entry in pooled_metrics.to_dict()["results"].items():
        assert entry["metrics"] == pytest.approx(metrics[name]["metrics"], rel=1e-6)


def test_a_static_model_mines_a_task_with_an_instruction(static_model_path: str) -> None:
    """A static embedding model has no length limit (``max_seq_length`` is infinite): the instruction check
    lets every instruction through instead of failing with a TypeError on slicing."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.negatives import HardNegativeConfig, mine_hard_negatives
    from hf_unified_embed.schema import UNIFIED_FEATURES

    model = SentenceTransformer(static_model_path, device="cpu")
    assert model.max_seq_length == float("inf")
    row = {"task": "qa", "task_type": "retrieval", "negatives": [], "positive_scores": [], "negative_scores": []}
    rows = [
        {**row, "query_instruction": "Find the passage: ", "document_instruction": "", "query": f"q {i}"}
        | {"positives": [f"passage number {i} about rivers"]}
        for i in range(12)
    ]
    tasks = {"qa": Dataset.from_list(rows, features=UNIFIED_FEATURES)}
    config = HardNegativeConfig(num_negatives=2, relative_margin=None)
    mined = mine_hard_negatives(tasks, model, config, show_progress_bar=False).tasks["qa"]
    assert all(len(negatives) == 2 for negatives in mined["negatives"])


@pytest.mark.multiprocess
def test_a_curriculum_planned_by_two_processes_is_one_process_plan(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    from hf_unified_embed.curriculum import CurriculumPlan

    arguments = ["curriculum", str(unified_dir), "--teacher", tiny_model_path, "--tasks", "stsb,wikiqa,trecqa"]
    options = ["--n-samples", "25", "--iterations", "2000", "--negative-pool", "16", "--batch-size", "16"]
    assert main([*arguments, "-o", str(tmp_path / "one"), *options]) == 0
    completed = run(_torchrun(*arguments, "-o", str(tmp_path / "two"), *options), expected=LAUNCH, env=_environment())
    assert completed.returncode == 0, failure(completed)
    assert completed.stdout.count("wrote ") == 1, "the first process reports"
    one, two = (CurriculumPlan.load(tmp_path / name) for name in ("one", "two"))
    assert one.order == two.order
    np.testing.assert_allclose(one.similarity, two.similarity, atol=1e-5)
    first, second = load_unified(tmp_path / "one"), load_unified(tmp_path / "two")
    for task in first:
        np.testing.assert_allclose(first[task]["difficulty"], second[task]["difficulty"], atol=1e-5, err_msg=task)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]


@pytest.mark.multiprocess
def test_a_merge_search_by_two_processes_scores_and_writes_as_one_process(
    tiny_model_path: str, tmp_path: Path
) -> None:
    import yaml
    from _merge_helpers import noisy_copy, read_weights

    base = noisy_copy(tiny_model_path, tmp_path / "base", 0, scale=0.0)
    tuned = noisy_copy(tiny_model_path, tmp_path / "run", 1, scale=0.05)
    suite = {
        "data_root": str(REPO / "examples" / "data"),
        "evaluations": [
            {"name": "stsb", "kind": "sts", "source": "stsb", "data_files": "stsb-train.tsv", "split": "train"},
            {"name": "msrp", "kind": "pair_classification", "source": "msrp", "data_files": "msrp-train.tsv"}
            | {"split": "train"},
        ],
    }
    for name in ("one", "two"):
        recipe = {
            "method": "slerp",
            "models": [str(base), str(tuned)],
            "output_dir": str(tmp_path / name),
            "search": {"suite": suite, "parameters": {"t": [0.2, 0.8]}, "objective": {"stsb": 1.0, "msrp": 1.0}},
        }
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(recipe))
    assert main(["merge", str(tmp_path / "one.yaml"), "--no-progress"]) == 0
    completed = run(
        _torchrun("merge", str(tmp_path / "two.yaml"), "--no-progress"), expected=LAUNCH, env=_environment()
    )
    assert completed.returncode == 0, failure(completed)
    assert completed.stdout.strip().endswith("two") and completed.stdout.count("score") == 2, failure(completed)
    one, two = (json.loads((tmp_path / name / "merge_search.json").read_text()) for name in ("one", "two"))
    assert one["best"] == two["best"]
    for a, b in zip(one["candidates"], two["candidates"]):
        assert a["parameters"] == b["parameters"]
        assert b["metrics"] == pytest.approx(a["metrics"], rel=1e-6)
    weights = read_weights(tmp_path / "two")
    for key, value in read_weights(tmp_path / "one").items():
        torch.testing.assert_close(weights[key], value)
