"""A resumed stream proves it reads the data its state was saved on; an edited stream state is one located line.

Each saved stream state records every task's data identity (its shards' names, sizes, rows and footer
digests). Resuming on other data — the folder rebuilt with other shard counts or fewer rows — is refused,
naming the task and what changed, or, with ``on_data_change="restart"`` (recipe ``data.on_data_change``),
starts that task's pass afresh and says so. Before, such a resume trained on with exit 0 and no word.

A stream state edited by hand (wrong types, a negative pass, an offset past the data, missing keys) is refused
before training in one line naming the checkpoint's ``trainer_state.json`` and the field; before, it ended
in a traceback (``processes: 'abc'``, ``pass: -3``) or was silently believed (an offset past the data).
"""

from __future__ import annotations

import copy
import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset, DatasetDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.data import save_unified, stream_unified
from hf_unified_embed.errors import InputError
from hf_unified_embed.recipe import recipe_from_dict
from hf_unified_embed.sampling import MultiTaskStream
from hf_unified_embed.sampling.elastic_resume import resplit
from hf_unified_embed.sampling.stream_resume import check_stream_checkpoint
from hf_unified_embed.schema import unified_features

WINDOW, STEP_ROWS, SAVED_AT = 8, 4, 6


def _task(name: str, rows: int) -> Dataset:
    return Dataset.from_dict(
        {
            "task": [name] * rows,
            "task_type": ["retrieval"] * rows,
            "query_instruction": [""] * rows,
            "document_instruction": [""] * rows,
            "query": [f"{name} question {index}" for index in range(rows)],
            "positives": [[f"{name} answer {index}"] for index in range(rows)],
            "negatives": [[f"{name} other {index}"] for index in range(rows)],
            "positive_scores": [[] for _ in range(rows)],
            "negative_scores": [[] for _ in range(rows)],
        },
        features=unified_features(),
    )


def _folder(path: Path, rows: dict[str, int], shard_bytes: int = 2500) -> Path:
    if path.exists():
        shutil.rmtree(path)
    return save_unified(
        DatasetDict({name: _task(name, count) for name, count in rows.items()}), path, max_shard_bytes=shard_bytes
    )


ROWS = {"alpha": 60, "beta": 48}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
    """A folder, the stream state before step :data:`SAVED_AT` (through JSON, as a checkpoint holds it) and the
    rows the uninterrupted stream reads from that step on."""
    folder = _folder(tmp_path_factory.mktemp("identity") / "data", ROWS)
    stream = _stream(folder)
    rows = iter(stream)
    for _ in range(SAVED_AT * STEP_ROWS):
        next(rows)
    state = json.loads(json.dumps(stream.state_at(SAVED_AT)))
    return folder, state, [next(rows) for _ in range(3 * STEP_ROWS)]


def _stream(folder: Path, on_data_change: str = "refuse") -> MultiTaskStream:
    return MultiTaskStream(
        stream_unified(folder),
        batch_size=STEP_ROWS,
        gradient_accumulation_steps=1,
        seed=3,
        shuffle_window=WINDOW,
        on_data_change=on_data_change,
    )


def _resumed_rows(stream: MultiTaskStream, state: dict[str, Any], count: int) -> list[dict[str, Any]]:
    stream.load_state_dict(state)
    rows = iter(stream)
    return [next(rows) for _ in range(count)]


def test_the_state_records_each_task_s_data_and_the_same_data_elsewhere_resumes_exactly(saved, tmp_path: Path) -> None:
    folder, state, expected = saved
    assert set(state["data"]) == set(ROWS)
    assert {task: identity["rows"] for task, identity in state["data"].items()} == ROWS
    moved = tmp_path / "moved"
    shutil.copytree(folder, moved)  # the data identity is the content, not where the folder lies
    assert _resumed_rows(_stream(moved), state, len(expected)) == expected


