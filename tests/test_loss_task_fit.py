"""Every (task, loss) pair of a recipe is checked against the rows before any model loads.

A loss names what it reads (its ``ColumnLayout``: scores, hard negatives, teacher scores, a difficulty,
task types); a task's rows are counted (``TaskColumns``). hypothesis draws a loss (every loss of
``hf_unified_embed.losses`` and sentence-transformers losses a recipe accepts) × a task type × which
columns the rows carry (scores, hard negatives, several positives, a difficulty, in all, some or none of
the rows), and asserts the rule: the recipe check either refuses the pair in one line naming the task,
the loss, what is missing and the losses that fit (each of which the check accepts), or accepts it, and
then every batch of the task collates into the columns the loss reads and a fixed set of draws trains
one step in ``SentenceTransformerTrainer``. The defect this came from — a similarity loss named for
retrieval rows passed ``train --check`` and failed at the first batch with a traceback — is a test of
its own, through the command.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from _processes import Expected, failure, run
from _training_helpers import train_steps, unified_dataset
from datasets import DatasetDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_unified_embed import losses as package_losses
from hf_unified_embed.errors import LossFitError
from hf_unified_embed.losses.task_fit import layout_of, stand_in
from hf_unified_embed.recipe.preflight_losses import check_losses_fit_tasks, resolve_loss_class
from hf_unified_embed.recipe.train_recipe import recipe_from_dict
from hf_unified_embed.schema import TASK_TYPES
from hf_unified_embed.training import UnifiedDataCollator

CONSOLE_SCRIPT = str(Path(sys.executable).parent / "hf-unified-embed")

#: Every loss a recipe can name for a task: this package's (less the abstract base and ``KeepBaseLoss``, which
#: wraps another loss and is set with the recipe's ``keep_base:`` key) and sentence-transformers' usual ones.
LOSS_NAMES = [
    *sorted({name for name in package_losses.__all__ if name.endswith("Loss")} - {"EmbeddingLoss", "KeepBaseLoss"}),
    *("MultipleNegativesRankingLoss", "CoSENTLoss", "CosineSimilarityLoss", "OnlineContrastiveLoss", "TripletLoss"),
    *("MegaBatchMarginLoss", "MarginMSELoss", "DenoisingAutoEncoderLoss"),  # two columns only; inputs no row holds
]

#: "all" rows carry the column, "some" (every other row), or "none".
COVERAGE = st.sampled_from(["all", "some", "none"])

ERROR_LINE = re.compile(
    r"^r\.yaml: losses\.(?P<key>\w+): task '(?P<task>[\w-]+)' \((?P<type>\w+)\) cannot train with (?P<loss>\w+): "
    r"(?P<problem>.+); (losses that fit this task: (?P<fitting>\w+(, \w+)*)|no known loss fits this task)$"
)

PROPERTY = settings(
    derandomize=os.environ.get("INPUT_PROPERTY_RANDOM") != "1",
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _covers(coverage: str, index: int) -> bool:
    return coverage == "all" or (coverage == "some" and index % 2 == 0)


@st.composite
def tasks(draw: st.DrawFn) -> dict[str, Any]:
    """A task as a user could give it: a task type and which columns its eight rows carry."""
    task_type = draw(st.sampled_from(TASK_TYPES))
    return {
        "task_type": task_type,
        # an sts row has one score per positive (the row check refuses it otherwise)
        "scores": "all" if task_type == "sts" else draw(COVERAGE),
        "negatives": draw(COVERAGE),
        "positives": draw(st.sampled_from([1, 3])),
        # classification and clustering rows may come without positives
        "no_positives": task_type in ("classification", "clustering") and draw(st.booleans()),
        "difficulty": draw(st.sampled_from(["column", "none"])),
    }


def task_rows(shape: Mapping[str, Any], task: str = "t", rows: int = 8) -> DatasetDict:
    """The unified rows of ``shape`` (from :func:`tasks`), as the one task of a ``DatasetDict``."""
    data = []
    for i in range(rows):
        positives = [] if shape["no_positives"] and i % 2 else [f"answer {i}.{j}" for j in range(shape["positives"])]
        negatives = [f"other {i}.{j}" for j in range(2)] if _covers(shape["negatives"], i) else []
        scored = _covers(shape["scores"], i)
        row = {
            "task": task,
            "task_type": shape["task_type"],
            "query_instruction": "",
            "document_instruction": "",
            "query": f"question number {i}",
            "positives": positives,
            "negatives": negatives,
            "positive_scores": [0.9 - 0.1 * (i % 5)] * len(positives) if scored else [],
            "negative_scores": [0.1 * (i % 3)] * len(negatives) if scored else [],
        }
        if shape["difficulty"] == "column":
            row["difficulty"] = i / rows
        data.append(row)
    return DatasetDict({task: unified_dataset(data)})


def _recipe(folder: Path, data: str, base: str, losses: Mapping[str, Any], **changes: Any) -> Path:
    raw = {
        "base_model": base,
        "data": {"path": data},
        "losses": dict(losses),
        "negatives_per_query": 2,
        "training_args": {"max_steps": 1, "per_device_train_batch_size": 4},
        "output_dir": str(folder / "out"),
        **changes,
    }
    recipe = folder / "r.yaml"
    recipe.write_text(yaml.safe_dump(raw))
    return recipe


def check(loss: str, shape: Mapping[str, Any], key: str | None = None) -> LossFitError | None:
    """``train --check``'s loss check of ``loss`` on a task of ``shape``: the error, or ``None`` if it fits."""
    data = task_rows(shape)
    key = key or shape["task_type"]
    recipe = recipe_from_dict(
        {"data": {"path": "d"}, "losses": {key: loss}, "negatives_per_query": 2, "output_dir": "o"}, "r.yaml"
    )
    try:
        check_losses_fit_tasks(recipe, {key: (resolve_loss_class(loss), {})}, data)
    except LossFitError as error:
        return error
    return None


