"""The column layout a loss reads on a task type: the loss's own declaration, else sentence-transformers'.

Every loss of this package declares its layout (``loss.column_layout(task_type, negatives_per_query)``,
see :class:`~hf_unified_embed.losses.columns.ColumnLayout`), and so can a user's own loss: any loss
with a ``column_layout`` method is asked. sentence-transformers' losses cannot describe themselves,
so :data:`SENTENCE_TRANSFORMERS_LAYOUTS` holds theirs; a loss that is neither falls back on the task
type (``sts`` and ``pair_classification`` rows are scored pairs, everything else contrastive).
Wrappers (``MatryoshkaLoss``, ``AdaptiveLayerLoss``, ...) are looked through. It lives with the losses
so that the recipe check (:mod:`hf_unified_embed.losses.task_fit`) and the collator read one rule.
"""

from __future__ import annotations

from torch import nn

from hf_unified_embed.errors import shown
from hf_unified_embed.losses.columns import ColumnLayout

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


def innermost_loss(loss: nn.Module) -> nn.Module:
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
    inner = innermost_loss(loss)
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
