"""Damaged or hand-edited artifacts outside a unified folder: accepted while still valid, else one located line.

For each artifact a user may hand to a command — a model folder's ``config.json``, ``modules.json`` and
``model.safetensors``, a checkpoint's ``trainer_state.json``, a merge config, a curriculum plan — a search
draws a damage: the file cut at a drawn byte, a drawn byte flipped, or (for JSON and YAML) a drawn field
replaced by a drawn value of another type. The reading function either accepts the file, because it is
still valid (and then what it read is what the file says), or raises the package's error in one line
naming the file; never another exception. A few command-line runs check exit code 2 and one ``error:``
line with no traceback.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed.cli.main import main
from hf_unified_embed.errors import HfUnifiedEmbedError

PROPERTY = settings(
    max_examples=15,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# --- damages ----------------------------------------------------------------------------------------


def truncations(content: bytes) -> st.SearchStrategy[tuple[str, bytes]]:
    return st.integers(0, len(content) - 1).map(lambda at: (f"cut at byte {at}", content[:at]))


def flips(content: bytes, start: int = 0, end: int | None = None) -> st.SearchStrategy[tuple[str, bytes]]:
    end = len(content) if end is None else end

    def flip(at: int, mask: int) -> tuple[str, bytes]:
        return f"byte {at} ^ {mask:#x}", content[:at] + bytes([content[at] ^ mask]) + content[at + 1 :]

    return st.builds(flip, st.integers(start, end - 1), st.integers(1, 255))


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    found = [(path, value)] if path else []
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in children:
        found += _nodes(child, (*path, key))
    return found


def _other_type(value: Any) -> st.SearchStrategy[Any]:
    candidates = [
        st.text(max_size=6),
        st.integers(-3, 3),
        st.floats(-2, 2).filter(lambda x: x != int(x)),
        st.booleans(),
        st.none(),
        st.lists(st.integers(0, 3), max_size=2),
        st.just({"k": 1}),
    ]
    kinds = [str, int, float, bool, type(None), list, dict]
    same = type(value)
    return st.one_of([c for c, kind in zip(candidates, kinds) if kind is not same])


def retyped(data: Any, dump: Callable[[Any], bytes]) -> st.SearchStrategy[tuple[str, bytes]]:
    """``data`` with one drawn field (at any depth) replaced by a drawn value of another type."""
    nodes = _nodes(data)

    @st.composite
    def mutate(draw: st.DrawFn) -> tuple[str, bytes]:
        path, value = draw(st.sampled_from(nodes))
        new = draw(_other_type(value))
        copy = json.loads(json.dumps(data))
        node = copy
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = new
        return f"{'.'.join(map(str, path))}: {value!r} -> {new!r}", dump(copy)

    return mutate()


def damages(content: bytes, data: Any = None, dump: Callable[[Any], bytes] | None = None) -> st.SearchStrategy:
    kinds = [truncations(content), flips(content)]
    if data is not None and dump is not None:
        kinds.append(retyped(data, dump))
    return st.one_of(kinds)


def json_bytes(data: Any) -> bytes:
    return json.dumps(data, indent=2).encode()


def yaml_bytes(data: Any) -> bytes:
    return yaml.safe_dump(data, sort_keys=False).encode()


def check_refusal(error: BaseException, name: str, what: str) -> None:
    """The package's error, one line, naming the file (or its folder)."""
    assert isinstance(error, HfUnifiedEmbedError), f"{what}: {type(error).__name__}: {error}"
    assert "\n" not in str(error), f"{what}: {error}"
    assert name in str(error), f"{what}: the error does not name {name}: {error}"


# --- the model folder ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model(tiny_model_path: str) -> Path:
    return Path(tiny_model_path)


def _load(folder: Path) -> Any:
    from hf_unified_embed.training.bidirectional_transformer import load_sentence_transformer
    from hf_unified_embed.utils.model_loading import load_model

    return load_model(str(folder), "model", device="cpu", loader=load_sentence_transformer)