@pytest.mark.parametrize(
    ("rows", "shard_bytes", "change"),
    [
        (ROWS, 1200, r"shards \d+ -> \d+"),  # rebuilt with another shard size
        ({"alpha": 50, "beta": 48}, 2500, "rows 60 -> 50"),  # fewer rows
    ],
)
def test_a_resume_on_other_data_is_refused_naming_the_task_and_what_changed(
    saved, tmp_path: Path, rows: dict[str, int], shard_bytes: int, change: str
) -> None:
    _, state, _ = saved
    other = _folder(tmp_path / "other", rows, shard_bytes)
    stream = _stream(other)
    with pytest.raises(InputError) as refused:
        stream.load_state_dict(state)
    message = str(refused.value)
    assert "\n" not in message and "task 'alpha'" in message and "on_data_change='restart'" in message, message
    assert re.search(change, message), message
    # The same refusal before training, from the checkpoint a trainer wrote, naming the checkpoint.
    checkpoint = _checkpoint(tmp_path / "checkpoint-6", [state])
    with pytest.raises(InputError, match=r"^resume_from_checkpoint .*task 'alpha': its data changed"):
        check_stream_checkpoint(checkpoint, list(ROWS), 1, stream=stream)


def test_restart_starts_the_changed_task_s_pass_afresh_and_says_so(
    saved, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, state, expected = saved
    other = _folder(tmp_path / "fewer", {"alpha": 40, "beta": 48})
    stream = _stream(other, on_data_change="restart")
    checkpoint = _checkpoint(tmp_path / "checkpoint-6", [state])
    check_stream_checkpoint(checkpoint, list(ROWS), 1, stream=stream)
    with caplog.at_level(logging.WARNING):
        rows = _resumed_rows(stream, state, len(expected))
    assert "task 'alpha': its data changed" in caplog.text and "starts afresh" in caplog.text
    # beta is unchanged: it continues where it was (the steps' tasks follow the new row counts); alpha reads a
    # fresh pass of the new data.
    beta = [row for row in rows if row["dataset_name"] == "beta"]
    uninterrupted = [row for row in expected if row["dataset_name"] == "beta"]
    shared = min(len(beta), len(uninterrupted))
    assert shared and beta[:shared] == uninterrupted[:shared]
    assert all(int(row["query"].split()[-1]) < 40 for row in rows if row["dataset_name"] == "alpha")


def _checkpoint(folder: Path, processes: list[dict[str, Any]], step: int = SAVED_AT) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    attributes = {"step": step, "processes": processes}
    state = {
        "global_step": step,
        "stateful_callbacks": {"StreamResumeCallback": {"args": {}, "attributes": attributes}},
    }
    (folder / "trainer_state.json").write_text(json.dumps(state))
    return folder


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _nodes(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _nodes(inner, (*path, index))
    return found


OTHER_VALUES = st.one_of(
    st.integers(-5, 5),
    st.integers(10**3, 10**9),
    st.booleans(),
    st.none(),
    st.text("abc-1", max_size=4),
    st.floats(-3, 3).filter(lambda value: value != int(value)),
    st.lists(st.integers(0, 3), max_size=2),
    st.just({"k": 1}),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), delete=st.booleans(), value=OTHER_VALUES)
def test_an_edited_stream_state_is_refused_in_one_line_naming_the_file_and_field_or_resumes(
    saved, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, delete: bool, value: Any
) -> None:
    folder, state, _ = saved
    processes = [copy.deepcopy(state)]
    path = data.draw(st.sampled_from(_nodes(processes)[1:]), label="field")
    parent = processes
    for key in path[:-1]:
        parent = parent[key]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    checkpoint = _checkpoint(tmp_path_factory.mktemp("edited") / "checkpoint-6", processes)
    stream = _stream(folder)
    try:
        check_stream_checkpoint(checkpoint, list(ROWS), 1, stream=stream)
    except InputError as error:
        message = str(error)
        assert "\n" not in message and message.startswith(f"resume_from_checkpoint {checkpoint}: "), message
        if "stream state" not in message and "its data changed" not in message:
            assert f"{checkpoint}/trainer_state.json, field '" in message, message
        return
    # Accepted: the edit left a state a stream can have written; the stream continues, or names the task.
    try:
        rows = _resumed_rows(stream, resplit(processes, 0, 1), 2 * STEP_ROWS)
    except InputError as error:
        assert "\n" not in str(error) and "task '" in str(error), str(error)
        return
    assert len(rows) == 2 * STEP_ROWS


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda processes: "abc", "attributes.processes'"),
        (
            lambda processes: [
                {
                    **processes[0],
                    "tasks": {**processes[0]["tasks"], "alpha": {**processes[0]["tasks"]["alpha"], "pass": -3}},
                }
            ],
            "tasks.alpha.pass",
        ),
        (
            lambda processes: [
                {
                    **processes[0],
                    "tasks": {**processes[0]["tasks"], "beta": {**processes[0]["tasks"]["beta"], "window": 10**6}},
                }
            ],
            "tasks.beta.offset",
        ),
        (
            lambda processes: [{key: value for key, value in processes[0].items() if key != "tasks"}],
            "processes[0].tasks",
        ),
    ],
)
def test_the_edits_that_raised_or_were_believed_before(saved, tmp_path: Path, edit: Any, field: str) -> None:
    folder, state, _ = saved
    checkpoint = _checkpoint(tmp_path / "checkpoint-6", edit([state]))
    with pytest.raises(InputError) as refused:
        check_stream_checkpoint(checkpoint, list(ROWS), 1, stream=_stream(folder))
    assert "trainer_state.json, field '" in str(refused.value) and field in str(refused.value), str(refused.value)