@settings(PROPERTY, max_examples=80)
@given(loss=st.sampled_from(LOSS_NAMES), shape=tasks())
def test_each_pair_is_refused_in_one_line_or_collates_into_what_the_loss_reads(
    loss: str, shape: dict[str, Any]
) -> None:
    error = check(loss, shape)
    if error is not None:
        line = str(error)
        match = ERROR_LINE.match(line)
        assert match, line
        assert (match["key"], match["task"], match["type"], match["loss"]) == (
            shape["task_type"],
            "t",
            shape["task_type"],
            loss,
        )
        for other in (match["fitting"] or "").split(", ") if match["fitting"] else []:
            assert check(other, shape) is None, f"{other} is offered for a task it cannot read: {line}"
        return
    # Accepted: every batch collates, with the label and the negatives the loss reads.
    data = task_rows(shape)["t"]
    layout = layout_of(stand_in(resolve_loss_class(loss), {}), shape["task_type"], 2)
    assert layout is not None
    collator = UnifiedDataCollator(preprocess_fn=lambda texts, **kwargs: {}, layouts={"t": layout})
    for start in range(0, len(data), 4):
        batch = collator.to_columns([data[i] for i in range(start, start + 4)])
        for columns in batch:
            assert ("label" in columns) == (layout.label is not None)
            if layout.hard_negatives:
                assert f"negative_{layout.negatives}" in columns


#: Draws that train one step (a tiny BERT, batch 4): each loss family once on data it fits, and the
#: shapes the check-only property cannot train (no negative column in a batch, several positives).
TRAINED = [
    ("CoDiEmbSTSLoss", "sts", "all", "none", 1),
    ("CoSENTLoss", "pair_classification", "all", "none", 1),
    ("MultiPositiveInfoNCELoss", "retrieval", "none", "some", 3),
    ("MultipleNegativesRankingLoss", "retrieval", "none", "none", 1),
    ("InstructorLoss", "clustering", "none", "none", 1),
    ("DistillKLLoss", "retrieval", "all", "all", 3),
    ("DistillMarginMSELoss", "retrieval", "all", "all", 1),
    ("TripletLoss", "retrieval", "none", "all", 1),
    ("MegaBatchMarginLoss", "retrieval", "none", "all", 3),
    ("CurriculumInfoNCELoss", "retrieval", "none", "some", 1),
]


