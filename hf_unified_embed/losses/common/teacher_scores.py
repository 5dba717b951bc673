"""Base of the distillation losses: the student's scores of a query's own documents against the teacher's."""

from __future__ import annotations

from abc import abstractmethod

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.losses.common.input_checks import as_float, require_columns
from hf_unified_embed.losses.common.label_values import checked_before_embedding
from hf_unified_embed.losses.embedding_loss import EmbeddingLoss, MemoryBudget, MiniBatchOption


class TeacherScoreLoss(EmbeddingLoss):
    """A loss over ``cos(q_i, d_ij)`` for the row's own documents ``d_i1..d_iK`` and the teacher's scores of them.

    The columns are ``query, positive_1..K+, negative_1..K−``; the labels are a ``(batch, K+ + K−)``
    tensor of the teacher's scores of those documents, in the same order (the unified
    ``positive_scores`` / ``negative_scores`` of the drawn texts, as the collator passes them for a
    :class:`ColumnLayout` with ``label="teacher_scores"``). Subclasses implement :meth:`loss_from_scores`.
    """

    def __init__(
        self,
        model: nn.Module,
        positives_per_query: int = 1,
        mini_batch_size: MiniBatchOption = None,
        mini_batch_num_tokens: MiniBatchOption = None,
        mini_batch_memory_budget: MemoryBudget = None,
    ) -> None:
        super().__init__(model, mini_batch_size, mini_batch_num_tokens, mini_batch_memory_budget)
        if positives_per_query < 1:
            raise ValueError(f"positives_per_query must be at least 1, got {positives_per_query}.")
        self.positives_per_query = positives_per_query

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None) -> Tensor:
        name = type(self).__name__
        require_columns(name, embeddings, 1 + self.positives_per_query, "query, positives, then hard negatives")
        query = F.normalize(as_float(embeddings[0]), dim=-1)
        documents = F.normalize(as_float(torch.stack(embeddings[1:], dim=1)), dim=-1)  # (batch, K, dim)
        student = torch.einsum("bd,bkd->bk", query, documents)
        if labels is None or labels.shape != student.shape:
            raise ValueError(
                f"{name} needs the teacher's score of every document column as labels, shape "
                f"{tuple(student.shape)}; got {None if labels is None else tuple(labels.shape)}. Use "
                "UnifiedDataCollator with rows that carry positive_scores and negative_scores (mine-negatives)."
            )
        teacher = labels.to(student.dtype)
        if not checked_before_embedding(labels) and not bool(torch.isfinite(teacher).all()):
            raise ValueError(f"{name} got non-finite teacher scores.")
        return self.loss_from_scores(student, teacher)

    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        """The query, ``positives_per_query`` positives and K− negatives, labelled with their teacher scores."""
        return ColumnLayout(positives=self.positives_per_query, negatives=negatives_per_query, label="teacher_scores")

    @abstractmethod
    def loss_from_scores(self, student: Tensor, teacher: Tensor) -> Tensor:
        """The loss from ``(batch, K)`` student cosines and ``(batch, K)`` teacher scores (positives first)."""
