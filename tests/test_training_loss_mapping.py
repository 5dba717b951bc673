"""losses_for_tasks and the column layout each loss gets."""

from __future__ import annotations

import logging

import pytest
from datasets import DatasetDict
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.losses import (
    CoSENTLoss,
    MatryoshkaLoss,
    MultipleNegativesRankingLoss,
)
from torch import nn

from hf_unified_embed import losses as hue
from hf_unified_embed.training import ColumnLayout, column_layouts, layout_for_loss, losses_for_tasks
from tests._training_helpers import unified_dataset, unified_row


@pytest.fixture(scope="module")
def model(tiny_model_path: str) -> SentenceTransformer:
    return SentenceTransformer(tiny_model_path)


@pytest.fixture(scope="module")
def tasks() -> DatasetDict:
    return DatasetDict(
        wikiqa=unified_dataset([unified_row("wikiqa", "q", ["a"], ["n"])]),
        trecqa=unified_dataset([unified_row("trecqa", "q", ["a"], ["n"])]),
        stsb=unified_dataset([unified_row("stsb", "s", ["t"], task_type="sts", positive_scores=[0.5])]),
    )


def test_task_types_expand_to_task_names_with_instances_classes_and_kwargs(model, tasks) -> None:
    shared = CoSENTLoss(model)
    losses = losses_for_tasks(
        model, tasks, {"retrieval": (hue.MultiPositiveInfoNCELoss, {"positives_per_query": 2}), "sts": shared}
    )
    assert list(losses) == ["wikiqa", "trecqa", "stsb"]
    assert losses["stsb"] is shared
    assert isinstance(losses["wikiqa"], hue.MultiPositiveInfoNCELoss) and losses["wikiqa"].positives_per_query == 2
    assert losses["wikiqa"] is not losses["trecqa"]  # a class builds one loss per task
    assert all(loss.model is model for loss in losses.values())


def test_a_task_name_wins_over_its_task_type(model, tasks) -> None:
    losses = losses_for_tasks(
        model,
        tasks,
        {"retrieval": MultipleNegativesRankingLoss, "trecqa": hue.MultiPositiveInfoNCELoss, "sts": CoSENTLoss},
    )
    assert type(losses["wikiqa"]) is MultipleNegativesRankingLoss
    assert type(losses["trecqa"]) is hue.MultiPositiveInfoNCELoss


def test_a_loss_for_an_absent_task_type_is_only_a_warning(model, tasks, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="hf_unified_embed.training.loss_mapping"):
        losses = losses_for_tasks(
            model, tasks, {"retrieval": MultipleNegativesRankingLoss, "sts": CoSENTLoss, "clustering": CoSENTLoss}
        )
    assert set(losses) == set(tasks)
    assert "['clustering']" in caplog.text


def test_missing_unused_and_foreign_losses_are_refused(model, tasks, tiny_model_path) -> None:
    with pytest.raises(ValueError, match=r"task 'stsb' \(task_type 'sts'\) has no loss"):
        losses_for_tasks(model, tasks, {"retrieval": MultipleNegativesRankingLoss})
    with pytest.raises(ValueError, match=r"\['stbs'\] match no task"):
        losses_for_tasks(
            model, tasks, {"retrieval": MultipleNegativesRankingLoss, "sts": CoSENTLoss, "stbs": CoSENTLoss}
        )
    other = SentenceTransformer(tiny_model_path)
    with pytest.raises(ValueError, match="different model"):
        losses_for_tasks(model, tasks, {"retrieval": MultipleNegativesRankingLoss(other), "sts": CoSENTLoss})
    with pytest.raises(TypeError, match=r"\(class, kwargs\)"):
        losses_for_tasks(model, tasks, {"retrieval": (MultipleNegativesRankingLoss,), "sts": CoSENTLoss})


@pytest.mark.parametrize(
    ("build", "task_type", "expected"),
    [
        (lambda m: hue.MultiPositiveInfoNCELoss(m, positives_per_query=3), "retrieval", ColumnLayout(3, 4)),
        (lambda m: hue.InstructorLoss(m), "retrieval", ColumnLayout(1, 4)),
        (lambda m: hue.CurriculumInfoNCELoss(m), "retrieval", ColumnLayout(1, 4, "difficulty")),
        (lambda m: hue.CoDiEmbSTSLoss(m), "sts", ColumnLayout(1, 0, "score")),
        (lambda m: hue.PearsonLoss(m), "sts", ColumnLayout(1, 0, "score")),
        (lambda m: hue.AnglEJointLoss(m), "pair_classification", ColumnLayout(1, 0, "score")),
        (lambda m: MultipleNegativesRankingLoss(m), "sts", ColumnLayout(1, 4)),  # CoDiEmb's "InfoNCE on STS"
        (lambda m: MatryoshkaLoss(m, CoSENTLoss(m), [32, 16]), "retrieval", ColumnLayout(1, 0, "score")),
        (lambda m: _CustomLoss(m), "sts", ColumnLayout(1, 0, "score")),  # unknown: by task type
        (lambda m: _CustomLoss(m), "retrieval", ColumnLayout(1, 4)),
    ],
)
def test_the_loss_decides_the_layout(model, build, task_type, expected) -> None:
    assert layout_for_loss(build(model), task_type, negatives_per_query=4) == expected


class _CustomLoss(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model


def test_column_layouts_per_task_and_difficulty_requirement(model, tasks) -> None:
    losses = losses_for_tasks(model, tasks, {"retrieval": hue.MultiPositiveInfoNCELoss, "sts": hue.CoDiEmbSTSLoss})
    layouts = column_layouts(tasks, losses, negatives_per_query={"wikiqa": 7})
    assert layouts == {"wikiqa": ColumnLayout(1, 7), "trecqa": ColumnLayout(1, 1), "stsb": ColumnLayout(1, 0, "score")}
    assert layouts["wikiqa"].columns == ("query", "positive_1", *(f"negative_{i}" for i in range(1, 8)))
    curriculum = {**losses, "wikiqa": hue.CurriculumInfoNCELoss(model)}
    with pytest.raises(ValueError, match=r"task 'wikiqa': CurriculumInfoNCELoss needs the 'difficulty' column"):
        column_layouts(tasks, curriculum)


def test_layout_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="at least one positive"):
        ColumnLayout(positives=0)
    with pytest.raises(ValueError, match="label must be"):
        ColumnLayout(label="scores")  # type: ignore[arg-type]
