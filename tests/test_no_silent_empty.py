"""Nothing to read is an error, never an empty result: a split or task the folder or recipe lacks is named.

``load_unified``, ``stream_unified``, ``build_unified`` and the commands that read a unified folder refuse a
split no task has (naming the splits there are), an empty task list and arguments of the wrong type
(``load_unified(None)``, ``save_unified(dataset)``), each with one line saying what to pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from _curriculum_helpers import unified_rows
from datasets import Dataset, DatasetDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.data import build_unified, load_unified, save_unified, stream_unified
from hf_unified_embed.errors import InputError, RecipeError
from hf_unified_embed.schema import UNIFIED_FEATURES

#: The folder's tasks by split: alpha in train and validation, beta in train only.
LAYOUT = {"train": ["alpha", "beta"], "validation": ["alpha"]}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    splits = {
        split: DatasetDict(
            {task: Dataset.from_list(unified_rows(task, 3), features=UNIFIED_FEATURES, split=split) for task in tasks}
        )
        for split, tasks in LAYOUT.items()
    }
    return save_unified(splits, tmp_path_factory.mktemp("u") / "data")


@pytest.mark.parametrize("reader", [load_unified, stream_unified])
@pytest.mark.parametrize("split", ["test", "tset", "Train"])
def test_a_split_no_task_has_is_an_error_naming_the_splits(folder: Path, reader, split: str) -> None:
    with pytest.raises(InputError, match=rf"no task has split '{split}'; the splits are \['train', 'validation'\]"):
        reader(folder, split=split)


@pytest.mark.parametrize("reader", [load_unified, stream_unified])
def test_an_empty_task_list_is_an_error(folder: Path, reader) -> None:
    with pytest.raises(InputError, match=r"tasks is an empty list; the tasks are \['alpha', 'beta'\]"):
        reader(folder, tasks=[])


@pytest.mark.parametrize("reader", [load_unified, stream_unified])
@pytest.mark.parametrize("bad", [None, 3, b"folder", ["a", "b"]])
def test_a_folder_argument_of_the_wrong_type_names_the_argument(reader, bad: object) -> None:
    with pytest.raises(
        TypeError, match=r"repo_id_or_dir must be a unified dataset folder \(a path\) or a Hub dataset id"
    ):
        reader(bad)


def test_an_empty_folder_argument_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="repo_id_or_dir is empty"):
        load_unified("")


def test_tasks_as_one_string_and_a_split_of_the_wrong_type(folder: Path) -> None:
    with pytest.raises(
        TypeError, match=r"tasks must be a list of task names or None, got 'alpha' \(one task: \['alpha'\]\)"
    ):
        load_unified(folder, tasks="alpha")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"split must be a split name such as 'train', got None"):
        load_unified(folder, split=None)  # type: ignore[arg-type]


def test_save_unified_of_one_dataset_says_what_to_pass(tmp_path: Path) -> None:
    dataset = Dataset.from_list(unified_rows("alpha", 2), features=UNIFIED_FEATURES)
    with pytest.raises(TypeError, match=r'got one Dataset; pass \{"task_name": dataset\}'):
        save_unified(dataset, tmp_path / "out")  # type: ignore[arg-type]
    for bad in (None, [dataset], {"alpha": [1, 2]}):
        with pytest.raises(TypeError, match="save_unified: data must be a DatasetDict keyed by task name"):
            save_unified(bad, tmp_path / "out")  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


def test_build_of_a_split_the_recipe_lacks_names_its_splits(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"anchor": "q", "positive": "p"}\n')
    recipe = {"sources": [{"name": "p", "format": "pairs", "data_files": str(path), "task_type": "retrieval"}]}
    with pytest.raises(RecipeError, match=r"no source has split 'tset'; splits are \['train'\]"):
        build_unified(recipe, split="tset")


@settings(
    max_examples=30,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    split=st.sampled_from(["train", "validation", "test", "tset", "TRAIN", "dev"]),
    tasks=st.one_of(st.none(), st.lists(st.sampled_from(["alpha", "beta", "gamma"]), max_size=3, unique=True)),
    streaming=st.booleans(),
)
def test_what_is_read_is_what_was_asked_or_an_error(
    folder: Path, split: str, tasks: list[str] | None, streaming: bool
) -> None:
    """Whatever split and tasks a user asks for, the result holds exactly those tasks (all of the split's by
    default), never none; otherwise one ``InputError`` naming the folder and what it has."""
    has = {task: [name for name, names in LAYOUT.items() if task in names] for task in ("alpha", "beta")}
    wanted = [task for task in has if split in has[task]] if tasks is None else tasks
    fits = bool(wanted) and all(task in has and split in has[task] for task in wanted)
    reader = stream_unified if streaming else load_unified
    if fits:
        assert list(reader(folder, tasks=tasks, split=split)) == wanted
        return
    with pytest.raises(InputError) as info:
        reader(folder, tasks=tasks, split=split)
    message = str(info.value)
    assert message.startswith(str(folder)) and "\n" not in message
    assert "train" in message or "alpha" in message, message


def test_commands_refuse_a_split_the_folder_lacks(folder: Path, tmp_path: Path, tiny_model_path: str, capsys) -> None:
    recipe = {
        "base_model": tiny_model_path,
        "data": {"path": str(folder), "split": "tset"},
        "output_dir": str(tmp_path / "out"),
        "losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss"}},
        "training_args": {"max_steps": 1, "per_device_train_batch_size": 2},
    }
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(recipe))
    assert main(["train", str(path), "--check"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "no task has split 'tset'" in lines[0] and "Traceback" not in err, err
    out = tmp_path / "curriculum"
    assert main(["curriculum", str(folder), "--teacher", tiny_model_path, "-o", str(out), "--split", "tset"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "the splits are ['train', 'validation']" in lines[0] and "Traceback" not in err, err
    assert not out.exists()
