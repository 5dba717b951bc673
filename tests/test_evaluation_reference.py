"""Evaluation on one's own held-out rows, and a base model's scores beside the model's in one command.

* a suite entry ``held_out_from: RECIPE`` scores exactly the rows the build recipe's source leaves out past
  its ``max_rows``: no row the build gives is scored, and together they are all the rows of the files;
* ``evaluate MODEL SUITE --reference BASE`` (a fresh process, on the bundled sample) prints both models'
  values and their difference, and writes the reference's results beside the model's; each equals what
  ``run_suite`` gives for that model alone;
* a held-out entry that cannot hold out anything, or names what is not there, is one ``error:`` line, exit 2.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from _processes import Expected, failure, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import build_unified
from hf_unified_embed.evaluation import load_suite
from hf_unified_embed.evaluation.suite_rows import load_entry_rows
from tests.conftest import make_tiny_model

#: Rows of the sample's STS Benchmark file the recipe trains on; the rest are held out.
TRAIN_ROWS = 250


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample, a build recipe training on the first rows of two of its files, and a suite
    scoring the rest of each."""
    folder = tmp_path_factory.mktemp("held-out") / "sample"
    assert main(["sample", str(folder)]) == 0
    shipped = yaml.safe_load((folder / "recipes" / "sample.yaml").read_text(encoding="utf-8"))
    sources = {source["name"]: source for source in shipped["sources"]}
    recipe = {"sources": [{**sources["stsb"], "max_rows": TRAIN_ROWS}, {**sources["wikiqa"], "max_rows": 40}]}
    (folder / "recipes" / "own.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    suite = {
        "name": "own-rows",
        "diagnostics": False,
        "evaluations": [
            {"name": "stsb", "kind": "sts", "held_out_from": "../recipes/own.yaml"},
            {"name": "wikiqa-held-out", "kind": "retrieval", "held_out_from": "../recipes/own.yaml", "task": "wikiqa"},
        ],
    }
    (folder / "suites" / "own.yaml").write_text(yaml.safe_dump(suite), encoding="utf-8")
    return folder


def _pairs(rows: Any) -> list[tuple[str, tuple[str, ...]]]:
    return [(row["query"], tuple(row["positives"])) for row in rows]


def _recipe_with(folder: Path, max_rows: int | None) -> dict[str, Any]:
    recipe = yaml.safe_load((folder / "recipes" / "own.yaml").read_text(encoding="utf-8"))
    recipe["sources"] = [{**recipe["sources"][0], "max_rows": max_rows}]
    return recipe


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(train_rows=st.integers(1, 299))
def test_held_out_rows_are_the_rows_the_build_leaves_out(sample: Path, train_rows: int, tmp_path_factory: Any) -> None:
    folder = tmp_path_factory.mktemp("recipe")
    recipe_path = folder / "recipe.yaml"
    recipe = _recipe_with(sample, train_rows)
    recipe["sources"][0]["data_files"] = str(sample / "data" / "stsb-train.tsv")
    recipe_path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    suite = load_suite(
        {"data_root": str(folder), "evaluations": [{"name": "stsb", "kind": "sts", "held_out_from": "recipe.yaml"}]}
    )

    trained = _pairs(build_unified(recipe_path)["stsb"])  # what training reads
    held_out = _pairs(load_entry_rows(suite)["stsb"])
    recipe["sources"][0]["max_rows"] = None
    recipe_path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    every = _pairs(build_unified(recipe_path)["stsb"])

    assert len(trained) == train_rows
    assert trained + held_out == every  # in file order: the build's rows, then the held-out ones
    assert not set(trained) & set(held_out)


