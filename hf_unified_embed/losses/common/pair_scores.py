"""Base of the STS losses that only look at the cosine score of each (sentence1, sentence2) pair."""

from __future__ import annotations

from abc import abstractmethod

from sentence_transformers.util import pairwise_cos_sim
from torch import Tensor

from hf_unified_embed.losses.columns import ColumnLayout
from hf_unified_embed.losses.common.input_checks import as_float, require_labels, require_pairs
from hf_unified_embed.losses.embedding_loss import EmbeddingLoss


class PairScoreLoss(EmbeddingLoss):
    """A list-wise loss over the predicted pair scores ``cos(f(x1_i), f(x2_i))`` and their gold labels.

    Subclasses implement :meth:`loss_from_scores`, which :class:`CoDiEmbSTSLoss` also calls directly so
    that its parts share one score computation.
    """

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None) -> Tensor:
        name = type(self).__name__
        require_pairs(name, embeddings)
        labels = require_labels(name, labels, embeddings[0].size(0), "a similarity score per pair")
        scores = pairwise_cos_sim(as_float(embeddings[0]), as_float(embeddings[1]))
        return self.loss_from_scores(scores, labels.to(scores.dtype))

    def column_layout(self, task_type: str, negatives_per_query: int) -> ColumnLayout:
        """Sentence pairs with the gold score as label, whatever the task type."""
        return ColumnLayout.scored_pair()

    @abstractmethod
    def loss_from_scores(self, scores: Tensor, labels: Tensor) -> Tensor:
        """The loss from ``(batch,)`` predicted cosine scores and ``(batch,)`` float gold scores."""