@pytest.mark.parametrize("name", ["config.json", "modules.json", "model.safetensors"])
def test_damaged_model_files_load_or_are_one_located_line(model: Path, tmp_path_factory, name: str) -> None:
    content = (model / name).read_bytes()
    if name.endswith(".json"):
        strategy = damages(content, json.loads(content), json_bytes)
    else:  # the header (where a flip is found) and any cut; a flipped weight is still a valid file
        header = 8 + int.from_bytes(content[:8], "little")
        strategy = st.one_of(truncations(content), flips(content, 0, header))

    @PROPERTY
    @given(strategy)
    def check(damage: tuple[str, bytes]) -> None:
        what, damaged = damage
        folder = tmp_path_factory.mktemp("model")
        shutil.copytree(model, folder, dirs_exist_ok=True)
        (folder / name).write_bytes(damaged)
        try:
            loaded = _load(folder)
        except Exception as error:
            check_refusal(error, str(folder), what)
            return
        assert loaded.encode(["a sentence"]).shape[0] == 1, what

    check()


def test_a_truncated_model_safetensors_names_the_file(model: Path, tmp_path: Path) -> None:
    folder = Path(shutil.copytree(model, tmp_path / "m"))
    (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:1000])
    with pytest.raises(HfUnifiedEmbedError, match=r"model.safetensors: not a readable safetensors file"):
        _load(folder)


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("config.json", b"\xff\xfe{", r"config.json: not UTF-8 text"),
        ("config.json", b"[1, 2]", r"config.json: expected a JSON object, got list"),
        ("modules.json", b"[1]", r"modules.json: entry 0 is int"),
        ("modules.json", b'{"0": "x"}', r"modules.json: expected a JSON list, got dict"),
        ("modules.json", b'[{"idx": 0, "name": "0", "path": "../up", "type": "x"}]', r"outside the model folder"),
    ],
)
def test_broken_model_json_names_the_file(model: Path, tmp_path: Path, name: str, content: bytes, match: str) -> None:
    folder = Path(shutil.copytree(model, tmp_path / "m"))
    (folder / name).write_bytes(content)
    with pytest.raises(HfUnifiedEmbedError, match=match):
        _load(folder)


def test_what_a_load_does_not_read_is_not_checked(tmp_path: Path) -> None:
    """all-MiniLM-L6-v2 as published: a ``data_config.json`` list, and (saved by some tools) a Normalize
    module without a folder of its own; both load, so neither is refused."""
    from hf_unified_embed.recipe import packaged_minilm_path
    from hf_unified_embed.utils.model_files import model_files_problem

    folder = Path(shutil.copytree(packaged_minilm_path(), tmp_path / "minilm"))
    assert isinstance(json.loads((folder / "data_config.json").read_text()), list)
    shutil.rmtree(folder / "2_Normalize", ignore_errors=True)
    assert model_files_problem(folder) is None
    assert _load(folder).encode(["a sentence"]).shape == (1, 384)


