"""Normalised rank KL-divergence loss of CoDiEmb (Eq. 6)."""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hf_unified_embed.errors import shown
from hf_unified_embed.losses.common.citations import CODIEMB
from hf_unified_embed.losses.common.input_checks import zero_loss
from hf_unified_embed.losses.common.pair_scores import PairScoreLoss
from hf_unified_embed.losses.embedding_loss import MemoryBudget, MiniBatchOption, Positive


def average_descending_ranks(values: Tensor) -> Tensor:
    """0-based ranks in descending order, ties sharing the average of their ranks (as Spearman's ρ does)."""
    higher = (values.unsqueeze(0) > values.unsqueeze(1)).sum(dim=1)
    tied = (values.unsqueeze(0) == values.unsqueeze(1)).sum(dim=1)
    return higher.to(values.dtype) + (tied.to(values.dtype) - 1) / 2


class RankKLLoss(PairScoreLoss):
    def __init__(
        self,
        model: nn.Module,
        temperature: Positive = 0.05,
        reduction: Literal["batchmean", "sum"] = "batchmean",
        mini_batch_size: MiniBatchOption = None,
        mini_batch_num_tokens: MiniBatchOption = None,
        mini_batch_memory_budget: MemoryBudget = None,
    ) -> None:
        r"""KL divergence from a target distribution built from the *ranks* of the gold scores to the
        softmax of the predicted cosine scores (CoDiEmb Eq. 6).

        The batch is ranked by gold score in descending order (``r_i ∈ [0, N−1]``, ties get the average of
        their ranks), the ranks are normalised to ``y'_i = (N − 1 − r_i) / (N − 1) ∈ [0, 1]``, and::

            p_i = softmax(y' / τ)_i,   q_i = softmax(ŷ / τ)_i,   ŷ_i = cos(f(x1_i), f(x2_i))
            loss = Σ_i p_i log(p_i / q_i)

        Using ranks rather than raw scores makes the target independent of how the labels are spread:
        the gradient does not collapse onto the few highest-scored pairs of a batch.

        A batch of one row, or one whose labels are all equal, has a uniform target; the loss then only
        pushes the predicted scores towards each other.

        Args:
            model: The SentenceTransformer model.
            temperature: ``τ`` of both softmaxes. CoDiEmb uses 0.05.
            reduction: ``"batchmean"`` (default) divides the KL divergence by the batch size, as the official
                CoDiEmb code does (``F.kl_div(..., reduction="batchmean")`` on a 1-D input); the official loss
                weight 5 was tuned at this scale. ``"sum"`` is Eq. 6 as printed.
            mini_batch_size: Embed in mini-batches of this many rows with gradient caching (GradCache): the
                loss still ranks the whole batch, with the same value and gradients. ``None`` embeds the
                whole batch at once.
            mini_batch_num_tokens: Instead of ``mini_batch_size``, a token budget per mini-batch (rows sorted
                by length, the padded tokens of all columns counted). Either may be ``"auto"``: sized to the
                memory at the first step (see :class:`EmbeddingLoss`).
            mini_batch_memory_budget: Bytes one mini-batch's activations may take, for ``"auto"``.

        References:
            - CoDiEmb, Section 2.2, Equation 6: https://github.com/TencentCloudADP/youtu-embedding

        Requirements:
            1. Sentence pairs with float similarity labels.

        Inputs:
            +-----------------------------+-------------------------------+
            | Texts                       | Labels                        |
            +=============================+===============================+
            | (sentence1, sentence2)      | float similarity score        |
            +-----------------------------+-------------------------------+

        Relations:
            - :class:`CoDiEmbSTSLoss` combines this loss with :class:`PearsonLoss`, :class:`PROLoss` and
              :class:`MidLayerInfoNCELoss` (default weight 5).

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

                from hf_unified_embed.losses import RankKLLoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                train_dataset = Dataset.from_dict({
                    "sentence1": ["A man is playing a guitar.", "A woman is slicing onions.", "Kids play soccer."],
                    "sentence2": ["A man plays the guitar.", "A man is eating pasta.", "Children are playing football."],
                    "score": [0.96, 0.04, 0.84],
                })
                loss = RankKLLoss(model)
                trainer = SentenceTransformerTrainer(model=model, train_dataset=train_dataset, loss=loss)
                trainer.train()
        """
        super().__init__(model, mini_batch_size, mini_batch_num_tokens, mini_batch_memory_budget)
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}.")
        if reduction not in ("batchmean", "sum"):
            raise ValueError(f"reduction must be 'batchmean' or 'sum', got {shown(reduction)}.")
        self.temperature = temperature
        self.reduction = reduction

    def loss_from_scores(self, scores: Tensor, labels: Tensor) -> Tensor:
        size = scores.numel()
        if size < 2:
            return zero_loss(scores)
        ranks = average_descending_ranks(labels)
        target_scores = (size - 1 - ranks) / (size - 1)
        log_target = F.log_softmax(target_scores / self.temperature, dim=0)
        log_predicted = F.log_softmax(scores / self.temperature, dim=0)
        divergence = (torch.exp(log_target) * (log_target - log_predicted)).sum()
        return divergence / size if self.reduction == "batchmean" else divergence

    def get_config_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "reduction": self.reduction, **super().get_config_dict()}

    @property
    def citation(self) -> str:
        return CODIEMB
