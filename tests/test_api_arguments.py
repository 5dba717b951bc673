"""The Python path refuses what the recipe refuses: ``unified_training``'s arguments are checked before training.

hypothesis draws a call of ``unified_training`` with one argument replaced by what a user could give
wrongly (a wrong type, an unknown sampler name, a misspelt task in ``negatives_per_query``, a negative
count, a ``batch_sampler`` the sampler would ignore) and asserts one ``ArgumentError`` (a ``ValueError``
and a ``TypeError``) that names the argument — never an ``AttributeError`` / ``KeyError`` from deep
inside, never a run that trains with loss 0.0. The defects — ``sampler="bogus"`` trained two steps with
loss 0.0, ``args.batch_sampler="no_duplicates"`` was ignored by the curriculum sampler (the recipe refuses
exactly this), and a misspelt task in ``negatives_per_query`` silently got 1 negative — are tests of
their own.

The same rule for every headline function (``hf_unified_embed.__all__``): hypothesis draws a function, one of
its arguments and a value of a wrong type, and expects one ``ArgumentError`` naming the function and the
argument (:func:`hf_unified_embed.utils.arguments.checked_arguments`) before any work is done.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from _training_helpers import unified_dataset, unified_row
from datasets import DatasetDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed import MultiPositiveInfoNCELoss, unified_training
from hf_unified_embed.errors import ArgumentError

PROPERTY = settings(
    derandomize=os.environ.get("INPUT_PROPERTY_RANDOM") != "1",
    deadline=None,
    database=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: Values a user could pass where another type belongs.
WRONG_TYPES = st.sampled_from([None, 3, 2.5, "text", ["a"], {"a": 1}, object(), True])


@pytest.fixture(scope="module")
def call(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A correct call's arguments: two retrieval tasks, a loss, training arguments."""
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainingArguments

    tasks = DatasetDict(
        {
            name: unified_dataset(
                [unified_row(name, f"question {i}", [f"answer {i}"], [f"other {i}"]) for i in range(8)]
            )
            for name in ("wikiqa", "trecqa")
        }
    )
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path_factory.mktemp("out")), max_steps=1, report_to="none", use_cpu=True
    )
    model = SentenceTransformer(tiny_model_path, device="cpu")
    return {"model": model, "dataset": tasks, "losses": {"retrieval": MultiPositiveInfoNCELoss}, "args": args}


@st.composite
def misuses(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """``(argument, changes)``: one argument of a correct call given wrongly."""
    kind = draw(st.sampled_from(["type", "sampler", "negatives_task", "negatives_count"]))
    if kind == "type":
        argument = draw(st.sampled_from(["model", "dataset", "losses", "args", "instructions", "negatives_per_query"]))
        value = draw(WRONG_TYPES.filter(lambda v: not (argument == "instructions" and isinstance(v, bool))))
        if argument == "negatives_per_query" and isinstance(value, int) and not isinstance(value, bool):
            value = -value - 1
        return argument, {argument: value}
    if kind == "sampler":
        name = draw(st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12))
        value = draw(st.sampled_from([name, 7, ["proportional"]]))
        if value in ("proportional", "round_robin"):
            value = "bogus"
        return "sampler", {"sampler": value}
    if kind == "negatives_task":
        task = draw(st.sampled_from(["wikqa", "WikiQA", "trec", "sts", ""]))
        return "negatives_per_query", {"negatives_per_query": {"wikiqa": 2, task: 1}}
    count = draw(st.sampled_from([-1, 1.5, "2", None]))
    return "negatives_per_query", {"negatives_per_query": {"wikiqa": count}}


@settings(PROPERTY)
@given(misuse=misuses())
def test_a_wrong_argument_is_one_error_naming_it(call: dict[str, Any], misuse: tuple[str, dict[str, Any]]) -> None:
    argument, changes = misuse
    with pytest.raises(ArgumentError) as raised:
        unified_training(**{**call, **changes})
    message = str(raised.value)
    assert message.startswith(f"unified_training: {argument}"), message
    assert "\n" not in message
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, TypeError)


