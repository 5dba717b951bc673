"""Which fixed text columns (and which label) a task's batches get: the loss of the task decides.

Unified rows hold variable-length lists of positives and negatives; a sentence-transformers loss
reads a fixed number of columns. A :class:`ColumnLayout` says how many of each the collator draws
per row and which value it passes as ``labels``. :func:`layout_for_loss` derives it from the loss:

* losses on scored pairs (Pearson, RankKL, PRO, CoSENT, AnglE, ...) get ``(query, positive_1)`` and
  the score of ``positive_1`` as label;
* contrastive losses get ``query``, ``positive_1..K+`` (``K+`` is the loss's ``positives_per_query``,
  1 if it has none) and ``negative_1..K−`` (``K−`` chosen by the caller, the loss has no say);
* :class:`~hf_unified_embed.losses.CurriculumInfoNCELoss` additionally gets the row's ``difficulty``
  as label, which is how the curriculum's per-row φ reaches the loss;
* a loss this module does not know falls back on the task type (``sts`` and ``pair_classification``
  rows are scored pairs, everything else contrastive).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from datasets import Dataset, DatasetDict
from torch import nn

from hf_unified_embed.schema import DIFFICULTY_COLUMN

LabelSource = Literal["score", "difficulty"]

#: Task types whose rows are sentence pairs with a graded score (CoDiEmb's STS data organisation).
SCORED_PAIR_TASK_TYPES: tuple[str, ...] = ("sts", "pair_classification")


@functools.cache
def _known_losses() -> tuple[tuple[type[nn.Module], ...], tuple[type[nn.Module], ...]]:
    """(losses on scored pairs, contrastive losses); imported on first use to keep this module light."""
    from sentence_transformers.sentence_transformer import losses as st

    from hf_unified_embed import losses as hue

    scored_pairs = (
        hue.PearsonLoss,
        hue.RankKLLoss,
        hue.PROLoss,
        hue.MidLayerInfoNCELoss,
        hue.CoDiEmbSTSLoss,
        hue.AnglEJointLoss,
        st.CoSENTLoss,
        st.AnglELoss,
        st.CosineSimilarityLoss,
        st.ContrastiveLoss,
        st.OnlineContrastiveLoss,
    )
    contrastive = (
        hue.MultiPositiveInfoNCELoss,
        hue.InstructorLoss,
        hue.CurriculumInfoNCELoss,
        st.MultipleNegativesRankingLoss,
        st.CachedMultipleNegativesRankingLoss,
        st.MultipleNegativesSymmetricRankingLoss,
        st.GISTEmbedLoss,
        st.CachedGISTEmbedLoss,
        st.TripletLoss,
    )
    return scored_pairs, contrastive


@dataclass(frozen=True)
class ColumnLayout:
    """The columns one task's batches carry: ``query``, ``positive_1..positives``, ``negative_1..negatives``.

    Args:
        positives: Positives drawn per row (K+); rows with fewer are sampled with replacement.
        negatives: Hard negatives drawn per row (K−); 0 for losses on scored pairs.
        label: What becomes ``labels``: ``"score"`` (the score of ``positive_1``), ``"difficulty"``
            (the curriculum's column) or ``None`` (no labels).
    """

    positives: int = 1
    negatives: int = 0
    label: LabelSource | None = None

    def __post_init__(self) -> None:
        if self.positives < 1:
            raise ValueError(f"a layout needs at least one positive column, got positives={self.positives}")
        if self.negatives < 0:
            raise ValueError(f"negatives must be >= 0, got {self.negatives}")
        if self.label not in (None, "score", "difficulty"):
            raise ValueError(f"label must be 'score', 'difficulty' or None, got {self.label!r}")

    @property
    def columns(self) -> tuple[str, ...]:
        """The text column names in the order the loss reads them."""
        return (
            "query",
            *(f"positive_{i}" for i in range(1, self.positives + 1)),
            *(f"negative_{i}" for i in range(1, self.negatives + 1)),
        )


def scored_pair_layout() -> ColumnLayout:
    """``(query, positive_1)`` with the score of ``positive_1`` as label."""
    return ColumnLayout(positives=1, negatives=0, label="score")


def _innermost(loss: nn.Module) -> nn.Module:
    # Wrappers (MatryoshkaLoss, AdaptiveLayerLoss, ...) keep the loss that reads the columns in `.loss`.
    inner = getattr(loss, "loss", None)
    while isinstance(inner, nn.Module):
        loss, inner = inner, getattr(inner, "loss", None)
    return loss


def layout_for_loss(loss: nn.Module, task_type: str, negatives_per_query: int = 1) -> ColumnLayout:
    """The column layout ``loss`` reads on a task of ``task_type``.

    Args:
        loss: The loss the trainer will call for this task (wrappers are looked through).
        task_type: The task's ``task_type``; decides only for losses this module does not know.
        negatives_per_query: K− for contrastive losses (hard negatives drawn per row).
    """
    from hf_unified_embed.losses import CurriculumInfoNCELoss

    inner = _innermost(loss)
    scored_pairs, contrastive = _known_losses()
    if isinstance(inner, scored_pairs) or (not isinstance(inner, contrastive) and task_type in SCORED_PAIR_TASK_TYPES):
        return scored_pair_layout()
    label: LabelSource | None = "difficulty" if isinstance(inner, CurriculumInfoNCELoss) else None
    return ColumnLayout(
        positives=int(getattr(inner, "positives_per_query", 1)),
        negatives=negatives_per_query,
        label=label,
    )


def task_type_of(dataset: Dataset, task: str) -> str:
    """The single ``task_type`` of a unified task dataset; raises if it is missing or mixed."""
    if "task_type" not in dataset.column_names:
        raise ValueError(f"task {task!r}: no 'task_type' column; is this a unified dataset?")
    types = dataset.unique("task_type")
    if len(types) != 1:
        raise ValueError(f"task {task!r}: expected one task_type per task, found {sorted(types)}")
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
            raise ValueError(f"task {task!r} has no loss; losses are given for {sorted(losses)}")
        k_neg = negatives_per_query if isinstance(negatives_per_query, int) else negatives_per_query.get(task, 1)
        layout = layout_for_loss(losses[task], task_type_of(dataset, task), k_neg)
        if layout.label == "difficulty" and DIFFICULTY_COLUMN not in dataset.column_names:
            raise ValueError(
                f"task {task!r}: {type(_innermost(losses[task])).__name__} needs the {DIFFICULTY_COLUMN!r} column; "
                "add it with the curriculum planner first"
            )
        layouts[task] = layout
    return layouts
