"""``hf-unified-embed evaluate MODEL SUITE.yaml``: table on stdout, JSON file, user errors → exit 2."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hf_unified_embed.cli.main import main
from tests._evaluation_helpers import all_kinds_suite, write_evaluation_files


@pytest.fixture(scope="module")
def suite_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_evaluation_files(tmp_path_factory.mktemp("cli-data"))
    suite = all_kinds_suite(root)
    suite["evaluations"] = suite["evaluations"][:2]  # STS + retrieval keep the CLI test short
    path = root / "suite.yaml"
    path.write_text(yaml.safe_dump(suite), encoding="utf-8")
    return path


def test_evaluate_prints_table_and_writes_json(
    tiny_model_path: str, suite_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "results.json"
    assert main(["evaluate", tiny_model_path, str(suite_file), "-o", str(output), "--batch-size", "2"]) == 0
    printed = capsys.readouterr().out
    assert "spearman_cosine*" in printed and "cosine_ndcg@10*" in printed
    assert "Embedding-space diagnostics" in printed
    data = json.loads(output.read_text())
    assert set(data["results"]) == {"sts", "retrieval"}
    assert data["model-index"][0]["name"] == "st"  # the model folder's name
    assert data["suite"] == "tiny-suite"

    # An existing result file is kept unless --overwrite is given; the check runs before evaluating.
    assert main(["evaluate", tiny_model_path, str(suite_file), "-o", str(output)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (
        main(["evaluate", tiny_model_path, str(suite_file), "-o", str(output), "--overwrite", "--no-diagnostics"]) == 0
    )
    assert json.loads(output.read_text())["results"]["sts"]["diagnostics"] is None


def test_only_scores_the_named_sets(tiny_model_path: str, suite_file: Path, tmp_path: Path) -> None:
    output = tmp_path / "results.json"
    assert main(["evaluate", tiny_model_path, str(suite_file), "-o", str(output), "--only", "retrieval"]) == 0
    assert set(json.loads(output.read_text())["results"]) == {"retrieval"}


STS_ENTRY = {"name": "sts", "kind": "sts", "source": "semeval-sts", "data_files": "sts/*.tsv"}
BEIR_ENTRY = {"name": "ir", "kind": "retrieval", "source": "beir", "data_files": "beir"}


def _suite(tmp_path: Path, data_root: Path, *entries: dict[str, Any], **top: Any) -> str:
    path = tmp_path / "suite.yaml"
    path.write_text(
        yaml.safe_dump({"data_root": str(data_root), "evaluations": list(entries), **top}), encoding="utf-8"
    )
    return str(path)


def _file(path: Path) -> Path:
    path.write_text("not a folder\n", encoding="utf-8")
    return path


# Each case: (argv builder, located message). The builder gets (tmp_path, data_root, model path).
USER_ERRORS: dict[str, tuple[Callable[[Path, Path, str], list[str]], str]] = {
    "missing suite file": (lambda t, d, m: [m, str(t / "absent.yaml")], r"absent\.yaml: file does not exist"),
    "suite entry without data_files": (
        lambda t, d, m: [m, _suite(t, d, {**STS_ENTRY, "data_files": None})],
        r"suite\.yaml: evaluations\[0\]: entry 'sts', field 'data_files'",
    ),
    "missing data files": (
        lambda t, d, m: [m, _suite(t, d, {**STS_ENTRY, "data_files": "nope/*.tsv"})],
        r"evaluation 'sts', field 'data_files': nothing matches nope/\*\.tsv \(relative paths resolve in ",
    ),
    "missing corpus files": (
        lambda t, d, m: [m, _suite(t, d, {**BEIR_ENTRY, "corpus_files": "extra.jsonl"})],
        r"evaluation 'ir', field 'corpus_files': nothing matches extra\.jsonl",
    ),
    "missing unified folder": (
        lambda t, d, m: [m, _suite(t, d, {"name": "u", "kind": "sts", "unified": "../no/folder"})],
        r"entry 'u', field 'unified': no folder \.\./no/folder",
    ),
    "unified folder without a card": (
        lambda t, d, m: [m, _suite(t, d, {"name": "u", "kind": "sts", "unified": str(d)})],
        r"entry 'u', field 'unified': cannot read the unified dataset: .*has no README\.md",
    ),
    "model path that does not exist": (
        lambda t, d, m: [str(t / "no-model"), _suite(t, d, STS_ENTRY)],
        r"model .*no-model: no such folder",
    ),
    "model folder without a model": (
        lambda t, d, m: [str(d / "beir"), _suite(t, d, STS_ENTRY)],
        r"model .*beir: ",
    ),
    "unknown evaluator option": (
        lambda t, d, m: [m, _suite(t, d, {**STS_ENTRY, "evaluator": {"batch_siz": 2}})],
        r"evaluations\[0\]: entry 'sts', field 'evaluator': STSEvaluator has no option 'batch_siz'; did you mean",
    ),
    "evaluator option of the wrong type": (
        lambda t, d, m: [m, _suite(t, d, {**BEIR_ENTRY, "evaluator": {"ndcg_at_k": 10}})],
        r"evaluations\[0\]: entry 'ir', field 'evaluator': option 'ndcg_at_k': input should be a valid list",
    ),
    "entry name outside the naming rule": (
        lambda t, d, m: [m, _suite(t, d, {**STS_ENTRY, "name": "../../escaped"})],
        r"evaluations\[0\]: entry '\.\./\.\./escaped', field 'name': invalid task name",
    ),
    "split outside the naming rule": (
        lambda t, d, m: [m, _suite(t, d, {**STS_ENTRY, "split": "../test"})],
        r"evaluations\[0\]: entry 'sts', field 'split': invalid split name",
    ),
    "unknown kind": (
        lambda t, d, m: [m, _suite(t, d, {**STS_ENTRY, "kind": "classification"})],
        r"evaluations\[0\]: entry 'sts', field 'kind': got 'classification'; expected one of",
    ),
    "unknown source format": (
        lambda t, d, m: [m, _suite(t, d, {**STS_ENTRY, "source": "sts-tsv"})],
        r"evaluations\[0\]: entry 'sts', field 'source': unknown source format 'sts-tsv'",
    ),
    "bad diagnostics setting": (
        lambda t, d, m: [m, _suite(t, d, STS_ENTRY, diagnostics={"max_texts": "all"})],
        r"suite\.yaml: diagnostics: max_texts must be a positive integer, got 'all'",
    ),
    "output is a folder": (lambda t, d, m: [m, _suite(t, d, STS_ENTRY), "-o", str(t)], r"output .* is a folder"),
    "output folder is a file": (
        lambda t, d, m: [m, _suite(t, d, STS_ENTRY), "-o", str(_file(t / "notes.txt") / "results.json")],
        r"cannot write the output .*notes\.txt/results\.json",
    ),
    "output overwrites the suite": (
        lambda t, d, m: [m, _suite(t, d, STS_ENTRY), "-o", str(t / "suite.yaml"), "--overwrite"],
        r"output .*suite\.yaml overlaps the input",
    ),
    "bad device": (lambda t, d, m: [m, _suite(t, d, STS_ENTRY), "--device", "gpu7"], r"--device 'gpu7'"),
    "--only names no set": (
        lambda t, d, m: [m, _suite(t, d, STS_ENTRY), "--only", "sts", "stsx"],
        r"--only stsx: not in .*suite\.yaml, whose evaluation sets are \['sts'\]",
    ),
}


@pytest.mark.parametrize("case", list(USER_ERRORS))
def test_user_errors_exit_2_with_a_located_message(
    case: str, tiny_model_path: str, suite_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build_argv, message = USER_ERRORS[case]
    argv = build_argv(tmp_path, suite_file.parent, tiny_model_path)
    assert main(["evaluate", *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and re.search(message, lines[0]), err
    assert not list(tmp_path.glob(".*staging*")), "a failed run leaves no staging folder"


def test_results_json_is_staged_redacted_and_replaces_stale_staging(
    tiny_model_path: str, suite_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys

    from hf_unified_embed.utils.outputs import _host

    token = "hf_" + "Ab3" * 12
    monkeypatch.setenv("HF_TOKEN", token)
    suite = yaml.safe_load(suite_file.read_text(encoding="utf-8"))
    suite["name"] = f"suite-{token}"
    suite["evaluations"] = [{**suite["evaluations"][0], "name": "hotkeys", "dataset_id": f"org/{token}"}]
    custom = tmp_path / "suite.yaml"
    custom.write_text(yaml.safe_dump(suite), encoding="utf-8")
    # A staging folder left by a process killed with kill -9 (its pid is gone) is removed by the next run.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".results.json.staging-{_host()}-{int(dead.stdout)}-0123abcd"
    (stale / "results.json").mkdir(parents=True)
    output = tmp_path / "results.json"
    assert main(["evaluate", tiny_model_path, str(custom), "-o", str(output)]) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["results.json", "suite.yaml"]
    text = output.read_text(encoding="utf-8")
    assert token not in text and "<redacted>" in text
    result = json.loads(text)["results"]["hotkeys"]  # an evaluation name is data, not a secret-looking key
    assert isinstance(result["diagnostics"]["token_similarity"], float)
    assert isinstance(result["metrics"]["spearman_cosine"], float)
