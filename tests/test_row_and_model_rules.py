"""One row check and one model rule for every command (issue 37, items 5 and 6).

Before: ``mine-negatives`` on rows with a null negative failed with an ``IndexError`` (exit 1), accepted empty
negatives, NaN negative scores and positive scores of -1 that ``validate`` refuses, and refused empty
positives after 35 s; ``evaluate --reference nosuch-org/nosuch-model`` (or the same reference in a suite, or
``./nope-model``) failed with an ``OSError`` traceback after scoring.

Now every command that reads unified rows (``mine-negatives``, ``evaluate`` on a unified entry,
``curriculum``) refuses a bad row with ``validate``'s message (file, task, row, field), exit 2, before any model
loads; every option that takes a model refuses a missing path, a file, a dataset folder and (offline) an
unknown Hub id with one line before any work. Hypothesis draws the defect and the command.
"""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main

FAST_CURRICULUM = ["--iterations", "200", "--n-samples", "4", "--batch-size", "8", "--negative-pool", "8"]
PROPERTY = settings(
    max_examples=12,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _row(index: int) -> dict[str, Any]:
    return {
        "task": "ret",
        "task_type": "retrieval",
        "query_instruction": "",
        "document_instruction": "",
        "query": f"what is thing number {index}",
        "positives": [f"thing {index} is a kind of object"],
        "negatives": [f"an unrelated sentence {index}", f"another sentence {index}"],
        "positive_scores": [1.0],
        "negative_scores": [0.0, 0.1],
    }


#: A defect a user's rows could have: (what it is, how it breaks row 2).
DEFECTS: dict[str, Any] = {
    "null negative": lambda row: row.update(negatives=[None, "x"]),
    "empty negatives with scores": lambda row: row.update(negatives=[]),
    "NaN negative score": lambda row: row.update(negative_scores=[math.nan, 0.1]),
    "positive score -1": lambda row: row.update(positive_scores=[-1.0]),
    "empty positives": lambda row: row.update(positives=[], positive_scores=[]),
    "blank query": lambda row: row.update(query="  "),
    "null positive": lambda row: row.update(positives=[None]),
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str) -> Path:
    from datasets import Dataset, DatasetDict

    from hf_unified_embed.data import save_unified
    from hf_unified_embed.schema import unified_features

    root = tmp_path_factory.mktemp("rules")
    rows = [_row(index) for index in range(6)]
    save_unified(DatasetDict({"ret": Dataset.from_list(rows, features=unified_features())}), root / "clean")
    import shutil

    shutil.copytree(tiny_model_path, root / "model")
    return root


def _broken(project: Path, defect: str, name: str) -> Path:
    import shutil

    folder = project / name
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(project / "clean", folder)
    shard = folder / "data" / "ret" / "train-00000-of-00001.parquet"
    table = pq.read_table(shard)
    rows = table.to_pylist()
    DEFECTS[defect](rows[2])
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    return folder


def _run(project: Path, argv: list[str]) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.chdir(project), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, [line for line in err.getvalue().split("\n") if line.strip() and "\r" not in line]


def _suite(project: Path, name: str, entry: dict[str, Any]) -> str:
    (project / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, "evaluations": [entry]}))
    return f"{name}.yaml"


def _reading_command(command: str, project: Path, folder: str) -> list[str]:
    if command == "mine-negatives":
        return ["mine-negatives", folder, "-o", "mined", "--model", "model", "--num-negatives", "1"]
    if command == "curriculum":
        return ["curriculum", folder, "--teacher", "model", "-o", "plan", *FAST_CURRICULUM]
    suite = _suite(
        project, "rows", {"name": "ret", "kind": "retrieval", "unified": folder, "task": "ret", "split": "train"}
    )
    return ["evaluate", "model", suite, "--no-diagnostics"]


@pytest.fixture
def no_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    from sentence_transformers import SentenceTransformer

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("a model was loaded before the rows were checked")

    monkeypatch.setattr(SentenceTransformer, "__init__", refuse)


@PROPERTY
@given(defect=st.sampled_from(sorted(DEFECTS)), command=st.sampled_from(["mine-negatives", "evaluate", "curriculum"]))
def test_every_command_that_reads_rows_refuses_what_validate_refuses(
    project: Path, no_model_loads: None, defect: str, command: str
) -> None:
    folder = _broken(project, defect, "broken")
    code, expected = _run(project, ["validate", "broken"])
    assert code == 2 and len(expected) == 1, (defect, expected)
    why = expected[0].removeprefix("error: ")
    assert "task 'ret'" in why and "row 2" in why, why
    code, lines = _run(project, _reading_command(command, project, "broken"))
    assert code == 2 and len(lines) == 1, (command, defect, lines)
    assert why in lines[0] or why.split(": ", 1)[1] in lines[0], (why, lines[0])
    assert not (project / "mined").exists() and not (project / "plan").exists()
    assert folder.is_dir()


REFERENCES = {
    "missing path": ("./nope-model", "no such folder"),
    "unknown Hub id": ("nosuch-org/nosuch-model", "the Hub model cannot be loaded: it is not in the cache"),
    "a file": ("clean/README.md", "is a file; give the model's folder"),
    "a dataset folder": ("clean", "is a unified dataset folder, not a model"),
}


def _model_command(option: str, project: Path, name: str) -> list[str]:
    if option == "evaluate MODEL":
        suite = _suite(
            project, "ok", {"name": "ret", "kind": "retrieval", "unified": "clean", "task": "ret", "split": "train"}
        )
        return ["evaluate", name, suite, "--no-diagnostics"]
    if option == "evaluate --reference":
        entry = {"name": "kept", "kind": "forgetting", "unified": "clean", "task": "ret", "split": "train"}
        return ["evaluate", "model", _suite(project, "forget", entry), "--reference", name, "--no-diagnostics"]
    if option == "suite reference":
        entry = {
            "name": "kept",
            "kind": "forgetting",
            "unified": "clean",
            "task": "ret",
            "split": "train",
            "evaluator": {"reference": name},
        }
        return ["evaluate", "model", _suite(project, "forget-ref", entry), "--no-diagnostics"]
    if option == "curriculum --teacher":
        return ["curriculum", "clean", "--teacher", name, "-o", "plan", *FAST_CURRICULUM]
    if option == "mine-negatives --model":
        return ["mine-negatives", "clean", "-o", "mined", "--model", name]
    return ["merge", "--method", "soup", "--models", "model", name, "-o", "merged", "--no-progress"]


OPTIONS = [
    "evaluate MODEL",
    "evaluate --reference",
    "suite reference",
    "curriculum --teacher",
    "mine-negatives --model",
    "merge --models",
]


@PROPERTY
@given(kind=st.sampled_from(sorted(REFERENCES)), option=st.sampled_from(OPTIONS))
def test_every_option_that_takes_a_model_refuses_a_reference_that_cannot_load(
    project: Path, no_model_loads: None, kind: str, option: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # as the tests run: no Hub
    name, expected = REFERENCES[kind]
    code, lines = _run(project, _model_command(option, project, name))
    assert code == 2 and len(lines) == 1, (option, kind, lines)
    assert name in lines[0] and expected in lines[0], (option, kind, lines[0])
    for output in ("mined", "plan", "merged"):
        assert not (project / output).exists()
