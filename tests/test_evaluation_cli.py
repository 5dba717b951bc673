"""``hf-unified-embed evaluate MODEL SUITE.yaml``: table on stdout, JSON file, user errors → exit 2."""

from __future__ import annotations

import json
from pathlib import Path

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


def test_evaluate_reports_bad_suites_without_traceback(
    tiny_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"evaluations": [{"name": "x", "kind": "sts", "source": "stsb"}]}), encoding="utf-8")
    assert main(["evaluate", tiny_model_path, str(bad)]) == 2
    assert "evaluations[0]: entry 'x', field 'data_files'" in capsys.readouterr().err
    missing = tmp_path / "missing-data.yaml"
    missing.write_text(
        yaml.safe_dump({"evaluations": [{"name": "x", "kind": "sts", "source": "stsb", "data_files": "nope.tsv"}]}),
        encoding="utf-8",
    )
    assert main(["evaluate", tiny_model_path, str(missing)]) == 2
    assert "nope.tsv" in capsys.readouterr().err
    assert main(["evaluate", tiny_model_path, str(tmp_path / "absent.yaml")]) == 2
