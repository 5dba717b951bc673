"""Preference Rank Optimisation loss as adapted to STS by CoDiEmb (Eq. 8), vectorised over the batch."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from hf_unified_embed.losses.common.citations import CODIEMB
from hf_unified_embed.losses.common.input_checks import masked_mean
from hf_unified_embed.losses.common.pair_scores import PairScoreLoss
from hf_unified_embed.losses.embedding_loss import MemoryBudget, MiniBatchOption, Positive


class PROLoss(PairScoreLoss):
    def __init__(
        self,
        model: nn.Module,
        temperature: Positive = 0.05,
        mini_batch_size: MiniBatchOption = None,
        mini_batch_num_tokens: MiniBatchOption = None,
        mini_batch_memory_budget: MemoryBudget = None,
    ) -> None:
        r"""Preference Rank Optimisation (PRO) over the pairs of a batch, as adapted by CoDiEmb (Eq. 8).

        Sort the batch by gold score; every pair ``i`` becomes the positive of a softmax over itself and
        all pairs with a *strictly lower* gold score, each weighted by the gold-score gap::

            T_i^j = τ / (y_i − y_j)       for y_j < y_i
            T_i^i = min_j T_i^j           (the largest gap of pair i)
            loss  = −mean_i log( e^{ŷ_i / T_i^i} / (e^{ŷ_i / T_i^i} + Σ_{y_j < y_i} e^{ŷ_j / T_i^j}) )

        with ``ŷ_i = cos(f(x1_i), f(x2_i))``. Unlike CoSENT, which penalises every inverted pair alike, a
        pair far below ``i`` in gold score weighs more. The mean runs over the pairs that have at least one
        lower-scored pair (``N − 1`` of them without ties). Pairs tied with ``i`` are not in its softmax:
        the weight ``τ / 0`` is undefined and the batch says nothing about their order (the official code
        drops them the same way). A batch whose labels are all equal has no preference; the loss is 0.

        All ``N`` sub-problems are computed at once as masked ``N × N`` matrices; there is no Python loop
        over the batch (``bench/losses.py`` measures the speed-up over a loop).

        Args:
            model: The SentenceTransformer model.
            temperature: ``τ``. CoDiEmb uses 0.05.
            mini_batch_size: Embed in mini-batches of this many rows with gradient caching (GradCache): the
                loss still ranks the whole batch, with the same value and gradients. ``None`` embeds the
                whole batch at once.
            mini_batch_num_tokens: Instead of ``mini_batch_size``, a token budget per mini-batch (rows sorted
                by length, the padded tokens of all columns counted). Either may be ``"auto"``: sized to the
                memory at the first step (see :class:`EmbeddingLoss`).
            mini_batch_memory_budget: Bytes one mini-batch's activations may take, for ``"auto"``.

        References:
            - CoDiEmb, Section 2.2, Equation 8: https://github.com/TencentCloudADP/youtu-embedding
            - PRO as introduced for query rewriting in BEQUE (Peng et al., 2024).

        Requirements:
            1. Sentence pairs with float similarity labels.

        Inputs:
            +-----------------------------+-------------------------------+
            | Texts                       | Labels                        |
            +=============================+===============================+
            | (sentence1, sentence2)      | float similarity score        |
            +-----------------------------+-------------------------------+

        Relations:
            - :class:`CoDiEmbSTSLoss` combines this loss with :class:`PearsonLoss`, :class:`RankKLLoss` and
              :class:`MidLayerInfoNCELoss` (default weight 0.5).
            - sentence-transformers' ``CoSENTLoss`` is the unweighted pair-wise counterpart.

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

                from hf_unified_embed.losses import PROLoss

                model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
                train_dataset = Dataset.from_dict({
                    "sentence1": ["A man is playing a guitar.", "A woman is slicing onions.", "Kids play soccer."],
                    "sentence2": ["A man plays the guitar.", "A man is eating pasta.", "Children are playing football."],
                    "score": [0.96, 0.04, 0.84],
                })
                loss = PROLoss(model)
                trainer = SentenceTransformerTrainer(model=model, train_dataset=train_dataset, loss=loss)
                trainer.train()
        """
        super().__init__(model, mini_batch_size, mini_batch_num_tokens, mini_batch_memory_budget)
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}.")
        self.temperature = temperature

    def loss_from_scores(self, scores: Tensor, labels: Tensor) -> Tensor:
        gaps = labels.unsqueeze(1) - labels.unsqueeze(0)  # gaps[i, j] = y_i - y_j
        lower = gaps > 0
        anchors = lower.any(dim=1)
        inverse_temperatures = gaps.clamp_min(0) / self.temperature  # 1 / T_i^j
        anchor_logits = scores * inverse_temperatures.max(dim=1).values  # ŷ_i / T_i^i
        tail_logits = (scores.unsqueeze(0) * inverse_temperatures).masked_fill(~lower, float("-inf"))
        log_partition = torch.logsumexp(torch.cat([anchor_logits.unsqueeze(1), tail_logits], dim=1), dim=1)
        # A row with no lower-scored row has only its own term: 0, with a finite gradient; left out of the mean.
        return masked_mean(log_partition - anchor_logits, anchors)

    def get_config_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature, **super().get_config_dict()}

    @property
    def citation(self) -> str:
        return CODIEMB