def test_an_unknown_sampler_is_refused_naming_what_is_accepted(call: dict[str, Any]) -> None:
    """The defect: ``sampler="bogus"`` trained two steps with loss 0.0."""
    with pytest.raises(
        ArgumentError, match=r"^unified_training: sampler 'bogus' is no sampler: give None .*'proportional'"
    ):
        unified_training(**call, sampler="bogus")
    # a sampler's name works as its MultiDatasetBatchSamplers member does
    from sentence_transformers.base.sampler import MultiDatasetBatchSamplers

    chosen = unified_training(**call, sampler="round_robin")["args"].multi_dataset_batch_sampler
    assert chosen == MultiDatasetBatchSamplers.ROUND_ROBIN


def test_a_misspelt_task_in_negatives_per_query_is_refused(call: dict[str, Any]) -> None:
    """The defect: the misspelt task was ignored and the task silently got 1 negative."""
    with pytest.raises(ArgumentError, match=r"names task\(s\) \['wikqa'\] that the dataset does not have; its tasks: \['trecqa', 'wikiqa'\]"):  # fmt: skip
        unified_training(**call, negatives_per_query={"wikqa": 2})
    assert unified_training(**call, negatives_per_query={"wikiqa": 2})["data_collator"] is not None


def test_a_batch_sampler_the_curriculum_sampler_ignores_is_refused_as_the_recipe_refuses_it(
    call: dict[str, Any], tmp_path: Path
) -> None:
    """The defect: ``args.batch_sampler="no_duplicates"`` was ignored by the curriculum sampler without a word."""
    import copy

    from sentence_transformers.base.sampler import MultiDatasetBatchSamplers

    args = copy.copy(call["args"])
    args.batch_sampler = "no_duplicates"
    with pytest.raises(ArgumentError, match=r"args\.batch_sampler 'no_duplicates': the curriculum sampler .* would ignore it"):  # fmt: skip
        unified_training(**{**call, "args": args})
    # with a stock sampler, which takes each task's batches from it, it applies
    kwargs = unified_training(**{**call, "args": args}, sampler=MultiDatasetBatchSamplers.PROPORTIONAL)
    assert kwargs["args"].multi_dataset_batch_sampler == MultiDatasetBatchSamplers.PROPORTIONAL


# --- every headline function: a wrong type or name is one ArgumentError naming the argument -------------------

#: A correct value for each headline function's required arguments (``None``: filled from the fixture).
#: A wrong value replaces one of them (or one option) and is refused before the function does any work.
PUBLIC_CALLS: dict[str, tuple[str, ...]] = {
    "build_unified": ("recipe",),
    "device_training_args": ("device",),
    "exclude_instructions_from_pooling": ("model",),
    "load_suite": ("suite", "data_root"),
    "load_train_recipe": ("path",),
    "load_unified": ("repo_id_or_dir", "tasks", "split"),
    "stream_unified": ("repo_id_or_dir", "tasks", "split"),
    "validate_unified_folder": ("repo_dir",),
    "losses_for_tasks": ("dataset_dict", "losses", "negatives_per_query"),
    "merge_models": ("models", "method", "output_dir", "model_ids", "evaluation_results"),
    "mine_hard_negatives": ("tasks", "model", "config", "cross_encoder", "task_names", "teacher_name", "scratch_dir"),
    "mine_pairs": ("documents",),
    "plan_curriculum": ("model", "tasks", "method", "n_samples", "seed", "difficulty", "negative_pool", "batch_size"),
    "push_folder": ("folder", "repo_id", "repo_type", "token"),
    "push_unified": ("dir_or_datasetdict", "repo_id", "token"),
    "resolve_model": ("name",),
    "run_suite": ("model", "suite", "data_root"),
    "sample_recipe": ("name",),
    "save_unified": ("data", "out_dir"),
    "search_merge": ("models", "method", "output_dir", "suite", "search", "objective"),
    "train_from_recipe": ("recipe",),
}