def test_evaluate_with_reference_prints_both_and_the_difference(
    sample: Path, tiny_model_path: str, minilm_path: str, tmp_path: Path
) -> None:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.evaluation import run_suite

    base = make_tiny_model(tmp_path / "base", minilm_path, seed=1)
    output = tmp_path / "results.json"
    command = [sys.executable, "-m", "hf_unified_embed", "evaluate", tiny_model_path, "suites/own.yaml"]
    command += ["--reference", base, "--no-diagnostics", "-o", str(output)]
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    completed = run(command, expected=Expected(startup_s=20), cwd=sample, env=environment)
    assert completed.returncode == 0, failure(completed)

    header = next(line for line in completed.stdout.splitlines() if line.startswith("evaluation"))
    assert header.split() == ["evaluation", "kind", "n", "metric", "model", "reference", "difference"]
    data = json.loads(output.read_text(encoding="utf-8"))
    assert set(data["results"]) == set(data["reference"]["results"]) == {"stsb", "wikiqa-held-out"}
    assert data["results"]["stsb"]["num_examples"] == 300 - TRAIN_ROWS  # the file's rows past max_rows

    # Each model's values are those it gets alone (in this process), the difference is model − reference.
    suite = sample / "suites" / "own.yaml"
    alone = run_suite(SentenceTransformer(tiny_model_path, device="cpu"), suite, show_progress_bar=False)
    reference = run_suite(SentenceTransformer(base, device="cpu"), suite, show_progress_bar=False)
    table = {tuple(line.split()[:4]): line.split()[4:] for line in completed.stdout.splitlines()[2:] if line.strip()}
    for entry in alone.entries:
        for metric, value in entry.reported_metrics.items():
            written_model = data["results"][entry.name]["metrics"][metric]
            written_reference = data["reference"]["results"][entry.name]["metrics"][metric]
            assert written_model == pytest.approx(value, abs=1e-6)
            assert written_reference == pytest.approx(reference[entry.name].metrics[metric], abs=1e-6)
            difference = data["reference"]["difference"][entry.name][metric]
            assert difference == pytest.approx(written_model - written_reference, abs=1e-12)
            star = "*" if metric == entry.primary_metric else ""
            shown = table[(entry.name, entry.kind, str(entry.num_examples), metric + star)]
            assert shown == [f"{written_model:.4f}", f"{written_reference:.4f}", f"{difference:+.4f}"]
    assert data["model-index"][0]["name"] == "st"  # the card's results stay the model's own


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_rows": None}, r"source 'stsb' of .*own\.yaml trains on every row .*no max_rows"),
        ({"max_rows": 5000}, r"gives 300 rows, all within its max_rows 5000: none is held out"),
        ({"entry": {"task": "nosuch"}}, r"has no source 'nosuch'; its sources are \['stsb', 'wikiqa'\]"),
        ({"entry": {"held_out_from": "../recipes/absent.yaml"}}, r"absent\.yaml: file does not exist"),
        ({"entry": {"kind": "retrieval"}}, r"is task_type 'sts', kind 'retrieval' scores 'retrieval' rows"),
        ({"entry": {"data_files": "x.tsv"}}, r"field 'held_out_from': the recipe's source gives the files"),
    ],
)
def test_a_held_out_entry_that_cannot_hold_out_is_one_error_line(
    sample: Path,
    tiny_model_path: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: dict[str, Any],
    message: str,
) -> None:
    import re

    recipe = yaml.safe_load((sample / "recipes" / "own.yaml").read_text(encoding="utf-8"))
    if "max_rows" in change:
        recipe["sources"][0]["max_rows"] = change["max_rows"]
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "own.yaml").write_text(
        yaml.safe_dump(recipe).replace("../data/", f"{sample}/data/"), encoding="utf-8"
    )
    entry = {"name": "stsb", "kind": "sts", "held_out_from": "../recipes/own.yaml", **change.get("entry", {})}
    (tmp_path / "suites").mkdir()
    suite = tmp_path / "suites" / "own.yaml"
    suite.write_text(yaml.safe_dump({"evaluations": [entry]}), encoding="utf-8")
    assert main(["evaluate", tiny_model_path, str(suite), "--no-diagnostics"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and re.search(message, err[-1]), err


def test_the_guides_held_out_suite_scores_the_rows_its_recipe_leaves_out(
    tiny_model_path: str, minilm_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = Path(__file__).resolve().parent.parent / "examples" / "data" / "your-data" / "held-out"
    base = make_tiny_model(tmp_path / "base", minilm_path, seed=1)
    output = tmp_path / "results.json"
    argv = ["evaluate", tiny_model_path, str(folder / "held-out.yaml"), "--reference", base, "-o", str(output)]
    assert main(argv) == 0, capsys.readouterr().err
    data = json.loads(output.read_text(encoding="utf-8"))
    recipe = yaml.safe_load((folder / "faq.yaml").read_text(encoding="utf-8"))["sources"][0]
    rows = (folder / recipe["data_files"]).read_text(encoding="utf-8").splitlines()[1:]  # a header, then a pair a line
    assert data["results"]["faq"]["num_examples"] == len(rows) - recipe["max_rows"]
    assert set(data["reference"]["difference"]["faq"]) >= {"cosine_ndcg@10", "cosine_mrr@10"}