@pytest.mark.slow
@pytest.mark.parametrize(("loss", "task_type", "scores", "negatives", "positives"), TRAINED)
def test_an_accepted_pair_trains_one_step(
    loss: str, task_type: str, scores: str, negatives: str, positives: int, tiny_model_path: str, tmp_path: Path
) -> None:
    from sentence_transformers import SentenceTransformer

    shape = {
        "task_type": task_type, "scores": scores, "negatives": negatives, "positives": positives,
        "no_positives": False, "difficulty": "column",
    }  # fmt: skip
    assert check(loss, shape) is None
    model = SentenceTransformer(tiny_model_path, device="cpu")
    data = task_rows(shape)
    losses = {"t": resolve_loss_class(loss)(model)}
    _, history = train_steps(model, data, losses, tmp_path / "run", max_steps=1, batch_size=4)
    assert len(history) == 1 and history[0] == history[0]  # one finite step, not NaN


#: Drawn pairs trained in CI; ``LOSS_FIT_TRAINED_EXAMPLES=200`` searches deeper outside it.
TRAINED_EXAMPLES = int(os.environ.get("LOSS_FIT_TRAINED_EXAMPLES", "10"))


@pytest.mark.slow
@settings(PROPERTY, max_examples=TRAINED_EXAMPLES)
@given(loss=st.sampled_from(LOSS_NAMES), shape=tasks())
def test_a_drawn_pair_is_refused_at_the_check_or_trains_one_step(
    loss: str, shape: dict[str, Any], tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from sentence_transformers import SentenceTransformer

    error = check(loss, shape)
    if error is not None:
        assert ERROR_LINE.match(str(error)), str(error)
        return
    model = SentenceTransformer(tiny_model_path, device="cpu")
    losses = {"t": resolve_loss_class(loss)(model)}
    _, history = train_steps(
        model, task_rows(shape), losses, tmp_path_factory.mktemp("run"), max_steps=1, batch_size=4
    )
    assert len(history) == 1 and history[0] == history[0]


def test_a_refused_pair_names_what_is_missing_and_what_fits() -> None:
    retrieval = {"task_type": "retrieval", "scores": "none", "negatives": "none", "positives": 1, "no_positives": False, "difficulty": "none"}  # fmt: skip
    message = str(check("DistillMarginMSELoss", retrieval))
    assert "it needs positive_scores (empty in 8 of 8 rows); negatives (empty in 8 of 8 rows)" in message
    assert "losses that fit this task: " in message and "MultiPositiveInfoNCELoss" in message
    assert "CoDiEmbSTSLoss" not in message.partition("fit this task")[2]
    mixed = {**retrieval, "scores": "all", "negatives": "some"}  # a batch would mix rows with and without
    assert "negatives (empty in 4 of 8 rows)" in str(check("DistillKLLoss", mixed))
    assert check("DistillKLLoss", {**mixed, "negatives": "all"}) is None
    # no row has a negative: with its default positives_per_query=1 it compares one document per row, and a
    # distribution over one document is the same for teacher and student (loss and gradient 0)
    for positives in (1, 3):
        assert "cannot train with DistillKLLoss: it would learn nothing: " in str(
            check("DistillKLLoss", {**mixed, "negatives": "none", "positives": positives})
        )
    curriculum = str(check("CurriculumInfoNCELoss", retrieval))
    assert "it needs difficulty (no such column: add it with hf-unified-embed curriculum)" in curriculum
    for name in (
        "MarginMSELoss",
        "DenoisingAutoEncoderLoss",
    ):  # sentence-transformers' losses the collator cannot feed
        assert (
            f"cannot train with {name}: the columns and labels this sentence-transformers loss reads are not known"
            in str(check(name, retrieval))
        )
    unlabelled = {**retrieval, "task_type": "clustering", "no_positives": True}
    assert "no known loss fits this task" in str(check("MultiPositiveInfoNCELoss", unlabelled))


def test_a_loss_can_name_the_task_types_it_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    class SentencePairsOnly(package_losses.GURLoss):
        def column_layout(self, task_type: str, negatives_per_query: int) -> package_losses.ColumnLayout:
            return package_losses.ColumnLayout(task_types=("sts", "pair_classification"))

    monkeypatch.setattr(package_losses, "SentencePairsOnly", SentencePairsOnly, raising=False)
    retrieval = {"task_type": "retrieval", "scores": "none", "negatives": "none", "positives": 1, "no_positives": False, "difficulty": "none"}  # fmt: skip
    assert "it needs task_type sts or pair_classification;" in str(check("SentencePairsOnly", retrieval))
    assert check("SentencePairsOnly", {**retrieval, "task_type": "sts", "scores": "all"}) is None


def test_a_task_without_a_loss_and_a_key_without_a_task_are_refused_before_the_model() -> None:
    from hf_unified_embed.errors import RecipeError

    retrieval = {"task_type": "retrieval", "scores": "none", "negatives": "all", "positives": 1, "no_positives": False, "difficulty": "none"}  # fmt: skip
    fits = (resolve_loss_class("MultiPositiveInfoNCELoss"), {})
    for losses, message in (
        ({"sts": fits}, r"^r\.yaml: losses: task 't' \(task_type 'retrieval'\) has no loss; .*given for \['sts'\]"),
        (
            {"retrieval": fits, "wikiqa": fits},
            r"^r\.yaml: losses given for \['wikiqa'\] match no task name or task type of d$",
        ),
    ):
        recipe = recipe_from_dict({"data": {"path": "d"}, "losses": dict.fromkeys(losses, "MultiPositiveInfoNCELoss"), "output_dir": "o"}, "r.yaml")  # fmt: skip
        with pytest.raises(RecipeError, match=message):
            check_losses_fit_tasks(recipe, losses, task_rows(retrieval))


USER_LOSSES = '''
from torch import nn

from hf_unified_embed.losses import ColumnLayout


class ScaledCosineLoss(nn.Module):
    """A user's loss on scored pairs, not of this package: its layout is its own declaration."""

    def __init__(self, model, scale: float = 1.0) -> None:
        super().__init__()
        self.model, self.scale = model, scale

    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        return ColumnLayout.scored_pair()


class PlainLoss(nn.Module):
    """A user's loss that declares nothing: laid out by the task type, as the collator does."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model
'''


def test_a_users_loss_is_checked_by_its_own_declaration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A module name of its own: another test's user module named ``userlosses`` stays in sys.modules.
    (tmp_path / "fit_userlosses.py").write_text(USER_LOSSES)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fit_userlosses", raising=False)
    retrieval = {"task_type": "retrieval", "scores": "none", "negatives": "all", "positives": 1, "no_positives": False, "difficulty": "none"}  # fmt: skip
    message = str(check("fit_userlosses:ScaledCosineLoss", retrieval))
    assert "cannot train with ScaledCosineLoss: it needs positive_scores (empty in 8 of 8 rows)" in message
    assert check("fit_userlosses:ScaledCosineLoss", {**retrieval, "scores": "all"}) is None
    assert check("fit_userlosses:PlainLoss", retrieval) is None
    assert "cannot train with PlainLoss: it needs positive_scores" in str(
        check("fit_userlosses:PlainLoss", {**retrieval, "task_type": "pair_classification"})
    )


@pytest.fixture
def retrieval_folder(tmp_path: Path) -> Path:
    from hf_unified_embed.data import save_unified

    shape = {"task_type": "retrieval", "scores": "none", "negatives": "all", "positives": 1, "no_positives": False, "difficulty": "none"}  # fmt: skip
    return save_unified(task_rows(shape, task="wikiqa", rows=12), tmp_path / "data")


@pytest.mark.parametrize("check_only", [True, False])
def test_the_similarity_loss_on_retrieval_rows_exits_2_before_the_model_loads(
    check_only: bool,
    retrieval_folder: Path,
    tiny_model_path: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The defect: ``losses: {retrieval: {name: CoDiEmbSTSLoss}}`` on retrieval rows passed ``train --check``
    and ``train`` failed at the first batch ("field 'positive_scores' is empty", a traceback, exit 1)."""
    from hf_unified_embed.cli.main import main

    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the losses were checked against the data")

    monkeypatch.setattr("hf_unified_embed.recipe.run._model", no_model)
    recipe = _recipe(tmp_path, str(retrieval_folder), tiny_model_path, {"retrieval": {"name": "CoDiEmbSTSLoss"}})
    assert main(["train", str(recipe), *(["--check"] if check_only else [])]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]  # the rest: the data's progress bar
    assert len(errors) == 1 and "Traceback" not in err, err
    assert errors[0].startswith(
        f"error: {recipe}: losses.retrieval: task 'wikiqa' (retrieval) cannot train with CoDiEmbSTSLoss: "
        "it needs positive_scores (empty in 12 of 12 rows); losses that fit this task: "
    ), err
    assert "MultiPositiveInfoNCELoss" in errors[0] and not (tmp_path / "out").exists()


def test_the_python_path_raises_the_same_error(tiny_model_path: str) -> None:
    from sentence_transformers import SentenceTransformer

    from hf_unified_embed.training import losses_for_tasks

    shape = {"task_type": "retrieval", "scores": "none", "negatives": "all", "positives": 1, "no_positives": False, "difficulty": "none"}  # fmt: skip
    model = SentenceTransformer(tiny_model_path, device="cpu")
    data = task_rows(shape, task="wikiqa")
    for spec in (
        package_losses.CoDiEmbSTSLoss,
        (package_losses.CoDiEmbSTSLoss, {}),
        package_losses.CoDiEmbSTSLoss(model),
    ):
        with pytest.raises(LossFitError, match=r"^losses\['retrieval'\]: task 'wikiqa' \(retrieval\) cannot train with "
                           r"CoDiEmbSTSLoss: it needs positive_scores \(empty in 8 of 8 rows\); losses that fit this task: "):  # fmt: skip
            losses_for_tasks(model, data, {"retrieval": spec})
    with pytest.raises(LossFitError, match="DistillMarginMSELoss needs negatives_per_query >= 1, got 0"):
        losses_for_tasks(model, data, {"retrieval": package_losses.DistillMarginMSELoss}, negatives_per_query=0)


def test_a_loss_for_a_task_type_the_data_lacks_is_one_warning_line_without_v(
    retrieval_folder: Path, tiny_model_path: str, tmp_path: Path
) -> None:
    losses = {"retrieval": "MultiPositiveInfoNCELoss", "sts": "CoDiEmbSTSLoss"}
    recipe = _recipe(tmp_path, str(retrieval_folder), tiny_model_path, losses)
    completed = run([CONSOLE_SCRIPT, "train", str(recipe), "--check"], expected=Expected())
    assert completed.returncode == 0, failure(completed)
    warnings = [line for line in completed.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        f"warning: {recipe}: losses given for task type(s) sts are not used: no task of {retrieval_folder} has that type"
    ], completed.stderr


def test_a_recipe_without_interleave_trains_shuffled() -> None:
    """docs/quality.md: the shuffled one-task-per-step sampler measured best, so it is the default."""
    recipe = recipe_from_dict(
        {"data": {"path": "d"}, "losses": {"retrieval": "MultiPositiveInfoNCELoss"}, "output_dir": "o"}
    )
    assert (recipe.sampler.interleave, recipe.sampler.instance_order) == ("shuffled", "random")