#: Wrong values of a wrong type for any argument above (a string is right for some: drawn separately).
WRONG_VALUES = [None, 3, 2.5, True, ["a"], {"a": 1}, object()]

#: Arguments that accept ``None`` / a string / a list / a mapping, so that value is not wrong for them.
ACCEPTS = {
    None: {"device", "data_root", "config", "cross_encoder", "task_names", "teacher_name", "scratch_dir",
           "model_ids", "difficulty", "tasks@load_unified", "tasks@stream_unified", "token"},
    "list": {"models", "task_names", "evaluation_results", "model_ids", "tasks@load_unified", "tasks@stream_unified",
             "documents"},
    "mapping": {"suite", "recipe@build_unified", "losses", "negatives_per_query", "search", "objective", "difficulty",
                "data", "tasks@plan_curriculum", "tasks@mine_hard_negatives", "dataset_dict", "documents",
                "model_ids"},
}  # fmt: skip


def _accepts(function: str, argument: str, value: object) -> bool:
    names = {argument, f"{argument}@{function}"}
    if value is None:
        return bool(names & ACCEPTS[None])
    if isinstance(value, list):
        return bool(names & ACCEPTS["list"])
    if isinstance(value, dict):
        return bool(names & ACCEPTS["mapping"])
    return argument == "negatives_per_query" and isinstance(value, int) and not isinstance(value, bool)


@st.composite
def public_misuses(draw: st.DrawFn) -> tuple[str, str, object]:
    """``(function, argument, value)``: one headline function's argument given a value of a wrong type."""
    function = draw(st.sampled_from(sorted(PUBLIC_CALLS)))
    argument = draw(st.sampled_from(PUBLIC_CALLS[function]))
    value = draw(st.sampled_from(WRONG_VALUES).filter(lambda value: not _accepts(function, argument, value)))
    return function, argument, value


