"""A checkpoint a streaming run cannot resume from is refused before training, with one line (issue 37, item 7).

Before: resuming a stream checkpoint saved by 1 process under 2 processes gave a ``ValueError`` traceback on every
rank, then torchrun's failure report (exit 1); a streaming recipe given a non-streaming checkpoint gave a
traceback (exit 1). Now: exit 2, one ``error:`` line, on the launching process only. A state saved by N
processes resumes under any M (test_elastic_resume.py, test_elastic_stream.py): here a 1-process checkpoint
trains on under 2 from a recipe; only a state mid-way through finishing a pass under yet another count is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_unified_embed.errors import InputError
from hf_unified_embed.sampling.stream_resume import check_stream_checkpoint

REPO = Path(__file__).resolve().parent.parent


#: A task's stream state before its first row (TaskStream.state_dict()).
FRESH = {"pass": 0, "window": -1, "window_start": None, "offset": 0}


def _checkpoint(folder: Path, step: int, processes: list[list[str]] | None, remainder: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    state: dict[str, Any] = {"global_step": step, "stateful_callbacks": {}}
    if processes is not None:
        # remainder: saved while finishing a pass interrupted under another process count (elastic_resume.py)
        task = {**FRESH, "remainder": {"world_size": 3, "states": [FRESH] * 3, "source": 0, "seen": 0, "inner": None}}
        attributes = {
            "step": step,
            "processes": [
                {"step": step, "tasks": {name: task if remainder else FRESH for name in tasks}} for tasks in processes
            ],
        }
        state["stateful_callbacks"]["StreamResumeCallback"] = {"args": {}, "attributes": attributes}
    (folder / "trainer_state.json").write_text(json.dumps(state))
    return folder


@settings(max_examples=60, deadline=None)
@given(
    saved_by=st.integers(1, 4),
    resumed_by=st.integers(1, 4),
    saved_tasks=st.sets(st.sampled_from(["a", "b", "c", "d"]), min_size=1),
    run_tasks=st.sets(st.sampled_from(["a", "b", "c"]), min_size=1),
    has_state=st.booleans(),
    remainder=st.booleans(),
)
def test_refused_exactly_when_the_state_does_not_fit_the_run(
    tmp_path_factory: pytest.TempPathFactory,
    saved_by: int,
    resumed_by: int,
    saved_tasks: set[str],
    run_tasks: set[str],
    has_state: bool,
    remainder: bool,
) -> None:
    folder = tmp_path_factory.mktemp("checkpoint") / "checkpoint-4"
    _checkpoint(folder, 4, [sorted(saved_tasks)] * saved_by if has_state else None, remainder)
    fits = has_state and saved_tasks <= run_tasks and (saved_by == resumed_by or not remainder)
    if fits:
        check_stream_checkpoint(folder, sorted(run_tasks), resumed_by)
        return
    with pytest.raises(InputError) as refused:
        check_stream_checkpoint(folder, sorted(run_tasks), resumed_by)
    message = str(refused.value)
    assert message.startswith(f"resume_from_checkpoint {folder}: ") and "\n" not in message
    if not has_state:
        assert "holds no training stream state" in message
    elif not saved_tasks <= run_tasks:
        assert "that this run does not stream" in message
    else:
        assert f"saved by {saved_by} process(es), cannot be split among {resumed_by}" in message
        assert f"resume it with the {saved_by} process(es) that saved it" in message


@pytest.fixture(scope="module")
def unified_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hf_unified_embed.data import build_unified, save_unified

    return save_unified(
        build_unified(REPO / "examples/recipes/sample.yaml", split="train"), tmp_path_factory.mktemp("u") / "data"
    )


def _recipe(unified_dir: Path, base: str, out: Path, streaming: bool, **training: Any) -> dict[str, Any]:
    return {
        "base_model": base,
        "data": {"path": str(unified_dir), "tasks": ["stsb", "wikiqa"], "streaming": streaming},
        "losses": {"retrieval": "MultiPositiveInfoNCELoss", "sts": "CoDiEmbSTSLoss"},
        "training_args": {
            "max_steps": 2,
            "per_device_train_batch_size": 4,
            "save_strategy": "steps",
            "save_steps": 2,
            **training,
        },
        "output_dir": str(out),
    }


def _train(recipe: dict[str, Any], path: Path, processes: int = 1) -> subprocess.CompletedProcess[str]:
    path.write_text(yaml.safe_dump(recipe))
    command = [sys.executable, "-m", "hf_unified_embed"]
    if processes > 1:
        command = [
            sys.executable,
            "-m",
            "hf_unified_embed.cli.launch",
            f"--nproc_per_node={processes}",
            "-m",
            "hf_unified_embed",
        ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    # A hang guard: two processes train a tiny model on a machine that may be loaded.
    return subprocess.run([*command, "train", str(path)], capture_output=True, text=True, timeout=1800, env=env)


def _errors(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.split("\n") if line.startswith("error:")]


@pytest.mark.multiprocess
def test_a_non_streaming_checkpoint_or_another_recipe_s_is_refused_with_one_line_and_another_count_resumes(
    unified_dir: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    plain = _train(_recipe(unified_dir, tiny_model_path, tmp_path / "plain", False), tmp_path / "plain.yaml")
    assert plain.returncode == 0, plain.stderr[-3000:]
    checkpoint = tmp_path / "plain-checkpoints" / "checkpoint-2"
    resumed = _recipe(
        unified_dir, tiny_model_path, tmp_path / "s1", True, max_steps=4, resume_from_checkpoint=str(checkpoint)
    )
    result = _train(resumed, tmp_path / "s1.yaml")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(_errors(result)) == 1 and "holds no training stream state for its step 2" in _errors(result)[0]

    streamed = _train(_recipe(unified_dir, tiny_model_path, tmp_path / "one", True), tmp_path / "one.yaml")
    assert streamed.returncode == 0, streamed.stderr[-3000:]
    checkpoint = tmp_path / "one-checkpoints" / "checkpoint-2"
    two = _recipe(
        unified_dir, tiny_model_path, tmp_path / "two", True, max_steps=4, resume_from_checkpoint=str(checkpoint)
    )
    result = _train(two, tmp_path / "two.yaml", processes=2)
    assert result.returncode == 0, result.stderr[-3000:]

    state_file = checkpoint / "trainer_state.json"
    state = json.loads(state_file.read_text())
    saved = state["stateful_callbacks"]["StreamResumeCallback"]["attributes"]["processes"][0]["tasks"]
    saved["other-task"] = saved.pop("stsb")
    state_file.write_text(json.dumps(state))
    other = _recipe(
        unified_dir, tiny_model_path, tmp_path / "other", True, max_steps=4, resume_from_checkpoint=str(checkpoint)
    )
    result = _train(other, tmp_path / "other.yaml", processes=2)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "ChildFailedError" not in result.stderr, result.stderr[-3000:]
    errors = _errors(result)
    assert len(errors) == 1 and "names task(s) ['other-task'] that this run does not stream" in errors[0], errors
    # Only rank 0 draws progress bars: another process's half-drawn bar could hold the start of the error's line.
    assert result.stderr.count("Loading weights: 100%") <= 1, result.stderr[-3000:]
