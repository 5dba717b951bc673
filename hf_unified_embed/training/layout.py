"""Which fixed text columns (and which label) a task's batches get: the loss of the task decides.

What one loss reads on one task type is :func:`~hf_unified_embed.losses.layouts.layout_for_loss` (the
losses' own declarations, and sentence-transformers' by name); here the layouts of a whole unified
dataset, task by task.
"""

from __future__ import annotations

from collections.abc import Mapping

from datasets import Dataset, DatasetDict
from torch import nn

from hf_unified_embed.errors import shown
from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.losses.layouts import (
    SCORED_PAIR_TASK_TYPES,
    SENTENCE_TRANSFORMERS_LAYOUTS,
    innermost_loss,
    layout_for_loss,
)
from hf_unified_embed.schema import DIFFICULTY_COLUMN

# Re-exported: the collator, the recipe check and users import them from here.
__all__ = [
    "SCORED_PAIR_TASK_TYPES",
    "SENTENCE_TRANSFORMERS_LAYOUTS",
    "ColumnLayout",
    "column_layouts",
    "layout_for_loss",
    "task_type_of",
]


def task_type_of(dataset: Dataset, task: str) -> str:
    """The single ``task_type`` of a unified task dataset; raises if it is missing or mixed."""
    if "task_type" not in dataset.column_names:
        raise ValueError(f"task {shown(task)}: no 'task_type' column; is this a unified dataset?")
    types = dataset.unique("task_type")
    if len(types) != 1:
        raise ValueError(f"task {shown(task)}: expected one task_type per task, found {sorted(types)}")
    return str(types[0])


def column_layouts(
    dataset_dict: DatasetDict | Mapping[str, Dataset],
    losses: Mapping[str, nn.Module],
    negatives_per_query: int | Mapping[str, int] = 1,
) -> dict[str, ColumnLayout]:
    """One :class:`ColumnLayout` per task of ``dataset_dict``, derived from ``losses[task]``.

    Args:
        dataset_dict: Unified tasks keyed by task name (the keys the trainer passes as dataset name).
        losses: The loss per task, e.g. from :func:`~hf_unified_embed.training.losses_for_tasks`.
        negatives_per_query: K− for contrastive tasks, one number or one per task name.
    """
    layouts = {}
    for task, dataset in dataset_dict.items():
        if task not in losses:
            raise ValueError(f"task {shown(task)} has no loss; losses are given for {sorted(losses)}")
        k_neg = negatives_per_query if isinstance(negatives_per_query, int) else negatives_per_query.get(task, 1)
        layout = layout_for_loss(losses[task], task_type_of(dataset, task), k_neg)
        if layout.label == "difficulty" and DIFFICULTY_COLUMN not in dataset.column_names:
            raise ValueError(
                f"task {shown(task)}: {type(innermost_loss(losses[task])).__name__} needs the {shown(DIFFICULTY_COLUMN)} column; "
                "add it with the curriculum planner first"
            )
        layouts[task] = layout
    return layouts