@pytest.fixture(scope="module")
def public_arguments(call: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Correct arguments for each function in ``PUBLIC_CALLS`` (their values never run: one is always wrong)."""
    folder = str(tmp_path_factory.mktemp("args"))
    model, tasks = call["model"], call["dataset"]
    return {
        "build_unified": {"recipe": folder},
        "device_training_args": {"device": "cpu"},
        "exclude_instructions_from_pooling": {"model": model},
        "load_suite": {"suite": folder},
        "load_train_recipe": {"path": folder},
        "load_unified": {"repo_id_or_dir": folder},
        "stream_unified": {"repo_id_or_dir": folder},
        "validate_unified_folder": {"repo_dir": folder},
        "losses_for_tasks": {"model": model, "dataset_dict": tasks, "losses": call["losses"]},
        "merge_models": {"models": [folder, folder], "method": "linear", "output_dir": folder},
        "mine_hard_negatives": {"tasks": tasks, "model": model},
        "mine_pairs": {"documents": []},
        "plan_curriculum": {"model": model, "tasks": tasks},
        "push_folder": {"folder": folder, "repo_id": "me/model", "dry_run": True},
        "push_unified": {"dir_or_datasetdict": folder, "repo_id": "me/data", "dry_run": True},
        "resolve_model": {"name": folder},
        "run_suite": {"model": model, "suite": folder},
        "sample_recipe": {"name": "sample"},
        "save_unified": {"data": tasks, "out_dir": folder},
        "search_merge": {
            "models": [folder, folder],
            "method": "linear",
            "output_dir": folder,
            "suite": folder,
            "search": {},
            "objective": {},
        },
        "train_from_recipe": {"recipe": folder},
    }


@settings(PROPERTY, max_examples=50)
@given(misuse=public_misuses())
def test_every_headline_function_refuses_a_wrong_argument_naming_it(
    public_arguments: dict[str, dict[str, Any]], misuse: tuple[str, str, object]
) -> None:
    """The defects: ``train_from_recipe(123)``, ``mine_hard_negatives(123, model)``, ``plan_curriculum(model, [...])``,
    ``exclude_instructions_from_pooling(None)`` and ``losses_for_tasks`` with a list ended in ``AttributeError``;
    ``load_train_recipe(123)``, ``merge_models({...})``, ``push_unified(None)`` and ``push_folder(None)`` in
    pathlib's ``TypeError``: none said which argument was wrong or what it takes."""
    import hf_unified_embed

    function, argument, value = misuse
    with pytest.raises(ArgumentError) as raised:
        getattr(hf_unified_embed, function)(**{**public_arguments[function], argument: value})
    message = str(raised.value)
    assert message.startswith(f"{function}: {argument}"), message
    assert " must be " in message and "\n" not in message, message


@pytest.mark.parametrize(
    ("function", "arguments", "expected"),
    [
        ("train_from_recipe", (123,), "train_from_recipe: recipe must be a TrainRecipe, got 123"),
        ("load_train_recipe", (123,), "load_train_recipe: path must be a string or a path, got 123"),
        (
            "exclude_instructions_from_pooling",
            (None,),
            "exclude_instructions_from_pooling: model must be a SentenceTransformer, got None",
        ),
        ("push_folder", (None, "me/model"), "push_folder: folder must be a string or a path, got None"),
        (
            "push_unified",
            (None, "me/data"),
            "push_unified: dir_or_datasetdict must be a string or a path or a DatasetDict, got None",
        ),
        (
            "merge_models",
            ({"a": 1}, "linear", "out"),
            "merge_models: models must be a sequence of str | Path | ModelSpec, got {'a': 1}",
        ),
    ],
)
def test_the_misuses_found_are_one_line_naming_what_is_accepted(
    function: str, arguments: tuple[Any, ...], expected: str
) -> None:
    import hf_unified_embed

    with pytest.raises(ArgumentError) as raised:
        getattr(hf_unified_embed, function)(*arguments)
    assert str(raised.value) == expected


def test_a_task_that_is_no_dataset_is_named(call: dict[str, Any]) -> None:
    """``losses_for_tasks`` / ``mine_hard_negatives`` / ``plan_curriculum`` with a value that is no Dataset name its task."""
    from hf_unified_embed import losses_for_tasks, mine_hard_negatives, plan_curriculum

    tasks = {"wikiqa": call["dataset"]["wikiqa"], "trecqa": ["question 1"]}
    for function, arguments in [
        (losses_for_tasks, (call["model"], tasks, call["losses"])),
        (mine_hard_negatives, (tasks, call["model"])),
        (plan_curriculum, (call["model"], tasks)),
    ]:
        with pytest.raises(ArgumentError, match=r": \w+\['trecqa'\] must be a Dataset, got \['question 1'\]$"):
            function(*arguments)
    with pytest.raises(ArgumentError, match=r"plan_curriculum: tasks must be a mapping of str to Dataset"):
        plan_curriculum(call["model"], [call["dataset"]["wikiqa"]])


def test_a_task_that_is_no_unified_dataset_is_named_before_any_work(call: dict[str, Any]) -> None:
    """A ``Dataset`` without the unified columns ended in ``KeyError: 'task_type'`` (mining) or datasets' own
    ``Column name ... not in the dataset`` (the curriculum); an empty mapping in a bare ``ValueError``."""
    from datasets import Dataset

    from hf_unified_embed import mine_hard_negatives, plan_curriculum
    from hf_unified_embed.errors import HfUnifiedEmbedError

    tasks = {"mine": Dataset.from_dict({"question": ["q"], "answer": ["a"]})}
    for function, arguments in [
        (mine_hard_negatives, (tasks, call["model"])),
        (plan_curriculum, (call["model"], tasks)),
    ]:
        with pytest.raises(
            HfUnifiedEmbedError, match=r"^task 'mine', field 'task': missing columns \['task', 'task_type'"
        ):
            function(*arguments)
    with pytest.raises(ArgumentError, match=r"^plan_curriculum: tasks is empty"):
        plan_curriculum(call["model"], {})
