"""``exclude_seen``: an STS or pair-classification entry scored only on pairs its training files do not hold."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from scipy.stats import spearmanr

from hf_unified_embed.cli.main import main
from hf_unified_embed.errors import InputNotFoundError
from hf_unified_embed.evaluation import EvaluationDataError, SuiteError, build_evaluators, load_suite, run_suite
from tests._evaluation_helpers import MSRP_ROWS, STS_ROWS, write_evaluation_files

# A training file in SemEval layout (score, s1, s2) holding two of the STS test pairs, written the other
# way round and with other case and spacing, one MSRP test pair, and a pair no test file has.
TRAIN_ROWS = [
    ("4.0", "a man plays the  guitar.", "A man is playing a guitar."),
    ("1.0", "The stock market fell today.", "A cat sleeps on the sofa."),
    ("2.0", MSRP_ROWS[1][1], MSRP_ROWS[1][2]),
    ("3.0", "Nothing in a test file.", "Nor this."),
]
SEEN = [{"source": "semeval-sts", "data_files": "train/seen.train.tsv"}]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_evaluation_files(tmp_path_factory.mktemp("exclude-seen-data"))
    (root / "train").mkdir()
    (root / "train" / "seen.train.tsv").write_text(
        "".join(f"{s}\t{a}\t{b}\n" for s, a, b in TRAIN_ROWS), encoding="utf-8"
    )
    return root


def _suite(data_root: Path, *entries: dict[str, Any]) -> dict[str, Any]:
    return {"data_root": str(data_root), "batch_size": 4, "diagnostics": False, "evaluations": list(entries)}


STS = {"name": "sts", "kind": "sts", "source": "semeval-sts", "data_files": "sts/*.tsv"}
MSRP = {"name": "paraphrase", "kind": "pair_classification", "source": "msrp", "data_files": "msrp.tsv"}


def test_sts_is_scored_on_the_unseen_pairs_only(data_root: Path, tiny_model_path: str) -> None:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(tiny_model_path, device="cpu")
    suite = _suite(data_root, STS, {**STS, "name": "sts-unseen", "exclude_seen": SEEN})
    results = run_suite(model, suite, show_progress_bar=False)

    labelled = [row for row in STS_ROWS if row[0]]
    seen = {frozenset(" ".join(t.casefold().split()) for t in (a, b)) for _, a, b in TRAIN_ROWS}
    unseen = [row for row in labelled if frozenset(" ".join(t.casefold().split()) for t in row[1:]) not in seen]
    assert len(labelled) == 6 and len(unseen) == 4  # the reversed, re-spaced pair and the exact one are left out
    first = model.encode([a for _, a, _ in unseen], normalize_embeddings=True)
    second = model.encode([b for _, _, b in unseen], normalize_embeddings=True)
    expected = spearmanr([float(s) for s, _, _ in unseen], (first * second).sum(axis=1)).statistic

    assert results["sts"].num_examples == 6  # the entry without exclude_seen is untouched
    assert results["sts-unseen"].num_examples == 4
    assert results["sts-unseen"].metrics["spearman_cosine"] == pytest.approx(expected, abs=1e-6)


def test_pair_labels_stay_with_their_pairs(data_root: Path) -> None:
    evaluator: Any = build_evaluators(_suite(data_root, {**MSRP, "exclude_seen": SEEN}))["paraphrase"]
    expected = [(a, b, int(q)) for i, (q, a, b) in enumerate(MSRP_ROWS) if i != 1]
    assert list(zip(evaluator.sentences1, evaluator.sentences2, evaluator.labels)) == expected


def test_a_source_read_with_another_task_type(data_root: Path) -> None:
    # MSRP's training file as an exclusion of an STS entry: read as the entry's type unless task_type says.
    seen = [{"source": "msrp", "data_files": "msrp.tsv", "task_type": "pair_classification"}]
    suite = _suite(data_root, {**MSRP, "name": "all-seen", "exclude_seen": seen})
    with pytest.raises(EvaluationDataError, match=r"evaluation 'all-seen', field 'exclude_seen': all 4 pairs"):
        build_evaluators(suite)
    evaluator: Any = build_evaluators(_suite(data_root, {**STS, "exclude_seen": seen}))["sts"]
    assert len(evaluator.sentences1) == 6  # no STS pair is an MSRP pair


def test_a_unified_training_folder_as_exclusion(data_root: Path, tmp_path: Path) -> None:
    # What `hf-unified-embed build` writes (or any unified JSON lines / Parquet): `source: unified`.
    train = tmp_path / "unified.jsonl"
    rows = [
        {
            "query": STS_ROWS[1][1],
            "positives": [STS_ROWS[1][2]],
            "negatives": [STS_ROWS[5][1]],
            "task": "qa",
            "task_type": "retrieval",
        },
        {"query": "q", "positives": ["p"], "positive_scores": [0.5], "task": "sts", "task_type": "sts"},
    ]
    train.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    seen = [{"source": "unified", "data_files": str(train), "task_type": None}]  # null: each row's own type
    evaluator: Any = build_evaluators(_suite(data_root, {**STS, "exclude_seen": seen}))["sts"]
    assert (STS_ROWS[1][1], STS_ROWS[1][2]) not in set(zip(evaluator.sentences1, evaluator.sentences2))
    assert len(evaluator.sentences1) == 5  # the negative pairs a text with another row's query: not a test pair


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"kind": "retrieval", "source": "beir", "data_files": "beir"},
            r"field 'exclude_seen': kind 'retrieval' does not score pairs one by one",
        ),
        ({"exclude_seen": ["train.tsv"]}, r"field 'exclude_seen': \[0\] input should be a valid dictionary"),
        ({"exclude_seen": [{"source": "semeval-sts"}]}, r"'exclude_seen\[0\]': missing field\(s\) \['data_files'\]"),
        ({"exclude_seen": [{**SEEN[0], "split": "train"}]}, r"'exclude_seen\[0\]': unknown field\(s\) \['split'\]"),
        ({"exclude_seen": [{**SEEN[0], "source": "stsbb"}]}, r"unknown source format 'stsbb'"),
        ({"exclude_seen": [{**SEEN[0], "task_type": "sts-ish"}]}, r"task_type: got 'sts-ish'"),
        ({"exclude_seen": [{**SEEN[0], "data_files": 3}]}, r"'exclude_seen\[0\]': data_files: "),
    ],
)
def test_malformed_exclusions_name_the_entry_and_field(data_root: Path, change: dict[str, Any], message: str) -> None:
    with pytest.raises(SuiteError, match=rf"evaluations\[0\]: entry '\w+', .*{message}"):
        load_suite(_suite(data_root, {**STS, "exclude_seen": SEEN, **change}))


def test_a_missing_exclusion_file_names_entry_and_field(data_root: Path) -> None:
    suite = _suite(data_root, {**STS, "exclude_seen": [{**SEEN[0], "data_files": "train/absent.tsv"}]})
    with pytest.raises(InputNotFoundError, match=r"evaluation 'sts', field 'exclude_seen\[0\].data_files'"):
        build_evaluators(suite)


def test_cli_yaml_with_a_shared_exclusion_list(
    data_root: Path, tiny_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One list for several entries, as a YAML anchor: how examples/suites/shared.yaml writes it.
    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(
        f"data_root: {data_root}\n"
        "diagnostics: false\n"
        "evaluations:\n"
        "  - {name: sts-unseen, kind: sts, source: semeval-sts, data_files: 'sts/*.tsv', exclude_seen: &seen "
        f"{json.dumps(SEEN)}}}\n"
        "  - {name: paraphrase-unseen, kind: pair_classification, source: msrp, data_files: msrp.tsv, "
        "exclude_seen: *seen}\n",
        encoding="utf-8",
    )
    assert yaml.safe_load(suite_file.read_text())["evaluations"][1]["exclude_seen"] == SEEN
    output = tmp_path / "results.json"
    assert main(["evaluate", tiny_model_path, str(suite_file), "-o", str(output)]) == 0
    results = json.loads(output.read_text())["results"]
    assert (results["sts-unseen"]["num_examples"], results["paraphrase-unseen"]["num_examples"]) == (4, 3)

    suite_file.write_text(suite_file.read_text().replace("seen.train.tsv", "gone.tsv"), encoding="utf-8")
    assert main(["evaluate", tiny_model_path, str(suite_file), "-o", str(tmp_path / "other.json")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and re.search(r"error: .*'sts-unseen'.*exclude_seen\[0\]\.data_files", err), err
    assert not (tmp_path / "other.json").exists()


def test_shared_suite_scores_sts12_15_also_without_the_training_pairs(shared_data: Path) -> None:
    """The counts the comment of examples/suites/shared.yaml and docs/quality.md give, on the real files."""
    from hf_unified_embed.evaluation.suite_rows import load_entry_rows

    suite = load_suite(Path(__file__).parents[1] / "examples/suites/shared.yaml", data_root=shared_data)
    suite.entries = [entry for entry in suite.entries if re.fullmatch(r"sts1[2-5](-unseen)?", entry.name)]
    rows = load_entry_rows(suite)
    pairs = {
        name: sum(map(len, dataset["positives"])) + sum(map(len, dataset["negatives"]))
        for name, dataset in rows.items()
    }
    assert [pairs[f"sts{year}"] for year in range(12, 16)] == [2358, 1500, 3750, 3000]
    assert [pairs[f"sts{year}-unseen"] for year in range(12, 16)] == [1640, 903, 1889, 1898]
    assert sum(pairs[f"sts{y}"] - pairs[f"sts{y}-unseen"] for y in range(12, 16)) == 4278