def _suite(tmp_path: Path) -> Path:
    data = tmp_path / "sts.tsv"
    data.write_text("".join(f"g\tf\t2012\t{i}\t{i % 5}.0\tfirst {i}.\tsecond {i}.\n" for i in range(6)))
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        yaml.safe_dump(
            {"name": "s", "evaluations": [{"name": "sts", "kind": "sts", "source": "stsb", "data_files": str(data)}]}
        )
    )
    return suite


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_evaluate_and_train_check_refuse_a_truncated_model(model: Path, tmp_path: Path, capsys) -> None:
    folder = Path(shutil.copytree(model, tmp_path / "m"))
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert main(["evaluate", str(folder), str(_suite(tmp_path))]) == 2
    assert f"{weights}: not a readable safetensors file" in _one_error_line(capsys.readouterr().err)
    recipe = {
        "base_model": str(folder),
        "data": {"path": str(tmp_path / "nowhere")},
        "output_dir": str(tmp_path / "out"),
        "losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss"}},
    }
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(recipe))
    (tmp_path / "nowhere").mkdir()
    assert main(["train", str(tmp_path / "train.yaml"), "--check"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "base_model" in line and f"{weights}: not a readable safetensors file" in line, line


# --- trainer_state.json -------------------------------------------------------------------------


def _trainer_state() -> dict[str, Any]:
    from transformers import TrainerState

    state = TrainerState(global_step=4, max_steps=8, logging_steps=2, save_steps=4, train_batch_size=2)
    state.log_history = [{"loss": 0.5, "step": 2, "epoch": 0.5}, {"loss": 0.25, "step": 4, "epoch": 1.0}]
    return json.loads(state.to_json_string() if hasattr(state, "to_json_string") else json.dumps(state.__dict__))


def test_damaged_trainer_state_is_read_as_the_trainer_would_or_refused(tmp_path_factory) -> None:
    from transformers import TrainerState

    from hf_unified_embed.training.checkpoints import read_trainer_state

    data = _trainer_state()
    content = json_bytes(data)

    @PROPERTY
    @given(damages(content, data, json_bytes))
    def check(damage: tuple[str, bytes]) -> None:
        what, damaged = damage
        checkpoint = tmp_path_factory.mktemp("checkpoint-4")
        (checkpoint / "trainer_state.json").write_bytes(damaged)
        try:
            state = read_trainer_state(checkpoint)
        except Exception as error:
            check_refusal(error, str(checkpoint / "trainer_state.json"), what)
            return
        assert state == json.loads(damaged), what
        TrainerState(**state)  # what it accepts, the trainer reads

    check()


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"[]", r"expected a JSON object, got list"),
        (b'{"global_step": "4"}', r"field 'global_step': input should be a valid integer"),
        (b'{"log_history": {"loss": 1}}', r"field 'log_history': expected a JSON list"),
        (b'{"steps": 4}', r"unknown field 'steps'"),
        (b"\x00\x01", r"cannot be read as JSON"),
    ],
)
def test_resume_from_a_bad_trainer_state_is_one_line(tmp_path: Path, content: bytes, match: str) -> None:
    from hf_unified_embed.recipe.run import finished_checkpoint

    checkpoint = tmp_path / "checkpoint-4"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_bytes(content)
    with pytest.raises(HfUnifiedEmbedError, match=match) as info:
        finished_checkpoint(str(checkpoint), SimpleNamespace(max_steps=8, output_dir=str(tmp_path)))
    assert str(info.value).startswith(f"resume_from_checkpoint {checkpoint}: {checkpoint / 'trainer_state.json'}")


def test_resume_from_a_good_trainer_state_still_finds_a_finished_checkpoint(tmp_path: Path) -> None:
    from hf_unified_embed.recipe.run import finished_checkpoint

    checkpoint = tmp_path / "checkpoint-4"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_bytes(json_bytes(_trainer_state()))
    assert finished_checkpoint(str(checkpoint), SimpleNamespace(max_steps=4, output_dir=str(tmp_path))) == checkpoint
    assert finished_checkpoint(str(checkpoint), SimpleNamespace(max_steps=8, output_dir=str(tmp_path))) is None


# --- merge config and curriculum plan -----------------------------------------------------------


def test_damaged_merge_config_is_read_or_refused(model: Path, tmp_path_factory) -> None:
    from hf_unified_embed.merge.merge_config import MergeConfig

    data = {
        "method": "soup",
        "models": [str(model), {"path": str(model), "id": "me/tiny"}],
        "output_dir": "merged",
        "parameters": {"weights": [0.5, 0.5], "normalize": True},
    }
    content = yaml_bytes(data)

    @PROPERTY
    @given(damages(content, data, yaml_bytes))
    def check(damage: tuple[str, bytes]) -> None:
        what, damaged = damage
        path = tmp_path_factory.mktemp("merge") / "merge.yaml"
        path.write_bytes(damaged)
        try:
            MergeConfig.from_yaml(path)
        except Exception as error:
            check_refusal(error, str(path), what)

    check()


