"""The smaller cases of issue 37 (item 9), each as a user meets it on the command line.

Before: resuming a finished run trained one more step; ``merge OUT/merge_config.yaml`` in place gave a
Hub error; ``--num-proc two`` said ``invalid _positive_int value``; ``validate ""`` checked ``.``; a folder
given for a recipe or suite said "file does not exist".
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from hf_unified_embed.cli.main import main


def run(argv: list[str], cwd: Path | None = None) -> tuple[int, list[str]]:
    err = io.StringIO()
    with (
        contextlib.chdir(cwd or Path.cwd()),
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse
            code = int(exit_.code or 0)
    return code, [line for line in err.getvalue().split("\n") if line.strip() and "\r" not in line]


@pytest.fixture
def unified(tmp_path: Path) -> Path:
    rows = [{"query": f"question {i} about {i}", "positives": [f"answer {i} about {i}"]} for i in range(16)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    source = {"name": "qa", "format": "unified", "data_files": "rows.jsonl", "task_type": "retrieval"}
    (tmp_path / "build.yaml").write_text(yaml.safe_dump({"sources": [source]}))
    assert run(["build", "build.yaml", "-o", "unified"], tmp_path)[0] == 0
    return tmp_path / "unified"


def test_resuming_a_finished_run_trains_no_extra_step_and_writes_the_checkpoints_model(
    unified: Path, tiny_model_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    root = unified.parent
    recipe = {
        "base_model": tiny_model_path,
        "data": {"path": "unified"},
        "losses": {"retrieval": "MultiPositiveInfoNCELoss"},
        "training_args": {"max_steps": 2, "per_device_train_batch_size": 4, "save_strategy": "steps", "save_steps": 2},
        "output_dir": "model",
    }
    (root / "train.yaml").write_text(yaml.safe_dump(recipe))
    assert run(["train", "train.yaml"], root)[0] == 0
    checkpoint = root / "model-checkpoints" / "checkpoint-2"
    recipe["training_args"]["resume_from_checkpoint"] = str(checkpoint)
    (root / "resume.yaml").write_text(yaml.safe_dump(recipe))
    code, lines = run(["train", "resume.yaml", "-o", "again"], root)
    assert code == 0, lines
    assert "is at max_steps 2: the run is already finished; no step is trained" in caplog.text
    resumed, saved = load_file(root / "again" / "model.safetensors"), load_file(checkpoint / "model.safetensors")
    assert resumed.keys() == saved.keys() and all((resumed[key] == saved[key]).all() for key in saved)
    assert not (root / "again-checkpoints" / "checkpoint-3").exists()


def test_merge_config_run_inside_its_output_says_to_copy_it_next_to_the_inputs(
    tmp_path: Path, tiny_model_path: str
) -> None:
    for name in ("run-a", "run-b"):
        shutil.copytree(tiny_model_path, tmp_path / name)
    assert (
        run(["merge", "--method", "soup", "--models", "run-a", "run-b", "-o", "merged", "--no-progress"], tmp_path)[0]
        == 0
    )
    code, lines = run(["merge", "merged/merge_config.yaml", "-o", "again", "--no-progress"], tmp_path)
    assert code == 2 and len(lines) == 1, lines
    assert (
        "names its inputs by folder name (run-a, run-b)" in lines[0]
        and "copy it next to the input folders" in lines[0]
    )
    shutil.copy(tmp_path / "merged" / "merge_config.yaml", tmp_path / "again.yaml")
    assert run(["merge", "again.yaml", "-o", "again", "--no-progress"], tmp_path)[0] == 0


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["build", "build.yaml", "-o", "x", "--num-proc", "two"],
            "argument --num-proc: expected a positive integer, got 'two'",
        ),
        (
            ["build", "build.yaml", "-o", "x", "--num-proc", "0"],
            "argument --num-proc: expected a positive integer, got '0'",
        ),
        (["validate", ""], "argument folder: expected a path (is a shell variable unset?), got ''"),
        (["train", "recipe.yaml", "--max-steps", "ten"], "argument --max-steps: expected an integer, got 'ten'"),
    ],
)
def test_argument_types_name_what_they_expect(tmp_path: Path, argv: list[str], expected: str) -> None:
    code, lines = run(argv, tmp_path)
    assert code == 2 and lines[-1].endswith(expected), lines


@pytest.mark.parametrize("command", ["train", "build", "evaluate"])
def test_a_folder_given_for_a_yaml_file_says_it_is_a_folder(
    tmp_path: Path, command: str, tiny_model_path: str
) -> None:
    (tmp_path / "recipes").mkdir()
    argv = {
        "train": ["train", "recipes"],
        "build": ["build", "recipes", "-o", "out"],
        "evaluate": ["evaluate", tiny_model_path, "recipes"],
    }[command]
    code, lines = run(argv, tmp_path)
    assert code == 2 and len(lines) == 1 and "recipes: is a folder; give the YAML file itself" in lines[0], lines