def test_a_streaming_recipe_resumed_on_a_rebuilt_folder_is_refused(tiny_model_path: str, tmp_path: Path) -> None:
    from hf_unified_embed.recipe.run import train_from_recipe

    folder = _folder(tmp_path / "data", ROWS)
    raw = {
        "base_model": tiny_model_path,
        "data": {"path": str(folder), "streaming": True, "shuffle_window": WINDOW},
        "losses": {"retrieval": "MultiPositiveInfoNCELoss"},
        "negatives_per_query": 1,
        "training_args": {"max_steps": 2, "per_device_train_batch_size": 4, "save_steps": 2},
        "output_dir": str(tmp_path / "model"),
    }
    train_from_recipe(recipe_from_dict(copy.deepcopy(raw)))
    checkpoint = tmp_path / "model-checkpoints" / "checkpoint-2"
    _folder(folder, {"alpha": 52, "beta": 48})
    raw["training_args"].update(max_steps=4, resume_from_checkpoint=str(checkpoint))
    with pytest.raises(
        InputError, match=r"task 'alpha': its data changed since the stream state was saved \(rows 60 -> 52"
    ):
        train_from_recipe(recipe_from_dict(copy.deepcopy(raw)), overwrite=True)
    raw["data"]["on_data_change"] = "restart"
    assert train_from_recipe(recipe_from_dict(raw), overwrite=True).train_loss is not None


def test_an_edited_window_start_is_refused_naming_the_task_and_field(saved) -> None:
    """The source position inside a state must have the shape of the data's own; before, an edited one ended in
    a ``TypeError`` deep in datasets some windows later."""
    folder, state, _ = saved
    edited = copy.deepcopy(state)
    start = edited["tasks"]["alpha"]["window_start"]
    assert start is not None
    start["examples_iterable"]["num_chunks_since_previous_state"] = None
    stream = _stream(folder)
    stream.load_state_dict(edited)
    with pytest.raises(InputError) as refused:
        next(iter(stream))
    message = str(refused.value)
    assert "task 'alpha'" in message and "window_start.examples_iterable.num_chunks_since_previous_state" in message
    assert "\n" not in message