def _plan() -> dict[str, Any]:
    from hf_unified_embed.curriculum.plan import CurriculumPlan, TaskStatistics
    from hf_unified_embed.curriculum.task_order import tour_score

    similarity = [[1.0, 0.25, 0.5], [0.25, 1.0, 0.75], [0.5, 0.75, 1.0]]
    order = ["a", "c", "b"]
    score = tour_score(np.asarray(similarity), [0, 2, 1])
    plan = CurriculumPlan(
        tasks=["a", "b", "c"],
        order=order,
        similarity=similarity,
        score=float(score),
        solver={"method": "exact"},
        task_statistics={"a": TaskStatistics(rows=3, difficulty_mean=0.5), "b": TaskStatistics(rows=2)},
    )
    return plan.to_dict()


def test_damaged_curriculum_plan_is_read_or_refused(tmp_path_factory) -> None:
    from hf_unified_embed.curriculum.plan import CurriculumPlan

    data = _plan()
    content = json_bytes(data)
    CurriculumPlan.from_dict(json.loads(content))  # the undamaged plan reads

    @settings(PROPERTY, max_examples=40)
    @given(damages(content, data, json_bytes))
    def check(damage: tuple[str, bytes]) -> None:
        what, damaged = damage
        path = tmp_path_factory.mktemp("plan") / "curriculum_plan.json"
        path.write_bytes(damaged)
        try:
            plan = CurriculumPlan.load(path)
        except Exception as error:
            check_refusal(error, str(path), what)
            return
        read = json.loads(damaged)
        assert plan.order == read["order"] and plan.tasks == read["tasks"], what
        assert math.isclose(plan.score, read["score"]), what

    check()


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"[]", r"expected a JSON object, got list"),
        (None, r"field 'task_statistics.a': expected an object, got int"),
        (None, r"field 'order': input should be a valid list"),
    ],
)
def test_a_hand_edited_plan_names_the_field(tmp_path: Path, content: bytes | None, match: str) -> None:
    from hf_unified_embed.curriculum.plan import CurriculumPlan

    if content is None:
        data = _plan()
        if "task_statistics" in match:
            data["task_statistics"]["a"] = 3
        else:
            data["order"] = "a,b,c"
        content = json_bytes(data)
    path = tmp_path / "curriculum_plan.json"
    path.write_bytes(content)
    with pytest.raises(HfUnifiedEmbedError, match=match):
        CurriculumPlan.load(path)


@pytest.mark.parametrize(("field", "value"), [("dtype", 0), ("hidden_size", "32"), ("architectures", 3)])
def test_train_check_refuses_a_retyped_config_field(
    model: Path, tmp_path: Path, capsys, field: str, value: Any
) -> None:
    from _curriculum_helpers import tiny_tasks

    from hf_unified_embed.data import save_unified

    folder = Path(shutil.copytree(model, tmp_path / "m"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, field: value}))
    recipe = {
        "base_model": str(folder),
        "data": {"path": str(save_unified(tiny_tasks(), tmp_path / "data"))},
        "output_dir": str(tmp_path / "out"),
        "losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss"}},
    }
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(recipe))
    code = main(["train", str(tmp_path / "train.yaml"), "--check"])
    err = capsys.readouterr().err
    if code == 0:  # still a model transformers loads: nothing to refuse
        return
    assert code == 2, err
    assert f"base_model: {folder}" in _one_error_line(err)


def test_train_resume_from_a_list_trainer_state_exits_2(model: Path, tmp_path: Path, capsys) -> None:
    from _curriculum_helpers import tiny_tasks

    from hf_unified_embed.data import save_unified

    checkpoint = tmp_path / "checkpoints" / "checkpoint-1"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text("[1, 2]")
    recipe = {
        "base_model": str(model),
        "data": {"path": str(save_unified(tiny_tasks(), tmp_path / "data"))},
        "output_dir": str(tmp_path / "out"),
        "losses": {"retrieval": {"name": "MultiPositiveInfoNCELoss"}},
        "training_args": {"max_steps": 2, "per_device_train_batch_size": 2, "resume_from_checkpoint": str(checkpoint)},
    }
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(recipe))
    assert main(["train", str(tmp_path / "train.yaml")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"{checkpoint / 'trainer_state.json'}: expected a JSON object, got list" in line, line
    assert not (tmp_path / "out").exists()
