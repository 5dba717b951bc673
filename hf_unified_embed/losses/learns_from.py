"""What a loss learns from: the rows that give it a gradient, declared by the loss itself.

Reading a task's columns (its :class:`~hf_unified_embed.losses.columns.ColumnLayout`) is not learning from
them. A KL divergence between two distributions over one candidate is 0 whatever the model does; a loss
that selects pairs labelled exactly 0 or 1 selects none among graded scores; a loss whose anchors are the
pairs scored at or above a threshold has none when no score reaches it. Each of these trains with loss 0.0
and gradient 0.0 without a word. A loss therefore declares, next to its layout, a :class:`LearnsFrom`:

* as a class attribute (or a property, when it follows an option), ``learns_from = LearnsFrom(...)``, on
  this package's losses and on a user's own (a new loss describes itself in its own file);
* for sentence-transformers' losses, whose classes are not ours, in
  :data:`SENTENCE_TRANSFORMERS_LEARNS_FROM`.

:meth:`LearnsFrom.problem` compares the declaration with what a task's rows carry
(:class:`~hf_unified_embed.losses.columns.TaskColumns`): ``train --check``, ``losses_for_tasks`` and the
loss table (:mod:`hf_unified_embed.losses.overview`) all ask it. ``recommended_for`` is the loss's own
word on the task types it is a first choice for; the table recommends it for a data shape only where it
also reads everything such rows carry (their scores, their hard negatives, their difficulty).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from hf_unified_embed.errors import shown
from hf_unified_embed.losses.columns import ColumnLayout, TaskColumns
from hf_unified_embed.losses.layouts import innermost_loss

#: Task types whose rows are one query (or sentence) with documents to find among others.
CONTRASTIVE_TASK_TYPES: tuple[str, ...] = ("retrieval", "classification", "clustering")


@dataclass(frozen=True)
class LearnsFrom:
    """Which rows give a loss a gradient, and the task types it is a first choice for.

    Args:
        candidates: Documents of a row's own the loss compares with each other (a softmax over them): 2
            for a list-wise distillation, whose distribution over one document is constant; 1 for a loss
            with in-batch negatives or on pairs, which learns from any row.
        label_values: The only label values the loss selects rows by; rows labelled otherwise train
            nothing (sentence-transformers' ``OnlineContrastiveLoss`` selects ``label == 0`` and
            ``label == 1``). ``None``: every label.
        min_label: Rows labelled below it are no anchors and train nothing on their own (the
            ``positive_threshold`` of ``MidLayerInfoNCELoss``). ``None``: every label.
        recommended_for: The task types the loss is a first choice for (the loss table recommends it for
            a data shape of those types where it reads everything such rows carry).

    Raises:
        ValueError: ``candidates`` below 1, an empty ``label_values`` or an unknown task type.
    """

    candidates: int = 1
    label_values: tuple[float, ...] | None = None
    min_label: float | None = None
    recommended_for: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from hf_unified_embed.schema import TASK_TYPES

        if self.candidates < 1:
            raise ValueError(f"candidates must be at least 1, got {self.candidates}")
        if self.label_values is not None and not self.label_values:
            raise ValueError("label_values must name at least one value, or be None (every label)")
        if unknown := [t for t in self.recommended_for if t not in TASK_TYPES]:
            raise ValueError(f"recommended_for must name some of {list(TASK_TYPES)}, got {shown(unknown)}")

    def problem(self, layout: ColumnLayout, task: TaskColumns) -> str | None:
        """Why the loss, reading ``layout``, learns nothing from ``task``'s rows; ``None`` when it learns.

        Args:
            layout: The columns the loss reads on this task (the rows carry them: see
                :meth:`ColumnLayout.missing`).
            task: What the task's rows carry.

        Returns:
            One phrase for an error line (``it compares each row's own documents (at least 2; ...), and
            these rows give it 1: ...``), or ``None``.
        """
        if self.candidates > 1:
            documents = min(layout.positives, max(task.most_positives, 1)) + min(layout.negatives, task.most_negatives)
            if documents < self.candidates:
                return (
                    f"it compares each row's own documents (at least {self.candidates}; over {documents} the teacher's "
                    f"and the student's distributions are equal, loss and gradient 0), and these rows give it "
                    f"{documents}{_more_documents(layout, task)}"
                )
        if layout.label != "score" or not task.score_values:
            return None
        values = task.score_values
        if self.label_values is not None and (graded := [v for v in values if v not in self.label_values]):
            wanted = " or ".join(f"{v:g}" for v in self.label_values)
            return (
                f"it learns only from pairs labelled exactly {wanted}, and these scores are graded "
                f"({_some(graded)}): every other pair trains nothing; give it rows labelled {wanted}, or a loss "
                "that reads graded scores"
            )
        if self.min_label is not None and values[-1] < self.min_label:
            return (
                f"it learns only from pairs scored {self.min_label:g} or more, and the highest score of "
                f"these rows is {values[-1]:g}: no pair trains it"
            )
        return None


def _more_documents(layout: ColumnLayout, task: TaskColumns) -> str:
    if task.most_negatives and not layout.negatives:
        return ": set negatives_per_query to 1 or more"
    if not task.most_negatives:
        return ": give its rows hard negatives with teacher scores (mine-negatives writes them) or several positives"
    return ""


def _some(values: list[float]) -> str:
    shown_values = ", ".join(f"{v:g}" for v in values[:3])
    return shown_values + (", ..." if len(values) > 3 else "")


#: sentence-transformers' losses by class name (their classes cannot declare ours). A loss not here learns
#: from every row it can read.
SENTENCE_TRANSFORMERS_LEARNS_FROM: dict[str, LearnsFrom] = {
    # OnlineContrastiveLoss selects `labels == 1` and `labels == 0` as its positive and negative pairs.
    "OnlineContrastiveLoss": LearnsFrom(label_values=(0.0, 1.0), recommended_for=("pair_classification",)),
    "CoSENTLoss": LearnsFrom(recommended_for=("sts", "pair_classification")),
    "MultipleNegativesRankingLoss": LearnsFrom(recommended_for=CONTRASTIVE_TASK_TYPES),
    "CachedMultipleNegativesRankingLoss": LearnsFrom(recommended_for=CONTRASTIVE_TASK_TYPES),
}


def learns_from(loss: nn.Module) -> LearnsFrom:
    """What ``loss`` (an instance or a stand-in; wrappers looked through) declares it learns from.

    Returns:
        The loss's ``learns_from`` attribute, else sentence-transformers' entry in
        :data:`SENTENCE_TRANSFORMERS_LEARNS_FROM`, else :class:`LearnsFrom()` (every row it reads).

    Raises:
        TypeError: The loss's ``learns_from`` is not a :class:`LearnsFrom`.
    """
    inner = innermost_loss(loss)
    declared = getattr(inner, "learns_from", None)
    if declared is not None:
        if not isinstance(declared, LearnsFrom):
            raise TypeError(f"{type(inner).__name__}.learns_from is {shown(declared)}, not a LearnsFrom")
        return declared
    if type(inner).__module__.startswith("sentence_transformers."):
        return SENTENCE_TRANSFORMERS_LEARNS_FROM.get(type(inner).__name__, LearnsFrom())
    return LearnsFrom()
