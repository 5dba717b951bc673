"""Which fixed text columns (and which label) a task's batches get: the loss of the task decides.

Every loss of this package declares its layout (``loss.column_layout(task_type, negatives_per_query)``,
see :class:`~hf_unified_embed.losses.columns.ColumnLayout`), and so can a user's own loss: any loss
with a ``column_layout`` method is asked. sentence-transformers' losses cannot describe themselves,
so :data:`SENTENCE_TRANSFORMERS_LAYOUTS` holds theirs; a loss that is neither falls back on the task
type (``sts`` and ``pair_classification`` rows are scored pairs, everything else contrastive).
Wrappers (``MatryoshkaLoss``, ``AdaptiveLayerLoss``, ...) are looked through.
"""

from __future__ import annotations

from collections.abc import Mapping

from datasets import Dataset, DatasetDict
from torch import nn

from hf_unified_embed.errors import shown
from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.schema import DIFFICULTY_COLUMN

#: Task types whose rows are sentence pairs with a graded score (CoDiEmb's STS data organisation).
SCORED_PAIR_TASK_TYPES: tuple[str, ...] = ("sts", "pair_classification")

#: sentence-transformers' losses by class name: ``"scored_pair"``, ``"contrastive"`` (query, positive, K− negatives),
#: ``"pair"`` (query and positive only) or ``"triplet"`` (query, positive and exactly one hard negative of the
#: row's own). The recipe check refuses any other of their losses: what it reads is not known here.
SENTENCE_TRANSFORMERS_LAYOUTS: dict[str, str] = {
    **dict.fromkeys(
        ("CoSENTLoss", "AnglELoss", "CosineSimilarityLoss", "ContrastiveLoss", "OnlineContrastiveLoss"), "scored_pair"
    ),
    **dict.fromkeys(
        (
            "MultipleNegativesRankingLoss",
            "CachedMultipleNegativesRankingLoss",
            "MultipleNegativesSymmetricRankingLoss",
            "CachedMultipleNegativesSymmetricRankingLoss",
            "GISTEmbedLoss",
            "CachedGISTEmbedLoss",
        ),
        "contrastive",
    ),
    "MegaBatchMarginLoss": "pair",
    "TripletLoss": "triplet",
}


def _innermost(loss: nn.Module) -> nn.Module:
    # Wrappers (MatryoshkaLoss, AdaptiveLayerLoss, ...) keep the loss that reads the columns in `.loss`.
    inner = getattr(loss, "loss", None)
    while isinstance(inner, nn.Module):
        loss, inner = inner, getattr(inner, "loss", None)
    return loss


def _is_sentence_transformers_loss(loss: nn.Module) -> bool:
    return type(loss).__module__.startswith("sentence_transformers.")


def layout_for_loss(loss: nn.Module, task_type: str, negatives_per_query: int = 1) -> ColumnLayout:
    """The column layout ``loss`` reads on a task of ``task_type``.

    Args:
        loss: The loss the trainer will call for this task (wrappers are looked through).
        task_type: The task's ``task_type``.
        negatives_per_query: K− for losses that read hard negatives.
    """
    inner = _innermost(loss)
    declared = getattr(inner, "column_layout", None)
    if callable(declared):
        layout = declared(task_type, negatives_per_query)
        if not isinstance(layout, ColumnLayout):
            raise TypeError(f"{type(inner).__name__}.column_layout returned {shown(layout)}, not a ColumnLayout")
        return layout
    kind = SENTENCE_TRANSFORMERS_LAYOUTS.get(type(inner).__name__) if _is_sentence_transformers_loss(inner) else None
    if kind is None:
        kind = "scored_pair" if task_type in SCORED_PAIR_TASK_TYPES else "contrastive"
    if kind == "scored_pair":
        return ColumnLayout.scored_pair()
    if kind == "pair":
        return ColumnLayout.pair()
    if kind == "triplet":  # (anchor, positive, negative): never fewer or more columns
        return ColumnLayout(positives=1, negatives=1, hard_negatives=True)
    return ColumnLayout(positives=1, negatives=negatives_per_query)


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
                f"task {shown(task)}: {type(_innermost(losses[task])).__name__} needs the {shown(DIFFICULTY_COLUMN)} column; "
                "add it with the curriculum planner first"
            )
        layouts[task] = layout
    return layouts
